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
                         steps (`checkpoint_input_iterator`, runner/
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
run. metrics.jsonl and config.gin are replaced atomically (io_utils).
Reading checkpoints (eval, the converters, experiments) goes through
`runner.checkpoints`, not through this module. tests/resume_test.py kills
this runner mid-step and mid-save from outside (tests/crashing_train.py).
"""

import functools
import json
import os
import pathlib
import time
from typing import Any, Optional, Sequence

from absl import flags
from absl import logging
from clu import metric_writers
import gin
import jax
import numpy as np
import orbax.checkpoint as ocp
import tqdm

from rembert_t5x import configs
from rembert_t5x import errors
from rembert_t5x import models
from rembert_t5x.convert import checkpoint_io
from rembert_t5x.data import inputs
from rembert_t5x.data import vocabulary as vocab_lib
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import cli
from rembert_t5x.runner import input_checkpoints
from rembert_t5x.runner import io_utils
from rembert_t5x.runner import train_lib


def check_model_dir(model_dir: Optional[str]) -> pathlib.Path:
  """Creates MODEL_DIR if needed and checks it is writable."""
  if model_dir is None:
    raise errors.UserError(
        "MODEL_DIR is not set: the run file binds no train.train.model_dir "
        "(add `train.train.model_dir = %MODEL_DIR`)")
  if not model_dir or model_dir is gin.REQUIRED:
    raise errors.UserError("MODEL_DIR is not set (e.g. --gin.MODEL_DIR=\"'/tmp/m'\")")
  path = pathlib.Path(model_dir)
  try:
    path.mkdir(parents=True, exist_ok=True)
    probe = path / f".write_probe_{os.getpid()}"
    probe.write_text("ok")
    probe.unlink()
  except OSError as e:
    raise errors.UserError(f"MODEL_DIR {model_dir} is not writable: "
                        f"{e.strerror or e}") from e
  return path


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


def _shapes(tree) -> dict[str, tuple[int, ...]]:
  """{"a/b/c": shape} for a params tree (arrays or ArrayMetadata)."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
    name = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
    out[name] = tuple(leaf.shape)
  return out


def _check_checkpoint_matches(step_dir: pathlib.Path, params):
  """Compares parameter shapes before restoring, naming the first mismatch."""
  saved = _shapes(checkpoints.tree_metadata(str(step_dir))["params"])
  expected = _shapes(params)
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


def _input_iterator(make_dataset, out_dir: pathlib.Path, start: int,
                    restore: bool) -> inputs.InputIterator:
  """The training batches from step `start` on: the saved iterator state of
  that step restored, else the pipeline skipping the `start` consumed
  batches."""
  if start and restore:
    data = input_checkpoints.restore(make_dataset, out_dir, start)
    if data is not None:
      return data
  elif start:
    logging.info("train.checkpoint_input_iterator=False: skipping the %d "
                 "batches consumed before the resumed step", start)
  return make_dataset(skip_batches=start)


@gin.configurable
def train(
    model_dir: Optional[str] = None,
    *,
    model=gin.REQUIRED,
    mixture_or_task_name: str = gin.REQUIRED,
    mixture_or_task_module: Optional[str] = None,
    task_feature_lengths: dict = gin.REQUIRED,
    train_steps: int = gin.REQUIRED,
    batch_size: int = 8,
    learning_rate: float = 1e-4,
    warmup_steps: int = 0,
    weight_decay: float = 0.01,
    clip_norm: Optional[float] = 1.0,
    adam_b1: float = 0.9,
    adam_b2: float = 0.999,
    adam_eps: float = 1e-6,
    grad_accum_steps: int = 1,
    pack: bool = False,
    mesh_shape: Sequence[int] = (-1, 1),
    checkpoint_period: int = 100,
    keep_checkpoints: int = 3,
    log_period: int = 10,
    seed: int = 0,
    data_seed: int = 0,
    init_checkpoint: Optional[str] = None,
    nonfinite: str = "stop",
    checkpoint_input_iterator: bool = True,
    progress_bar: bool = True,
) -> dict[str, float]:
  """Trains `model` on a SeqIO task; returns the last logged metrics.

  Args:
    model_dir: output directory (created; must be writable). The run files
      bind it as T5X's do: `train.train.model_dir = %MODEL_DIR`.
    model: a `models.RemBert*Model`.
    mixture_or_task_name: registered SeqIO task or mixture.
    mixture_or_task_module: a module to import first, which registers it
      (e.g. 'rembert_tasks').
    task_feature_lengths: e.g. {"input_tokens": 128}.
    train_steps: total optimizer steps.
    batch_size: examples per step (split into `grad_accum_steps` micro
      batches).
    learning_rate, warmup_steps, weight_decay, clip_norm, adam_*: AdamW with
      linear warm-up and linear decay (paper Table 14).
    grad_accum_steps: gradient accumulation.
    pack: pack examples (MLM pre-training).
    mesh_shape: (data, model) mesh over local devices; -1 takes the rest.
    checkpoint_period: save every this many steps (and at the end).
    keep_checkpoints: keep the last this many.
    log_period: log metrics every this many steps.
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

  Returns:
    The last logged metrics.
  """
  if nonfinite not in ("stop", "skip"):
    raise errors.UserError(f"train.nonfinite must be 'stop' or 'skip', got {nonfinite!r}")
  if batch_size % grad_accum_steps:
    raise errors.UserError(f"batch_size {batch_size} is not divisible by "
                        f"grad_accum_steps {grad_accum_steps}")
  out_dir = check_model_dir(model_dir)
  inputs.import_task_module(mixture_or_task_module)
  inputs.get_task_or_mixture(mixture_or_task_name)  # fail early on a typo
  # The vocabulary of the checkpoint the run starts from (or resumes), before
  # the tasks' lazy vocabularies are first read.
  vocab_lib.use_checkpoint_vocabulary(init_checkpoint, str(out_dir))
  inputs.check_task_vocabulary(model, mixture_or_task_name)
  inputs.save_task_vocabulary(out_dir, mixture_or_task_name)
  rules = train_lib.default_rules()
  try:
    mesh = train_lib.make_mesh(mesh_shape)
  except ValueError as e:
    raise errors.UserError(f"train.{e}") from e
  if batch_size // grad_accum_steps % mesh.shape["data"]:
    raise errors.UserError(f"micro batch {batch_size // grad_accum_steps} is not "
                        f"divisible by the data axis {mesh.shape['data']}")
  length = task_feature_lengths["input_tokens"]
  input_shapes = {k: (batch_size // grad_accum_steps, length) for k in
                  ("input_tokens", "token_types", "segment_ids", "positions")}
  tx, schedule = train_lib.make_optimizer(
      learning_rate, train_steps, warmup_steps, weight_decay, clip_norm,
      adam_b1, adam_b2, adam_eps)

  init_fn = None
  if init_checkpoint:
    pretrained = checkpoints.load_params(init_checkpoint)

    def init_fn(fresh):
      try:
        return models.finetuning_params_from_pretraining(
            pretrained, fresh, model.config.num_layers)
      except ValueError as e:
        raise errors.UserError(f"init checkpoint {init_checkpoint}: {e}") from e

  rng = jax.random.PRNGKey(seed)
  state, shardings = train_lib.init_train_state(
      model, tx, rng, input_shapes, mesh, rules, init_params_fn=init_fn)

  mngr = checkpoints.writer(out_dir / "checkpoints", checkpoint_period,
                            keep_checkpoints)
  start = 0
  latest = mngr.latest_step()
  if latest is not None:
    _check_checkpoint_matches(out_dir / "checkpoints" / str(latest),
                              state.params)
    abstract = jax.tree_util.tree_map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        state, shardings)
    state = mngr.restore(latest, args=ocp.args.StandardRestore(abstract))
    start = int(state.step)
    logging.info("Resumed from %s at step %d", out_dir / "checkpoints", start)
  io_utils.atomic_write_text(out_dir / "config.gin", gin.operative_config_str())
  # For the checkpoint converters: the parameter shapes alone do not give the
  # config (attention kernels join heads x head_dim).
  checkpoint_io.write_config(out_dir, model.config)

  step_fn = train_lib.train_step_program(
      model, tx, schedule, shardings, mesh, rules, grad_accum_steps,
      skip_nonfinite=nonfinite == "skip")
  data = _input_iterator(
      functools.partial(inputs.make_dataset, model, mixture_or_task_name,
                        task_feature_lengths, batch_size, "train", data_seed,
                        pack),
      out_dir, start, checkpoint_input_iterator)
  input_checkpoints.prune(out_dir, mngr.all_steps())
  save_iterator = checkpoint_input_iterator  # off after a failed save
  log = MetricsLog(out_dir, start)
  meter = train_lib.ThroughputMeter()
  last: dict[str, float] = {}
  bar = tqdm.tqdm(total=train_steps, initial=start, unit="step",
                  disable=not progress_bar, dynamic_ncols=True)
  dropout_rng = jax.random.fold_in(rng, 1)

  def check_finite(done, metrics):
    """Stops (or warns, with skip) on a non-finite step; syncs with it."""
    if bool(metrics["finite"]):
      return
    if nonfinite == "stop":
      # The new state is never saved: the last checkpoint stays the
      # newest, and a restart resumes from it.
      good = mngr.latest_step()
      raise errors.UserError(
          f"non-finite loss or gradient at step {done} (loss="
          f"{float(metrics['loss'])}, grad_norm="
          f"{float(metrics['grad_norm'])}); stopped, the last good "
          f"checkpoint is "
          + (f"{out_dir / 'checkpoints' / str(good)}" if good is not None
             else "none (no step saved yet)")
          + " (train.nonfinite='skip' skips such updates)")
    logging.warning("step %d: non-finite loss/gradient, update skipped", done)

  # The finite flag of a step is read on the host only after the next step
  # has been dispatched (or before anything is logged or saved), so the
  # host never waits for the device between steps.
  unchecked = None
  try:
    for step in range(start, train_steps):
      tick = time.perf_counter()
      batch = inputs.next_batch(data, mixture_or_task_name, step)
      inputs.check_batch(model, batch, mixture_or_task_name, step)
      state, metrics = step_fn(state, batch, dropout_rng)
      done = step + 1
      if unchecked is not None:
        check_finite(*unchecked)
      unchecked = (done, metrics)
      if (done % log_period == 0 or done % checkpoint_period == 0
          or done == train_steps):
        check_finite(*unchecked)
        unchecked = None
      tokens = float(np.sum(batch["segment_ids"] > 0))
      meter.add(tokens, time.perf_counter() - tick)
      if done % log_period == 0 or done == train_steps:
        scalars = {k: float(v) for k, v in jax.device_get(metrics).items()}
        scalars["tokens_per_s"] = meter.rate()
        log.write(done, scalars)
        last = scalars
        bar.set_postfix(loss=f"{scalars['loss']:.3f}",
                        tok_s=f"{meter.rate():.0f}")
        meter.reset()
      if done % checkpoint_period == 0 or done == train_steps:
        # The iterator first: a step orbax has committed then has its state.
        if save_iterator:
          save_iterator = input_checkpoints.save(data, out_dir, done)
        mngr.save(done, args=ocp.args.StandardSave(state), force=True)
        input_checkpoints.prune(out_dir, mngr.all_steps())
      bar.update(1)
  finally:
    bar.close()
    data.close()
    mngr.wait_until_finished()
    log.close()
  return last


def main(fv: flags.FlagValues) -> None:
  """Runs the command line's gin flags (`cli.define_gin_flags`)."""
  configs.parse_gin(fv.gin_file, fv.gin_bindings,
                    search_paths=fv.gin_search_paths)
  # Every argument, model_dir (= %MODEL_DIR) included, comes from gin.
  print(json.dumps(train()))


if __name__ == "__main__":
  # Run the copy imported under its package name, so gin bindings such as
  # `train.train.x` (module `rembert_t5x.runner.train`) apply; `python -m` would
  # otherwise register the configurables under `__main__`.
  from rembert_t5x.runner import train as _module  # pylint: disable=g-import-not-at-top
  cli.run_main(_module.main, doc=__doc__)
