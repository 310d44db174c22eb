"""Training jobs: what the experiments ask the runner to do.

The experiments (`experiments/sweep`, `demo`, `reproduce`) describe a run with
a `TrainJob` (which model, task, budget and seed; where to start from and
where to write) and hand it to `run`. Only this module calls the training
loop (`runner/train`), so the loop's keyword surface (optimiser constants,
mesh, logging, the input-iterator checkpoints) can change without touching
any experiment, and every experiment derives the same things the same way:
a warm-up of a tenth of the steps, the data shuffled with the init seed, no
progress bar.

`Evaluations` is the other half of a fine-tuning experiment: score the last
checkpoint of a job on a mixture, building (tokenising and caching) each
mixture's evaluation examples once per process however many jobs it scores.

`run_workers` runs an experiment's independent parts in worker processes:
one tiny model's training does not keep two cores busy (much of a step is
the input pipeline), so two processes finish two models sooner than one
process does in turn. `pin_to_core` pins a worker to one core (the
reproduction does; the demo's fine-tuning ran slower pinned).

Example:

  metrics = jobs.run(jobs.TrainJob(
      model_dir="/tmp/ft", model=model, task="demo_tag_train",
      lengths={"input_tokens": 64}, steps=100, batch_size=16,
      learning_rate=5e-4, seed=0, init_checkpoint="/tmp/pre"))
  scores = jobs.Evaluations().last_checkpoint(
      "/tmp/ft", model, "demo_tag_zeroshot", {"input_tokens": 64})
"""

import dataclasses
import math
import os
import subprocess
import sys
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from rembert_t5x.common import errors
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import eval as eval_lib
from rembert_t5x.runner import train as train_loop


@dataclasses.dataclass(frozen=True)
class TrainJob:
  """One training run.

  Attributes:
    model_dir: where checkpoints and metrics go; a directory holding a
      checkpoint is resumed from it.
    model: a `models.RemBert*Model`.
    task: the registered SeqIO task or mixture to train on.
    lengths: task feature lengths, e.g. {"input_tokens": 128}.
    steps: optimiser steps.
    batch_size: examples per step.
    learning_rate: the peak of the linear warm-up / linear decay schedule.
    seed: parameter-init and dropout seed, also the data-shuffling (and MLM
      masking) seed, so one integer names the run.
    init_checkpoint: a pre-training MODEL_DIR whose encoder initialises the
      model (fine-tuning); None trains from scratch.
    pack: pack examples into full rows (`train.train`'s `pack`: None packs
      the fine-tuning heads' steps, not MLM).
    warmup_fraction: warm-up steps as a fraction of `steps` (BERT: 0.1).
    checkpoint_period: save every this many steps; None saves only at the
      end.
    keep_checkpoints: checkpoints kept; None keeps every one saved (needed
      when a checkpoint is selected on dev afterwards).
    log_period: log metrics every this many steps (capped at `steps`).
  """
  model_dir: str
  model: Any
  task: str
  lengths: Mapping[str, int]
  steps: int
  batch_size: int
  learning_rate: float
  seed: int
  init_checkpoint: Optional[str] = None
  pack: Optional[bool] = None
  warmup_fraction: float = 0.1
  checkpoint_period: Optional[int] = None
  keep_checkpoints: Optional[int] = None
  log_period: int = 50

  def saved_steps(self) -> int:
    """How many checkpoints the run writes (the last step always saved)."""
    period = self.checkpoint_period or self.steps
    return -(-self.steps // period)


def train_arguments(job: TrainJob) -> Dict[str, Any]:
  """The training loop's keyword arguments for `job`."""
  return dict(
      model_dir=job.model_dir, model=job.model, mixture_or_task_name=job.task,
      task_feature_lengths=dict(job.lengths), train_steps=job.steps,
      batch_size=job.batch_size, learning_rate=job.learning_rate,
      # The epsilon keeps 70 * 0.1 = 7.000000000000001 and 30 * 0.1 alike
      # on the integer below them, as `steps // 10` would.
      warmup_steps=math.floor(job.steps * job.warmup_fraction + 1e-9),
      pack=job.pack, checkpoint_period=job.checkpoint_period or job.steps,
      keep_checkpoints=job.keep_checkpoints or job.saved_steps() + 1,
      log_period=max(1, min(job.log_period, job.steps)), seed=job.seed,
      data_seed=job.seed, init_checkpoint=job.init_checkpoint,
      # A run that checkpoints only at its end is never resumed mid-way:
      # the input iterator's state (its shuffle buffers, ~9 MB for the demo)
      # would be written for nothing. A rerun with more steps still reads
      # the same batches (the runner then skips the consumed ones).
      checkpoint_input_iterator=job.checkpoint_period is not None,
      progress_bar=False)


def run(job: TrainJob) -> Dict[str, float]:
  """Trains `job`; returns its last logged metrics as floats."""
  metrics = train_loop.train(**train_arguments(job))
  return {k: float(v) for k, v in metrics.items()}


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
    return {eval_lib.task_language(t): m for t, m in sorted(scores.items())}


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
