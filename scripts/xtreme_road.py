r"""From the released RemBERT to Table 16, in one command (README section
"From the released RemBERT to Table 16").

  # Offline plumbing run (tiny random "released-like" model, tiny XTREME
  # folder from ../shared/data with SYNTHETIC labels: scores mean nothing):
  python scripts/xtreme_road.py --workdir=/tmp/road
  # The real thing: the hub's google/rembert directory and XTREME's download
  # folder (scripts/download_data.sh of google-research/xtreme); steps
  # derived from the data (3 epochs at Table 15's batch sizes), 3 seeds:
  python scripts/xtreme_road.py --workdir=/tmp/road --hf_dir=rembert_hf \
      --xtreme_dir=xtreme/download --train_steps=0 --seeds=0,1,2

Steps: (1) the Hugging Face directory (--hf_dir, or a tiny one built here),
(2) `convert_checkpoint.py hf-to-t5x`, (3) `python -m rembert_t5x.experiments.sweep
--experiment=table15 --xtreme_dir=...` (fine-tune on English, select on
English dev, evaluate every language), (4) the Table-16-style table with the
paper's numbers, printed and written to WORKDIR/sweep/sweep.md. Each step
prints the command that does the same by hand; finished steps are not redone
when the command is run again with the same WORKDIR.

Cost: the plumbing run (all six grids, ~130 per-language tasks, 2 steps, 1
seed) took 41 minutes wall / 17.5 minutes CPU on a shared, loaded 2-core
machine, mostly building each task's input pipeline (PAN-X's 40 languages:
20 minutes); `--tasks=pawsx,tydiqa --languages=de,ar` a few minutes. The
real run costs what Table 15's fine-tuning costs (hours per task on an
accelerator for RemBERT).
"""

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from rembert_t5x.runner import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from rembert_t5x.experiments import xtreme_road  # pylint: disable=g-import-not-at-top,wrong-import-position


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--hf_dir", help="a Hugging Face RemBERT directory "
                      "(default: build a tiny released-like one)")
  parser.add_argument("--xtreme_dir", help="an XTREME download folder "
                      "(default: write a tiny one from --data_dir)")
  parser.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared",
                                                         "data"),
                      help="real text for the tiny model and folder "
                      "(Tatoeba, XQuAD)")
  parser.add_argument("--tasks", default=",".join(xtreme_road.FAMILY_GRIDS),
                      help="grids of the table15 sweep")
  parser.add_argument("--train_steps", type=int, default=2,
                      help="fine-tuning steps per run; 0 derives them from "
                      "the data (3 epochs, the paper's protocol)")
  parser.add_argument("--seeds", default="0")
  parser.add_argument("--batch_size", type=int,
                      help="overrides Table 15's batch sizes")
  parser.add_argument("--languages", help="evaluate only these languages "
                      "(comma-separated; English always kept)")
  parser.add_argument("--examples", type=int, default=8,
                      help="tiny folder: sentences per language and file")
  parser.add_argument("--qa_paragraphs", type=int, default=2,
                      help="tiny folder: XQuAD paragraphs per language")
  args = parser.parse_args(argv)
  needs_data = args.hf_dir is None or args.xtreme_dir is None
  if needs_data and not os.path.isdir(args.data_dir):
    print(f"error: --data_dir {args.data_dir}: no such directory (needed to "
          "build the tiny model or folder)", file=sys.stderr)
    sys.exit(2)
  with cli.user_errors(ValueError):
    xtreme_road.run_road(
        args.workdir, args.data_dir, hf_dir=args.hf_dir,
        xtreme_dir=args.xtreme_dir, grids=args.tasks.split(","),
        train_steps=args.train_steps or None, seeds=args.seeds,
        batch_size=args.batch_size, examples=args.examples,
        qa_paragraphs=args.qa_paragraphs,
        languages=args.languages.split(",") if args.languages else None)


if __name__ == "__main__":
  main()
