"""The local road: our fine-tuned checkpoints -> submission folders.

`sweep --submission_dir` (local runner) predicts, right after each grid
point's evaluation, every (task, language) the grid evaluates on the
request's split, checks the files and keeps them in the run's directory
(`run_predictions_dir`); a finished point without them predicts them from
its kept checkpoints. At the end, one folder per seed gathers each grid's
run at its best learning rate, plus BUCC and Tatoeba from the pre-trained
encoder (`retrieval`, shared by every seed). Predictions take the
evaluation's path (`predict_examples`).
"""

import dataclasses
import os
import pathlib
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple

import numpy as np
import seqio

from rembert_t5x.common import errors
from rembert_t5x.data import vocabulary as vocab_lib
from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x.data import xtreme_readers
from rembert_t5x.experiments import xtreme_local
from rembert_t5x.experiments.submission import families
from rembert_t5x.experiments.submission import folder
from rembert_t5x.experiments.submission import retrieval
from rembert_t5x.scoring import metrics
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import predict_batches


# --------------------------------------------------------------------------
# Predictions of a model, per example of a file
# --------------------------------------------------------------------------

def _decode(vocabulary: seqio.Vocabulary, output: np.ndarray) -> Any:
  # As seqio's evaluator decodes a prediction before postprocessing it
  # (`LegacyMetric.from_model_output`): per row, or per row of each example.
  if output.ndim <= 1:
    return vocabulary.decode(output.reshape(-1))
  return [vocabulary.decode(row) for row in output]


def predict_examples(model, params, task: seqio.Task, split: str,
                     lengths: Mapping[str, int], batch_size: int = 32
                     ) -> Tuple[List[Mapping[str, Any]], List[Any]]:
  """(task examples, postprocessed predictions), in dataset order.

  The same path as the evaluation (`runner.eval`): the task's dataset, the
  model's feature converter and jitted `predict_batch_with_aux`, seqio's
  decoding through the `targets` vocabulary, the task's postprocessor.
  """
  ds = task.get_dataset(dict(lengths), split=split, shuffle=False,
                        num_epochs=1, use_cached=False)
  examples = list(ds.as_numpy_iterator())
  model_ds = model.FEATURE_CONVERTER_CLS(pack=False)(ds, lengths)
  outputs = dict(predict_batches.make_predict_fn(model, params, batch_size)(
      model_ds.enumerate()))
  vocabulary = task.output_features["targets"].vocabulary
  predictions = [task.postprocess_fn(
      _decode(vocabulary, np.asarray(outputs[i])), example=ex,
      is_target=False) for i, ex in enumerate(examples)]
  return examples, predictions


def _qa_task(template: str, path: str, split: str) -> seqio.Task:
  """A registered QA task's preprocessing over one file whose gold answers
  may be blank (XTREME's hidden sets; `xtreme_readers.squad_source`)."""
  like = seqio.get_mixture_or_task(template)
  return seqio.Task(f"{template}_submission",
                    source=xtreme_readers.squad_source(path, split),
                    output_features=like.output_features,
                    preprocessors=like.preprocessors,
                    postprocess_fn=like.postprocessor, metric_fns=[])


# Family kind -> (row, postprocessed per-example predictions) -> `render`'s
# input: pairs, the labels as XTREME's files spell them; tags, per original
# sentence its tags (a word cut by the length scores "O"); QA, per question
# its best window's answer (the metric's rule).
_FROM_PREDICTIONS = {
    "pair": lambda family, out: [family.labels[int(p)] for p in out],
    "tagging": lambda _, out: [["O" if t is None else t for t in sentence]
                               for sentence in xp.join_sentence_parts(out)],
    "qa": lambda _, out: metrics.best_window_answers(
        [{"example_id": p["example_id"], "answers": []} for p in out], out)[1],
}


def family_predictions(task: str, predictions: Sequence[Any]) -> Any:
  """Postprocessed per-example predictions -> what `render` writes."""
  family = families.family(task)
  return _FROM_PREDICTIONS[family.kind](family, predictions)


def predict_language(model, params, xtreme_dir: str, task: str, split: str,
                     lang: str, lengths: Mapping[str, int],
                     batch_size: int = 32) -> str:
  """The checked file text of one fine-tuned (task, language)."""
  name = f"{xtreme_local.LOCAL_PREFIX}{task}_{lang}"
  seqio_split = families.seqio_split(task, split)

  def predict(path: str) -> Any:
    if families.family(task).kind == "qa":
      seqio_task = _qa_task(name, path, seqio_split)
    else:
      seqio_task = seqio.get_mixture_or_task(name)
    _, predictions = predict_examples(model, params, seqio_task, seqio_split,
                                      lengths, batch_size)
    return family_predictions(task, predictions)

  return families.checked_file(xtreme_dir, task, split, lang, predict)


# --------------------------------------------------------------------------
# Per grid point: its checked files in its run directory
# --------------------------------------------------------------------------

def run_predictions_dir(run_dir: pathlib.Path, split: str) -> pathlib.Path:
  """Where one grid point keeps its checked prediction files."""
  return pathlib.Path(run_dir) / f"submission-{split}"


def write_run_predictions(request: folder.Request, run_dir: pathlib.Path,
                          spec, model, params, lengths: Mapping[str, int],
                          batch_size: int = 32) -> None:
  """Predicts every (family, language) a grid point evaluates on the
  request's split; writes the checked files under `run_predictions_dir`."""
  files = {(task, lang): predict_language(
      model, params, request.xtreme_dir, task, request.split, lang, lengths,
      batch_size) for task, lang in folder.grid_tasks(spec, request)}
  folder.write_folder(str(run_predictions_dir(run_dir, request.split)),
                      files, {"split": request.split, "grid": spec.name})


def predict_from_kept(request: folder.Request, run_dir: pathlib.Path, spec,
                      model, record: Mapping[str, Any]) -> None:
  """`write_run_predictions` for a finished grid point from its kept
  checkpoints (`--keep_checkpoints`), at the step selected on English dev.

  Raises:
    errors.UserError: the checkpoints are gone.
  """
  step = record["selection"]["step"]
  model_dir = pathlib.Path(run_dir) / "model"
  step_dirs = (dict(checkpoints.checkpoint_dirs(str(model_dir)))
               if model_dir.is_dir() else {})
  if step not in step_dirs:
    raise errors.UserError(
        f"{run_dir}: finished without {request.split} predictions and its "
        f"selected checkpoint (step {step}) is gone; delete its results.json "
        "to rerun it (--keep_checkpoints keeps checkpoints for later "
        "submissions)")
  # The run's vocabulary (its MODEL_DIR's copy), before any task reads text:
  # a resumed sweep has trained nothing in this process.
  vocab_lib.use_checkpoint_vocabulary(str(model_dir))
  params = checkpoints.load_params_for(model, str(step_dirs[step]))
  write_run_predictions(request, run_dir, spec, model, params,
                        {"input_tokens": spec.length})


def _read_run(request: folder.Request, run_dir: pathlib.Path, spec
              ) -> Dict[Tuple[str, str], str]:
  """The checked files of one grid point, as {(task, language): text}."""
  predictions_dir = run_predictions_dir(run_dir, request.split)
  out = {}
  for task, lang in folder.grid_tasks(spec, request):
    path = predictions_dir / families.file_name(task, lang)
    if not path.is_file():
      raise errors.UserError(f"{task} {lang}: {path}: no predictions (rerun "
                             "the sweep with the same --submission_split)")
    out[(task, lang)] = path.read_text(encoding="utf-8")
  return out


# --------------------------------------------------------------------------
# Per seed: one folder
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SweepRun:
  """One grid point of a local sweep, as its folder needs it.

  Attributes:
    spec: the grid (`sweep.TaskSpec`).
    learning_rate: the point's learning rate.
    seed: the point's seed (one folder per seed).
    run_dir: its directory (results.json, `submission-<split>/`, `model/`).
    model: its model adapter (to predict from kept checkpoints).
    record: its results.json (the selected step).
  """
  spec: Any
  learning_rate: float
  seed: int
  run_dir: pathlib.Path
  model: Any
  record: Mapping[str, Any]


def write_sweep_folders(request: folder.Request, runs: Sequence[SweepRun],
                        table, config, pretrained: str,
                        log: Callable[[str], None] = print) -> List[str]:
  """Writes one folder per seed: each grid's run at its best learning rate
  (from `table`, the sweep's `aggregate`), plus BUCC and Tatoeba from the
  encoder of the MODEL_DIR `pretrained` (network config `config`), shared by
  every seed; returns the folders. A point of `runs` finished without
  predictions of the split predicts them from its kept checkpoints
  (`predict_from_kept`)."""
  best = {grid: g["best_learning_rate"] for grid, g in table["grids"].items()}
  by_seed: Dict[int, Dict[Tuple[str, str], str]] = {}
  for run in runs:
    if float(run.learning_rate) != best[run.spec.name]:
      continue
    if not run_predictions_dir(run.run_dir, request.split).is_dir():
      predict_from_kept(request, run.run_dir, run.spec, run.model, run.record)
    by_seed.setdefault(run.seed, {}).update(
        _read_run(request, run.run_dir, run.spec))
  shared = retrieval.retrieval_files(request, pretrained, config, log)
  inputs = [("--xtreme_dir", request.xtreme_dir), ("--pretrained", pretrained),
            *(("run directory", run.run_dir) for run in runs)]
  written = []
  for seed, files in sorted(by_seed.items()):
    files = {**shared.files, **files}
    manifest = {
        "split": request.split, "seed": seed, "learning_rates": best,
        "languages": list(request.languages) if request.languages else "all",
        "missing": folder.missing_tasks(files, shared.missing,
                                        "not in this sweep's grids"),
        **({"bucc2018": shared.bucc} if shared.bucc else {})}
    out = os.path.join(request.out_dir, f"seed-{seed}")
    folder.write_folder(out, files, manifest, sources=inputs,
                        output_flag="--submission_dir")
    log(f"{out}: XTREME submission folder ({request.split} predictions; "
        f"tasks {sorted({task for task, _ in files})}; not held: "
        f"{sorted(manifest['missing'])})")
    written.append(out)
  return written
