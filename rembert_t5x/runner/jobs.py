"""What the experiments ask of the runner: training runs, evaluations, workers.

The experiments (`experiments/sweep`, `demo`, `reproduce`) describe a run
with a `train_config.TrainConfig`, built by `experiment_config` so that every
experiment derives the same things the same way: a warm-up of a tenth of
the steps, the data shuffled with the init seed, every checkpoint kept, no
progress bar. They train it with `train.train_model`.

`Evaluations` is the other half of a fine-tuning experiment: score the last
checkpoint of a run on a mixture, building (tokenising and caching) each
mixture's evaluation examples once per process however many runs it scores.

`run_workers` runs an experiment's independent parts in worker processes:
one tiny model's training does not keep two cores busy (much of a step is
the input pipeline), so two processes finish two models sooner than one
process does in turn. `pin_to_core` pins a worker to one core (the
reproduction does; the demo's fine-tuning ran slower pinned).

Example:

  metrics = train.train_model(model, jobs.experiment_config(
      model_dir="/tmp/ft", mixture_or_task_name="demo_tag_train",
      task_feature_lengths={"input_tokens": 64}, train_steps=100,
      batch_size=16, learning_rate=5e-4, seed=0, init_checkpoint="/tmp/pre"))
  scores = jobs.Evaluations().last_checkpoint(
      "/tmp/ft", model, "demo_tag_zeroshot", {"input_tokens": 64})
"""

import os
import subprocess
import sys
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from rembert_t5x.common import errors
from rembert_t5x import protocol
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import eval as eval_lib
from rembert_t5x.runner import train_config

# The most steps between logged metrics.
LOG_PERIOD = 50


def experiment_config(*, train_steps: int, seed: int,
                      checkpoint_period: Optional[int] = None,
                      **fields) -> train_config.TrainConfig:
  """A `TrainConfig` with the experiments' conventions.

  Args:
    train_steps: optimiser steps; a tenth of them (rounded down) warm up.
    seed: the parameter-init and dropout seed, also the data-shuffling (and
      MLM masking) seed, so one integer names the run.
    checkpoint_period: save every this many steps; None saves only at the
      end. Every checkpoint saved is kept (a checkpoint may be selected on
      dev afterwards), and only a run checkpointed along the way saves its
      input iterator's state.
    **fields: the other `TrainConfig` fields (model_dir,
      mixture_or_task_name, task_feature_lengths, batch_size,
      learning_rate, init_checkpoint, pack, ...); they override the
      conventions.

  Returns:
    The config.
  """
  period = checkpoint_period or train_steps
  conventions = dict(
      train_steps=train_steps, seed=seed, data_seed=seed,
      warmup_steps=protocol.warmup_steps(train_steps),
      checkpoint_period=period,
      keep_checkpoints=-(-train_steps // period) + 1,
      log_period=max(1, min(LOG_PERIOD, train_steps)),
      # A run that checkpoints only at its end is never resumed mid-way:
      # the input iterator's state (its shuffle buffers, ~9 MB for the
      # demo) would be written for nothing. A rerun with more steps still
      # reads the same batches (the runner then skips the consumed ones).
      checkpoint_input_iterator=checkpoint_period is not None,
      progress_bar=False)
  return train_config.TrainConfig(**{**conventions, **fields})


class Evaluations:
  """Scores checkpoints on mixtures, each mixture's examples built once.

  seqio's evaluator tokenises and caches its tasks' examples when it is
  made; one made per (mixture, split, lengths) serves every model with the
  same feature converter (the fine-tuning models of one task family).
  """

  def __init__(self):
    self._evaluators: Dict[Tuple[Any, ...], Any] = {}

  def _evaluator(self, model, mixture: str, split: str,
                 lengths: Mapping[str, int]):
    key = (mixture, split, tuple(sorted(lengths.items())),
           model.FEATURE_CONVERTER_CLS)
    if key not in self._evaluators:
      self._evaluators[key] = eval_lib.make_evaluator(model, mixture, split,
                                                      lengths)
    return self._evaluators[key]

  def params(self, model, params, mixture: str, lengths: Mapping[str, int],
             split: str = "validation") -> Dict[str, Dict[str, float]]:
    """{task: {metric: value}} of `params` on every task of `mixture`."""
    return eval_lib.evaluate_with(
        self._evaluator(model, mixture, split, lengths), model, params)

  def last_checkpoint(self, model_dir: str, model, mixture: str,
                      lengths: Mapping[str, int], split: str = "validation",
                      by_language: bool = True) -> Dict[str, Dict[str, float]]:
    """Scores of the newest checkpoint under `model_dir`, keyed by language
    (the task name's suffix) or, with `by_language=False`, by task name."""
    scores = self.params(model, checkpoints.load_params_for(model, model_dir), mixture,
                         lengths, split)
    if not by_language:
      return scores
    return {protocol.task_language(t): m for t, m in sorted(scores.items())}


def pin_to_core(worker: int) -> None:
  """Pins this process to one core: worker i to the i-th allowed core."""
  if hasattr(os, "sched_getaffinity"):
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[worker % len(cores)]})


def run_workers(module: str, workers: int, args: Sequence[str]) -> None:
  """Runs `python -m module --worker=i *args` for i < `workers`; waits.

  Each worker prints its own progress; the experiment's records on disk are
  what the caller reads afterwards (a worker that fails leaves the others'
  records, and a rerun resumes from them).

  Raises:
    errors.UserError: a worker exited with an error.
  """
  procs = [subprocess.Popen([sys.executable, "-m", module, f"--worker={i}",
                             *args]) for i in range(workers)]
  failed = [i for i, proc in enumerate(procs) if proc.wait() != 0]
  if failed:
    raise errors.UserError(
        f"{module}: worker(s) {failed} failed (their output is above); "
        "finished runs are kept, rerun the same command to resume")


def cpu_seconds() -> float:
  """CPU seconds of this process and its finished (waited-for) children."""
  t = os.times()
  return t.user + t.system + t.children_user + t.children_system
