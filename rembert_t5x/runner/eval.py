r"""Local evaluation: per-language metrics of a checkpoint on SeqIO tasks.

  python -m rembert_t5x.runner.eval \
    --gin_file=gin_configs/runs/local_tiny_eval_pair.gin \
    --gin.CHECKPOINT_PATH="'/tmp/ft'" --gin.EVAL_OUTPUT_DIR="'/tmp/ft/eval'"

Runs SeqIO's own `Evaluator` (the same postprocessors and metric functions
`t5x.eval` uses) with the model's `predict_batch_with_aux`, over every task
of a mixture, and writes to EVAL_OUTPUT_DIR:

  results.json   {"tasks": {task: {metric: value}},
                  "families": {family: {language: {metric: value}}},
                  "selection": {...} (with a selection task)}
  results.md     a table with one row per task (family, language)
  results.png    a bar chart of the main metric per language and family

Results are keyed by the full task name: `rembert_mlqa_en` and
`rembert_squad_en` are different rows of different families.

Checkpoint: the latest under CHECKPOINT_PATH, or, with
`evaluate.selection_task` (the English dev task, e.g. 'rembert_xnli_en'),
the checkpoint that scores best on it (`select_checkpoint`): the paper and
XTREME select on the English dev set.
"""

import json
import pathlib
import re
import sys
import time
import weakref
from typing import Any, Mapping, Optional

from absl import flags
import gin
import jax
import numpy as np
import seqio

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x import configs
from rembert_t5x.data import inputs
from rembert_t5x.data import vocabulary as vocab_lib
from rembert_t5x import network
from rembert_t5x import protocol
from rembert_t5x.runner import checkpoints

# Which metric summarises a task in tables and plots, in order of preference.
MAIN_METRICS = ("xtreme", "f1", "accuracy", "exact_match")


# One jitted predict function per model object: checkpoint selection
# evaluates several checkpoints of one model, which must not recompile.
_JITTED_PREDICT = weakref.WeakKeyDictionary()


def make_predict_fn(model, params, batch_size: int):
  """A seqio predict function over an enumerated model-feature dataset.

  The parameters go to the device once, here, not with every batch (host
  numpy parameters would be copied on every call: 314 ms per batch measured
  for a 256 MB tree; RemBERT's is ~2.3 GB). Batches go in and predictions
  come back by explicit transfers only.
  """
  predict = _JITTED_PREDICT.get(model)
  if predict is None:
    predict = _JITTED_PREDICT[model] = jax.jit(model.predict_batch_with_aux)
  params = jax.device_put(params)

  def predict_fn(ds, model_feature_shapes=None):
    del model_feature_shapes
    outputs = []
    for indices, features in ds.batch(batch_size).as_numpy_iterator():
      n = len(indices)
      # Pad the last batch so every call has one shape (one compilation).
      batch = jax.device_put(
          {k: _pad(v, batch_size) for k, v in features.items()
           if np.issubdtype(v.dtype, np.number)})
      predictions, _ = predict(params, batch)
      predictions = jax.device_get(predictions)[:n]
      outputs.extend(zip(indices.tolist(), list(predictions)))
    return outputs

  return predict_fn


def _pad(x: np.ndarray, size: int) -> np.ndarray:
  if x.shape[0] == size:
    return x
  pad = [(0, size - x.shape[0])] + [(0, 0)] * (x.ndim - 1)
  return np.pad(x, pad)


def evaluate_params(model, params, mixture_or_task_name: str, split: str,
                    task_feature_lengths: Optional[Mapping[str, int]] = None,
                    batch_size: int = 32) -> dict[str, dict[str, float]]:
  """{task: {metric: value}} for every task of the mixture with `split`."""
  evaluator = make_evaluator(model, mixture_or_task_name, split,
                             task_feature_lengths)
  return evaluate_with(evaluator, model, params, batch_size)


def make_evaluator(model, mixture_or_task_name: str, split: str,
                   task_feature_lengths: Optional[Mapping[str, int]] = None
                   ) -> seqio.Evaluator:
  """A seqio Evaluator over the mixture's tasks with `split`.

  It tokenises and caches the evaluation examples once; `evaluate_with`
  reuses it for every model with the same feature converter class (the
  demo's seeds and variants), which saves re-tracing the input pipeline.
  """
  tick = time.monotonic()
  print(f"[eval] reading and tokenising {mixture_or_task_name} ({split})",
        file=sys.stderr, flush=True)
  evaluator = seqio.Evaluator(
      mixture_or_task_name=mixture_or_task_name,
      feature_converter=model.FEATURE_CONVERTER_CLS(pack=False),
      eval_split=split, use_cached=False,
      sequence_length=dict(task_feature_lengths) if task_feature_lengths else None,
      logger_cls=())
  print(f"[eval] {len(evaluator.eval_tasks)} tasks ready in "
        f"{time.monotonic() - tick:.0f} s", file=sys.stderr, flush=True)
  if not evaluator.eval_tasks:
    raise errors.UserError(f"no task of {mixture_or_task_name!r} has a {split!r} "
                        "split with metrics")
  return evaluator


def evaluate_with(evaluator: seqio.Evaluator, model, params,
                  batch_size: int = 32) -> dict[str, dict[str, float]]:
  """{task: {metric: value}} of `params` on an evaluator's cached tasks.

  With several tasks, one line per task goes to stderr as it finishes: its
  number, name, time, and the estimated time left.
  """
  predict_fn = make_predict_fn(model, params, batch_size)
  names = [task.name for task in evaluator.eval_tasks]
  if len(names) > 1:
    predict_fn = _Progress(predict_fn, names)
  results, _ = evaluator.evaluate(compute_metrics=True, predict_fn=predict_fn,
                                  predict_with_aux_fn=predict_fn)
  return {task: {k: float(v) for k, v in metrics.items()}
          for task, metrics in results.result().items()}


class _Progress:
  """Wraps a predict function; reports each task's end on stderr.

  seqio's Evaluator calls it once per task, in `eval_tasks` order.
  """

  def __init__(self, predict_fn, names: list[str]):
    self._predict_fn = predict_fn
    self._names = names
    self._done = 0
    self._start = time.monotonic()

  def __call__(self, ds, *args, **kwargs):
    tick = time.monotonic()
    outputs = self._predict_fn(ds, *args, **kwargs)
    self._done += 1
    total = len(self._names)
    elapsed = time.monotonic() - self._start
    left = elapsed / self._done * max(0, total - self._done)
    name = self._names[min(self._done, total) - 1]
    print(f"[eval {self._done}/{total}] {name}: {time.monotonic() - tick:.0f} s"
          f" (elapsed {elapsed:.0f} s, about {left:.0f} s left)",
          file=sys.stderr, flush=True)
    return outputs


def task_language(task_name: str) -> str:
  """The language code a task name ends with (`rembert_xnli_de` -> `de`)."""
  return task_name.rsplit("_", 1)[-1]


def task_family(task_name: str) -> str:
  """The task name without its language (`rembert_xnli_de` -> `rembert_xnli`)."""
  return re.sub(r"_[^_]+$", "", task_name)


def by_family(task_metrics: Mapping[str, Mapping[str, float]]
              ) -> dict[str, dict[str, dict[str, float]]]:
  """{family: {language: metrics}}: per-language rows that never collide."""
  out: dict[str, dict[str, dict[str, float]]] = {}
  for task, metrics in sorted(task_metrics.items()):
    out.setdefault(task_family(task), {})[task_language(task)] = dict(metrics)
  return out


def main_metric(metrics: Mapping[str, float]) -> str:
  for name in MAIN_METRICS:
    if name in metrics:
      return name
  return sorted(metrics)[0]


def language_table(task_metrics: Mapping[str, Mapping[str, float]],
                   chance: Optional[Mapping[str, float]] = None) -> str:
  """A markdown table: one row per task (family, language), one column per
  metric, and an average row per family."""
  names = sorted({m for metrics in task_metrics.values() for m in metrics})
  header = ["family", "language"] + names + (["chance"] if chance else [])
  lines = ["| " + " | ".join(header) + " |",
           "|" + "---|" * len(header)]
  for family, langs in by_family(task_metrics).items():
    for lang in sorted(langs):
      row = [family, lang] + [f"{langs[lang][n]:.1f}" if n in langs[lang]
                              else "" for n in names]
      if chance:
        row.append(f"{chance[lang]:.1f}" if lang in chance else "")
      lines.append("| " + " | ".join(row) + " |")
    averages = []
    for n in names:
      values = [m[n] for m in langs.values() if n in m]
      averages.append(f"{np.mean(values):.1f}" if values else "")
    lines.append(f"| {family} | **avg** | " + " | ".join(averages)
                 + (" | " if chance else "") + " |")
  return "\n".join(lines)


def plot_languages(groups: Mapping[str, Mapping[str, float]], path: pathlib.Path,
                   title: str, ylabel: str,
                   chance: Optional[Mapping[str, float]] = None,
                   errors: Optional[Mapping[str, Mapping[str, float]]] = None
                   ) -> None:
  """Grouped bars: one group per language, one bar per series; `errors`
  ({series: {language: half-height}}) draws error bars."""
  # Deferred: only plots need matplotlib.
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  langs = sorted({l for series in groups.values() for l in series})
  width = 0.8 / max(len(groups), 1)
  fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(langs) + 2), 3.5))
  for i, (label, series) in enumerate(sorted(groups.items())):
    xs = np.arange(len(langs)) + i * width
    yerr = ([errors.get(label, {}).get(l, 0.0) for l in langs] if errors
            else None)
    ax.bar(xs, [series.get(l, 0.0) for l in langs], width, label=label,
           yerr=yerr, capsize=3 if errors else 0)
  if chance:
    for j, lang in enumerate(langs):
      if lang in chance:
        ax.hlines(chance[lang], j - 0.1, j + 0.8, colors="k", linestyles="--",
                  label="chance" if j == 0 else None)
  ax.set_xticks(np.arange(len(langs)) + 0.4 - width / 2)
  ax.set_xticklabels(langs)
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.legend(fontsize=8)
  fig.tight_layout()
  tmp = path.with_suffix(".tmp.png")
  fig.savefig(tmp, dpi=100)
  plt.close(fig)
  tmp.replace(path)


def write_results(output_dir: str, task_metrics: Mapping[str, Mapping[str, float]],
                  title: str, chance: Optional[Mapping[str, float]] = None,
                  selection: Optional[Mapping[str, Any]] = None
                  ) -> dict[str, Any]:
  """Writes results.json, results.md and results.png (each atomically)."""
  out = pathlib.Path(output_dir)
  out.mkdir(parents=True, exist_ok=True)
  families = by_family(task_metrics)
  record = {"title": title, "tasks": dict(task_metrics),
            "families": families}
  if selection is not None:
    record["selection"] = dict(selection)
  io_utils.atomic_write_json(out / "results.json", record, indent=1)
  io_utils.atomic_write_text(
      out / "results.md", f"# {title}\n\n{language_table(task_metrics, chance)}\n")
  if task_metrics:
    metric = main_metric(next(iter(task_metrics.values())))
    plot_languages({family: {l: m[metric] for l, m in langs.items()
                             if metric in m}
                    for family, langs in families.items()},
                   out / "results.png", title, metric, chance)
  return record


def evaluate_checkpoints(model, checkpoint_dir: str, task_name: str,
                         split: str = "validation",
                         task_feature_lengths: Optional[Mapping[str, int]] = None,
                         batch_size: int = 32
                         ) -> dict[int, dict[str, float]]:
  """{step: metrics of `task_name`} for every checkpoint under a MODEL_DIR."""
  out = {}
  for step, step_dir in checkpoints.checkpoint_dirs(checkpoint_dir):
    params = checkpoints.load_params_for(model, str(step_dir))
    metrics = evaluate_params(model, params, task_name, split,
                              task_feature_lengths, batch_size)
    if task_name not in metrics:
      raise errors.UserError(f"selection task {task_name!r} is not a task (or "
                          f"has no {split!r} split)")
    out[step] = metrics[task_name]
  return out


def select_checkpoint(model, checkpoint_dir: str, task_name: str,
                      split: str = "validation",
                      task_feature_lengths: Optional[Mapping[str, int]] = None,
                      batch_size: int = 32) -> tuple[pathlib.Path, dict]:
  """The checkpoint under `checkpoint_dir` that scores best on `task_name`.

  Every complete checkpoint is evaluated on the selection task (the English
  dev set); the best `protocol.task_score` wins, ties to the earlier step.

  Returns:
    (the step directory, {"task", "split", "step", "scores": {step: score}}).
  """
  by_step = evaluate_checkpoints(model, checkpoint_dir, task_name, split,
                                 task_feature_lengths, batch_size)
  scores = {step: protocol.task_score(m) for step, m in by_step.items()}
  step = protocol.best_step(scores)
  step_dir = dict(checkpoints.checkpoint_dirs(checkpoint_dir))[step]
  return step_dir, {"task": task_name, "split": split, "step": step,
                    "scores": {str(s): v for s, v in sorted(scores.items())}}


def _check_dir_set(value: Optional[str], name: str, macro: str) -> None:
  if value is None:
    raise errors.UserError(
        f"{macro} is not set: the gin files bind no eval_lib.evaluate.{name} "
        f"(add `eval_lib.evaluate.{name} = %{macro}`)")
  if not value or value is gin.REQUIRED:
    raise errors.UserError(f"{macro} is not set (e.g. --gin.{macro}=\"'/tmp/x'\")")


@gin.configurable
def evaluate(checkpoint_dir: Optional[str] = None,
             output_dir: Optional[str] = None, *, model=gin.REQUIRED,
             mixture_or_task_name: str = gin.REQUIRED,
             mixture_or_task_module: Optional[str] = None,
             split: str = "validation",
             task_feature_lengths: Optional[Mapping[str, int]] = None,
             batch_size: int = 32,
             selection_task: Optional[str] = None,
             selection_split: str = "validation") -> dict[str, Any]:
  """Evaluates a checkpoint of `checkpoint_dir` on a mixture; writes results.

  The latest checkpoint, or with `selection_task` the best one on it (see
  `select_checkpoint`). The run files bind `checkpoint_dir = %CHECKPOINT_PATH`
  and `output_dir = %EVAL_OUTPUT_DIR` (T5X's macros).
  """
  _check_dir_set(checkpoint_dir, "checkpoint_dir", "CHECKPOINT_PATH")
  _check_dir_set(output_dir, "output_dir", "EVAL_OUTPUT_DIR")
  if task_feature_lengths:
    network.check_length(model.config, task_feature_lengths["input_tokens"])
  inputs.import_task_module(mixture_or_task_module)
  inputs.check_tfds_prepared(mixture_or_task_name)
  # The checkpoint's own vocabulary (its MODEL_DIR's sentencepiece.model)
  # unless $REMBERT_SPM_PATH is set; before any task is tokenised.
  vocab_lib.use_checkpoint_vocabulary(checkpoint_dir)
  inputs.check_task_vocabulary(model, mixture_or_task_name)
  selection = None
  checkpoint = checkpoint_dir
  if selection_task:
    inputs.check_tfds_prepared(selection_task)
    step_dir, selection = select_checkpoint(
        model, checkpoint_dir, selection_task, selection_split,
        task_feature_lengths, batch_size)
    checkpoint = str(step_dir)
  params = checkpoints.load_params_for(model, checkpoint)
  metrics = evaluate_params(model, params, mixture_or_task_name, split,
                            task_feature_lengths, batch_size)
  return write_results(output_dir, metrics,
                       f"{mixture_or_task_name} ({split})",
                       selection=selection)


def main(fv: flags.FlagValues) -> None:
  """Runs the command line's gin flags (`cli.define_gin_flags`)."""
  configs.parse_gin(fv.gin_file, fv.gin_bindings,
                    search_paths=fv.gin_search_paths)
  # Every argument, the directories (= %CHECKPOINT_PATH, %EVAL_OUTPUT_DIR)
  # included, comes from gin.
  print(json.dumps(evaluate()["tasks"]))


def run(argv=None) -> None:
  """The `rembert-eval` command: parses `argv` (default: sys.argv) and runs."""
  cli.run_main(main, argv, doc=__doc__)


if __name__ == "__main__":
  # Run the copy imported under its package name, so gin bindings such as
  # `eval.evaluate.x` (module `rembert_t5x.runner.eval`) apply; `python -m` would
  # otherwise register the configurables under `__main__`.
  from rembert_t5x.runner import eval as _module  # pylint: disable=g-import-not-at-top
  _module.run()
