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
English dev, evaluate every language; with `--submission_dir`, the dev sets'
predictions as an XTREME submission folder, WORKDIR/submission-dev/seed-*/,
to score with XTREME's evaluate.py), (4) the same sweep again, reusing its
kept checkpoints, for the test folder WORKDIR/submission-test/seed-*/, and
the Table-16-style table with the paper's numbers, printed and written to
WORKDIR/sweep/sweep.md. Each step prints the command that does the same by
hand; finished steps are not redone when the command is run again with the
same WORKDIR.

Cost: the plumbing run (all six grids, ~130 per-language tasks, 2 steps, 1
seed) took 41 minutes wall / 17.5 minutes CPU on a shared, loaded 2-core
machine, mostly building each task's input pipeline (PAN-X's 40 languages:
20 minutes), before the submission folders added a prediction pass per
split and the retrieval tasks; `--tasks=pawsx,tydiqa --languages=de,ar`
(with them) 3.5 minutes. The
real run costs what Table 15's fine-tuning costs (hours per task on an
accelerator for RemBERT).
"""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from rembert_t5x.common import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from rembert_t5x.common import errors  # pylint: disable=g-import-not-at-top,wrong-import-position
from rembert_t5x.experiments import xtreme_road  # pylint: disable=g-import-not-at-top,wrong-import-position


def _define_flags(fv: flags.FlagValues) -> None:
  def string(name, default, text, **kw):
    flags.DEFINE_string(name, default, text, flag_values=fv, **kw)

  def integer(name, default, text):
    flags.DEFINE_integer(name, default, text, flag_values=fv)

  string("workdir", None, "output directory", required=True)
  string("hf_dir", None, "a Hugging Face RemBERT directory (default: build "
         "a tiny released-like one)")
  string("xtreme_dir", None, "an XTREME download folder (default: write a "
         "tiny one from --data_dir)")
  string("data_dir", os.path.join(REPO, "..", "shared", "data"),
         "real text for the tiny model and folder (Tatoeba, XQuAD)")
  string("tasks", ",".join(xtreme_road.FAMILY_GRIDS),
         "grids of the table15 sweep")
  integer("train_steps", 2, "fine-tuning steps per run; 0 derives them from "
          "the data (3 epochs, the paper's protocol)")
  string("seeds", "0", "comma-separated fine-tuning seeds")
  integer("batch_size", None, "overrides Table 15's batch sizes")
  string("languages", None, "evaluate only these languages "
         "(comma-separated; English always kept)")
  integer("examples", 8, "tiny folder: sentences per language and file")
  integer("qa_paragraphs", 2, "tiny folder: XQuAD paragraphs per language")


def _main(fv: flags.FlagValues) -> None:
  needs_data = fv.hf_dir is None or fv.xtreme_dir is None
  if needs_data and not os.path.isdir(fv.data_dir):
    raise errors.UserError(f"--data_dir {fv.data_dir}: no such directory "
                           "(needed to build the tiny model or folder)")
  xtreme_road.run_road(
      fv.workdir, fv.data_dir, hf_dir=fv.hf_dir,
      xtreme_dir=fv.xtreme_dir, grids=fv.tasks.split(","),
      train_steps=fv.train_steps or None, seeds=fv.seeds,
      batch_size=fv.batch_size, examples=fv.examples,
      qa_paragraphs=fv.qa_paragraphs,
      languages=fv.languages.split(",") if fv.languages else None)


def main(argv=None) -> None:
  cli.run_main(_main, argv, _define_flags, doc=__doc__, also=(ValueError,))


if __name__ == "__main__":
  main()
