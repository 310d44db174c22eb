"""The settings of one local evaluation, beside `train_config.TrainConfig`.

`EvalConfig` is `eval.evaluate`'s arguments but `model`: the run files bind
its fields (`eval.evaluate.split = 'test'`), `with_config_signature` gives
`evaluate` their names and defaults, and `validate` checks the two
directories and makes them absolute before anything is read.
"""

import dataclasses
from typing import Mapping, Optional

import gin

from rembert_t5x.common import errors
from rembert_t5x.runner import train_config


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalConfig:
  """The settings of one local evaluation.

  Attributes:
    checkpoint_dir: a MODEL_DIR (its latest checkpoint, or the one
      `selection_task` picks). The run files bind it as T5X's do:
      `eval.evaluate.checkpoint_dir = %CHECKPOINT_PATH`.
    output_dir: where the results go (`eval.evaluate.output_dir =
      %EVAL_OUTPUT_DIR`).
    mixture_or_task_name: registered SeqIO task or mixture.
    mixture_or_task_module: a module to import first, which registers it.
    split: the split evaluated.
    task_feature_lengths: e.g. {"input_tokens": 128}; None: the tasks' own.
    batch_size: examples per predicted batch.
    selection_task: with it, the checkpoint that scores best on this task
      (the English dev set in the paper and XTREME) instead of the latest.
    selection_split: the split of `selection_task`.
    length_sorted: each task's examples longest first, every batch cut to
      its longest example (`predict_batches.make_predict_fn`); False
      predicts every row at the full length, in dataset order.
  Relative paths are relative to the working directory, `~` is the home
  directory.
  """
  checkpoint_dir: Optional[str] = None
  output_dir: Optional[str] = None
  mixture_or_task_name: str
  mixture_or_task_module: Optional[str] = None
  split: str = "validation"
  task_feature_lengths: Optional[Mapping[str, int]] = None
  batch_size: int = 32
  selection_task: Optional[str] = None
  selection_split: str = "validation"
  length_sorted: bool = True


# `eval.evaluate(checkpoint_dir=None, output_dir=None, *, model, **settings)`.
with_config_signature = train_config.config_signature(
    EvalConfig, ("checkpoint_dir", "output_dir"))


def _check_dir_set(value: Optional[str], name: str, macro: str) -> None:
  if value is None:
    raise errors.UserError(
        f"{macro} is not set: the gin files bind no eval_lib.evaluate.{name} "
        f"(add `eval_lib.evaluate.{name} = %{macro}`)")
  if not value or value is gin.REQUIRED:
    raise errors.UserError(f"{macro} is not set (e.g. --gin.{macro}=\"'/tmp/x'\")")


def validate(config: EvalConfig) -> EvalConfig:
  """`config` with both directories set and made absolute.

  Raises:
    errors.UserError: CHECKPOINT_PATH or EVAL_OUTPUT_DIR is not bound or
      empty (one line naming the macro and how to set it).
  """
  _check_dir_set(config.checkpoint_dir, "checkpoint_dir", "CHECKPOINT_PATH")
  _check_dir_set(config.output_dir, "output_dir", "EVAL_OUTPUT_DIR")
  return dataclasses.replace(
      config, checkpoint_dir=train_config.absolute_path(config.checkpoint_dir),
      output_dir=train_config.absolute_path(config.output_dir))
