"""The pieces of the local runner: optimizer, sharded state, train step.

Built from the same parts T5X uses — a `jax.sharding.Mesh` with ("data",
"model") axes, the logical axis rules in `partitioning.py`, optax, orbax —
so a model that trains here shards the same way under `t5x.train`.
"""

import collections
import dataclasses
import functools
import logging
from typing import Any, Callable, Mapping, Optional, Sequence

import flax
import flax.linen as nn
from flax.linen import partitioning as nn_partitioning
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rembert_t5x.common import errors
from rembert_t5x import models
from rembert_t5x import optimizer
from rembert_t5x import partitioning
from rembert_t5x import t5x_partitioning

PyTree = Any
P = jax.sharding.PartitionSpec


# ----------------------------------------------------------------------------
# Optimizer: the one AdamW of `optimizer.py` (shared with the T5X gin files).
# ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def make_optimizer(
    learning_rate: float,
    total_steps: int,
    warmup_steps: int = 0,
    **adamw_settings,
) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """`optimizer.adamw` over `optimizer.learning_rate_schedule`, and the schedule.

  Args:
    learning_rate, total_steps, warmup_steps: the schedule's.
    **adamw_settings: `optimizer.adamw`'s keyword arguments (b1, b2, eps,
      weight_decay, clip_norm); those left out take its defaults.

  Cached: the same settings give the same (stateless) objects, so the
  programs built from them can be reused (`reused_program`).
  """
  schedule = optimizer.learning_rate_schedule(learning_rate, total_steps,
                                              warmup_steps)
  return optimizer.adamw(schedule, **adamw_settings), schedule


# ----------------------------------------------------------------------------
# Programs reused by the runs of one process.
# ----------------------------------------------------------------------------

# (id(model), key) -> (model, program), the most recent few. The experiments
# fine-tune one model object with several seeds in one process (the demo,
# sweeps); every run would otherwise trace and lower the same init and
# train-step programs again: ~6 s of a demo fine-tuning run on CPU, against
# ~5 s of its 100 steps. The entry holds the model, so its id stays its own.
_PROGRAMS: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
_MAX_PROGRAMS = 8


def reused_program(model, key: tuple, build: Callable[[], Any]) -> Any:
  """`build()` once per (model object, key) among the recent ones."""
  full_key = (id(model),) + key
  hit = _PROGRAMS.get(full_key)
  if hit is not None and hit[0] is model:
    _PROGRAMS.move_to_end(full_key)
    return hit[1]
  program = build()
  _PROGRAMS[full_key] = (model, program)
  while len(_PROGRAMS) > _MAX_PROGRAMS:
    _PROGRAMS.popitem(last=False)
  return program


def _setting_key(mesh: jax.sharding.Mesh, rules, **settings) -> tuple:
  return (mesh, repr(list(rules)), repr(sorted(settings.items())))


# ----------------------------------------------------------------------------
# Mesh and shardings.
# ----------------------------------------------------------------------------


def require_one_process(what: str) -> None:
  """Refuses to run `what` where JAX has several processes.

  On every worker of a multi-host TPU slice (and in a `jax.distributed`
  cluster) `jax.process_count() > 1`. The local runner reads every example
  and writes MODEL_DIR from each process that runs it: started on every
  host, each would train on the same data and write the same files. The
  T5X run files are the road for a pod (docs/T5X.md, "Pods").

  Raises:
    errors.UserError: `jax.process_count() > 1`.
  """
  count = jax.process_count()
  if count > 1:
    raise errors.UserError(
        f"{what} runs on one host, but JAX sees {count} processes (a "
        "multi-host TPU slice or a jax.distributed cluster): every host "
        "would read the same data and write the same files; run the T5X "
        "run files with python -m t5x.train on every host instead "
        "(docs/T5X.md, \"Pods\")")


def make_mesh(mesh_shape: Sequence[int] = (-1, 1),
              devices: Optional[Sequence[Any]] = None) -> jax.sharding.Mesh:
  """A ("data", "model") mesh over local devices; -1 takes the rest.

  The rest is as many as fit: (-1, 3) over 8 devices is a 2 x 3 mesh over
  the first 6. Built by `t5x_partitioning.explicit_mesh` (`jax.make_mesh`),
  the mesh of the T5X path.

  Raises:
    ValueError: a shape that is not two sizes, both -1, a size below 1
      (other than -1), or more devices than there are.
  """
  devices = list(devices if devices is not None else jax.devices())
  shape = tuple(mesh_shape)
  if len(shape) != 2:
    raise ValueError(f"mesh_shape {shape}: expected (data, model)")
  data, model = shape
  if data == -1 and model == -1:
    raise ValueError("mesh_shape: at most one of (data, model) may be -1")
  if any(size < 1 and size != -1 for size in shape):
    raise ValueError(f"mesh_shape {shape}: sizes must be >= 1 (or -1 for "
                     "the rest of the devices)")
  if data == -1:
    data = max(len(devices) // model, 1)
  if model == -1:
    model = max(len(devices) // data, 1)
  if data * model > len(devices):
    raise ValueError(f"mesh_shape {shape} needs {data * model} "
                     f"devices; {len(devices)} are available")
  return t5x_partitioning.explicit_mesh(model, devices[: data * model])


def logical_specs(params_axes: PyTree) -> PyTree:
  """Logical PartitionSpecs for the params from the `params_axes` collection."""
  return flax.core.unfreeze(nn_partitioning.get_axis_names(params_axes))


def param_shardings(params_axes: PyTree, mesh: jax.sharding.Mesh,
                    rules: Sequence[tuple[str, Any]],
                    shapes: Optional[PyTree] = None) -> PyTree:
  """NamedShardings from the logical axes.

  With `shapes`, a dimension that its mesh axes do not divide evenly (an
  unpadded 250,300-row vocabulary over 8 model shards, say) is replicated
  instead, with a log line; JAX refuses uneven shardings. T5X has no such
  fallback: `RemBertConfig.vocab_pad_multiple` pads the vocabulary instead.
  """
  shardings = nn.logical_to_mesh_sharding(logical_specs(params_axes), mesh,
                                          rules)
  if shapes is None:
    return shardings

  def fit(sharding, shape):
    spec = list(sharding.spec) + [None] * (len(shape.shape) - len(sharding.spec))
    for i, axis in enumerate(spec):
      if axis is None:
        continue
      names = axis if isinstance(axis, tuple) else (axis,)
      size = int(np.prod([mesh.shape[n] for n in names]))
      if shape.shape[i] % size:
        logging.info("dimension %d of a %s parameter is not divisible by mesh "
                     "axes %s (size %d); replicating it", i, shape.shape,
                     names, size)
        spec[i] = None
    return jax.sharding.NamedSharding(mesh, P(*spec))

  return jax.tree_util.tree_map(fit, shardings, shapes)


def opt_state_shardings(tx: optax.GradientTransformation, params: PyTree,
                        p_shardings: PyTree,
                        mesh: jax.sharding.Mesh) -> PyTree:
  """Shardings of `tx`'s state: each params-shaped tree (Adam's moments) as
  the params, the rest (step counts) replicated.

  Stated explicitly because `tx.init` builds the moments as zeros that do
  not depend on the params' values, and XLA left to itself replicates them:
  two full float32 copies of the model on every device (measured with
  `benchmarks/scale_plan.py`: 9.9 instead of 6.0 GB per device for RemBERT at
  model parallelism 2). T5X derives the same axes for its optimizer state.
  """
  replicated = jax.sharding.NamedSharding(mesh, P())
  return optax.tree_map_params(
      tx, lambda _, sharding: sharding, jax.eval_shape(tx.init, params),
      p_shardings, transform_non_params=lambda _: replicated)


def batch_sharding(mesh: jax.sharding.Mesh) -> jax.sharding.NamedSharding:
  return jax.sharding.NamedSharding(mesh, P("data"))


# ----------------------------------------------------------------------------
# Train state and step.
# ----------------------------------------------------------------------------


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: PyTree
  opt_state: PyTree


def init_train_state(
    model, tx: optax.GradientTransformation, rng: jax.Array,
    input_shapes: Mapping[str, tuple[int, ...]], mesh: jax.sharding.Mesh,
    rules: Sequence[tuple[str, Any]],
    init_params_fn: Optional[Callable[[PyTree], PyTree]] = None,
) -> tuple[TrainState, PyTree]:
  """Initialises params (sharded by their logical axes) and optimizer state.

  Args:
    model: a `models.RemBert*Model`.
    tx: the optimizer.
    rng: init key.
    input_shapes: model feature shapes (e.g. {"input_tokens": (B, L)}).
    mesh: the device mesh.
    rules: logical axis rules.
    init_params_fn: optional host-side function that replaces freshly
      initialised params (e.g. loading a pre-trained encoder).

  Returns:
    The state and its sharding tree.
  """
  shapes = {k: tuple(v) for k, v in input_shapes.items()}

  def build():
    abstract = jax.eval_shape(
        lambda r: model.get_initial_variables(r, shapes), rng)
    p_shardings = param_shardings(abstract["params_axes"], mesh, rules,
                                  shapes=abstract["params"])
    init = jax.jit(lambda r: model.get_initial_variables(r, shapes)["params"],
                   out_shardings=p_shardings)
    opt_init = jax.jit(tx.init, out_shardings=opt_state_shardings(
        tx, abstract["params"], p_shardings, mesh))
    return p_shardings, init, opt_init

  p_shardings, init, opt_init = reused_program(
      model, ("init", tx) + _setting_key(mesh, rules, shapes=shapes), build)
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    params = init(rng)
  if init_params_fn is not None:
    params = init_params_fn(jax.device_get(params))
    params = jax.device_put(params, p_shardings)
  replicated = jax.sharding.NamedSharding(mesh, P())
  with jax.set_mesh(mesh):
    opt_state = opt_init(params)
  step = jax.device_put(jnp.zeros((), jnp.int32), replicated)
  state = TrainState(step=step, params=params, opt_state=opt_state)
  shardings = jax.tree_util.tree_map(lambda x: x.sharding, state)
  return state, shardings


def _split_microbatches(batch, num):
  return jax.tree_util.tree_map(
      lambda x: x.reshape((num, x.shape[0] // num) + x.shape[1:]), batch)


def _merge_metrics(stacked, num):
  """Merges `num` stacked clu metric maps (leading axis) into one map."""
  merged = jax.tree_util.tree_map(lambda x: x[0], stacked)
  for i in range(1, num):
    nxt = jax.tree_util.tree_map(lambda x, i=i: x[i], stacked)
    merged = {k: m.merge(nxt[k]) for k, m in merged.items()}
  return merged


def make_train_step(model, tx: optax.GradientTransformation,
                    schedule: optax.Schedule, grad_accum_steps: int = 1,
                    skip_nonfinite: bool = False):
  """A jittable `(state, batch, rng) -> (state, metrics)`.

  With `grad_accum_steps > 1` the batch is split into that many micro
  batches whose gradients are summed (a `lax.scan`, so memory is that of
  one micro batch). Every row first gets the whole batch's total loss weight
  (`models.with_full_batch_loss_weight`), so the micro batch losses are
  shares of the full batch's mean and the summed gradient is the full
  batch's, also for tagging with uneven weights. With `skip_nonfinite`, a
  step whose loss, gradient or updated params are NaN/inf leaves params and
  optimizer state
  unchanged (the step counter still advances, so the data order stays that
  of an uninterrupted run).
  """

  def loss_and_grads(params, batch, rng):
    (loss, metrics), grads = jax.value_and_grad(
        model.loss_fn, has_aux=True)(params, batch, rng)
    return loss, metrics, grads

  def train_step(state: TrainState, batch, rng):
    rng = jax.random.fold_in(rng, state.step)
    if grad_accum_steps == 1:
      loss, metrics, grads = loss_and_grads(state.params, batch, rng)
    else:
      batch = models.with_full_batch_loss_weight(model, batch)
      micro = _split_microbatches(batch, grad_accum_steps)

      def body(carry, xs):
        i, mb = xs
        loss, metrics, grads = loss_and_grads(
            state.params, mb, jax.random.fold_in(rng, i))
        carry = jax.tree_util.tree_map(jnp.add, carry, (loss, grads))
        return carry, metrics

      zeros = jax.tree_util.tree_map(
          lambda x: jnp.zeros(x.shape, x.dtype), (
              jax.ShapeDtypeStruct((), jnp.float32), state.params))
      (loss, grads), stacked = jax.lax.scan(
          body, zeros, (jnp.arange(grad_accum_steps), micro))
      metrics = _merge_metrics(stacked, grad_accum_steps)
    metrics = {k: m.compute() for k, m in metrics.items()}
    grad_norm = optax.tree.norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    # The new parameters too: a finite gradient times an overflowing step
    # size (or an Adam state gone inf) makes them NaN/inf, and the runner
    # saves only states whose flag is set. One reduction over the params.
    finite = (jnp.isfinite(loss) & jnp.isfinite(grad_norm)
              & jnp.isfinite(optax.tree.norm(params)))
    if skip_nonfinite:
      keep = lambda new, old: jnp.where(finite, new, old)
      params = jax.tree_util.tree_map(keep, params, state.params)
      opt_state = jax.tree_util.tree_map(keep, opt_state, state.opt_state)
    metrics = dict(metrics, loss=loss, grad_norm=grad_norm,
                   learning_rate=schedule(state.step), finite=finite)
    new_state = TrainState(step=state.step + 1, params=params,
                           opt_state=opt_state)
    return new_state, metrics

  return train_step


def make_scheduled_train_step(model, adamw_settings: Mapping[str, Any],
                              grad_accum_steps: int = 1,
                              skip_nonfinite: bool = False):
  """A jittable `(state, batch, rng, schedule_args) -> (state, metrics)`.

  `make_train_step` with `optimizer.adamw(**adamw_settings)` over
  `optimizer.learning_rate_schedule(*schedule_args)`, built inside the step:
  the schedule's (learning rate, total steps, warm-up steps) are an argument
  of the program instead of constants in it, so runs that differ only in
  them compile one program. The optimizer state is the same tree as
  `make_optimizer`'s (only the schedule's values differ).
  """
  settings = dict(adamw_settings)

  def train_step(state: TrainState, batch, rng, schedule_args):
    schedule = optimizer.learning_rate_schedule(*schedule_args)
    tx = optimizer.adamw(schedule, **settings)
    return make_train_step(model, tx, schedule, grad_accum_steps,
                           skip_nonfinite)(state, batch, rng)

  return train_step


def train_step_program(model, learning_rate: float, total_steps: int,
                       warmup_steps: int, adamw_settings: Mapping[str, Any],
                       state_shardings, mesh, rules,
                       grad_accum_steps: int = 1,
                       skip_nonfinite: bool = False):
  """`(state, batch, rng) -> (state, metrics)`: the runner's step.

  The jitted `make_scheduled_train_step`, built once per model object and
  settings among the recent ones (`reused_program`) whatever the schedule,
  called with this run's schedule: a second run of the same model object
  (another seed, another learning rate) reuses the traced step. Runs of
  another model object with the same architecture and settings but another
  learning rate or length lower to the same program, which XLA's
  compilation cache then holds.
  """
  key = ("scheduled_step", repr(sorted(adamw_settings.items()))) + (
      _setting_key(mesh, rules, grad_accum_steps=grad_accum_steps,
                   skip_nonfinite=skip_nonfinite,
                   shardings=jax.tree_util.tree_structure(state_shardings)))
  program = reused_program(model, key, lambda: jit_train_step(
      make_scheduled_train_step(model, adamw_settings, grad_accum_steps,
                                skip_nonfinite=skip_nonfinite),
      state_shardings, mesh, rules, num_extra_args=1))
  schedule_args = (jnp.float32(learning_rate), jnp.int32(total_steps),
                   jnp.int32(warmup_steps))

  def run(state, batch, rng):
    return program(state, batch, rng, schedule_args)

  return run


def jit_train_step(train_step, state_shardings, mesh, rules,
                   num_extra_args: int = 0):
  """Jits the step with sharded state and batch; the old state is donated.

  `num_extra_args` more (replicated) arguments follow the rng, e.g. the
  schedule of `make_scheduled_train_step`.
  """
  data = batch_sharding(mesh)
  jitted = jax.jit(train_step,
                   in_shardings=(state_shardings, data, None) + (
                       None,) * num_extra_args,
                   out_shardings=(state_shardings, None),
                   donate_argnums=(0,))

  def run(state, batch, rng, *extra):
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
      return jitted(state, batch, rng, *extra)

  return run


def default_rules() -> list[tuple[str, Any]]:
  return partitioning.logical_axis_rules()


@dataclasses.dataclass
class ThroughputMeter:
  """Tokens per second over the last logging period."""

  tokens: float = 0.0
  seconds: float = 0.0

  def add(self, tokens: float, seconds: float):
    self.tokens += tokens
    self.seconds += seconds

  def rate(self) -> float:
    return self.tokens / self.seconds if self.seconds > 0 else 0.0

  def reset(self):
    self.tokens = self.seconds = 0.0
