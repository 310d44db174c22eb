r"""XTREME submission folders: predictions as XTREME's `evaluate.py` reads them.

  # The local runner writes them itself, from the checkpoint selected on
  # English dev at the best learning rate, one folder per seed:
  python -m rembert_t5x.experiments.sweep --experiment=table15 --workdir=W \
    --pretrained=M --xtreme_dir=D --submission_dir=OUT [--submission_split=dev]
  # From `t5x.infer` outputs (the last lines `sweep --runner=t5x
  # --submission_dir=OUT` prints run this); --pretrained adds BUCC and
  # Tatoeba from the pre-trained encoder (our MODEL_DIR, as hf-to-t5x wrote):
  python -m rembert_t5x.experiments.submission --xtreme_dir=D --split=test \
    --infer_dirs=W/runs/xnli/lr=1e-05/seed=0/infer_test,... --output_dir=OUT/seed-0 \
    [--pretrained=MODEL_DIR] [--work_dir=OUT/embeddings]
  # Score a dev folder with XTREME's own scorer (labels in the same layout):
  python evaluate.py --prediction_folder=OUT/seed-0 --label_folder=LABELS \
    --output_file=scores.json   # google-research/xtreme

A folder holds `<task>/test-<lang>.<suffix>` for every language of every task
it holds (whichever split was predicted: that is all `evaluate.py` opens) and
`submission.json`; it is complete or not written, and a task the run did not
cover is listed in `submission.json` with the reason.
"""

from absl import flags

from rembert_t5x.common import cli
from rembert_t5x.experiments.submission import families
from rembert_t5x.experiments.submission import t5x_road


def _define_flags(fv: flags.FlagValues) -> None:
  """The folder command's flags, defined on `fv`."""
  flags.DEFINE_list("infer_dirs", [], "t5x.infer INFER_OUTPUT_DIRs "
                    "(comma-separated)", flag_values=fv)
  flags.DEFINE_string("xtreme_dir", None, "XTREME's download folder",
                      flag_values=fv, required=True)
  flags.DEFINE_enum("split", "test", list(families.SPLITS),
                    "the split predicted", flag_values=fv)
  flags.DEFINE_string("output_dir", None, "the submission folder",
                      flag_values=fv, required=True)
  flags.DEFINE_bool("overwrite", False, "replace an existing folder",
                    flag_values=fv)
  flags.DEFINE_string("pretrained", None, "BUCC and Tatoeba from this "
                      "pre-trained MODEL_DIR's encoder (our layout, as "
                      "hf-to-t5x writes it)", flag_values=fv)
  flags.DEFINE_string("work_dir", None, "the retrieval corpora's embeddings "
                      "(a rerun resumes; default: embeddings/ beside "
                      "--output_dir)", flag_values=fv)


def _main(fv: flags.FlagValues) -> None:
  """Writes the folder the parsed flags ask for."""
  manifest = t5x_road.from_t5x(fv.infer_dirs, fv.xtreme_dir, fv.split,
                               fv.output_dir, fv.overwrite,
                               pretrained=fv.pretrained, work_dir=fv.work_dir)
  print(f"{fv.output_dir}: XTREME submission folder ({fv.split}); not held: "
        f"{sorted(manifest['missing'])}")


def main(argv=None) -> None:
  """`python -m rembert_t5x.experiments.submission`."""
  cli.run_main(_main, argv, _define_flags, doc=__doc__)
