"""Tests for rembert_t5x.runner.train_lib: the optimizer it builds, the train step."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rembert_t5x import models
from rembert_t5x import optimizer
from rembert_t5x.runner import train_lib
from tests import test_utils
from tests import tolerances


def test_optimizer_matches_optax_reference_over_steps():
  """make_optimizer == optax's clip + AdamW (same state tree, same params)."""
  rng = np.random.default_rng(1)
  params = {"dense": {"kernel": jnp.asarray(rng.standard_normal((3, 4)),
                                            jnp.float32),
                      "bias": jnp.zeros((4,), jnp.float32)}}
  tx, schedule = train_lib.make_optimizer(1e-2, total_steps=10,
                                          warmup_steps=2)
  ref = optax.chain(
      optax.clip_by_global_norm(1.0),
      optax.adamw(schedule, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01,
                  mask=optimizer.decay_mask))
  s, rs = tx.init(params), ref.init(params)
  assert (jax.tree_util.tree_structure(s)
          == jax.tree_util.tree_structure(rs))
  p, rp = params, params
  for i in range(4):
    g = jax.tree_util.tree_map(
        lambda x: jnp.asarray(rng.standard_normal(x.shape) * (i + 0.5),
                              jnp.float32), params)
    u, s = tx.update(g, s, p)
    ru, rs = ref.update(g, rs, rp)
    p, rp = optax.apply_updates(p, u), optax.apply_updates(rp, ru)
  for a, b in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(rp)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def _hand_built_mesh(data, model, devices):
  """The mesh builder `jax.make_mesh` replaced: devices in order, reshaped."""
  return jax.sharding.Mesh(
      np.asarray(devices[: data * model]).reshape(data, model),
      ("data", "model"))


@pytest.mark.parametrize("shape,expected", [
    ((-1, 1), (8, 1)), ((-1, 2), (4, 2)), ((2, -1), (2, 4)), ((1, 8), (1, 8)),
    ((2, 2), (2, 2)), ((-1, 3), (2, 3)), ((3, 1), (3, 1))])
def test_make_mesh_is_the_hand_built_mesh(shape, expected):
  """`jax.make_mesh` gives the mesh the old reshape gave (8 CPU devices):
  shape, axis names, Auto axes and the devices in the same order; -1 still
  takes as many of the remaining devices as fit."""
  if jax.device_count() != 8:
    pytest.skip("needs the 8 simulated devices of tests/conftest.py")
  mesh = train_lib.make_mesh(shape)
  old = _hand_built_mesh(*expected, jax.devices())
  assert mesh.axis_names == old.axis_names == ("data", "model")
  assert mesh.devices.shape == old.devices.shape == expected
  assert mesh.axis_types == old.axis_types == (
      jax.sharding.AxisType.Auto,) * 2
  # On CPU jax.make_mesh keeps the given order (it reorders TPUs by their
  # torus and GPUs by id), so the meshes are equal, not just the same set.
  assert [d.id for d in mesh.devices.flat] == [d.id for d in old.devices.flat]
  assert mesh == old


@pytest.mark.parametrize("shape,message", [
    ((16, 1), r"mesh_shape \(16, 1\) needs 16 devices; 8 are available"),
    ((-1, 16), r"mesh_shape \(-1, 16\) needs 16 devices"),
    ((-1, -1), "at most one of"),
    ((0, 2), ">= 1"),
    ((4,), "expected \\(data, model\\)")])
def test_make_mesh_refuses_impossible_shapes(shape, message):
  if jax.device_count() != 8:
    pytest.skip("needs the 8 simulated devices of tests/conftest.py")
  with pytest.raises(ValueError, match=message):
    train_lib.make_mesh(shape)


def test_make_mesh_uses_the_devices_given():
  if jax.device_count() < 4:
    pytest.skip("needs 4 devices (tests/conftest.py simulates 8)")
  devices = jax.devices()[::-1][:4]
  mesh = train_lib.make_mesh((-1, 2), devices=devices)
  assert mesh == _hand_built_mesh(2, 2, devices)


def test_adam_moments_are_sharded_like_their_params():
  """Not replicated: that would put two float32 copies of the model on every
  device (XLA replicates the zeros `tx.init` makes unless told otherwise)."""
  from rembert_t5x import models  # pylint: disable=g-import-not-at-top
  from rembert_t5x import network  # pylint: disable=g-import-not-at-top
  from tests import test_utils  # pylint: disable=g-import-not-at-top
  if jax.device_count() < 4:
    pytest.skip("needs 4 devices (tests/conftest.py simulates 8)")
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(
      test_utils.TINY_CONFIG))
  tx, _ = train_lib.make_optimizer(1e-3, total_steps=10)
  mesh = train_lib.make_mesh((2, 2), devices=jax.devices()[:4])
  state, _ = train_lib.init_train_state(
      model, tx, jax.random.PRNGKey(0), {"input_tokens": (2, 8)}, mesh,
      train_lib.default_rules())
  specs = {}
  for path, x in jax.tree_util.tree_flatten_with_path(state.params)[0]:
    specs[jax.tree_util.keystr(path)] = x.sharding.spec
  split = [k for k, s in specs.items() if "model" in s]
  assert split  # the check below would be empty otherwise
  moments = 0
  for path, x in jax.tree_util.tree_flatten_with_path(state.opt_state)[0]:
    key = jax.tree_util.keystr(path)
    param = next((k for k in specs if key.endswith(k)), None)
    if param is None:  # step counts
      assert x.ndim == 0, key
      continue
    moments += 1
    assert x.sharding.spec == specs[param], key
  assert moments == 2 * len(specs)  # mu and nu of every parameter


def _tagging_batch(batch_size=8, length=12, seed=0):
  """Rows with very different numbers of labelled tokens (0 to all)."""
  rng = np.random.default_rng(seed)
  weights = np.zeros((batch_size, length), np.float32)
  for row, count in enumerate([length, 1, 0, 5, 2, length - 1, 3, 1]
                              [:batch_size]):
    weights[row, :count] = 1.0
  return {
      "input_tokens": jnp.asarray(rng.integers(5, 97, (batch_size, length)),
                                  jnp.int32),
      "token_types": jnp.zeros((batch_size, length), jnp.int32),
      "targets": jnp.asarray(rng.integers(0, 5, (batch_size, length)),
                             jnp.int32),
      "weights": jnp.asarray(weights),
  }


@pytest.mark.parametrize("accum", [2, 4])
def test_gradient_accumulation_gives_the_full_batch_gradient(accum):
  """grad_accum_steps=k: the same gradient (and loss) as one full batch.

  With plain SGD at learning rate 1 the update is minus the gradient, so the
  new params compare the gradients themselves; the tagging rows carry
  uneven weights, where averaging micro-batch means is not the full mean.
  """
  # No dropout: each micro batch gets its own dropout rng.
  config = dataclasses.replace(test_utils.TINY_CONFIG,
                               classifier_dropout_rate=0.0)
  model = models.RemBertTaggingModel(models.make_module(
      "tagging", config, num_classes=5))
  batch = _tagging_batch()
  params = model.get_initial_variables(
      jax.random.PRNGKey(0), {"input_tokens": (2, 12)})["params"]
  tx = optax.sgd(1.0)
  state = train_lib.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                               opt_state=tx.init(params))
  results = {}
  for k in (1, accum):
    step = jax.jit(train_lib.make_train_step(model, tx, optax.constant_schedule(
        1.0), grad_accum_steps=k))
    results[k] = step(state, batch, jax.random.PRNGKey(1))
  (full, full_m), (acc, acc_m) = results[1], results[accum]
  # SGD at 1: the updates are minus the gradients; the tiny model's float32
  # bounds (gradient normwise; loss and norm: forward chain, the norm's sum
  # of squares adding its own terms; accuracy: exact counts).
  rows, length = batch["input_tokens"].shape
  delta = lambda p: jax.tree_util.tree_map(lambda a, b: a - b, p, params)
  tolerances.assert_trees_close_normwise(
      delta(acc.params), delta(full.params),
      tolerances.tiny_gradient_rtol(config, length, ("classes", 5),
                                    rows * length), rows * length)
  forward_rtol = tolerances.float32_chain_rtol(
      tolerances.tiny_network_reductions(config, length, ("classes", 5),
                                         rows * length))
  for key in ("loss", "grad_norm", "token_accuracy"):
    np.testing.assert_allclose(acc_m[key], full_m[key], rtol=2 * forward_rtol
                               if key == "grad_norm" else forward_rtol)
  # Averaging micro-batch mean gradients (what accumulation did before) is
  # not the full batch's gradient with these weights: the check can fail.
  size = 8 // accum
  grad_fn = jax.jit(jax.grad(lambda p, b: model.loss_fn(p, b)[0]))
  averaged = [grad_fn(params, jax.tree_util.tree_map(
      lambda x, i=i: x[i * size:(i + 1) * size], batch)) for i in range(accum)]
  flat = lambda tree: np.concatenate(
      [np.ravel(x) for x in jax.tree_util.tree_leaves(tree)])
  averaged = np.mean([flat(g) for g in averaged], axis=0)
  full_grad = flat(params) - flat(full.params)  # SGD at rate 1
  assert (np.linalg.norm(averaged - full_grad)
          > 0.05 * np.linalg.norm(full_grad))


def test_init_and_step_programs_are_reused_per_model_object():
  """A second run of one model object with the same settings (another seed,
  another schedule) reuses the traced init and train-step programs; another
  model object, other optimiser settings or another mode build their own."""
  from rembert_t5x import network  # pylint: disable=g-import-not-at-top
  make = lambda: models.RemBertMLMModel(network.RemBertForMaskedLM(  # pylint: disable=unnecessary-lambda-assignment
      test_utils.TINY_CONFIG))
  model = make()
  tx, schedule = train_lib.make_optimizer(1e-3, total_steps=10)
  assert train_lib.make_optimizer(1e-3, total_steps=10) == (tx, schedule)
  assert train_lib.make_optimizer(1e-3, total_steps=20)[1] is not schedule
  mesh, rules = train_lib.make_mesh((1, 1)), train_lib.default_rules()
  shapes = {"input_tokens": (2, 8)}
  built = []
  original = train_lib.jit_train_step

  def counting_jit_train_step(*args, **kwargs):
    built.append(1)
    return original(*args, **kwargs)

  train_lib.jit_train_step = counting_jit_train_step
  try:
    first, shardings = train_lib.init_train_state(
        model, tx, jax.random.PRNGKey(0), shapes, mesh, rules)
    again, _ = train_lib.init_train_state(
        model, tx, jax.random.PRNGKey(0), shapes, mesh, rules)
    other, _ = train_lib.init_train_state(
        model, tx, jax.random.PRNGKey(1), shapes, mesh, rules)
    for a, b in zip(jax.tree_util.tree_leaves(first.params),
                    jax.tree_util.tree_leaves(again.params)):
      np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(
        jax.tree_util.tree_leaves(first.params),
        jax.tree_util.tree_leaves(other.params)))
    step = train_lib.train_step_program(model, 1e-3, 10, 0, {}, shardings,
                                        mesh, rules)
    # Another learning rate or length: the same traced program.
    train_lib.train_step_program(model, 2e-3, 20, 2, {}, shardings, mesh,
                                 rules)
    assert len(built) == 1
    # Another model object, another nonfinite mode, other optimiser
    # settings: each builds its own step.
    train_lib.train_step_program(make(), 1e-3, 10, 0, {}, shardings, mesh,
                                 rules)
    train_lib.train_step_program(model, 1e-3, 10, 0, {}, shardings, mesh,
                                 rules, skip_nonfinite=True)
    train_lib.train_step_program(model, 1e-3, 10, 0, {"weight_decay": 0.1},
                                 shardings, mesh, rules)
    assert len(built) == 4
  finally:
    train_lib.jit_train_step = original
  state, metrics = step(first, {
      "input_tokens": np.full((2, 8), 5, np.int32),
      "token_types": np.zeros((2, 8), np.int32),
      "segment_ids": np.ones((2, 8), np.int32),
      "positions": np.tile(np.arange(8, dtype=np.int32), (2, 1)),
      "targets": np.full((2, 8), 6, np.int32),
      "weights": np.ones((2, 8), np.float32)}, jax.random.PRNGKey(0))
  assert int(state.step) == 1 and np.isfinite(float(metrics["loss"]))


def test_scheduled_step_is_the_step_of_make_optimizer():
  """The runner's step takes its schedule as an argument: over a warm-up and
  the decay it follows `make_optimizer`'s AdamW with the schedule built in.

  The two programs differ only in float32 rounding: the schedule's values
  (a few operations each, within 4 u of the learning rate of each other,
  optimizer_test) and whatever XLA fuses differently. A wrong schedule
  (warm-up off by one step, another learning rate) moves the parameters by
  about the learning rate per step, far above the tolerance below.
  """
  from rembert_t5x import network  # pylint: disable=g-import-not-at-top
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(
      dataclasses.replace(test_utils.TINY_CONFIG, dropout_rate=0.0)))
  lr, total, warmup = 1e-3, 4, 2
  tx, schedule = train_lib.make_optimizer(lr, total, warmup)
  mesh, rules = train_lib.make_mesh((1, 1)), train_lib.default_rules()
  state, shardings = train_lib.init_train_state(
      model, tx, jax.random.PRNGKey(0), {"input_tokens": (2, 8)}, mesh, rules)
  batch = {
      "input_tokens": np.full((2, 8), 5, np.int32),
      "token_types": np.zeros((2, 8), np.int32),
      "segment_ids": np.ones((2, 8), np.int32),
      "positions": np.tile(np.arange(8, dtype=np.int32), (2, 1)),
      "targets": np.full((2, 8), 6, np.int32),
      "weights": np.ones((2, 8), np.float32)}
  scheduled = train_lib.train_step_program(model, lr, total, warmup, {},
                                           shardings, mesh, rules)
  built_in = jax.jit(train_lib.make_train_step(model, tx, schedule))
  copy = lambda s: jax.tree_util.tree_map(jnp.array, s)  # donated below
  got, want = copy(state), state
  for step in range(total):
    got, got_m = scheduled(got, batch, jax.random.PRNGKey(1))
    want, want_m = built_in(want, batch, jax.random.PRNGKey(1))
    np.testing.assert_allclose(got_m["learning_rate"],
                               want_m["learning_rate"], rtol=0,
                               atol=4 * tolerances.U32 * lr)
    assert float(got_m["learning_rate"]) == pytest.approx(
        float(schedule(step)), abs=4 * tolerances.U32 * lr)
  tolerances.assert_trees_close(got.params, want.params, rtol=0,
                                atol=1e-3 * lr)
  # The optimizer state keeps its tree: checkpoints restore either way.
  assert (jax.tree_util.tree_structure(got.opt_state)
          == jax.tree_util.tree_structure(want.opt_state))
