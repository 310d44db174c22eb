"""Tests for rembert_t5x.layers: CPU-only forms, attention implementations."""

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


def _primitives(fn, *args):
  jaxpr = jax.make_jaxpr(fn)(*args)
  return {str(e.primitive) for e in jaxpr.jaxpr.eqns}


def test_cpu_forms_only_on_cpu(monkeypatch):
  """On another default backend: plain ops, same values and gradients."""
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.standard_normal((4, 5)), jnp.float32)
  params = _dense(True).init(jax.random.PRNGKey(0), x)
  grad = lambda p, x: jax.grad(
      lambda p: jnp.sum(jnp.sin(_dense(True).apply(p, x))))(p)
  assert layers.cpu_forms()
  cpu_grad = grad(params, x)
  cpu_gelu = layers.gelu(x)
  assert "custom_vjp_call" in _primitives(
      lambda p: _dense(True).apply(p, x), params)
  assert "erf" in _primitives(layers.gelu, x)

  monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
  assert not layers.cpu_forms()
  primitives = _primitives(lambda p: _dense(True).apply(p, x), params)
  assert "custom_vjp_call" not in primitives and "dot_general" in primitives
  assert "optimization_barrier" not in _primitives(grad, params, x)
  np.testing.assert_allclose(layers.gelu(x), cpu_gelu, rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.tree_util.tree_leaves(grad(params, x)),
                  jax.tree_util.tree_leaves(cpu_grad)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _attention_inputs(batch=2, length=9, heads=4, head_dim=8, seed=0):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((batch, length, heads * head_dim)),
                  jnp.float32)
  segment_ids = np.ones((batch, length), np.int32)
  segment_ids[0, 5:] = 2  # two packed segments
  segment_ids[1, 6:] = 0  # padding
  return x, layers.make_attention_mask(jnp.asarray(segment_ids))


def _split_head_reference(params, x, mask, heads, head_dim):
  """Attention written per head from the joined kernels, in numpy float64."""
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
  x = np.asarray(x, np.float64)
  b, t, _ = x.shape
  proj = lambda name: (x @ p[name]["kernel"] + p[name]["bias"]).reshape(
      b, t, heads, head_dim)
  q, k, v = proj("query"), proj("key"), proj("value")
  logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(head_dim)
  logits = np.where(np.asarray(mask), logits, -1e30)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  context = np.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, -1)
  return context @ p["out"]["kernel"] + p["out"]["bias"]


@pytest.mark.parametrize("implementation", ["einsum", "xla", "auto"])
def test_joined_kv_attention_equals_per_head_attention(implementation):
  """The joined heads x head_dim kernels compute ordinary multi-head
  attention (heads major), whichever implementation runs it."""
  x, mask = _attention_inputs()
  module = layers.MultiHeadSelfAttention(num_heads=4, head_dim=8,
                                         implementation=implementation)
  params = module.init(jax.random.PRNGKey(0), x, mask, False)["params"]
  # Non-zero biases so a misplaced bias cannot hide.
  params = jax.tree_util.tree_map(
      lambda p: p + 0.05 * jnp.cos(jnp.arange(p.size, dtype=p.dtype)
                                   ).reshape(p.shape), params)
  assert params["query"]["kernel"].shape == (32, 32)
  assert params["out"]["kernel"].shape == (32, 32)
  with jax.default_matmul_precision("highest"):
    got = module.apply({"params": params}, x, mask, False)
  want = _split_head_reference(params, x, mask, 4, 8)
  np.testing.assert_allclose(got, want, atol=2e-5)


def test_dot_product_attention_gradients_match_einsum():
  x, mask = _attention_inputs(seed=1)
  make = lambda impl: layers.MultiHeadSelfAttention(
      num_heads=4, head_dim=8, implementation=impl)
  params = make("einsum").init(jax.random.PRNGKey(0), x, mask, False)
  grad = lambda impl: jax.grad(lambda p: jnp.sum(jnp.sin(
      make(impl).apply(p, x, mask, False))))(params)
  with jax.default_matmul_precision("highest"):
    for a, b in zip(jax.tree_util.tree_leaves(grad("xla")),
                    jax.tree_util.tree_leaves(grad("einsum"))):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(jax.default_backend() != "gpu",
                    reason="cuDNN fused attention needs an NVIDIA GPU")
def test_cudnn_attention_matches_einsum_in_bfloat16():
  """On a GPU, "auto" picks cuDNN for bfloat16 and agrees with the einsum
  path to bfloat16 rounding (values and gradients)."""
  assert layers._attention_backend("auto", jnp.bfloat16, False) == "cudnn"  # pylint: disable=protected-access
  x, mask = _attention_inputs(batch=2, length=128, heads=4, head_dim=64)
  make = lambda impl: layers.MultiHeadSelfAttention(
      num_heads=4, head_dim=64, implementation=impl, dtype=jnp.bfloat16)
  params = make("einsum").init(jax.random.PRNGKey(0), x, mask, False)
  run = lambda impl: jax.jit(lambda p: make(impl).apply(p, x, mask, False))(
      params)
  want = np.asarray(run("einsum"), np.float32)
  for impl in ("cudnn", "auto"):
    got = np.asarray(run(impl), np.float32)
    real = np.asarray(mask[:, 0].any(-1))  # rows with a real query
    np.testing.assert_allclose(got[real], want[real], atol=3e-2, rtol=3e-2)
  weight = jnp.asarray(real, jnp.float32)[..., None]
  loss = lambda impl: lambda p: jnp.sum(
      (make(impl).apply(p, x, mask, False).astype(jnp.float32) * weight) ** 2)
  g_cudnn = jax.jit(jax.grad(loss("cudnn")))(params)
  g_einsum = jax.jit(jax.grad(loss("einsum")))(params)
  for a, b in zip(jax.tree_util.tree_leaves(g_cudnn),
                  jax.tree_util.tree_leaves(g_einsum)):
    scale = float(jnp.max(jnp.abs(b))) + 1e-6
    assert float(jnp.max(jnp.abs(a - b))) <= 5e-2 * scale
