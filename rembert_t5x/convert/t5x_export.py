"""Exports our checkpoint as a T5X-native checkpoint that `t5x.train` restores,
and reads one back.

`hf-to-t5x` / `tf-to-t5x` write our local runner's orbax layout
(`MODEL_DIR/checkpoints/<step>/default` with `{"step", "params"}`). T5X
restores its own train states instead: this module builds the T5X train state
of the pre-training model (`models.RemBertMLMModel(network.RemBertForMaskedLM)`)
with our params, step 0 and a fresh optimizer state, and saves it with T5X's
own `t5x.checkpoints.Checkpointer` as `OUTPUT_DIR/checkpoint_0`, which is what
`--gin.INITIAL_CHECKPOINT_PATH` of the `finetune_*.gin` run files (or
`pretrain_mlm.gin`, to continue pre-training) takes.

The exported config pads the vocabulary as the T5X run files do
(`VOCAB_PAD_MULTIPLE = partitioning.T5X_VOCAB_PAD_MULTIPLE`): padded rows are
appended as zeros.

The optimizer state must have the structure of the run that restores it
(unless, like `finetune_base.gin`, it skips `state/.*`): it is the
optimizer of `gin_configs/runs/train_base.gin`, which `pretrain_mlm.gin`
and `finetune_base.gin` include (`rembert_t5x.optimizer.adamw`: clipping +
AdamW with BERT's decay mask and a learning-rate schedule), at step 0 with
zero moments. (T5X's Adafactor is not offered: it needs factorisation rules
for RemBERT's extra axis names, which no run file defines.)

`from_t5x_native` goes back: the params of a T5X checkpoint (one
`t5x.train` wrote, or this export) in our layout, for the tools that read
our MODEL_DIR.

T5X is not on PyPI; it is imported only inside the functions here, and a
missing T5X is a `errors.UserError` saying how to install it.
"""

import dataclasses
import pathlib
import re
from typing import Any, Optional

import flax
from flax import traverse_util
import jax
import numpy as np
import orbax.checkpoint as ocp

from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x import configs
from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x.convert import checkpoint_io
from rembert_t5x import layer_stacking
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import optimizer as optimizer_lib
from rembert_t5x import partitioning
from rembert_t5x.runner import checkpoints
from rembert_t5x import t5x_partitioning

OPTIMIZERS = ("adamw",)
T5X_MISSING = ("the t5x-native export needs T5X, which is not on PyPI: "
               "install it with pip install -e \".[t5x]\" (from this "
               "repository's root)")


def _import_t5x():
  try:
    # Deferred: t5x is optional (not on PyPI); only these exports need it.
    # pylint: disable=g-import-not-at-top,unused-import
    import t5x
    from t5x import checkpoints
    from t5x import partitioning
    from t5x import train_state
    # pylint: enable=g-import-not-at-top,unused-import
  except ImportError as e:
    raise errors.UserError(f"{T5X_MISSING} ({e})") from e


def make_optimizer(name: str):
  """The T5X optimizer def of train_base.gin: `adamw` over our `adamw()`."""
  _import_t5x()
  # Deferred: t5x is optional (not on PyPI).
  from t5x import optimizers  # pylint: disable=g-import-not-at-top
  if name == "adamw":
    # What gin_configs/runs/train_base.gin binds, with pretrain_mlm.gin's
    # schedule. The optimizer state written here (step 0, zero moments, the
    # schedule's count) depends on the structure only, not on these values.
    run = configs.run_file_macros("pretrain_mlm.gin")
    schedule = optimizer_lib.learning_rate_schedule(
        run["LEARNING_RATE"], total_steps=run["TRAIN_STEPS"],
        warmup_steps=run["WARMUP_STEPS"])
    return optimizers.OptaxWrapper(optimizer_lib.adamw(schedule))
  raise errors.UserError(
      f"--optimizer={name!r}: expected one of {OPTIMIZERS}")


def make_partitioner(num_partitions: int = 1):
  """T5X's PjitPartitioner with the rules the run gin files use.

  Over an explicit (data, model) mesh (`t5x_partitioning`): T5X's default
  CPU mesh puts every device on "model", which RemBERT's odd sizes (e.g. the
  vocabulary) do not divide.
  """
  _import_t5x()
  # Deferred: t5x is optional (not on PyPI).
  from t5x import partitioning as t5x_partitioning_lib  # pylint: disable=g-import-not-at-top
  return t5x_partitioning.explicit_mesh_partitioner(
      model_parallelism=num_partitions,
      logical_axis_rules=t5x_partitioning_lib.standard_logical_axis_rules(
          additional_rules=partitioning.rembert_additional_axis_rules()))


def _config(source: checkpoint_io.OrbaxParams,
            gin_file: Optional[str]) -> network.RemBertConfig:
  """The checkpoint's config with the T5X run files' vocabulary padding."""
  config = checkpoint_io.checkpoint_config(source, gin_file)
  return dataclasses.replace(
      config, vocab_pad_multiple=partitioning.T5X_VOCAB_PAD_MULTIPLE)


def build_train_state(params: dict, config: network.RemBertConfig,
                      optimizer: str = "adamw"):
  """The T5X `FlaxOptimTrainState` of the MLM model holding `params`.

  Raises:
    errors.UserError: `params` are not a `RemBertForMaskedLM` of `config`.
  """
  _import_t5x()
  # Deferred: t5x is optional.
  from t5x import train_state as train_state_lib  # pylint: disable=g-import-not-at-top
  optimizer_def = make_optimizer(optimizer)
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(config),
                                 optimizer_def=optimizer_def)
  shapes = jax.eval_shape(
      lambda rng: model.get_initial_variables(rng, {"input_tokens": (1, 8)}),
      jax.random.PRNGKey(0))
  want = {"/".join(k): v for k, v in
          traverse_util.flatten_dict(shapes["params"]).items()}
  have = {"/".join(k): v for k, v in
          traverse_util.flatten_dict(params).items()}
  missing = sorted(set(want) - set(have))
  extra = sorted(set(have) - set(want))
  if missing or extra:
    hint = ("; the export takes a pre-training (masked-LM) checkpoint"
            if not any(n.startswith("mlm_head/") for n in have) else "")
    raise errors.UserError(
        "checkpoint params do not match RemBertForMaskedLM of the config: "
        f"missing {missing[:3]}, unexpected {extra[:3]}{hint}")
  for name, spec in want.items():
    if tuple(np.shape(have[name])) != tuple(spec.shape):
      raise errors.UserError(f"checkpoint parameter {name} has shape "
                      f"{tuple(np.shape(have[name]))}, the config expects "
                      f"{tuple(spec.shape)}")
  params = jax.tree_util.tree_map(
      lambda x: jax.numpy.asarray(np.asarray(x, np.float32)), params)
  # Frozen, as T5X's own initialisation (`TrainStateInitializer`) has them:
  # the optimizers derive their state's axes with FrozenDict-typed trees.
  state = train_state_lib.FlaxOptimTrainState.create(
      optimizer_def, flax.core.freeze(
          {"params": params, "params_axes": shapes["params_axes"]}))
  # T5X builds its states under jit, so every leaf is an array; optax's
  # init leaves the step a Python int, which T5X's Checkpointer cannot save.
  return jax.tree_util.tree_map(jax.numpy.asarray, state)


def t5x_native(checkpoint_dir: str, output_dir: str, *,
               gin_file: Optional[str] = None, optimizer: str = "adamw",
               overwrite: bool = False) -> checkpoint_io.Summary:
  """Writes our MLM checkpoint as the T5X checkpoint `output_dir/checkpoint_0`.

  Args:
    checkpoint_dir: our MODEL_DIR (as `hf-to-t5x` writes it), its
      `checkpoints/` or one step directory.
    output_dir: the T5X checkpoints directory to write; it gets
      `checkpoint_0/` (T5X's Checkpointer format), `rembert_config.json`
      and the source's vocabulary (`sentencepiece.model`) if it has one.
    gin_file: the model gin file (otherwise `rembert_config.json` beside the
      checkpoint).
    optimizer: `adamw` (pretrain_mlm.gin's; the only one).
    overwrite: replace a non-empty `output_dir`.

  Raises:
    errors.UserError: `output_dir` is, contains or lies inside an input
      (checked first, even with `overwrite`); T5X is missing; a bad
      checkpoint, gin file or optimizer.
  """
  inputs = [("--checkpoint_dir", checkpoint_dir), ("--gin_file", gin_file)]
  io_utils.check_output_dir(output_dir, overwrite, sources=inputs)
  _import_t5x()
  if optimizer not in OPTIMIZERS:
    raise errors.UserError(
        f"--optimizer={optimizer!r}: expected one of {OPTIMIZERS}")
  # Deferred: t5x is optional (not on PyPI).
  from t5x import checkpoints as t5x_checkpoints  # pylint: disable=g-import-not-at-top
  source = checkpoint_io.OrbaxParams(checkpoint_dir)
  config = _config(source, gin_file)
  loaded = cc.flatten(checkpoints.load_params(str(source.step_dir)))
  word = loaded.get("encoder/embeddings/word_embeddings/embedding")
  rows_added = 0 if word is None else config.padded_vocab_size - word.shape[0]
  # Padded as the T5X run files pad, in the layout the config (SCAN_LAYERS)
  # asks for, whatever the checkpoint's.
  params = layer_stacking.to_layout(cc.unflatten(cc.resize_vocab_params(
      loaded, config.padded_vocab_size)), config)
  del loaded
  state = build_train_state(params, config, optimizer)
  del params
  leaves = jax.tree_util.tree_leaves(state.params)
  count, tensors = sum(int(np.prod(np.shape(x))) for x in leaves), len(leaves)
  partitioner = make_partitioner()
  with io_utils.atomic_output_dir(output_dir, overwrite,
                                  sources=inputs) as tmp:
    checkpointer = t5x_checkpoints.Checkpointer(state, partitioner, str(tmp))
    checkpointer.save(state)
    if not (tmp / "checkpoint_0").is_dir():
      raise RuntimeError(f"T5X's Checkpointer wrote no checkpoint_0 in {tmp}")
    configs.write_checkpoint_config(tmp, config)
    # Beside checkpoint_0, where the gin hook vocabulary.checkpoint_vocabulary
    # finds it from INITIAL_CHECKPOINT_PATH.
    vocab_file = checkpoint_io.checkpoint_vocabulary(source.step_dir)
    checkpoint_io.copy_vocabulary(vocab_file, tmp)
  return checkpoint_io.Summary(
      str(output_dir), cc.Head.MASKED_LM.value, tensors, count, rows_added, {},
      checkpoint_io.peak_rss_bytes() / 2**20,
      checkpoint_io.written_vocabulary(vocab_file, output_dir))


def _native_model_dir(checkpoint_path: str) -> pathlib.Path:
  """The T5X MODEL_DIR of `checkpoint_path` (itself, or `checkpoint_N`'s
  parent), where `rembert_config.json` and the vocabulary sit."""
  path = pathlib.Path(checkpoint_path)
  if re.fullmatch(r"checkpoint_\d+", path.name):
    return path.parent
  return path


def _fit_vocab_padding(config: network.RemBertConfig, rows: int,
                       source: str) -> network.RemBertConfig:
  """`config` with the vocabulary padding the checkpoint's `rows` show.

  A model gin file pads nothing; the T5X run files pad to
  `T5X_VOCAB_PAD_MULTIPLE`. The padded rows are kept (as zeros they cost
  nothing; after training the MLM bias of a padded row need not be zero).

  Raises:
    errors.UserError: `rows` fits neither padding.
  """
  for multiple in (config.vocab_pad_multiple,
                   partitioning.T5X_VOCAB_PAD_MULTIPLE):
    candidate = dataclasses.replace(config, vocab_pad_multiple=multiple)
    if candidate.padded_vocab_size == rows:
      return candidate
  raise errors.UserError(
      f"checkpoint {source} has {rows} vocabulary rows; the config's "
      f"vocab_size {config.vocab_size} pads to {config.padded_vocab_size} "
      f"(or {partitioning.T5X_VOCAB_PAD_MULTIPLE}-padded, as the T5X run "
      "files pad): pass the model gin file it was trained with")


def _orbax_step_dir(checkpoint_path: str) -> Optional[pathlib.Path]:
  """The `checkpoint_N` of the layout `t5x.train` writes with Orbax
  (`checkpoint_N/state/_METADATA`): `checkpoint_path` itself, or the newest
  such `checkpoint_N` of a MODEL_DIR (Orbax renames a checkpoint into place
  when it is complete, so every `checkpoint_N` listed is); None if none."""
  path = pathlib.Path(checkpoint_path)
  if (path / "state" / "_METADATA").is_file():
    return path
  steps = [(int(p.name[len("checkpoint_"):]), p)
           for p in path.glob("checkpoint_*")
           if re.fullmatch(r"checkpoint_\d+", p.name)
           and (p / "state" / "_METADATA").is_file()]
  return max(steps)[1] if steps else None


def _read_orbax_state(step_dir: pathlib.Path) -> dict:
  """{"target": params, "state": {"step", ...}} of an Orbax T5X checkpoint,
  as host numpy arrays, read in this one process whatever topology wrote
  it (every host's shards are in the checkpoint); no T5X needed."""
  checkpointer = ocp.PyTreeCheckpointer()
  path = step_dir / "state"
  metadata = checkpointer.metadata(path)
  tree = getattr(getattr(metadata, "item_metadata", metadata), "tree",
                 metadata)
  restore_args = jax.tree_util.tree_map(
      lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
  return checkpointer.restore(path, restore_args=restore_args)


def from_t5x_native(checkpoint_path: str, output_dir: str, *,
                    gin_file: Optional[str] = None,
                    overwrite: bool = False) -> checkpoint_io.Summary:
  """Writes a T5X-native checkpoint's params in our layout (`t5x_native`'s
  inverse).

  For the tools that read our MODEL_DIR (the local runner, the BUCC/Tatoeba
  predictions of `experiments.submission --pretrained`) after a
  `t5x.train` run. The optimizer state is dropped; the layers are written
  per layer (as `hf_to_t5x` writes them) whatever `SCAN_LAYERS` was; the
  vocabulary keeps the checkpoint's padded rows, and the written config
  records that padding (`vocab_pad_multiple`).

  Args:
    checkpoint_path: a T5X `checkpoint_N` directory, or the T5X MODEL_DIR
      (its latest checkpoint).
    output_dir: our MODEL_DIR to write (`checkpoints/<step>/default`,
      `rembert_config.json` and `sentencepiece.model` if the T5X MODEL_DIR
      has one).
    gin_file: the model gin file (otherwise `rembert_config.json` beside the
      checkpoint, which `t5x_native` writes but `t5x.train` does not).
    overwrite: replace a non-empty `output_dir`.

  Returns:
    A `checkpoint_io.Summary` (`vocab_rows_changed` is 0: nothing is
    trimmed).

  Raises:
    errors.UserError: `output_dir` is, contains or lies inside an input
      (checked first, even with `overwrite`); T5X is missing; no T5X
      checkpoint at `checkpoint_path`; no config or a config that does not
      fit the params.
  """
  inputs = [("--checkpoint_path", checkpoint_path), ("--gin_file", gin_file)]
  io_utils.check_output_dir(output_dir, overwrite, sources=inputs)
  step_dir = _orbax_step_dir(checkpoint_path)
  if step_dir is None:
    # T5X's own (pre-Orbax) layout, as `t5x_native` writes it.
    _import_t5x()
    # Deferred: t5x is optional (not on PyPI).
    from t5x import checkpoints as t5x_checkpoints  # pylint: disable=g-import-not-at-top
    try:
      found = t5x_checkpoints.find_checkpoint(checkpoint_path)
    except ValueError as e:
      raise errors.UserError(
          f"--checkpoint_path={checkpoint_path}: no T5X checkpoint there "
          "(give a checkpoint_N directory or the T5X MODEL_DIR holding "
          "one)") from e
    step_dir = pathlib.Path(found).parent
  model_dir = _native_model_dir(str(step_dir))
  config = checkpoint_io.config_beside(model_dir, gin_file, str(step_dir))
  if (step_dir / "state" / "_METADATA").is_file():
    loaded = _read_orbax_state(step_dir)
  else:
    loaded = t5x_checkpoints.load_t5x_checkpoint(str(step_dir))
  step = int(np.asarray(loaded.get("state", {}).get("step", 0)))
  flat = cc.flatten(layer_stacking.unstack_layers(loaded["target"]))
  del loaded
  word = flat.get("encoder/embeddings/word_embeddings/embedding")
  if word is None:
    raise errors.UserError(f"checkpoint {step_dir} holds no RemBERT encoder "
                           "(no encoder/embeddings/word_embeddings)")
  config = _fit_vocab_padding(config, word.shape[0], str(step_dir))
  count = sum(int(np.size(v)) for v in flat.values())
  tensors = len(flat)
  head, _ = cc.head_from_params({k: np.shape(v) for k, v in flat.items()})
  vocab_file = checkpoint_io.checkpoint_vocabulary(step_dir)
  with io_utils.atomic_output_dir(output_dir, overwrite,
                                  sources=inputs) as tmp:
    checkpoint_io.write_orbax_params(tmp, iter(flat.items()), step=step)
    configs.write_checkpoint_config(tmp, config)
    checkpoint_io.copy_vocabulary(vocab_file, tmp)
  return checkpoint_io.Summary(
      str(output_dir), head.value, tensors, count, 0, {},
      checkpoint_io.peak_rss_bytes() / 2**20,
      checkpoint_io.written_vocabulary(vocab_file, output_dir))


def restore_for_finetuning(checkpoint_path: str, model: Any,
                           optimizer: str = "adamw", seq_len: int = 8):
  """Restores `checkpoint_path` as `finetune_base.gin` does; for checks.

  RestoreCheckpointConfig mode 'specific', `assignment_map=(('state/.*',
  None),)`, `fallback_to_scratch=True`, `strict=False`. Returns the T5X
  train state of `model` (a fine-tuning `models.RemBert*Model`).
  """
  _import_t5x()
  # Deferred: t5x is optional.
  from t5x import utils  # pylint: disable=g-import-not-at-top
  partitioner = make_partitioner()
  initializer = utils.TrainStateInitializer(
      optimizer_def=make_optimizer(optimizer),
      init_fn=model.get_initial_variables,
      input_shapes={"input_tokens": (1, seq_len)},
      partitioner=partitioner)
  cfg = utils.RestoreCheckpointConfig(
      path=checkpoint_path, mode="specific",
      assignment_map=models.FINETUNE_ASSIGNMENT_MAP,
      fallback_to_scratch=True, strict=False)
  return initializer.from_checkpoint_or_scratch(
      [cfg], init_rng=jax.random.PRNGKey(0))


__all__ = ["OPTIMIZERS", "T5X_MISSING", "build_train_state",
           "from_t5x_native", "make_optimizer", "make_partitioner",
           "restore_for_finetuning", "t5x_native"]
