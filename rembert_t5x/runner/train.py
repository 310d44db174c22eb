r"""Local runner: train a RemBERT model on one host, any number of devices.

  python -m rembert_t5x.runner.train \
    --gin_file=gin_configs/runs/local_tiny_pretrain.gin \
    --gin.MODEL_DIR="'/tmp/m'" --gin.TRAIN_STEPS=30

Same model classes and model gin files as the T5X path; the data comes from
SeqIO tasks through the model's feature converter. Writes to MODEL_DIR:

  checkpoints/<step>/    orbax checkpoints (every `checkpoint_period` steps,
                         the last `keep_checkpoints` kept; written to a
                         temporary name and renamed, so a crash never leaves
                         a half-written "latest" checkpoint)
  input_iterator/<step>/ the input pipeline's position at each of those
                         steps and the settings that fix its batches' shape
                         (`checkpoint_input_iterator`, runner/
                         input_checkpoints.py)
  metrics.jsonl          one JSON object per logged step: step, loss,
                         learning_rate, tokens_per_s, ...
  events.out.tfevents.*  the same metrics for TensorBoard (clu writers)
  config.gin             the operative gin config
  sentencepiece.model    the task's vocabulary; runs started from this
                         MODEL_DIR (or from a converted checkpoint holding
                         one) use it unless $REMBERT_SPM_PATH is set
  rembert_config.json    the network config (what the checkpoint converters
                         read: the parameter shapes alone do not determine it)

Restarting with the same MODEL_DIR resumes from the latest checkpoint, with
the same data order (the input iterator's saved state is restored, so the
consumed batches are not read again; without one the deterministic pipeline
skips them) and the same dropout keys (folded from the step), so a run
killed at any point (even with SIGKILL, even inside a checkpoint save) and
restarted with the same command ends with the losses of an uninterrupted
run. metrics.jsonl and config.gin are replaced atomically (io_utils). A
restart that would change the batch's shape (batch size, sequence lengths,
tf.data packing) is refused before anything in MODEL_DIR is written.
Reading checkpoints (eval, the converters, experiments) goes through
`runner.checkpoints`, not through this module. tests/resume_test.py kills
this runner mid-step and mid-save from outside (tests/crashing_train.py).
"""

import functools
import json
import math
import os
import pathlib
import sys
import time
from typing import Any, Mapping, Optional

from absl import flags
from absl import logging
from clu import metric_writers
import gin
import jax
import numpy as np
import orbax.checkpoint as ocp
import tqdm

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x.common import task_modules
from rembert_t5x import configs
from rembert_t5x.data import inputs
from rembert_t5x.data import vocabulary as vocab_lib
from rembert_t5x import models
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import finetune_packing
from rembert_t5x.runner import input_checkpoints
from rembert_t5x.runner import model_dir_lock
from rembert_t5x.runner import train_config
from rembert_t5x.runner import train_lib


def check_model_dir(model_dir: Optional[str]) -> pathlib.Path:
  """Creates MODEL_DIR if needed and checks it is writable."""
  if model_dir is None:
    raise errors.UserError(
        "MODEL_DIR is not set: the run file binds no train.train.model_dir "
        "(add `train.train.model_dir = %MODEL_DIR`)")
  if not model_dir or model_dir is gin.REQUIRED:
    raise errors.UserError("MODEL_DIR is not set (e.g. --gin.MODEL_DIR=\"'/tmp/m'\")")
  return io_utils.make_writable_dir(model_dir, "MODEL_DIR")


class MetricsLog:
  """Appends one JSON line per logged step to metrics.jsonl (+ TensorBoard)."""

  def __init__(self, model_dir: pathlib.Path, resume_step: int):
    self.path = model_dir / "metrics.jsonl"
    if self.path.exists():
      # Steps after the restored checkpoint will be re-run and re-logged:
      # drop their old lines so each step appears once (atomic rewrite). A
      # run killed while appending may have left a partial last line.
      kept = []
      for line in self.path.read_text().splitlines():
        try:
          record = json.loads(line)
        except json.JSONDecodeError:
          continue
        if record.get("step", 0) <= resume_step:
          kept.append(line)
      io_utils.atomic_write_text(self.path, "".join(l + "\n" for l in kept))
    self.writer = metric_writers.create_default_writer(
        str(model_dir), just_logging=jax.process_index() > 0)

  def write(self, step: int, scalars: dict[str, float]):
    record = {"step": step, **{k: float(v) for k, v in scalars.items()}}
    io_utils.append_line(self.path, json.dumps(record))
    self.writer.write_scalars(step, scalars)

  def close(self):
    self.writer.flush()
    self.writer.close()


def _check_checkpoint_matches(step_dir: pathlib.Path, tree,
                              expected: Mapping[str, tuple[int, ...]]):
  """Compares parameter shapes before restoring, naming the first mismatch.

  `tree` is the checkpoint's metadata (`checkpoints.tree_metadata`),
  `expected` the model's {name: shape} (`checkpoints.param_shapes`).
  """
  if "params" not in tree:
    raise errors.UserError(f"checkpoint {step_dir} has no 'params': it is "
                           "not a checkpoint of this runner")
  saved = checkpoints.param_shapes(tree["params"])
  for name in sorted(set(saved) | set(expected)):
    if name not in saved:
      raise errors.UserError(f"checkpoint {step_dir} has no parameter {name}: "
                          "it is of another architecture")
    if name not in expected:
      raise errors.UserError(f"checkpoint {step_dir} has parameter {name} that "
                          "this model lacks: it is of another architecture")
    if saved[name] != expected[name]:
      raise errors.UserError(
          f"checkpoint {step_dir}: parameter {name} has shape {saved[name]}, "
          f"this model expects {expected[name]} (another architecture?)")


def _input_iterator(model, config: train_config.TrainConfig,
                    out_dir: pathlib.Path, start: int) -> inputs.InputIterator:
  """The training batches from step `start` on.

  Args:
    model: the model whose feature converter builds the batches.
    config: the run's settings (task, lengths, batch size, data seed, pack,
      `checkpoint_input_iterator`).
    out_dir: MODEL_DIR, holding the saved iterator states.
    start: the number of batches already consumed.

  Returns:
    With `checkpoint_input_iterator` and a saved state of step `start`, the
    restored iterator; else a fresh pipeline skipping `start` batches.
  """
  make_dataset = functools.partial(
      inputs.make_dataset, model, config.mixture_or_task_name,
      config.task_feature_lengths, config.batch_size, "train",
      config.data_seed, _tf_data_packs(model, config))
  if start and config.checkpoint_input_iterator:
    data = input_checkpoints.restore(make_dataset, out_dir, start)
    if data is not None:
      return data
  elif start:
    logging.info("train.checkpoint_input_iterator=False: skipping the %d "
                 "batches consumed before the resumed step", start)
  return make_dataset(skip_batches=start)


def _prepare_model_dir(model, config: train_config.TrainConfig,
                       out_dir: pathlib.Path) -> None:
  """Settles the run's task and vocabulary in MODEL_DIR.

  Imports `mixture_or_task_module` and looks the task up (a typo fails
  before anything is compiled), makes the vocabulary of the checkpoint the
  run starts from (or resumes) the default of the tasks' lazy vocabularies,
  before they are first read, checks it against the model's embedding and
  copies it into MODEL_DIR.

  Args:
    model: the model to train.
    config: the run's settings.
    out_dir: MODEL_DIR, created and locked.

  Raises:
    errors.UserError: the task module or task is unknown, or the task
      vocabulary is larger than the model's.
  """
  task_modules.import_task_module(config.mixture_or_task_module)
  inputs.get_task_or_mixture(config.mixture_or_task_name)
  vocab_lib.use_checkpoint_vocabulary(config.init_checkpoint, str(out_dir))
  inputs.check_task_vocabulary(model, config.mixture_or_task_name)
  inputs.save_task_vocabulary(out_dir, config.mixture_or_task_name)


def _make_mesh(config: train_config.TrainConfig) -> jax.sharding.Mesh:
  """The ("data", "model") mesh of `config.mesh_shape` over local devices.

  Raises:
    errors.UserError: the shape does not fit the devices, or the micro
      batch is not divisible by the data axis.
  """
  try:
    mesh = train_lib.make_mesh(config.mesh_shape)
  except ValueError as e:
    raise errors.UserError(f"train.{e}") from e
  if config.micro_batch_size % mesh.shape["data"]:
    raise errors.UserError(
        f"micro batch {config.micro_batch_size} is not divisible by the "
        f"data axis {mesh.shape['data']}")
  return mesh


def _init_state(model, config: train_config.TrainConfig, tx,
                mesh: jax.sharding.Mesh,
                rules) -> tuple[train_lib.TrainState, Any]:
  """The initial train state, sharded over `mesh`.

  Args:
    model: the model to train.
    config: the run's settings (`seed`, `init_checkpoint`, lengths, micro
      batch size).
    tx: the optimizer.
    mesh: the device mesh.
    rules: the logical axis rules.

  Returns:
    (state, shardings): a `train_lib.TrainState` at step 0, initialised
    from `seed` with the encoder of `init_checkpoint` (if set) replacing
    the fresh one, and the state's shardings.

  Raises:
    errors.UserError: `init_checkpoint` does not fit the model.
  """
  init_fn = None
  if config.init_checkpoint:
    pretrained = checkpoints.load_params(config.init_checkpoint)

    def init_fn(fresh):
      try:
        return models.finetuning_params_from_pretraining(
            pretrained, fresh, model.config.num_layers)
      except ValueError as e:
        raise errors.UserError(
            f"init checkpoint {config.init_checkpoint}: {e}") from e

  length = config.task_feature_lengths["input_tokens"]
  input_shapes = {k: (config.micro_batch_size, length) for k in
                  ("input_tokens", "token_types", "segment_ids", "positions")}
  return train_lib.init_train_state(
      model, tx, jax.random.PRNGKey(config.seed), input_shapes, mesh, rules,
      init_params_fn=init_fn)


CORRUPT_DIRECTORY = "unreadable_checkpoints"


def _restore_latest(mngr: ocp.CheckpointManager, out_dir: pathlib.Path,
                    state: train_lib.TrainState, shardings
                    ) -> tuple[train_lib.TrainState, int]:
  """The newest readable checkpoint of MODEL_DIR, if any.

  A committed checkpoint that cannot be read (a file truncated or lost by a
  disk or machine failure after orbax committed it) is moved, not deleted,
  to MODEL_DIR/unreadable_checkpoints/<step> with a warning naming it and
  the error, and the next older one is tried: resuming from an older step
  recomputes the same steps (the data order and dropout keys follow the
  step), so the run ends as an uninterrupted one would.

  Args:
    mngr: the checkpoint manager of `out_dir / "checkpoints"`.
    out_dir: MODEL_DIR.
    state: the initial train state (its structure, dtypes and shapes).
    shardings: the state's shardings.

  Returns:
    (state, step): the restored state and its step, or `state` and 0 when
    MODEL_DIR has no (readable) checkpoint.

  Raises:
    errors.UserError: a checkpoint's parameter names or shapes differ from
      the model's (checked before any tensor is read: another architecture
      is the user's mistake, not damage, and moves nothing), or an
      unreadable checkpoint cannot be moved aside.
  """
  abstract = jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      state, shardings)
  for step in sorted(mngr.all_steps(), reverse=True):
    step_dir = out_dir / "checkpoints" / str(step)
    try:
      saved = checkpoints.tree_metadata(str(step_dir))
    except errors.UserError as e:
      _set_aside(mngr, out_dir, step, str(e))
      continue
    _check_checkpoint_matches(step_dir, saved,
                              checkpoints.param_shapes(state.params))
    try:
      restored = mngr.restore(step, args=ocp.args.StandardRestore(abstract))
    except Exception as e:  # pylint: disable=broad-except
      # orbax and TensorStore raise plain Exception, ValueError, OSError...
      # for damaged files; the shapes already matched, so this is damage.
      _set_aside(mngr, out_dir, step,
                 errors.first_line(e).split(" See full TensorStore")[0])
      continue
    logging.info("Resumed from %s at step %d", step_dir, step)
    return restored, int(restored.step)
  return state, 0


def _set_aside(mngr: ocp.CheckpointManager, out_dir: pathlib.Path, step: int,
               reason: str) -> None:
  """Moves the unreadable checkpoint of `step` to unreadable_checkpoints/."""
  source = out_dir / "checkpoints" / str(step)
  target = out_dir / CORRUPT_DIRECTORY / str(step)
  if target.exists():
    target = target.with_name(f"{step}.{int(time.time())}")
  try:
    target.parent.mkdir(exist_ok=True)
    os.replace(source, target)
  except OSError as e:
    raise errors.UserError(
        f"checkpoint {source} cannot be read ({reason}) nor moved aside to "
        f"{target} ({e.strerror or e}): move or delete it by hand to resume "
        "from the previous checkpoint") from e
  mngr.reload()
  logging.warning(
      "checkpoint %s cannot be read (%s); moved to %s, resuming from the "
      "previous checkpoint (if any)", source, reason, target)
  print(f"warning: checkpoint {source} cannot be read ({reason}); moved to "
        f"{target}, resuming from the previous one", file=sys.stderr,
        flush=True)


def _write_run_files(out_dir: pathlib.Path, model) -> None:
  """Writes config.gin (atomically) and rembert_config.json into MODEL_DIR.

  The checkpoint converters read rembert_config.json: the parameter shapes
  alone do not give the config (attention kernels join heads x head_dim).
  """
  io_utils.atomic_write_text(out_dir / "config.gin", gin.operative_config_str())
  configs.write_checkpoint_config(out_dir, model.config)


def _check_finite(config: train_config.TrainConfig, step: int, metrics,
                  mngr: ocp.CheckpointManager, out_dir: pathlib.Path) -> None:
  """Reads step `step`'s finite flag on the host (waiting for that step).

  Args:
    config: the run's settings (`nonfinite`).
    step: the step (1-based) that produced `metrics`.
    metrics: that step's metrics (device arrays, with "finite").
    mngr: the checkpoint manager, for the last good checkpoint's name.
    out_dir: MODEL_DIR.

  Raises:
    errors.UserError: with nonfinite="stop", the step's loss, gradient or
      updated parameters are NaN/inf; the message names the step and the
      last good checkpoint (the state after this step is never saved, so a
      restart resumes from it). With "skip" the step's update was skipped:
      a warning is logged.
  """
  if bool(metrics["finite"]):
    return
  if config.nonfinite == "skip":
    logging.warning("step %d: non-finite loss, gradient or update; update "
                    "skipped", step)
    return
  good = mngr.latest_step()
  lengths = ", ".join(f"{k} {v}" for k, v in
                      sorted(config.task_feature_lengths.items()))
  loss, grad_norm = float(metrics["loss"]), float(metrics["grad_norm"])
  # The step program's flag also covers the updated parameters: an update
  # can overflow them while the loss and gradient are finite.
  what = ("loss or gradient" if not (math.isfinite(loss) and
                                     math.isfinite(grad_norm))
          else "parameters after the update")
  raise errors.UserError(
      f"non-finite {what} at step {step} (loss={loss}, "
      f"grad_norm={grad_norm}; "
      f"batch {config.batch_size} x {lengths}, learning rate "
      f"{config.learning_rate}); stopped, the last good checkpoint is "
      + (f"{out_dir / 'checkpoints' / str(good)}" if good is not None
         else "none (no step saved yet)")
      + ". Likely causes: a learning rate too high for the batch, no "
      "clipping (train.train.clip_norm), bad input ids; a bad batch now and "
      "then can be skipped with --gin.train.train.nonfinite=\"'skip'\"")


def _save_checkpoint(mngr: ocp.CheckpointManager, data: inputs.InputIterator,
                     out_dir: pathlib.Path, step: int, state,
                     save_iterator: Optional[dict[str, Any]]
                     ) -> Optional[dict[str, Any]]:
  """Checkpoints `state` as step `step`.

  The input iterator's state is written first (when `save_iterator`, the
  pipeline's settings to record with it), so a step that orbax has
  committed has it; iterator states whose checkpoint is gone are then
  pruned.

  Returns:
    `save_iterator`, or None after a failed save of the iterator's state
    (`input_checkpoints.save`): later steps do not try again.
  """
  if save_iterator is not None:
    if not input_checkpoints.save(data, out_dir, step, save_iterator):
      save_iterator = None
  mngr.save(step, args=ocp.args.StandardSave(state), force=True)
  input_checkpoints.prune(out_dir, mngr.all_steps())
  return save_iterator


def _train_loop(model, config: train_config.TrainConfig, *, step_fn, state,
                start: int, data: inputs.InputIterator,
                mngr: ocp.CheckpointManager, out_dir: pathlib.Path,
                pack=None) -> dict[str, float]:
  """Runs steps `start + 1` .. `train_steps`, logging and checkpointing.

  Args:
    model: the model (for the host-side batch checks).
    config: the run's settings.
    step_fn: `(state, batch, rng) -> (state, metrics)`, the jitted step.
    state: the train state after `start` steps.
    start: the number of steps already done.
    data: the batches from step `start` on; closed on return.
    mngr: the checkpoint manager; waited for on return.
    out_dir: MODEL_DIR (metrics.jsonl, TensorBoard events, iterator states).
    pack: None, or `batch -> batch` packing each checked batch
      (`finetune_packing.pack_step`).

  Returns:
    The last logged metrics (empty when no step ran), plus `step_shapes`:
    how many batch shapes the step ran on (each one compiled program), and
    `step_rows`: the most rows a step's batch had (below the batch size when
    `pack` packed examples together).

  Raises:
    errors.UserError: a batch cannot be read or fails its checks, or (with
      nonfinite="stop") a step's loss or gradient is NaN/inf
      (`_check_finite`).
  """
  log = MetricsLog(out_dir, start)
  meter = train_lib.ThroughputMeter()
  last: dict[str, float] = {}
  bar = tqdm.tqdm(total=config.train_steps, initial=start, unit="step",
                  disable=not config.progress_bar, dynamic_ncols=True)
  dropout_rng = jax.random.fold_in(jax.random.PRNGKey(config.seed), 1)
  # The settings saved with each iterator state; None: no state is saved
  # (off, or after a failed save).
  save_iterator = (_pipeline_settings(model, config)
                   if config.checkpoint_input_iterator else None)
  # Step N's finite flag (computed on device by the step program) is read on
  # the host once step N + 1 has been dispatched: the host waits for step N
  # while N + 1 is queued behind it, so the device does not idle while the
  # host reads and checks the next batch and dispatches it, as it would if
  # the flag were read before dispatching N + 1. The error still names step
  # N, and nothing from step N on is logged or saved (a step that logs or
  # saves reads its own flag first); the step N + 1 that "stop" has already
  # dispatched is dropped unsaved.
  pending = None  # (step, metrics) whose finite flag is not read yet
  shapes = set()  # batch shapes the step ran on: one compilation each
  try:
    for step in range(start, config.train_steps):
      tick = time.perf_counter()
      batch = inputs.next_batch(data, config.mixture_or_task_name, step)
      inputs.check_batch(model, batch, config.mixture_or_task_name, step)
      if pack is not None:
        finetune_packing.check_examples(
            batch, f"task {config.mixture_or_task_name}, batch of step "
            f"{step + 1}")
        batch = pack(batch)
      shapes.add(batch["input_tokens"].shape)
      state, metrics = step_fn(state, batch, dropout_rng)
      done = step + 1
      if pending is not None:
        _check_finite(config, *pending, mngr, out_dir)
        pending = None
      if config.logs_at(done) or config.saves_at(done):
        _check_finite(config, done, metrics, mngr, out_dir)
      else:
        pending = (done, metrics)
      meter.add(float(np.sum(batch["segment_ids"] > 0)),
                time.perf_counter() - tick)
      if config.logs_at(done):
        last = {k: float(v) for k, v in jax.device_get(metrics).items()}
        last["tokens_per_s"] = meter.rate()
        log.write(done, last)
        bar.set_postfix(loss=f"{last['loss']:.3f}",
                        tok_s=f"{meter.rate():.0f}")
        meter.reset()
      if config.saves_at(done):
        save_iterator = _save_checkpoint(mngr, data, out_dir, done, state,
                                         save_iterator)
      bar.update(1)
  finally:
    bar.close()
    data.close()
    mngr.wait_until_finished()
    log.close()
  if shapes:
    logging.info("the train step ran on %d batch shapes: %s", len(shapes),
                 sorted(shapes))
    last = dict(last, step_shapes=float(len(shapes)),
                step_rows=float(max(shape[0] for shape in shapes)))
  return last


@gin.configurable
@train_config.with_config_signature
def train(model_dir: Optional[str] = None, *, model=gin.REQUIRED,
          **settings) -> dict[str, float]:
  """Trains `model` on a SeqIO task: the run files' entry.

  Gin binds `train.train.model` and `train.train.<field>` for every
  `train_config.TrainConfig` field (the signature is the fields', with
  their defaults); this builds the `TrainConfig` and calls `train_model`.

  Args:
    model_dir: the `TrainConfig` field (also positional).
    model: a `models.RemBert*Model`.
    **settings: the other `TrainConfig` fields.

  Returns:
    As `train_model`.

  Raises:
    errors.UserError: as `train_model`.
  """
  return train_model(model, train_config.TrainConfig(model_dir=model_dir,
                                                     **settings))


def train_model(model, config: train_config.TrainConfig) -> dict[str, float]:
  """Trains `model` with `config`: validates, locks and prepares MODEL_DIR,
  builds or restores the state, then runs the loop.

  Args:
    model: a `models.RemBert*Model`.
    config: the run's settings.

  Returns:
    The last logged metrics: step, loss, learning_rate, grad_norm,
    tokens_per_s, the model's metrics.

  Raises:
    errors.UserError: a setting, MODEL_DIR, the task, its vocabulary or
      data, a checkpoint of MODEL_DIR or `init_checkpoint` is unusable,
      (with nonfinite="stop") a step's loss or gradient is NaN/inf, or JAX
      has several processes (`train_lib.require_one_process`).
  """
  train_lib.require_one_process("the local runner")
  config = train_config.validate(model, config)
  out_dir = check_model_dir(config.model_dir)
  with model_dir_lock.hold(out_dir):
    done = _finished_run(model, out_dir, config)
    if done is not None:
      return done
    _check_resume_settings(model, config, out_dir)
    return _run_locked(model, config, out_dir)


def _pipeline_settings(model, config: train_config.TrainConfig
                       ) -> dict[str, Any]:
  """The settings that fix the shape of the input pipeline's batches
  (`input_checkpoints.SHAPE_SETTINGS`), saved with each iterator state."""
  return {"batch_size": config.batch_size,
          "task_feature_lengths": dict(config.task_feature_lengths),
          "pack": _tf_data_packs(model, config)}


def _tf_data_packs(model, config: train_config.TrainConfig) -> bool:
  """Whether the tf.data pipeline packs (MLM), not the host (fine-tuning)."""
  return config.pack is True and not train_config.host_packs(model, config)


def _check_resume_settings(model, config: train_config.TrainConfig,
                           out_dir: pathlib.Path) -> None:
  """Refuses a resume that changes the batch's shape, before MODEL_DIR is
  written: its saved input pipeline would fail at the first batch, after
  config.gin was replaced (`input_checkpoints.check_settings`)."""
  try:
    saved = checkpoints.steps(str(out_dir / "checkpoints"))
  except errors.UserError:  # no checkpoints directory, or nothing committed
    return
  input_checkpoints.check_settings(out_dir, saved,
                                   _pipeline_settings(model, config))


def _finished_run(model, out_dir: pathlib.Path,
                  config: train_config.TrainConfig
                  ) -> Optional[dict[str, float]]:
  """The last metrics if MODEL_DIR already holds step `train_steps`.

  A rerun of a finished run changes nothing (config.gin, metrics.jsonl and
  the checkpoints stay as they are) and says so; it returns the last
  logged metrics, so a sweep can rerun a finished job cheaply.

  Returns:
    None when there are steps left to train, or the last checkpoint's
    metadata cannot be read (the run then sets it aside and redoes it).

  Raises:
    errors.UserError: MODEL_DIR holds a step beyond `train_steps` (a
      shorter run would truncate its log and restart its schedule), or its
      last checkpoint is of another architecture.
  """
  if not (out_dir / "checkpoints").is_dir():
    return None
  try:
    saved = checkpoints.steps(str(out_dir / "checkpoints"))
  except errors.UserError:  # no committed checkpoint yet
    return None
  latest = max(saved)
  if latest > config.train_steps:
    raise errors.UserError(
        f"MODEL_DIR {out_dir} holds a checkpoint of step {latest}, past "
        f"train_steps {config.train_steps}: nothing to train (raise "
        "TRAIN_STEPS to go on, or use a new MODEL_DIR)")
  if latest < config.train_steps:
    return None
  step_dir = out_dir / "checkpoints" / str(latest)
  try:
    tree = checkpoints.tree_metadata(str(step_dir))
  except errors.UserError:
    return None
  _check_checkpoint_matches(step_dir, tree,
                            checkpoints.model_param_shapes(model))
  print(f"MODEL_DIR {out_dir} already holds step {latest} = train_steps: "
        "nothing to train, nothing changed", file=sys.stderr, flush=True)
  last: dict[str, float] = {}
  log = out_dir / "metrics.jsonl"
  if log.is_file():
    for line in log.read_text().splitlines():
      try:
        last = {k: float(v) for k, v in json.loads(line).items()}
      except (ValueError, TypeError, AttributeError):
        continue
  return last


def _run_locked(model, config: train_config.TrainConfig,
                out_dir: pathlib.Path) -> dict[str, float]:
  """`train_model` once MODEL_DIR is held."""
  mesh = _make_mesh(config)
  _prepare_model_dir(model, config, out_dir)
  rules = train_lib.default_rules()
  # The state's tree; the step gets the schedule as an argument.
  tx, _ = train_lib.make_optimizer(
      config.learning_rate, config.train_steps, config.warmup_steps,
      **config.adamw_settings)
  state, shardings = _init_state(model, config, tx, mesh, rules)
  mngr = checkpoints.writer(out_dir / "checkpoints", config.checkpoint_period,
                            config.keep_checkpoints)
  state, start = _restore_latest(mngr, out_dir, state, shardings)
  _write_run_files(out_dir, model)
  step_fn = train_lib.train_step_program(
      model, config.learning_rate, config.train_steps, config.warmup_steps,
      config.adamw_settings, shardings, mesh, rules, config.grad_accum_steps,
      skip_nonfinite=config.nonfinite == "skip")
  data = _input_iterator(model, config, out_dir, start)
  input_checkpoints.prune(out_dir, mngr.all_steps())
  pack = None
  if train_config.host_packs(model, config):
    pack = functools.partial(
        finetune_packing.pack_step, grad_accum_steps=config.grad_accum_steps,
        max_segments=config.pack_max_segments, multiple=mesh.shape["data"])
  return _train_loop(model, config, step_fn=step_fn, state=state,
                     start=start, data=data, mngr=mngr, out_dir=out_dir,
                     pack=pack)


def _main(fv: flags.FlagValues) -> None:
  """Runs the command line's gin flags (`cli.define_gin_flags`)."""
  configs.parse_gin(fv.gin_file, fv.gin_bindings,
                    search_paths=fv.gin_search_paths)
  # Every argument, model_dir (= %MODEL_DIR) included, comes from gin.
  with configs.model_config_errors(fv.gin_file, fv.gin_bindings):
    print(json.dumps(train()))


def main(argv=None) -> None:
  """The `rembert-train` command: parses `argv` (default: sys.argv) and runs."""
  cli.run_main(_main, argv, doc=__doc__)


if __name__ == "__main__":
  # Run the copy imported under its package name, so gin bindings such as
  # `train.train.x` (module `rembert_t5x.runner.train`) apply; `python -m` would
  # otherwise register the configurables under `__main__`.
  from rembert_t5x.runner import train as _module  # pylint: disable=g-import-not-at-top
  _module.main()
