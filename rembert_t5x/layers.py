"""Building blocks of the RemBERT network: every parameter has logical axes.

Parameters are created with `flax.linen.partitioning.param_with_axes`, which
stores the logical axis names next to the parameters (in the `params_axes`
collection) where T5X's partitioner and our local runner read them.

Numerics follow BERT / Hugging Face RemBERT: LayerNorm with a learned scale and
bias computed in float32, exact (erf) GELU, softmax in float32.
"""

from typing import Any, Callable, Sequence, Union

import flax.linen as nn
from flax.linen import partitioning as nn_partitioning
import jax
import jax.numpy as jnp

from rembert_t5x import partitioning as axes

Array = jax.Array
DType = Any
Initializer = Callable[..., Array]

param_with_axes = nn_partitioning.param_with_axes
with_sharding_constraint = nn_partitioning.with_sharding_constraint

# BERT's initialiser: truncated normal with standard deviation 0.02.
default_kernel_init = nn.initializers.truncated_normal(stddev=0.02)

# `MultiHeadSelfAttention.implementation` values (see `RemBertConfig`).
ATTENTION_IMPLEMENTATIONS = ("auto", "einsum", "xla", "cudnn")


def zero_rows_from(init: Initializer, start: int, axis: int) -> Initializer:
  """`init`, with the entries at index >= `start` along `axis` set to zero.

  Padded vocabulary rows start at zero so that padding changes no value and a
  checkpoint without the padding restores bit for bit.
  """

  def wrapped(key, shape, dtype=jnp.float32):
    values = init(key, shape, dtype)
    if shape[axis] <= start:
      return values
    keep = jax.lax.broadcasted_iota(jnp.int32, shape, axis) < start
    return jnp.where(keep, values, jnp.zeros((), dtype))

  return wrapped


def cpu_forms() -> bool:
  """Whether to use the XLA:CPU-tuned forms below (default backend is CPU).

  They were measured on CPU only (docs/PERFORMANCE.md); on GPU and TPU,
  where users train, the model uses the plain ops and leaves the layout to
  XLA. Both give the same values and gradients (tests/layers_test.py).
  """
  return jax.default_backend() == "cpu"


def gelu(x: Array) -> Array:
  """Exact GELU, x * Phi(x), as BERT and HF's "gelu" (not the tanh form).

  On CPU it is written as 0.5 x (1 + erf(x / sqrt 2)), HF's formula: about
  twice as fast there as `jax.nn.gelu(approximate=False)`, which goes through
  erfc, and agrees with it to ~1e-6. Other backends use jax's.
  """
  if not cpu_forms():
    return jax.nn.gelu(x, approximate=False)
  return 0.5 * x * (1.0 + jax.lax.erf(x * jnp.asarray(0.7071067811865476,
                                                       x.dtype)))


def _vocab_matmul_fwd(x, kernel, bias):
  return _vocab_matmul(x, kernel, bias), (x, kernel)


def _vocab_matmul_bwd(residuals, g):
  x, kernel = residuals
  # g: [n, vocab]. The input gradient is the usual g @ kernel^T.
  dx = g @ kernel.T
  # kernel gradient x^T @ g with x^T materialised ([e, n], small): left to
  # itself XLA:CPU folds the transpose into the product and runs the
  # vocabulary-wide "transposed-A" form about 1.2x slower.
  dkernel = jax.lax.optimization_barrier(x.T) @ g
  # bias gradient: column sums of g as a mat-vec; XLA:CPU's reduction over
  # the leading axis of a [n, 120000] array is ~50x slower than this product.
  dbias = jnp.ones((g.shape[0],), g.dtype) @ g
  return dx, dkernel.astype(kernel.dtype), dbias


@jax.custom_vjp
def _vocab_matmul(x: Array, kernel: Array, bias: Array) -> Array:
  """`[n, e] x [e, v] + [v]` with gradients in CPU-friendly forms.

  Values and gradients are those of `x @ kernel + bias` (same products, only
  the layout of the backward products differs); see docs/PERFORMANCE.md.
  """
  return x @ kernel + bias


_vocab_matmul.defvjp(_vocab_matmul_fwd, _vocab_matmul_bwd)


class DenseGeneral(nn.Module):
  """A dense layer over the last `len(in_axes)` input dims, with a bias.

  Attributes:
    features: output feature shape, e.g. `768`.
    kernel_axes: logical names of the kernel dims, inputs first then outputs.
    num_contract: how many trailing input dims are contracted.
    dtype: computation dtype.
    param_dtype: parameter dtype.
    wide_output: the output is far wider than the input (the MLM decoder,
      E_out -> vocab): on CPU use `_vocab_matmul`, whose backward pass avoids
      two slow XLA:CPU forms (plain dot_general on other backends). Same
      parameters, values and gradients.
  """

  features: Union[int, Sequence[int]]
  kernel_axes: Sequence[str]
  num_contract: int = 1
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32
  kernel_init: Initializer = default_kernel_init
  wide_output: bool = False

  @nn.compact
  def __call__(self, x: Array) -> Array:
    features = (
        (self.features,) if isinstance(self.features, int) else tuple(self.features)
    )
    in_shape = x.shape[x.ndim - self.num_contract:]
    if len(self.kernel_axes) != len(in_shape) + len(features):
      raise ValueError(
          f"{self.name}: kernel_axes {tuple(self.kernel_axes)} do not match "
          f"kernel shape {in_shape + features}"
      )
    kernel = param_with_axes(
        "kernel",
        self.kernel_init,
        in_shape + features,
        self.param_dtype,
        axes=tuple(self.kernel_axes),
    )
    bias = param_with_axes(
        "bias",
        nn.initializers.zeros,
        features,
        self.param_dtype,
        axes=tuple(self.kernel_axes[len(in_shape):]),
    )
    x = jnp.asarray(x, self.dtype)
    kernel = jnp.asarray(kernel, self.dtype)
    if (self.wide_output and self.num_contract == 1 and len(features) == 1
        and cpu_forms()):
      # [..., e] -> [n, e] -> [n, v] -> [..., v]
      y = _vocab_matmul(x.reshape(-1, x.shape[-1]), kernel,
                        jnp.asarray(bias, self.dtype))
      return y.reshape(x.shape[:-1] + features)
    contract = tuple(range(x.ndim - self.num_contract, x.ndim))
    # [..., *in_shape] x [*in_shape, *features] -> [..., *features]
    y = jax.lax.dot_general(
        x, kernel, ((contract, tuple(range(self.num_contract))), ((), ()))
    )
    return y + jnp.asarray(bias, self.dtype)


class Embed(nn.Module):
  """A lookup table `[num_embeddings, features]` with logical axes.

  `attend` multiplies by the transposed table: the tied decoder of the
  coupled (mBERT-style) model.
  """

  num_embeddings: int
  features: int
  embedding_axes: Sequence[str]
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32
  embedding_init: Initializer = default_kernel_init

  def setup(self):
    self.embedding = param_with_axes(
        "embedding",
        self.embedding_init,
        (self.num_embeddings, self.features),
        self.param_dtype,
        axes=tuple(self.embedding_axes),
    )

  def __call__(self, ids: Array) -> Array:
    # [batch, length] -> [batch, length, features]. jnp.take's default fills
    # an out-of-range row with NaN, which silently poisons everything after
    # it; the callers check lengths and vocabularies before the first step,
    # so clipping only keeps a missed case finite.
    # Gathered from the parameter dtype, then cast: the gradient is a float32
    # scatter-add. A bfloat16 one (the cast table gathered) under-counts long
    # sums and is slow on GPUs (docs/PERFORMANCE.md, the profiled step).
    return jnp.asarray(
        jnp.take(self.embedding, ids, axis=0, mode="clip"), self.dtype)

  def attend(self, x: Array) -> Array:
    # [..., features] -> [..., num_embeddings]
    return jnp.einsum(
        "...f,vf->...v", jnp.asarray(x, self.dtype),
        jnp.asarray(self.embedding, self.dtype))


class LayerNorm(nn.Module):
  """LayerNorm with scale and bias over the last dim, computed in float32."""

  axis_name: str
  epsilon: float = 1e-12
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    features = x.shape[-1]
    scale = param_with_axes(
        "scale", nn.initializers.ones, (features,), self.param_dtype,
        axes=(self.axis_name,))
    bias = param_with_axes(
        "bias", nn.initializers.zeros, (features,), self.param_dtype,
        axes=(self.axis_name,))
    x32 = jnp.asarray(x, jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + self.epsilon)
    y = y * jnp.asarray(scale, jnp.float32) + jnp.asarray(bias, jnp.float32)
    return jnp.asarray(y, self.dtype)


def make_attention_mask(segment_ids: Array) -> Array:
  """Boolean mask allowing attention within a segment, never to padding.

  Args:
    segment_ids: `[batch, length]`, 0 for padding, 1.. for the packed segments.

  Returns:
    `[batch, 1, length, length]` boolean mask (query, key).
  """
  same = segment_ids[:, :, None] == segment_ids[:, None, :]
  not_pad = (segment_ids != 0)[:, None, :]
  return (same & not_pad)[:, None, :, :]


def _attention_backend(implementation: str, dtype, dropout_active: bool) -> str:
  """Which code computes attention: "einsum", "xla" or "cudnn"."""
  if dropout_active:
    return "einsum"  # jax.nn.dot_product_attention has no dropout.
  if implementation == "auto":
    # cuDNN's fused attention runs only on NVIDIA GPUs and only in half
    # precision; elsewhere our einsum form is as fast as XLA's (docs/PERFORMANCE.md).
    half = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
    return "cudnn" if half and jax.default_backend() == "gpu" else "einsum"
  return implementation


class MultiHeadSelfAttention(nn.Module):
  """Bidirectional multi-head self-attention with q/k/v/out biases.

  The q/k/v/out kernels keep heads and head_dim joined in one `joined_kv`
  axis ([H, heads * head_dim] and [heads * head_dim, H], heads major, the
  layout of Hugging Face's `[out, in]` weights transposed): T5X's partitioner
  splits that axis over the model mesh axis, and heads * head_dim divides
  model-parallel sizes that the head count (18 for RemBERT) does not.

  Attributes:
    num_heads: attention heads.
    head_dim: width of one head.
    dropout_rate: attention-probability dropout.
    implementation: see `RemBertConfig.attention_implementation`.
    dtype: computation dtype.
    param_dtype: parameter dtype.
    kernel_init: initializer of the q/k/v/out kernels.
  """

  num_heads: int
  head_dim: int
  dropout_rate: float = 0.0
  implementation: str = "auto"
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32
  kernel_init: Initializer = default_kernel_init

  @nn.compact
  def __call__(self, x: Array, mask: Array, enable_dropout: bool) -> Array:
    joined = self.num_heads * self.head_dim
    dense = lambda name: DenseGeneral(  # pylint: disable=g-long-lambda
        joined, kernel_axes=(axes.EMBED, axes.JOINED_KV),
        dtype=self.dtype, param_dtype=self.param_dtype,
        kernel_init=self.kernel_init, name=name)
    split = (x.shape[0], x.shape[1], self.num_heads, self.head_dim)
    # [batch, length, emb_dim] -> [batch, length, num_heads, head_dim]
    query, key, value = (
        with_sharding_constraint(
            dense(name)(x).reshape(split),
            (axes.BATCH, axes.LENGTH, axes.HEADS, axes.KV))
        for name in ("query", "key", "value"))

    dropout_active = enable_dropout and self.dropout_rate > 0.0
    backend = _attention_backend(self.implementation, self.dtype,
                                 dropout_active)
    if backend == "einsum":
      context = self._einsum_attention(query, key, value, mask,
                                       enable_dropout)
    else:
      # mask [batch, 1, q_len, k_len] broadcasts over heads.
      context = jax.nn.dot_product_attention(
          query, key, value, mask=mask, implementation=backend)
    # [batch, length, num_heads, head_dim] -> [batch, length, emb_dim]
    return DenseGeneral(
        x.shape[-1], kernel_axes=(axes.JOINED_KV, axes.EMBED),
        dtype=self.dtype, param_dtype=self.param_dtype,
        kernel_init=self.kernel_init, name="out")(
            context.reshape(split[:2] + (joined,)))

  def _einsum_attention(self, query, key, value, mask, enable_dropout):
    # [batch, q_len, heads, head_dim] x [batch, k_len, heads, head_dim]
    #   -> [batch, heads, q_len, k_len]
    logits = jnp.einsum("bqhd,bkhd->bhqk", query, key)
    logits = jnp.asarray(logits, jnp.float32) / jnp.sqrt(
        jnp.float32(self.head_dim))
    big_neg = jnp.finfo(jnp.float32).min
    logits = jnp.where(mask, logits, big_neg)
    probs = jax.nn.softmax(logits, axis=-1)
    probs = nn.Dropout(self.dropout_rate, name="attention_dropout")(
        probs, deterministic=not enable_dropout)
    probs = jnp.asarray(probs, self.dtype)
    # [batch, heads, q_len, k_len] x [batch, k_len, heads, head_dim]
    #   -> [batch, q_len, heads, head_dim]
    return jnp.einsum("bhqk,bkhd->bqhd", probs, value)


class MlpBlock(nn.Module):
  """H -> mlp_dim -> H with exact GELU and biases."""

  mlp_dim: int
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32
  kernel_init: Initializer = default_kernel_init

  @nn.compact
  def __call__(self, x: Array) -> Array:
    emb_dim = x.shape[-1]
    # [batch, length, emb_dim] -> [batch, length, mlp_dim]
    h = DenseGeneral(self.mlp_dim, kernel_axes=(axes.EMBED, axes.MLP),
                     dtype=self.dtype, param_dtype=self.param_dtype,
                     kernel_init=self.kernel_init, name="wi")(x)
    h = gelu(h)
    h = with_sharding_constraint(h, (axes.BATCH, axes.LENGTH, axes.MLP))
    # [batch, length, mlp_dim] -> [batch, length, emb_dim]
    return DenseGeneral(emb_dim, kernel_axes=(axes.MLP, axes.EMBED),
                        dtype=self.dtype, param_dtype=self.param_dtype,
                        kernel_init=self.kernel_init, name="wo")(h)
