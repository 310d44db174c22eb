"""The settings of one local training run, checked before any work starts.

`TrainConfig` is the one description of a run: the run files bind its
fields as `train.train`'s arguments (`with_config_signature` gives `train`
their names and defaults), and the experiments build it in Python
(`jobs.experiment_config`). `eval_config.EvalConfig` is evaluation's. `validate` refuses a bad setting with one line
naming it and what is allowed (docs/ERRORS.md), before any data is read,
anything compiled or anything written, and makes the paths absolute.
"""

import dataclasses
import inspect
import math
import os
from typing import Callable, Mapping, Optional, Sequence

import gin
import numpy as np

from rembert_t5x.common import errors
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import optimizer
from rembert_t5x.runner import finetune_packing


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
  """The settings of one local training run: `train`'s arguments but `model`.

  Attributes:
    model_dir: output directory (created; must be writable). The run files
      bind it as T5X's do: `train.train.model_dir = %MODEL_DIR`.
    mixture_or_task_name: registered SeqIO task or mixture.
    mixture_or_task_module: a module to import first, which registers it
      (e.g. 'rembert_tasks').
    task_feature_lengths: e.g. {"input_tokens": 128}.
    train_steps: total optimizer steps.
    batch_size: examples per step (split into `grad_accum_steps` micro
      batches).
    learning_rate, warmup_steps: the peak of the linear warm-up and linear
      decay schedule, and its warm-up (paper Table 14).
    weight_decay, clip_norm, adam_b1, adam_b2, adam_eps: `optimizer.adamw`'s
      `weight_decay`, `clip_norm` (None: no clipping), `b1`, `b2`, `eps`;
      the defaults are its own (paper Table 14).
    grad_accum_steps: gradient accumulation.
    pack: pack several examples into one row. For MLM pre-training
      (True in its run files) the tf.data pipeline packs as T5X does:
      rows, not examples, per step. For the fine-tuning heads (None, the
      default, means True) each step's `batch_size` examples are packed on
      the host into fewer rows (`finetune_packing`): the same examples and,
      without dropout, the same gradient as one example per row (False).
    pack_max_segments: the most examples per packed row for the pair and
      QA heads (their per-example features have this many slots).
    mesh_shape: (data, model) mesh over local devices; -1 takes the rest.
    checkpoint_period: save every this many steps (and at the end).
    keep_checkpoints: keep the last this many; None keeps every one.
    log_period: log metrics every this many steps (and at the end).
    seed: init and dropout seed.
    data_seed: shuffling/masking seed of the input pipeline.
    init_checkpoint: a pre-training MODEL_DIR; its encoder initialises the
      model (the MLM head and pre-training-only layers are dropped).
    nonfinite: what to do when the loss or gradient is NaN/inf: "stop"
      (raise, keeping the last good checkpoint) or "skip" (skip the update).
    checkpoint_input_iterator: save the input iterator's state with each
      checkpoint and restore it on resume, so the consumed batches are not
      read again (T5X's `save_dataset` and `restore_dataset` in one). The
      state holds the shuffle buffers: 9.3 MB for the 4-language demo at 64
      tokens (README, "Resume does not read the data again"). False, or a
      step without a state, resumes by skipping the consumed batches: the
      same batches, read again.
    progress_bar: show a tqdm bar.
  """
  model_dir: Optional[str] = None
  mixture_or_task_name: str
  mixture_or_task_module: Optional[str] = None
  task_feature_lengths: Mapping[str, int]
  train_steps: int
  batch_size: int = 8
  learning_rate: float = 1e-4
  warmup_steps: int = 0
  weight_decay: float = optimizer.WEIGHT_DECAY
  clip_norm: Optional[float] = optimizer.CLIP_NORM
  adam_b1: float = optimizer.B1
  adam_b2: float = optimizer.B2
  adam_eps: float = optimizer.EPS
  grad_accum_steps: int = 1
  pack: Optional[bool] = None
  pack_max_segments: int = finetune_packing.DEFAULT_MAX_SEGMENTS
  mesh_shape: Sequence[int] = (-1, 1)
  checkpoint_period: int = 100
  keep_checkpoints: Optional[int] = 3
  log_period: int = 10
  seed: int = 0
  data_seed: int = 0
  init_checkpoint: Optional[str] = None
  nonfinite: str = "stop"
  checkpoint_input_iterator: bool = True
  progress_bar: bool = True

  @property
  def micro_batch_size(self) -> int:
    """Examples per micro batch (`batch_size / grad_accum_steps`)."""
    return self.batch_size // self.grad_accum_steps

  @property
  def adamw_settings(self) -> dict[str, Optional[float]]:
    """`optimizer.adamw`'s keyword arguments."""
    return dict(b1=self.adam_b1, b2=self.adam_b2, eps=self.adam_eps,
                weight_decay=self.weight_decay, clip_norm=self.clip_norm)

  def logs_at(self, step: int) -> bool:
    """Whether the metrics of step `step` (1-based) are logged."""
    return step % self.log_period == 0 or step == self.train_steps

  def saves_at(self, step: int) -> bool:
    """Whether step `step` (1-based) is checkpointed."""
    return step % self.checkpoint_period == 0 or step == self.train_steps


def config_signature(config_cls, positional: Sequence[str]
                     ) -> Callable[[Callable], Callable]:
  """A decorator giving `fn(<positional>, *, model, **settings)` the fields
  of the dataclass `config_cls` as its arguments: `positional` (its first
  fields, in order) also by position, the others by keyword.

  Gin reads a configurable's signature: with it, gin refuses a binding of a
  name that is no field (a typo), names the required fields left unbound
  (those without a default: `gin.REQUIRED` here), and lists every default
  in the operative config (MODEL_DIR/config.gin). The fields are written
  once, in the config class.
  """
  parameter = inspect.Parameter
  fields = dataclasses.fields(config_cls)
  assert tuple(f.name for f in fields[:len(positional)]) == tuple(positional)

  def default(field):
    return (gin.REQUIRED if field.default is dataclasses.MISSING
            else field.default)

  parameters = [parameter(f.name, parameter.POSITIONAL_OR_KEYWORD,
                          default=default(f), annotation=f.type)
                for f in fields[:len(positional)]]
  parameters.append(parameter("model", parameter.KEYWORD_ONLY,
                              default=gin.REQUIRED))
  parameters += [parameter(f.name, parameter.KEYWORD_ONLY,
                           default=default(f), annotation=f.type)
                 for f in fields[len(positional):]]

  def decorate(fn: Callable) -> Callable:
    fn.__signature__ = inspect.signature(fn).replace(parameters=parameters)
    return fn
  return decorate


# `train.train(model_dir=None, *, model, **settings)`: `TrainConfig`'s fields.
with_config_signature = config_signature(TrainConfig, ("model_dir",))


def absolute_path(path: str) -> str:
  """`path` with `~` expanded and made absolute against the working
  directory, once, so that nothing later depends on the cwd."""
  return os.path.abspath(os.path.expanduser(path))


def _local_path(value: Optional[str], setting: str) -> Optional[str]:
  """`value` as an absolute local path (`~` expanded), None kept.

  orbax refuses relative checkpoint paths only at the first save, after
  the steps before it have run; the working directory may differ between
  the run and its resume. Resolved here, before anything is read.

  Raises:
    errors.UserError: not a string, or a URL (the local runner writes
      local files; gs:// runs go through t5x.train).
  """
  if value is None or value is gin.REQUIRED or value == "":
    return value
  if not isinstance(value, (str, os.PathLike)):
    raise errors.UserError(f"train.{setting} must be a path string, got "
                           f"{value!r}")
  value = os.fspath(value)
  if "://" in value:
    raise errors.UserError(
        f"train.{setting} {value!r}: the local runner writes local paths "
        "only (cloud storage runs go through t5x.train, docs/T5X.md)")
  return absolute_path(value)


def _check_integer(config: TrainConfig, name: str, low: int,
                   allow_none: bool = False) -> None:
  value = getattr(config, name)
  if allow_none and value is None:
    return
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise errors.UserError(f"train.{name} must be an integer, got {value!r}")
  if value < low:
    extra = " or None" if allow_none else ""
    raise errors.UserError(f"train.{name} must be >= {low}{extra}, got "
                           f"{value}")


def _check_number(config: TrainConfig, name: str, low: float, high: float,
                  low_open: bool = False, high_open: bool = True,
                  allow_none: bool = False) -> None:
  value = getattr(config, name)
  if allow_none and value is None:
    return
  bounds = (("(" if low_open else "[") + f"{low:g}, {high:g}"
            + (")" if high_open else "]"))
  if isinstance(value, bool) or not isinstance(
      value, (int, float, np.integer, np.floating)):
    raise errors.UserError(
        f"train.{name} must be a number in {bounds}, got {value!r}"
        + (" (a string: write the number without quotes)"
           if isinstance(value, str) else ""))
  value = float(value)
  inside = (math.isfinite(value)
            and (value > low if low_open else value >= low)
            and (value < high if high_open else value <= high))
  if not inside:
    raise errors.UserError(f"train.{name} must be a number in {bounds}, got "
                           f"{value!r}")


def validate(model, config: TrainConfig) -> TrainConfig:
  """Checks every setting before anything is read, compiled or written.

  Returns:
    `config` with `model_dir` and `init_checkpoint` made absolute.

  Raises:
    errors.UserError: one line naming the first bad setting and what is
      allowed (docs/ERRORS.md lists them).
  """
  for name in ("train_steps", "batch_size", "grad_accum_steps",
               "checkpoint_period", "log_period"):
    _check_integer(config, name, 1)
  # 0 is not "keep none": orbax would delete every checkpoint, the
  # resumable ones of this MODEL_DIR included. None keeps them all.
  _check_integer(config, "keep_checkpoints", 1, allow_none=True)
  for name in ("warmup_steps", "seed", "data_seed"):
    _check_integer(config, name, 0)
  _check_integer(config, "pack_max_segments", 1)
  if config.pack not in (None, True, False):
    raise errors.UserError(f"train.pack must be True, False or None, got "
                           f"{config.pack!r}")
  _check_number(config, "learning_rate", 0, math.inf)
  _check_number(config, "weight_decay", 0, math.inf)
  _check_number(config, "clip_norm", 0, math.inf, low_open=True,
                allow_none=True)
  _check_number(config, "adam_b1", 0, 1)
  _check_number(config, "adam_b2", 0, 1)
  _check_number(config, "adam_eps", 0, math.inf, low_open=True)
  if config.nonfinite not in ("stop", "skip"):
    raise errors.UserError("train.nonfinite must be 'stop' or 'skip', got "
                           f"{config.nonfinite!r}")
  if config.batch_size % config.grad_accum_steps:
    raise errors.UserError(
        f"batch_size {config.batch_size} is not divisible by "
        f"grad_accum_steps {config.grad_accum_steps}")
  _check_lengths(model, config.task_feature_lengths)
  if (getattr(model, "span_softmax", None) == "row"
      and host_packs(model, config)):
    raise errors.UserError(
        f"{type(model).__name__}.span_softmax='row' needs one example per "
        f"row, but train.pack is {config.pack!r} (packs the fine-tuning "
        "batches): set train.pack=False, or span_softmax='own_tokens'")
  return dataclasses.replace(
      config, model_dir=_local_path(config.model_dir, "model_dir"),
      init_checkpoint=_local_path(config.init_checkpoint, "init_checkpoint"))


def _check_lengths(model, lengths) -> None:
  """TASK_FEATURE_LENGTHS: {'input_tokens': N} (plus the model's own task
  features), N a positive integer within the position table."""
  allowed = set(getattr(model.FEATURE_CONVERTER_CLS, "TASK_FEATURES",
                        {"input_tokens": None}))
  if not isinstance(lengths, Mapping):
    raise errors.UserError(
        f"train.task_feature_lengths must be a dict, e.g. "
        f"{{'input_tokens': 128}}, got {lengths!r}")
  unknown = sorted(set(lengths) - allowed)
  if unknown or "input_tokens" not in lengths:
    raise errors.UserError(
        f"train.task_feature_lengths {dict(lengths)!r}: "
        + (f"{type(model).__name__} reads no feature {unknown} (T5-style "
           "'inputs'/'targets' do not apply); " if unknown else "")
        + "give the length as {'input_tokens': N}")
  for key, value in lengths.items():
    if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
        or value < 1):
      raise errors.UserError(f"train.task_feature_lengths[{key!r}] must be a "
                             f"positive integer, got {value!r}")
  network.check_length(model.config, lengths["input_tokens"])


def host_packs(model, config: TrainConfig) -> bool:
  """Whether each step's examples are packed on the host: the fine-tuning
  heads, unless `pack=False`. MLM packs in its tf.data pipeline instead
  (`pack=True`), as T5X does: rows, not examples, per step."""
  return config.pack is not False and isinstance(model, models.FINETUNING_MODELS)
