"""Tests for rembert_t5x.layers: CPU-only forms, attention implementations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rembert_t5x import layers
from tests import tolerances


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
  # One product in another order: float32 bound of its reductions (5
  # inputs, 37 outputs, the rows), normwise per leaf.
  rows = int(np.prod(shape[:-1]))
  tolerances.assert_trees_close_normwise(
      g_wide, g_plain, tolerances.float32_chain_rtol([5, 37, 37, rows]), rows)


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


# Gradient tolerance of a bfloat16 attention against the einsum path, per
# leaf: max |got - want| <= RTOL * max |want leaf| + ATOL * max |want tree|.
# The leaf term is the usual relative tolerance. The tree term is for leaves
# whose exact gradient is zero: the key bias (softmax ignores a constant
# added to every logit of a query, and q . b_k is one), where both sides are
# bfloat16 noise and a relative tolerance compares noise with noise (seen on
# an H200: 9.2e-5 apart on a leaf of 9.1e-5).
# Measured on CPU with the "xla" path standing in for cuDNN (same inputs as
# the GPU test; `test_gradient_tolerance_*` below): bfloat16 noise is <= 0.8%
# of each leaf's scale and <= 2e-6 of the tree's, at most 11% of the
# tolerance (the H200's key-bias gap: ~16%). The query and key kernels'
# gradients are only ~0.6% of the tree's scale, so the tree term must stay
# small: with ATOL = 1e-4 it is ~2% of those leaves, and a wrong attention
# exceeds the tolerance on some leaf: 13-40x when it ignores the mask, is
# causal, mixes heads, shifts keys by one position or scales the logits by
# 1/d; 1.5x when it scales them 10% wrong.
GRAD_RTOL = 5e-2
GRAD_ATOL = 1e-4


def _gradient_mismatches(got, want) -> list[str]:
  """Every leaf outside the tolerance above, as readable lines."""
  want_leaves = jax.tree_util.tree_flatten_with_path(want)[0]
  tree_scale = max(float(jnp.max(jnp.abs(b))) for _, b in want_leaves)
  failures = []
  for (path, b), a in zip(want_leaves, jax.tree_util.tree_leaves(got)):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    err = float(np.max(np.abs(a - b)))
    leaf_scale = float(np.max(np.abs(b)))
    tol = GRAD_RTOL * leaf_scale + GRAD_ATOL * tree_scale
    if not err <= tol:  # also catches NaN
      failures.append(f"{jax.tree_util.keystr(path)}: max |diff| {err:.3g} > "
                      f"{tol:.3g} (leaf scale {leaf_scale:.3g}, tree scale "
                      f"{tree_scale:.3g})")
  return failures


def _bf16_attention_case():
  """The GPU test's inputs: attention module maker, params, loss maker."""
  x, mask = _attention_inputs(batch=2, length=128, heads=4, head_dim=64)
  make = lambda impl: layers.MultiHeadSelfAttention(
      num_heads=4, head_dim=64, implementation=impl, dtype=jnp.bfloat16)
  params = make("einsum").init(jax.random.PRNGKey(0), x, mask, False)
  real = np.asarray(mask[:, 0].any(-1))  # rows with a real query
  weight = jnp.asarray(real, jnp.float32)[..., None]
  loss = lambda impl: lambda p: jnp.sum(
      (make(impl).apply(p, x, mask, False).astype(jnp.float32) * weight) ** 2)
  return x, mask, make, params, real, loss


def _bf16_grads(loss, impl, params):
  return jax.jit(jax.grad(loss(impl)))(params)


def test_gradient_tolerance_accepts_bfloat16_noise():
  """Two bfloat16 implementations (xla, einsum) agree within it on CPU."""
  _, _, _, params, _, loss = _bf16_attention_case()
  assert not _gradient_mismatches(_bf16_grads(loss, "xla", params),
                                  _bf16_grads(loss, "einsum", params))


@pytest.mark.parametrize("bug", ["no_mask", "scale_10_percent", "causal"])
def test_gradient_tolerance_catches_a_wrong_attention(bug, monkeypatch):
  """What a wrong fused kernel would look like fails the comparison."""
  _, _, _, params, _, loss = _bf16_attention_case()
  want = _bf16_grads(loss, "einsum", params)
  right = jax.nn.dot_product_attention
  wrong = {
      "no_mask": lambda q, k, v, mask: right(q, k, v),
      "scale_10_percent": lambda q, k, v, mask: right(
          q, k, v, mask=mask, scale=1.1 / np.sqrt(q.shape[-1])),
      "causal": lambda q, k, v, mask: right(q, k, v, mask=mask,
                                            is_causal=True),
  }[bug]
  monkeypatch.setattr(jax.nn, "dot_product_attention",
                      lambda q, k, v, mask=None, implementation=None: wrong(
                          q, k, v, mask))
  assert _gradient_mismatches(_bf16_grads(loss, "xla", params), want)


@pytest.mark.skipif(jax.default_backend() != "gpu",
                    reason="cuDNN fused attention needs an NVIDIA GPU")
def test_cudnn_attention_matches_einsum_in_bfloat16():
  """On a GPU, "auto" picks cuDNN for bfloat16 and agrees with the einsum
  path to bfloat16 rounding (values, and gradients of every parameter)."""
  assert layers._attention_backend("auto", jnp.bfloat16, False) == "cudnn"  # pylint: disable=protected-access
  x, mask, make, params, real, loss = _bf16_attention_case()
  run = lambda impl: jax.jit(lambda p: make(impl).apply(p, x, mask, False))(
      params)
  want = np.asarray(run("einsum"), np.float32)
  for impl in ("cudnn", "auto"):
    got = np.asarray(run(impl), np.float32)
    np.testing.assert_allclose(got[real], want[real], atol=3e-2, rtol=3e-2)
  failures = _gradient_mismatches(_bf16_grads(loss, "cudnn", params),
                                  _bf16_grads(loss, "einsum", params))
  assert not failures, "\n".join(failures)


def test_embed_never_reads_nan_past_the_table():
  embed = layers.Embed(4, 3, embedding_axes=("vocab", "embed"))
  variables = embed.init(jax.random.PRNGKey(0), jnp.zeros((1, 2), jnp.int32))
  table = variables["params"]["embedding"]
  out = embed.apply(variables, jnp.array([[0, 3, 4, 99]]))
  assert np.isfinite(np.asarray(out)).all()
  np.testing.assert_array_equal(out[0, :2], table[jnp.array([0, 3])])


def test_embed_gradient_accumulates_in_float32_under_bfloat16():
  """A token seen many times sums its gradient in float32: the lookup
  gathers from the float32 table and casts the rows, so the backward pass is
  a float32 scatter-add (a bfloat16 one is slow on GPUs and stalls on long
  sums: 8 bits of mantissa)."""
  embed = layers.Embed(4, 2, embedding_axes=("vocab", "embed"),
                       dtype=jnp.bfloat16)
  ids = jnp.ones((1, 4096), jnp.int32)
  variables = embed.init(jax.random.PRNGKey(0), ids)
  cotangent = jax.random.uniform(jax.random.PRNGKey(1), (1, 4096, 2),
                                 minval=0.5, maxval=1.5)

  def loss(table):
    out = embed.apply({"params": {"embedding": table}}, ids)
    return jnp.sum(out.astype(jnp.float32) * cotangent.astype(jnp.bfloat16))

  grad = jax.grad(loss)(variables["params"]["embedding"])
  assert grad.dtype == jnp.float32
  want = np.asarray(cotangent.astype(jnp.bfloat16), np.float64).sum((0, 1))
  # float32 sum of 4096 same-sign terms, any order (XLA's blocking differs
  # between CPUs; 1.08e-5 relative seen on an AMD EPYC) vs float64:
  # (4096 - 1) u = 2.4e-4. A bfloat16 scatter-add stalls: 87% short here
  # (sequential), >= 2.8e-4 even summed pairwise.
  np.testing.assert_allclose(np.asarray(grad[1], np.float64), want,
                             rtol=tolerances.float32_sum_rtol(
                                 4096, evaluations=1))
  np.testing.assert_array_equal(np.asarray(grad)[[0, 2, 3]], 0.0)
