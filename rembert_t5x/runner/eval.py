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

Each task's examples go to the model longest first, every batch cut to its
longest example (`make_predict_fn`): the metrics of full-length rows without
computing their padding; `evaluate.length_sorted = False` computes it.

Bad input stops the run with one `errors.UserError` line, and as early as
it can be seen: an EVAL_OUTPUT_DIR that cannot be written before anything
is read, a bad data file (naming the task, split, file and line) before the
checkpoint is loaded, a checkpoint that cannot be read naming its step
directory and the other steps. A refused or failed evaluation leaves
EVAL_OUTPUT_DIR as it was.
"""

import itertools
import json
import pathlib
import re
import sys
import time
from typing import Any, Mapping, Optional

from absl import flags
import gin
import numpy as np
import seqio
import tensorflow as tf

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x.common import task_modules
from rembert_t5x import configs
from rembert_t5x.data import inputs
from rembert_t5x.data import vocabulary as vocab_lib
from rembert_t5x import network
from rembert_t5x import protocol
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import eval_config
from rembert_t5x.runner import predict_batches
from rembert_t5x.runner import train_lib

# Which metric summarises a task in tables and plots, in order of preference.
MAIN_METRICS = ("xtreme", "f1", "accuracy", "exact_match")

# What reading a task's examples raises for a bad data file: the readers'
# ValueError naming the file and line (`xtreme_readers`, `qa`), tf.data's
# OpError (a file a tf.data source cannot open or parse, or a reader's
# ValueError raised inside the pipeline). Anything else is a bug, not bad
# input, and keeps its traceback.
_DATA_ERRORS = (ValueError, tf.errors.OpError)


def evaluate_params(model, params, mixture_or_task_name: str, split: str,
                    task_feature_lengths: Optional[Mapping[str, int]] = None,
                    batch_size: int = 32, *, length_sorted: bool = True
                    ) -> dict[str, dict[str, float]]:
  """{task: {metric: value}} for every task of the mixture with `split`
  (`length_sorted`: see `make_predict_fn`)."""
  evaluator = make_evaluator(model, mixture_or_task_name, split,
                             task_feature_lengths)
  return evaluate_with(evaluator, model, params, batch_size,
                       length_sorted=length_sorted)


class Evaluator(seqio.Evaluator):
  """seqio's Evaluator, which remembers its split for error messages."""

  def __init__(self, *args, eval_split: str, **kwargs):
    self.split = eval_split
    super().__init__(*args, eval_split=eval_split, **kwargs)


def make_evaluator(model, mixture_or_task_name: str, split: str,
                   task_feature_lengths: Optional[Mapping[str, int]] = None
                   ) -> Evaluator:
  """A seqio Evaluator over the mixture's tasks with `split`.

  It tokenises and caches the evaluation examples once; `evaluate_with`
  reuses it for every model with the same feature converter class (the
  demo's seeds and variants), which saves re-tracing the input pipeline.

  Raises:
    errors.UserError: no task has the split; a task's data cannot be read
      (`task <name>, split <split>: <the reader's first line, which names
      the file and line>`) or holds no example.
  """
  inputs.get_task_or_mixture(mixture_or_task_name)  # an unknown name: one line
  tick = time.monotonic()
  print(f"[eval] reading and tokenising {mixture_or_task_name} ({split})",
        file=sys.stderr, flush=True)
  lengths = dict(task_feature_lengths) if task_feature_lengths else None
  try:
    evaluator = Evaluator(
        mixture_or_task_name=mixture_or_task_name,
        feature_converter=model.FEATURE_CONVERTER_CLS(pack=False),
        eval_split=split, use_cached=False, sequence_length=lengths,
        logger_cls=())
  except _DATA_ERRORS as e:
    task = _failing_task(mixture_or_task_name, split, lengths)
    raise errors.UserError(
        f"task {task}, split {split}: {inputs.data_error_line(e)}") from e
  print(f"[eval] {len(evaluator.eval_tasks)} tasks ready in "
        f"{time.monotonic() - tick:.0f} s", file=sys.stderr, flush=True)
  if not evaluator.eval_tasks:
    raise errors.UserError(f"no task of {mixture_or_task_name!r} has a {split!r} "
                        "split with metrics")
  for task in evaluator.eval_tasks:
    # A metric over no examples is NaN or an error deep in the metric code;
    # seqio has counted them while caching (the local readers refuse an
    # empty file themselves; this catches every other source).
    if evaluator.cached_task_datasets[task.name].cardinality() == 0:
      raise errors.UserError(f"task {task.name}, split {split}: no examples")
  return evaluator


def _failing_task(mixture_or_task_name: str, split: str,
                  lengths: Optional[Mapping[str, int]]) -> str:
  """Which task of a mixture cannot be read (else the mixture's name).

  seqio's error does not say which task it was reading, so each task's
  split is read again, in seqio's order, until one fails: on the error path
  only, where it costs at most what the failed read did.
  """
  tasks = seqio.evaluation.get_valid_eval_tasks(
      seqio.get_subtasks(inputs.get_task_or_mixture(mixture_or_task_name)),
      split)
  if len(tasks) == 1:
    return tasks[0].name
  for task in tasks:
    try:
      task.get_dataset(sequence_length=lengths, split=split, shuffle=False,
                       num_epochs=1, use_cached=False).reduce(
                           np.int64(0), lambda n, _: n + 1)
    except _DATA_ERRORS:
      return task.name
  return mixture_or_task_name


def evaluate_with(evaluator: Evaluator, model, params,
                  batch_size: int = 32, *, length_sorted: bool = True
                  ) -> dict[str, dict[str, float]]:
  """{task: {metric: value}} of `params` on an evaluator's cached tasks.

  With several tasks, one line per task goes to stderr as it finishes: its
  number, name, time, and the estimated time left. `length_sorted`: see
  `make_predict_fn`.

  Raises:
    errors.UserError: a task's examples or its metric's own files (e.g.
      BUCC's gold pairs) cannot be read: `task <name>, split <split>: ...`.
  """
  names = [task.name for task in evaluator.eval_tasks]
  predict_fn = _Progress(predict_batches.make_predict_fn(
      model, params, batch_size, length_sorted), names)
  try:
    results, _ = evaluator.evaluate(
        compute_metrics=True, predict_fn=predict_fn,
        predict_with_aux_fn=predict_fn)
    task_metrics = results.result()
  except tf.errors.OpError as e:
    # Only the input pipeline raises OpErrors (JAX raises its own types).
    raise errors.UserError(
        f"task {predict_fn.current}, split {evaluator.split}: "
        f"{inputs.data_error_line(e)}") from e
  except ValueError as e:
    # seqio reports any error of a task's metric as ValueError("Failed to
    # evaluate task <name>: ...") from it: the file a metric reads (BUCC's
    # gold pairs) raises ValueError; another cause is a bug.
    failed = re.match(r"Failed to evaluate task (\S+):", str(e))
    if not (failed and isinstance(e.__cause__, (ValueError, OSError))):
      raise
    raise errors.UserError(
        f"task {failed.group(1)}, split {evaluator.split}: computing its "
        f"metrics: {errors.first_line(e.__cause__)}") from e
  return {task: {k: float(v) for k, v in metrics.items()}
          for task, metrics in task_metrics.items()}


class _Progress:
  """Wraps a predict function; knows the task it is predicting and, with
  several tasks, reports each task's end on stderr.

  seqio's Evaluator calls it once per task, in `eval_tasks` order.
  """

  def __init__(self, predict_fn, names: list[str]):
    self._predict_fn = predict_fn
    self._names = names
    self._done = 0
    self._start = time.monotonic()

  @property
  def current(self) -> str:
    """The task being predicted (the last one once all are done)."""
    return self._names[min(self._done, len(self._names) - 1)]

  def __call__(self, ds, *args, **kwargs):
    tick = time.monotonic()
    name = self.current
    outputs = self._predict_fn(ds, *args, **kwargs)
    self._done += 1
    total = len(self._names)
    if total > 1:
      elapsed = time.monotonic() - self._start
      left = elapsed / self._done * max(0, total - self._done)
      print(f"[eval {self._done}/{total}] {name}: "
            f"{time.monotonic() - tick:.0f} s (elapsed {elapsed:.0f} s, "
            f"about {left:.0f} s left)", file=sys.stderr, flush=True)
    return outputs


def by_family(task_metrics: Mapping[str, Mapping[str, float]]
              ) -> dict[str, dict[str, dict[str, float]]]:
  """{family: {language: metrics}}: per-language rows that never collide."""
  out: dict[str, dict[str, dict[str, float]]] = {}
  for task, metrics in sorted(task_metrics.items()):
    family, lang = protocol.task_family(task), protocol.task_language(task)
    out.setdefault(family, {})[lang] = dict(metrics)
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


def load_checkpoint(model, checkpoint: str) -> dict:
  """`checkpoints.load_params_for`; a checkpoint that cannot be read says
  which step directory it is and which others there are.

  Raises:
    errors.UserError: those of `load_params_for`; for a damaged checkpoint
      (a truncated or corrupt data, manifest or metadata file),
      `checkpoint <step dir>: cannot read its arrays: <TensorStore's
      reason>; if it is damaged, set CHECKPOINT_PATH to another of its
      checkpoints, e.g. <another step dir> (steps there: ...)` (`... cannot
      read its metadata: ...` when the tree of arrays cannot be read).
  """
  try:
    return checkpoints.load_params_for(model, checkpoint)
  except Exception as e:  # pylint: disable=broad-except
    # `load_params_for` turns unreadable metadata into a UserError from
    # orbax's error; its own refusals (no such directory, another
    # architecture) have no cause and stand as they are.
    cause = e.__cause__ if isinstance(e, errors.UserError) else e
    if not _is_read_error(cause):
      raise
    _drop_closed_loop_tracebacks()
    raise _unreadable_checkpoint(checkpoint, e) from e


def _is_read_error(e: Optional[BaseException]) -> bool:
  """Whether `e` is what orbax raises for checkpoint files it cannot read.

  TensorStore's errors are ValueErrors (`OUT_OF_RANGE: Error reading ...`,
  `DATA_LOSS: ...`, `FAILED_PRECONDITION: ... ZSTD_decompressStream()
  failed`), a bad `_METADATA` a JSONDecodeError (a ValueError), the file
  system's OSErrors; orbax wraps a failed read of a jax.Array shard in a
  bare `Exception` ("Encountered error while reading array index"). A
  subclass of Exception of any other kind (TypeError, ...) is a bug.
  """
  bare = type(e) is Exception  # pylint: disable=unidiomatic-typecheck
  return bare or isinstance(e, (ValueError, OSError))


def _drop_closed_loop_tracebacks() -> None:
  """Silences the reads orbax leaves running after a failed restore.

  When one array cannot be read, orbax closes its event loop while
  TensorStore still reads the others; each read that finishes then calls
  back into the closed loop, and Python prints `RuntimeError: Event loop is
  closed` as an unraisable exception: up to dozens of tracebacks (measured:
  0 to 64 lines of them on a 2-step tiny checkpoint) around the one error
  line, whenever the reads end. From here on, those are dropped.
  """
  previous = sys.unraisablehook

  def hook(unraisable):
    if not (isinstance(unraisable.exc_value, RuntimeError) and
            str(unraisable.exc_value) == "Event loop is closed"):
      previous(unraisable)

  sys.unraisablehook = hook


def _unreadable_checkpoint(checkpoint: str,
                           e: Exception) -> errors.UserError:
  step_dir = checkpoints.step_dir(checkpoint)
  if isinstance(e, errors.UserError):  # names the step directory already
    what = errors.first_line(e)
  else:
    # The innermost error says what was wrong (orbax's wrapper names only
    # the array index and a TensorStore spec).
    while e.__cause__ is not None:
      e = e.__cause__
    what = (f"checkpoint {step_dir}: cannot read its arrays: "
            f"{errors.first_line(e)}")
  found = checkpoints.checkpoint_dirs(str(step_dir.parent))
  others = [directory for _, directory in found if directory != step_dir]
  if others:
    steps = ", ".join(str(step) for step, _ in found)
    advice = (f"if it is damaged, set CHECKPOINT_PATH to another of its "
              f"checkpoints, e.g. {others[-1]} (steps there: {steps})")
  else:
    advice = (f"it is the only checkpoint in {step_dir.parent}: if it is "
              "damaged, train or convert it again")
  return errors.UserError(f"{what}; {advice}")


def evaluate_checkpoints(model, checkpoint_dir: str, task_name: str,
                         split: str = "validation",
                         task_feature_lengths: Optional[Mapping[str, int]] = None,
                         batch_size: int = 32, *, length_sorted: bool = True
                         ) -> dict[int, dict[str, float]]:
  """{step: metrics of `task_name`} for every checkpoint under a MODEL_DIR
  (`length_sorted`: see `make_predict_fn`)."""
  evaluator = make_evaluator(model, task_name, split, task_feature_lengths)
  if task_name not in [task.name for task in evaluator.eval_tasks]:
    raise errors.UserError(f"selection task {task_name!r} is not a task (or "
                           f"has no {split!r} split)")
  out = {}
  for step, step_dir in checkpoints.checkpoint_dirs(checkpoint_dir):
    params = load_checkpoint(model, str(step_dir))
    out[step] = evaluate_with(evaluator, model, params, batch_size,
                              length_sorted=length_sorted)[task_name]
  return out


def select_checkpoint(model, checkpoint_dir: str, task_name: str,
                      split: str = "validation",
                      task_feature_lengths: Optional[Mapping[str, int]] = None,
                      batch_size: int = 32, *, length_sorted: bool = True
                      ) -> tuple[pathlib.Path, dict]:
  """The checkpoint under `checkpoint_dir` that scores best on `task_name`.

  Every complete checkpoint is evaluated on the selection task (the English
  dev set); the best `protocol.task_score` wins, ties to the earlier step.

  Returns:
    (the step directory, {"task", "split", "step", "scores": {step: score}}).
  """
  by_step = evaluate_checkpoints(model, checkpoint_dir, task_name, split,
                                 task_feature_lengths, batch_size,
                                 length_sorted=length_sorted)
  scores = {step: protocol.task_score(m) for step, m in by_step.items()}
  step = protocol.best_step(scores)
  step_dir = dict(checkpoints.checkpoint_dirs(checkpoint_dir))[step]
  return step_dir, {"task": task_name, "split": split, "step": step,
                    "scores": {str(s): v for s, v in sorted(scores.items())}}


def check_output_dir(output_dir: str) -> None:
  """Refuses an EVAL_OUTPUT_DIR that cannot take the results.

  Run before anything is read: an evaluation takes minutes to hours, and
  its results would be lost at the end. The directory (and any missing
  parent) is created to write and remove a probe file in it, then removed
  again, so that a refused or failed evaluation leaves no trace;
  `write_results` creates it.

  Raises:
    errors.UserError: `EVAL_OUTPUT_DIR <path> is a file, not a directory`,
      or `EVAL_OUTPUT_DIR <path> is not writable: <reason>` (read-only,
      under a file, no permission to create it).
  """
  path = pathlib.Path(output_dir)
  if path.exists() and not path.is_dir():
    raise errors.UserError(f"EVAL_OUTPUT_DIR {path} is a file, not a "
                           "directory (the results are files written into it)")
  created = list(itertools.takewhile(lambda p: not p.exists(),
                                     (path, *path.parents)))
  try:
    io_utils.make_writable_dir(path, "EVAL_OUTPUT_DIR")
  finally:
    for directory in created:  # the deepest first
      try:
        directory.rmdir()
      except OSError:
        break  # never made, or no longer empty


@gin.configurable
@eval_config.with_config_signature
def evaluate(checkpoint_dir: Optional[str] = None,
             output_dir: Optional[str] = None, *, model=gin.REQUIRED,
             **settings) -> dict[str, Any]:
  """Evaluates a checkpoint on a mixture and writes the results: the run
  files' entry.

  Gin binds `eval.evaluate.model` and `eval.evaluate.<field>` for every
  `eval_config.EvalConfig` field (the signature is the fields', with their
  defaults); the run files bind `checkpoint_dir = %CHECKPOINT_PATH` and
  `output_dir = %EVAL_OUTPUT_DIR` (T5X's macros). This builds the
  `EvalConfig` and calls `evaluate_model`.
  """
  return evaluate_model(model, eval_config.EvalConfig(
      checkpoint_dir=checkpoint_dir, output_dir=output_dir, **settings))


def evaluate_model(model, config: eval_config.EvalConfig) -> dict[str, Any]:
  """Evaluates a checkpoint of `config.checkpoint_dir`; writes the results.

  The latest checkpoint, or with `selection_task` the best one on it (see
  `select_checkpoint`).

  The checks come before the work they guard: the output directory before
  anything is read, that a checkpoint is there before the data is read,
  every task's data before any checkpoint is loaded.

  Returns:
    What `write_results` writes to results.json.

  Raises:
    errors.UserError: see `eval_config.validate`, `check_output_dir`,
      `make_evaluator`, `evaluate_with`, `load_checkpoint`; JAX has several
      processes (`train_lib.require_one_process`).
  """
  train_lib.require_one_process("the local evaluator")
  config = eval_config.validate(config)
  check_output_dir(config.output_dir)
  lengths = config.task_feature_lengths
  if lengths:
    network.check_length(model.config, lengths["input_tokens"])
  task_modules.import_task_module(config.mixture_or_task_module)
  inputs.check_tfds_prepared(config.mixture_or_task_name)
  if config.selection_task:
    inputs.check_tfds_prepared(config.selection_task)
  # The checkpoint's own vocabulary (its MODEL_DIR's sentencepiece.model)
  # unless $REMBERT_SPM_PATH is set; before any task is tokenised.
  vocab_lib.use_checkpoint_vocabulary(config.checkpoint_dir)
  inputs.check_task_vocabulary(model, config.mixture_or_task_name)
  checkpoints.steps(config.checkpoint_dir)  # there is one (a listing, no read)
  evaluator = make_evaluator(model, config.mixture_or_task_name, config.split,
                             lengths)
  selection = None
  checkpoint = config.checkpoint_dir
  if config.selection_task:
    step_dir, selection = select_checkpoint(
        model, config.checkpoint_dir, config.selection_task,
        config.selection_split, lengths, config.batch_size,
        length_sorted=config.length_sorted)
    checkpoint = str(step_dir)
  params = load_checkpoint(model, checkpoint)
  metrics = evaluate_with(evaluator, model, params, config.batch_size,
                          length_sorted=config.length_sorted)
  return write_results(config.output_dir, metrics,
                       f"{config.mixture_or_task_name} ({config.split})",
                       selection=selection)


def _main(fv: flags.FlagValues) -> None:
  """Runs the command line's gin flags (`cli.define_gin_flags`)."""
  configs.parse_gin(fv.gin_file, fv.gin_bindings,
                    search_paths=fv.gin_search_paths)
  # Every argument, the directories (= %CHECKPOINT_PATH, %EVAL_OUTPUT_DIR)
  # included, comes from gin.
  with configs.model_config_errors(fv.gin_file, fv.gin_bindings):
    print(json.dumps(evaluate()["tasks"]))


def main(argv=None) -> None:
  """The `rembert-eval` command: parses `argv` (default: sys.argv) and runs."""
  cli.run_main(_main, argv, doc=__doc__)


if __name__ == "__main__":
  # Run the copy imported under its package name, so gin bindings such as
  # `eval.evaluate.x` (module `rembert_t5x.runner.eval`) apply; `python -m` would
  # otherwise register the configurables under `__main__`.
  from rembert_t5x.runner import eval as _module  # pylint: disable=g-import-not-at-top
  _module.main()
