"""Tests for rembert_t5x.train_lib's optimizer pieces."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rembert_t5x import train_lib


@pytest.mark.parametrize("scale", [0.01, 100.0])  # below and above the norm
def test_clip_by_global_norm_matches_optax(scale):
  rng = np.random.default_rng(0)
  grads = {"a": jnp.asarray(rng.standard_normal((4, 3)) * scale, jnp.float32),
           "b": {"bias": jnp.asarray(rng.standard_normal(5) * scale,
                                     jnp.float32)}}
  ours = train_lib.clip_by_global_norm(1.0)
  ref = optax.clip_by_global_norm(1.0)
  got, state = ours.update(grads, ours.init(grads))
  want, ref_state = ref.update(grads, ref.init(grads))
  assert type(state) is type(ref_state)
  for a, b in zip(jax.tree_util.tree_leaves(got),
                  jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  norm = float(optax.tree.norm(got))
  assert norm == pytest.approx(min(float(optax.tree.norm(grads)), 1.0),
                               rel=1e-5)


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
                  mask=train_lib._decay_mask))  # pylint: disable=protected-access
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
