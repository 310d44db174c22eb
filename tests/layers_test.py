"""Tests for rembert_t5x.layers: the CPU-friendly vocabulary projection."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rembert_t5x import layers


def _dense(wide_output):
  return layers.DenseGeneral(
      37, kernel_axes=("output_embed", "vocab"), wide_output=wide_output)


@pytest.mark.parametrize("shape", [(6, 5), (2, 3, 5)])
def test_wide_output_dense_matches_the_plain_product(shape):
  """Same parameters, values and gradients (x, kernel, bias) as x @ W + b."""
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
  params = _dense(False).init(jax.random.PRNGKey(0), x)
  # A non-zero bias and a loss that weighs every output differently, so a
  # wrong bias or kernel gradient cannot cancel out.
  params = jax.tree_util.tree_map(
      lambda p: p + 0.1 * jnp.arange(p.size, dtype=p.dtype).reshape(p.shape)
      / p.size, params)
  w = jnp.asarray(rng.standard_normal(shape[:-1] + (37,)), jnp.float32)

  def loss(module):
    return lambda p, x: jnp.sum(jnp.sin(module.apply(p, x)) * w)

  assert (jax.tree_util.tree_structure(_dense(True).init(
      jax.random.PRNGKey(0), x)) == jax.tree_util.tree_structure(params))
  plain = loss(_dense(False))
  wide = loss(_dense(True))
  np.testing.assert_allclose(wide(params, x), plain(params, x), rtol=1e-6)
  g_plain = jax.grad(plain, argnums=(0, 1))(params, x)
  g_wide = jax.jit(jax.grad(wide, argnums=(0, 1)))(params, x)
  for a, b in zip(jax.tree_util.tree_leaves(g_wide),
                  jax.tree_util.tree_leaves(g_plain)):
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
