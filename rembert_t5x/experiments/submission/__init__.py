"""XTREME submission folders: predictions as XTREME's `evaluate.py` reads them.

Table 16's numbers come from a folder of test predictions scored by XTREME:
`<folder>/<task>/test-<lang>.<suffix>` for every language of every task the
folder holds (named `test-` whichever split was predicted: that is all
`evaluate.py` opens). A folder is complete or not written (every language,
each with as many predictions as its XTREME file has examples, checked
before anything is written), and a task the run did not cover is listed in
its `submission.json`. Splits, formats and the lines of XTREME's scripts
each file follows: docs/EXPERIMENTS.md ("Submission folders") and
docs/FIDELITY.md ("Submission").

The modules, lowest first:
  families    one row per XTREME task (`Family`): its XTREME file, what a
              prediction file must match, the check, the writer, languages.
  folder      `Request` (what a sweep asks for), the check of its inputs
              before any training, the atomic writing of a folder.
  retrieval   BUCC 2018 and Tatoeba from the pre-trained encoder.
  local_road  our fine-tuned checkpoints -> folders (`sweep`, local runner).
  t5x_road    `t5x.infer` outputs -> a folder; the lines `sweep --runner=t5x`
              prints.
  command     `python -m rembert_t5x.experiments.submission` (`main`).
This package re-exports what the sweep, `xtreme_road` and the tests use.
"""

from rembert_t5x.experiments.submission.command import main
from rembert_t5x.experiments.submission.families import (
    RETRIEVAL_TASKS, check_predictions, file_name, input_file, render,
    required_languages, seqio_split)
from rembert_t5x.experiments.submission.folder import (
    MANIFEST, Request, check_inputs)
from rembert_t5x.experiments.submission.local_road import (
    SweepRun, family_predictions, write_run_predictions, write_sweep_folders)
from rembert_t5x.experiments.submission.retrieval import retrieval_files
from rembert_t5x.experiments.submission.t5x_road import (
    InferRun, t5x_folder_lines, t5x_infer_lines)
