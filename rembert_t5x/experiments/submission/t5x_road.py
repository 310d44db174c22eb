"""The T5X road: `t5x.infer` outputs -> a submission folder.

`sweep --runner=t5x --submission_dir=OUT` prints, per grid point, one
`t5x.infer` per evaluated language on the selected checkpoint ($BEST,
`t5x_infer_lines`) with gin_configs/runs/infer_<family>.gin, and at the end,
per seed, the folder command over its runs' infer outputs
(`t5x_folder_lines`), which `from_t5x` runs. QA predicts through the
prediction-only tasks, which read XTREME's blanked answers.
"""

import dataclasses
import json
import os
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x.experiments import xtreme_local
from rembert_t5x.experiments.submission import families
from rembert_t5x.experiments.submission import folder
from rembert_t5x.experiments.submission import retrieval
from rembert_tasks import qa as qa_tasks

# QA tasks may be the prediction-only ones (`qa_tasks.predict_task_name`).
_INFER_FILE = re.compile(
    r"^(?P<task>rembert_(?:local_)?(?P<family>[a-z]+)_(?:predict_)?"
    r"(?P<lang>[a-z]+))"
    r"-predict(?:_with_aux)?\.jsonl-(?P<shard>\d{5})-of-(?P<shards>\d{5})$")
INFER_GIN = "gin_configs/runs/infer_{family}.gin"
# The families t5x.infer predicts (BUCC and Tatoeba have no infer file).
_FINE_TUNED = tuple(t for t, f in families.FAMILIES.items()
                    if f.kind != "retrieval")


def infer_task(family: str, lang: str) -> str:
  """The local task `t5x.infer` predicts (family, language) with: for QA
  the prediction-only task, which reads XTREME's blanked answers."""
  if families.family(family).kind == "qa":
    return qa_tasks.predict_task_name(xtreme_local.LOCAL_PREFIX, family, lang)
  return f"{xtreme_local.LOCAL_PREFIX}{family}_{lang}"


def _infer_files(infer_dirs: Sequence[str]
                 ) -> Dict[Tuple[str, str], str]:
  """(family, language) -> the one infer output file of that task."""
  found: Dict[Tuple[str, str], str] = {}
  for directory in infer_dirs:
    if not tf.io.gfile.isdir(directory):
      raise errors.UserError(f"--infer_dirs: {directory}: no such directory")
    for name in sorted(tf.io.gfile.listdir(directory)):
      m = _INFER_FILE.match(name)
      if not m or m["family"] not in _FINE_TUNED:
        continue
      path = os.path.join(directory, name)
      key = (m["family"], m["lang"])
      if m["shards"] != "00001" or key in found:
        raise errors.UserError(
            f"{m['family']} {m['lang']}: {path}: more than one infer output "
            f"for {m['task']} (also {found.get(key, 'other shards')}); keep "
            "one single-shard run per task")
      found[key] = path
  return found


# --------------------------------------------------------------------------
# `rembert_t5x.t5x_infer` records -> `families.render`'s input
# --------------------------------------------------------------------------

# Family kind -> (row, `rembert_t5x.t5x_infer` records) -> `render`'s input:
# pairs, our class names as XTREME's files spell them; tags, per sentence
# its tags (a word cut by the length scores "O"); QA, {question id: answer}.
_FROM_RECORDS = {
    "pair": lambda family, records: [
        family.labels[family.label_names.index(r["prediction"])]
        for r in records],
    "tagging": lambda _, records: [
        ["O" if t is None else t for t in r["prediction"]] for r in records],
    "qa": lambda _, records: {r["id"]: r["prediction"] for r in records},
}


def _t5x_predictions(task: str, path: str) -> Any:
  """A t5x.infer output (`rembert_t5x.t5x_infer` records) -> `render` input.

  Raises:
    errors.UserError: pair and tagging records are not the examples 0..n-1
      in order (QA records name their question).
  """
  with tf.io.gfile.GFile(path) as f:
    records = [json.loads(line) for line in f if line.strip()]
  family = families.family(task)
  if (family.kind != "qa" and [r.get("index") for r in records]
      != list(range(len(records)))):
    raise errors.UserError(f"{path}: records are not the examples 0..n-1 in "
                           "order (one unsharded t5x.infer run per task)")
  return _FROM_RECORDS[family.kind](family, records)


def _infer_folder_files(found: Dict[Tuple[str, str], str],
                        infer_dirs: Sequence[str], xtreme_dir: str,
                        split: str) -> Dict[Tuple[str, str], str]:
  """{(task, language): checked text} of every family with an output file.

  Raises:
    errors.UserError: a family lacks a language, or a file does not match
      its XTREME file.
  """
  files = {}
  for task in sorted({t for t, _ in found}):
    for lang in families.required_languages(task, split):
      if (task, lang) not in found:
        raise errors.UserError(
            f"{task} {lang}: no t5x.infer output "
            f"{infer_task(task, lang)}-predict.jsonl-00000-of-00001 in "
            f"{list(infer_dirs)}: the {task} folder would lack {lang}")
      output = found[(task, lang)]
      files[(task, lang)] = families.checked_file(
          xtreme_dir, task, split, lang,
          lambda _, t=task, o=output: _t5x_predictions(t, o), source=output)
  return files


def from_t5x(infer_dirs: Sequence[str], xtreme_dir: str, split: str,
             output_dir: str, overwrite: bool = False, *,
             pretrained: Optional[str] = None, work_dir: Optional[str] = None,
             log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Writes the folder `output_dir` ("test" or "dev" `split`) from the
  `t5x.infer` outputs in `infer_dirs` (gin_configs/runs/infer_*.gin) and
  XTREME's download folder `xtreme_dir`; returns its manifest.

  Every family with an output file must have one for each of its languages.
  With `pretrained` (a MODEL_DIR in our layout, e.g. what `hf-to-t5x`
  wrote), BUCC and Tatoeba come from its encoder
  (`retrieval.retrieval_files`), embedded in `work_dir` (default:
  `embeddings/` beside `output_dir`).
  """
  families.check_split(split)
  sources = [("--xtreme_dir", xtreme_dir),
             *(("--infer_dirs", d) for d in infer_dirs),
             ("--pretrained", pretrained)]
  io_utils.check_output_dir(output_dir, overwrite, sources=sources)
  request = folder.Request(os.path.dirname(os.path.abspath(output_dir)),
                           xtreme_dir, split, work_dir=work_dir)
  if pretrained:
    folder.check_inputs(request, [])
  found = _infer_files(infer_dirs)
  if not found and not pretrained:
    raise errors.UserError(f"--infer_dirs {list(infer_dirs)}: no t5x.infer "
                           "outputs (<task>-predict.jsonl-00000-of-00001)")
  files = _infer_folder_files(found, infer_dirs, xtreme_dir, split)
  missing = {t: "no --pretrained (BUCC and Tatoeba embed with the "
             "pre-trained encoder)" for t in families.RETRIEVAL_TASKS}
  bucc = {}
  if pretrained:
    shared = retrieval.retrieval_files(request, pretrained, log=log)
    files.update(shared.files)
    missing, bucc = shared.missing, shared.bucc
  manifest = {"split": split, "infer_dirs": list(infer_dirs),
              "missing": folder.missing_tasks(files, missing,
                                              "no t5x.infer outputs"),
              **({"bucc2018": bucc} if bucc else {})}
  folder.write_folder(output_dir, files, manifest, overwrite=overwrite,
                      sources=sources)
  return manifest


# --------------------------------------------------------------------------
# The shell lines `sweep --runner=t5x --submission_dir` prints
# --------------------------------------------------------------------------

def t5x_infer_lines(spec, model_dir: str, model_gin: str, split: str
                    ) -> List[str]:
  """Shell lines: `t5x.infer` of every language a grid evaluates, on
  $BEST (set by the selection line before), into MODEL_DIR/infer_<split>."""
  lines = []
  for ev in spec.evaluations:
    tasks = " ".join(infer_task(ev.family, lang)
                     for lang in families.required_languages(ev.family,
                                                             split))
    lines.append(
        f"for t in {tasks}; do python -m t5x.infer --gin_search_paths=. "
        f"--gin_file={model_gin} "
        f"--gin_file={INFER_GIN.format(family=ev.family)} "
        "--gin.CHECKPOINT_PATH=\"'$BEST'\" "
        "--gin.MIXTURE_OR_TASK_NAME=\"'$t'\" "
        f"--gin.INFER_OUTPUT_DIR=\"'{model_dir}/infer_{split}'\" "
        "--gin.utils.DatasetConfig.split="
        f"\"'{families.seqio_split(ev.family, split)}'\""
        "; done")
  return lines


@dataclasses.dataclass(frozen=True)
class InferRun:
  """One grid point of a T5X sweep, as the folder commands need it.

  Attributes:
    grid: the grid's name.
    learning_rate: the point's learning rate.
    seed: the point's seed (one folder per seed).
    model_dir: its MODEL_DIR (t5x.infer writes `infer_<split>/` in it).
  """
  grid: str
  learning_rate: float
  seed: int
  model_dir: str


def t5x_folder_lines(request: folder.Request, runs: Sequence[InferRun]
                     ) -> List[str]:
  """Shell lines: per seed, the `from_t5x` command over its runs' infer
  outputs.

  Raises:
    errors.UserError: a grid has several learning rates (the best is known
      only from the finished runs: pass it with --learning_rates).
  """
  rates: Dict[str, set] = {}
  for run in runs:
    rates.setdefault(run.grid, set()).add(run.learning_rate)
  several = sorted(g for g, r in rates.items() if len(r) > 1)
  if several:
    raise errors.UserError(
        f"--submission_dir with --runner=t5x takes one learning rate per grid "
        f"({several} have several): pass the best (sweep.md) with "
        "--learning_rates")
  by_seed: Dict[int, List[str]] = {}
  for run in runs:
    by_seed.setdefault(run.seed, []).append(
        f"{run.model_dir}/infer_{request.split}")
  return [" ".join([
      "python", "-m", "rembert_t5x.experiments.submission",
      f"--xtreme_dir={os.path.abspath(request.xtreme_dir)}",
      f"--split={request.split}", "--infer_dirs=" + ",".join(dirs),
      f"--output_dir={request.out_dir.rstrip('/')}/seed-{seed}",
      "--overwrite"]) for seed, dirs in sorted(by_seed.items())]
