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
