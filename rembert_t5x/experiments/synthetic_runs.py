"""What the synthetic-benchmark experiments share: settings, data, runs.

The offline demo (`demo`) and the toy reproduction (`reproduce`) pre-train
on the synthetic corpus, fine-tune on its tasks in one language and evaluate
the others, in units that leave a record on disk (a rerun resumes) and run
in this process or in worker processes. Their common settings (`RunSettings`,
each field a command-line flag), the check that a work directory's data
match them, the model configs (`model_config`), the runner of units, the
clock that times them and the training and evaluation calls (`Session`)
live here; each experiment keeps its own grid, records and tables.
"""

import contextlib
import dataclasses
import pathlib
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Type

from absl import flags
import jax
from jax.experimental.compilation_cache import compilation_cache as cc

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x import configs
from rembert_t5x.data import synthetic
from rembert_t5x.data import synthetic_files
from rembert_t5x.experiments import sweep
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import jobs as runner_jobs
from rembert_t5x.runner import train as runner_train
from rembert_tasks import synthetic as synthetic_tasks

# Task family: main metric. Objectives, classes, the QA answer limit and the
# reproduction's input lengths: `sweep.demo_tasks`.
FAMILIES = {"pair": "accuracy", "tag": "f1", "qa": "f1"}
# MLM-head positions per pre-training row: ceil(15% of 64) plus a margin.
MAX_PREDICTIONS = 16
# The tiny models' initialiser (`RemBertConfig.initializer_range`; BERT's
# 0.02 is for H = 768 and up). At 0.02 the decoupled tiny model's first layer
# sees inputs of std ~0.1 (LayerNorm over E_in = 32, then a 0.02 projection)
# and stayed on the unigram plateau for 2,000 pre-training steps; at 0.05 it
# leaves it by step ~1,000 (docs/DEMO_RESULTS.md). Both variants get it.
INITIALIZER_RANGE = 0.05

_DEFINE_BY_TYPE = {int: flags.DEFINE_integer, float: flags.DEFINE_float,
                   str: flags.DEFINE_string, bool: flags.DEFINE_bool}


@dataclasses.dataclass
class RunSettings:
  """Sizes, learning rates and seeds every synthetic experiment has."""
  seed: int = 0
  data_seed: int = 0
  pretrain_steps: int = 500
  pretrain_learning_rate: float = 3e-3
  pretrain_length: int = 64
  batch_size: int = 32
  finetune_steps: int = 100
  finetune_learning_rate: float = 5e-4
  # Sentence-pair comparison is learnt more slowly than tagging or QA: it
  # gets more steps and a higher learning rate (at 100 steps its loss stayed
  # at chance, 0.69: docs/DEMO_RESULTS.md).
  pair_finetune_steps: int = 150
  pair_finetune_learning_rate: float = 1e-3
  # Dev examples per language.
  eval_examples: int = 400
  # Pre-training sentences per language. Pre-training's first batch reads
  # the whole corpus (seqio's 1,000-row shuffle buffers hold all of it):
  # ~8 s of CPU at the default.
  corpus_sentences: int = synthetic_files.CORPUS_SENTENCES
  # Worker processes the runs are split among (1: all in this process).
  jobs: int = 2

  def finetune(self, family: str):
    """(steps, learning rate) for fine-tuning one task family."""
    if family == "pair":
      return self.pair_finetune_steps, self.pair_finetune_learning_rate
    return self.finetune_steps, self.finetune_learning_rate

  def check(self, *counts: str) -> None:
    """Refuses a count (these and `counts`) below 1, naming its flag."""
    cli.check_at_least_one(self, (
        *counts, "eval_examples", "corpus_sentences", "pretrain_steps",
        "finetune_steps", "pair_finetune_steps", "batch_size", "jobs"))


def define_flags(fv: flags.FlagValues, cls: Type[RunSettings],
                 with_defaults: bool = True) -> None:
  """`--workdir`, the internal `--worker` and a flag per field of `cls`;
  without defaults (None) when the caller fills unset fields itself (the
  demo's `--full`)."""
  flags.DEFINE_string("workdir", None, "output directory", flag_values=fv,
                      required=True)
  flags.DEFINE_integer("worker", None, "internal: run as worker i of --jobs",
                       flag_values=fv)
  for field in dataclasses.fields(cls):
    _DEFINE_BY_TYPE[type(field.default)](
        field.name, field.default if with_defaults else None,
        f"default {field.default}", flag_values=fv)


def settings_from_flags(fv: flags.FlagValues, cls: Type[RunSettings],
                        **base: Any) -> RunSettings:
  """`cls` of parsed flags (`define_flags`): `base`, and over it every flag
  with a value."""
  return cls(**{**base, **{f.name: fv[f.name].value
                           for f in dataclasses.fields(cls)
                           if fv[f.name].value is not None}})


def worker_flags(settings: RunSettings) -> List[str]:
  """The command-line flags that give a worker process `settings`."""
  return [f"--{f.name}={getattr(settings, f.name)}"
          for f in dataclasses.fields(settings)]


def run_units(module: str, out: pathlib.Path, settings: RunSettings,
              todo: Sequence[Any], work: Callable[[Sequence[Any]], None],
              log: Callable[[str], None]) -> int:
  """Runs the units of `todo` (those without a record yet).

  One process's worth (`settings.jobs` or `todo` allows one) runs here as
  `work(todo)`; otherwise min(`settings.jobs`, len(todo)) worker processes
  run `python -m module --worker=i` with `--jobs` set to their number, and
  each runs its `worker_units`. Returns the number of workers (0: nothing
  to run).
  """
  workers = min(settings.jobs, len(todo))
  log(f"{len(todo)} unit(s) to run in {max(workers, 1)} process(es)")
  if workers > 1:
    settings = dataclasses.replace(settings, jobs=workers)
    runner_jobs.run_workers(module, workers,
                            [f"--workdir={out}", *worker_flags(settings)])
  elif todo:
    work(todo)
  return workers


def worker_units(units: Sequence[Any], todo: Sequence[Any], worker: int,
                 settings: RunSettings) -> List[Any]:
  """Worker `worker`'s share of `todo`: those of every `settings.jobs`-th
  of `units` (all of the experiment's). By position in `units`, not in
  `todo`: a worker that starts after another has finished a unit still
  takes its own."""
  return [u for i, u in enumerate(units)
          if i % settings.jobs == worker and u in todo]


class Clock:
  """Wall and process CPU seconds since the start, and per stage.

  CPU seconds (all threads, and the worker processes once they have
  finished) are logged beside wall seconds: on a shared machine the wall
  time says little about the cost on an idle one.
  """

  def __init__(self):
    self.start_wall, self.start_cpu = time.time(), runner_jobs.cpu_seconds()
    self.stages: Dict[str, List[float]] = {}

  def __call__(self) -> str:
    return (f"[{time.time() - self.start_wall:5.0f}s wall "
            f"{runner_jobs.cpu_seconds() - self.start_cpu:5.0f}s cpu]")

  @contextlib.contextmanager
  def stage(self, name: str):
    wall, cpu = time.time(), runner_jobs.cpu_seconds()
    yield
    self.add({name: [time.time() - wall, runner_jobs.cpu_seconds() - cpu]})

  def add(self, stages: Mapping[str, Sequence[float]]) -> None:
    """Adds stage times (a block's, or a worker's: stage seconds are then
    summed over processes)."""
    for name, (wall, cpu) in stages.items():
      total = self.stages.setdefault(name, [0.0, 0.0])
      total[0] += wall
      total[1] += cpu

  def elapsed(self) -> Dict[str, float]:
    """{"seconds", "cpu_seconds"} since the start."""
    return {"seconds": round(time.time() - self.start_wall, 1),
            "cpu_seconds": round(runner_jobs.cpu_seconds() - self.start_cpu,
                                 1)}

  def totals(self) -> Dict[str, Any]:
    """`elapsed`, and per stage [wall, CPU] seconds."""
    return {**self.elapsed(),
            "stages": {k: [round(w, 1), round(c, 1)]
                       for k, (w, c) in self.stages.items()}}


@contextlib.contextmanager
def compilation_cache(path: pathlib.Path):
  """JAX's persistent compilation cache in `path` for the block.

  Every fine-tuning run of one (variant, task) compiles the same programs
  (seeds are inputs, not constants), so all but the first load them. A
  cache directory already configured (JAX_COMPILATION_CACHE_DIR, the test
  suite's) is kept; otherwise the previous setting is restored afterwards.
  """
  name = "jax_compilation_cache_dir"
  old = getattr(jax.config, name)
  if old:
    yield
    return
  # JAX's default threshold (programs that took >= 1 s to compile) keeps
  # the train and init steps, not the many small eager ops.
  jax.config.update(name, str(path))
  cc.reset_cache()
  try:
    yield
  finally:
    jax.config.update(name, old)
    cc.reset_cache()


# The sizes of the manifest a work directory's data must match: {size in
# the manifest: field of `RunSettings`}.
_CHECKED_SIZES = {"eval_examples": "eval_examples",
                  "corpus": "corpus_sentences"}


def prepare_data(out: pathlib.Path, settings: RunSettings, prefix: str,
                 register: Optional[Mapping[str, Any]] = None, **sizes: Any):
  """(manifest, task names) of the synthetic data in `out/data`, generated
  with the seed and sizes of `settings` and `sizes`
  (`rembert_tasks.synthetic.prepare`) unless there, registered under
  `prefix` (with `register`'s options).

  Raises:
    errors.UserError: the directory's data were generated otherwise: its
      seed, a size of `_CHECKED_SIZES` or (`synthetic_tasks.prepare`) the
      pair task differs.
  """
  manifest = synthetic_tasks.prepare(
      str(out / "data"), seed=settings.data_seed,
      eval_examples=settings.eval_examples,
      corpus_sentences=settings.corpus_sentences, **sizes)
  made = {"data_seed": manifest["seed"],
          **{k: manifest["sizes"][k] for k in _CHECKED_SIZES}}
  wanted = {"data_seed": settings.data_seed,
            **{k: getattr(settings, f) for k, f in _CHECKED_SIZES.items()}}
  if made != wanted:
    raise errors.UserError(
        f"{out / 'data' / 'manifest.json'}: data were generated with "
        + ", ".join(f"{k}={v}" for k, v in made.items())
        + ", not " + ", ".join(f"{k}={v}" for k, v in wanted.items())
        + "; use a new --workdir")
  return manifest, synthetic_tasks.register_synthetic(
      manifest, prefix=prefix, **(register or {}))


def model_config(gin_file: str = sweep.TINY_GIN,
                 vocab_size: int = synthetic.VOCAB_SIZE,
                 **overrides: Any) -> network.RemBertConfig:
  """The network config of a model gin file with a synthetic vocabulary's
  size, the tiny models' `INITIALIZER_RANGE` and `overrides` (a
  variant's)."""
  return dataclasses.replace(
      configs.config_from_gin(gin_file), vocab_size=vocab_size,
      **{"initializer_range": INITIALIZER_RANGE, **overrides})


def finetune_model(family: str, config: network.RemBertConfig):
  """The model class of a synthetic task family over `config`."""
  return sweep.make_model(sweep.demo_tasks()[family], config)


@dataclasses.dataclass
class Session:
  """What the runs of one process share.

  Attributes:
    settings: the experiment's settings.
    prefix: the prefix the synthetic tasks are registered under.
    names: the registered task names (`prepare_data`).
    clock: times the stages (pre-training, fine-tuning, evaluation).
    evaluations: one for every model of a task: its evaluation examples
      are built once.
  """
  settings: RunSettings
  prefix: str
  names: Mapping[str, str]
  clock: Clock = dataclasses.field(default_factory=Clock)
  evaluations: runner_jobs.Evaluations = dataclasses.field(
      default_factory=runner_jobs.Evaluations)

  def pretrain(self, config: network.RemBertConfig, model_dir: str,
               seed: int) -> Dict[str, Any]:
    """MLM pre-training on the synthetic corpus (packed rows); the final
    metrics."""
    with self.clock.stage("pretrain"):
      return runner_train.train_model(
          models.RemBertMLMModel(network.RemBertForMaskedLM(config),
                                 max_predictions_per_seq=MAX_PREDICTIONS),
          runner_jobs.experiment_config(
              model_dir=model_dir, mixture_or_task_name=self.names["mlm"],
              task_feature_lengths={
                  "input_tokens": self.settings.pretrain_length},
              train_steps=self.settings.pretrain_steps,
              batch_size=self.settings.batch_size,
              learning_rate=self.settings.pretrain_learning_rate, seed=seed,
              pack=True))

  def finetune(self, model, model_dir: str, family: str, length: int,
               seed: int, init_checkpoint: str, pack: Optional[bool] = None
               ) -> Dict[str, Dict[str, float]]:
    """Fine-tunes `model` on the family's training task with its steps and
    learning rate (`RunSettings.finetune`) from `init_checkpoint` (`pack`:
    None is the runner's default), then scores the last checkpoint on every
    language; {language: metrics}."""
    steps, learning_rate = self.settings.finetune(family)
    lengths = {"input_tokens": length}
    with self.clock.stage("finetune"):
      runner_train.train_model(model, runner_jobs.experiment_config(
          model_dir=model_dir,
          mixture_or_task_name=f"{self.prefix}{family}_train",
          task_feature_lengths=lengths, train_steps=steps,
          batch_size=self.settings.batch_size, learning_rate=learning_rate,
          seed=seed, init_checkpoint=init_checkpoint, pack=pack))
    with self.clock.stage("evaluate"):
      return self.evaluations.last_checkpoint(model_dir, model,
                                              self.names[family], lengths)
