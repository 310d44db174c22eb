"""What the synthetic-benchmark experiments share: settings, data, runs.

The offline demo (`demo`) and the toy reproduction (`reproduce`) pre-train
on the synthetic corpus, fine-tune on its tasks in one language and evaluate
the others. Their common settings (`RunSettings`, each field a command-line
flag), the check that a work directory's data match them, and the two
training calls live here; each experiment keeps its own grid, records and
tables.
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Type

from absl import flags

from rembert_t5x.common import errors
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import jobs as runner_jobs
from rembert_t5x.runner import train as runner_train

# MLM-head positions per pre-training row: ceil(15% of 64) plus a margin.
MAX_PREDICTIONS = 16

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
  # Worker processes the runs are split among (1: all in this process).
  jobs: int = 2

  def finetune(self, family: str):
    """(steps, learning rate) for fine-tuning one task family."""
    if family == "pair":
      return self.pair_finetune_steps, self.pair_finetune_learning_rate
    return self.finetune_steps, self.finetune_learning_rate


def define_flags(fv: flags.FlagValues, cls: Type[RunSettings],
                 with_defaults: bool = True) -> None:
  """A flag per field of `cls`; without defaults (None) when the caller
  fills unset fields itself (the demo's `--full`)."""
  for field in dataclasses.fields(cls):
    _DEFINE_BY_TYPE[type(field.default)](
        field.name, field.default if with_defaults else None,
        f"default {field.default}", flag_values=fv)


def worker_flags(settings: RunSettings) -> List[str]:
  """The command-line flags that give a worker process `settings`."""
  return [f"--{f.name}={getattr(settings, f.name)}"
          for f in dataclasses.fields(settings)]


def check_data(manifest: Mapping[str, Any], manifest_path: str,
               wanted: Mapping[str, Any]) -> None:
  """Refuses a work directory whose data were generated otherwise.

  `wanted` maps `seed` or a size of `manifest["sizes"]` to the settings'
  value; the message names the flags as `data_seed=` and the sizes.
  """
  made = {k: manifest["seed"] if k == "seed" else manifest["sizes"][k]
          for k in wanted}
  if made != dict(wanted):
    name = lambda k: "data_seed" if k == "seed" else k  # pylint: disable=unnecessary-lambda-assignment
    raise errors.UserError(
        f"{manifest_path}: data were generated with "
        + ", ".join(f"{name(k)}={v}" for k, v in made.items())
        + ", not " + ", ".join(str(v) for v in wanted.values())
        + "; use a new --workdir")


def pretrain(config: network.RemBertConfig, model_dir: str, mixture: str,
             settings: RunSettings, seed: int) -> Dict[str, Any]:
  """MLM pre-training on `mixture` (packed rows); the final metrics."""
  return runner_train.train_model(
      models.RemBertMLMModel(network.RemBertForMaskedLM(config),
                             max_predictions_per_seq=MAX_PREDICTIONS),
      runner_jobs.experiment_config(
          model_dir=model_dir, mixture_or_task_name=mixture,
          task_feature_lengths={"input_tokens": settings.pretrain_length},
          train_steps=settings.pretrain_steps,
          batch_size=settings.batch_size,
          learning_rate=settings.pretrain_learning_rate, seed=seed,
          pack=True))


def finetune(model, model_dir: str, family: str, task: str, length: int,
             settings: RunSettings, seed: int, init_checkpoint: str,
             pack: Optional[bool] = None) -> Dict[str, Any]:
  """Fine-tunes `model` on `task` with the family's steps and learning rate
  from `init_checkpoint` (`pack`: None is the runner's default); the final
  metrics."""
  steps, learning_rate = settings.finetune(family)
  return runner_train.train_model(model, runner_jobs.experiment_config(
      model_dir=model_dir, mixture_or_task_name=task,
      task_feature_lengths={"input_tokens": length}, train_steps=steps,
      batch_size=settings.batch_size, learning_rate=learning_rate, seed=seed,
      init_checkpoint=init_checkpoint, pack=pack))
