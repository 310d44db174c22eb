"""The RemBERT network (Chung et al., ICLR 2021) in plain Flax.

RemBERT is BERT with the input and output embeddings *decoupled*:

  tokens -> word/position/token-type embeddings of width E_in (small)
         -> LayerNorm -> dense E_in -> H (only when E_in != H)
         -> L post-LayerNorm Transformer layers of width H
         -> MLM head: dense H -> E_out, GELU, LayerNorm, decoder E_out -> vocab
            (the "output embedding"; not tied, dropped after pre-training).

The coupled baseline (mBERT) ties the decoder to the word embeddings
(`tie_embeddings=True`, which needs E_in == E_out).

Parameter names follow the public RemBERT / Hugging Face layout one to one so
checkpoints convert with an explicit map (`checkpoint_conversion.py`). This
file imports nothing from t5x; `models.py` adapts it to T5X's model API.
"""

import dataclasses
from typing import Any, Optional

import flax.linen as nn
from flax.linen import partitioning as nn_partitioning
import jax
import jax.numpy as jnp

from rembert_t5x import layers
from rembert_t5x import partitioning as axes
from rembert_t5x.common import errors

Array = jax.Array

# Rematerialisation policies by name (RemBertConfig.remat_policy) -> what
# `jax.checkpoint` may save for the backward pass. "none" means no remat (every
# intermediate is kept); "full" saves only each layer's input and recomputes
# the layer in the backward pass; the "dots" policies keep matmul outputs and
# recompute the element-wise work. `dots_with_no_batch_dims_saveable` keeps the
# weight matmuls (q, k, v, out, MLP) but not the attention score and context
# einsums, whose batch dims make them [batch, heads, length, length].
REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable":
        jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


@dataclasses.dataclass(frozen=True)
class RemBertConfig:
  """Sizes and options of a RemBERT-family network.

  The defaults are RemBERT's (paper §5, Table 14). `gin_configs/models/` holds
  every configuration from the paper.

  Attributes:
    vocab_size: number of tokens.
    input_embed_dim: E_in, width of the input embeddings.
    emb_dim: H, the Transformer's hidden width.
    output_embed_dim: E_out, width of the MLM head's output embedding.
    num_layers: Transformer layers kept for fine-tuning.
    num_pretraining_only_layers: extra layers on top of `num_layers` used in
      pre-training only and dropped afterwards (paper Table 5).
    num_heads: attention heads; `num_heads * head_dim` must equal `emb_dim`.
    head_dim: width of one head.
    mlp_dim: inner width of the feed-forward block.
    max_position_embeddings: rows of the absolute position table.
    type_vocab_size: number of token types (segment A / B).
    tie_embeddings: coupled mode (mBERT): the MLM decoder reuses the word
      embedding matrix. Needs `input_embed_dim == output_embed_dim`.
    dropout_rate: hidden and attention dropout. The paper uses none.
    classifier_dropout_rate: dropout before the task heads (BERT's 0.1).
    layer_norm_epsilon: LayerNorm epsilon (1e-12 as BERT).
    initializer_range: standard deviation of the truncated-normal
      initialiser of every kernel and embedding table (BERT's and RemBERT's
      0.02; Hugging Face's `initializer_range`). Biases start at zero and
      LayerNorm scales at one. Tiny models learn faster from a larger one
      (the offline demo's: `synthetic_runs.INITIALIZER_RANGE`).
    pad_id: padding token id; used to derive a padding mask when no
      segment ids are given.
    dtype: computation dtype ("float32" or "bfloat16").
    param_dtype: parameter dtype.
    vocab_pad_multiple: store the word embeddings and the MLM decoder with
      their vocabulary rows padded up to a multiple of this (1: no padding),
      so the vocabulary axis divides the model-parallel mesh axis (T5X never
      replicates a dimension that does not divide). Padded rows are never
      looked up, their logits are masked out of the softmax (never
      predicted) and they get no gradient; `vocab_size` stays the real
      vocabulary and checkpoint conversion strips/restores the padding.
    attention_implementation: "einsum" (our einsum + float32 softmax),
      "xla" or "cudnn" (`jax.nn.dot_product_attention` with that
      implementation; "cudnn" is cuDNN's fused attention, GPU with bfloat16
      or float16 only), or "auto": "cudnn" on GPU for bfloat16/float16
      activations, "einsum" elsewhere. All give the same values up to
      rounding; attention dropout, when active, always takes the einsum path
      (jax's function has no dropout).
    scan_layers: run the Transformer layers as one `nn.scan` over stacked
      parameters (a leading "layers" axis) instead of a Python loop: XLA
      compiles one layer instead of all of them. Same outputs and gradients;
      the parameter tree differs (`layer_stacking` converts between the two).
    remat_policy: activation rematerialisation of each Transformer layer, one
      of `REMAT_POLICIES`: what the backward pass keeps from the forward pass
      instead of recomputing it. Same outputs and gradients, less memory,
      more FLOPs.
  """

  vocab_size: int = 250_300
  input_embed_dim: int = 256
  emb_dim: int = 1152
  output_embed_dim: int = 1664
  num_layers: int = 32
  num_pretraining_only_layers: int = 0
  num_heads: int = 18
  head_dim: int = 64
  mlp_dim: int = 4608
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  tie_embeddings: bool = False
  dropout_rate: float = 0.0
  classifier_dropout_rate: float = 0.1
  layer_norm_epsilon: float = 1e-12
  initializer_range: float = 0.02
  pad_id: int = 0
  dtype: Any = "float32"
  param_dtype: Any = "float32"
  vocab_pad_multiple: int = 1
  attention_implementation: str = "auto"
  scan_layers: bool = False
  remat_policy: str = "none"

  def __post_init__(self):
    for field in dataclasses.fields(self):
      # gin's REQUIRED sentinel is a bare `object()`: a size macro was not set.
      if type(getattr(self, field.name)) is object:  # pylint: disable=unidiomatic-typecheck
        raise ValueError(
            f"RemBertConfig.{field.name} is required but was not set (its gin "
            f"macro, e.g. {field.name.upper()}, is still %gin.REQUIRED)")
    positive = ("vocab_size", "input_embed_dim", "emb_dim", "output_embed_dim",
                "num_layers", "num_heads", "head_dim", "mlp_dim",
                "max_position_embeddings", "type_vocab_size",
                "vocab_pad_multiple")
    for name in positive:
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(
            f"RemBertConfig.{name} must be a positive integer, got {value!r}")
    if self.num_pretraining_only_layers < 0:
      raise ValueError(
          "RemBertConfig.num_pretraining_only_layers must be >= 0, got "
          f"{self.num_pretraining_only_layers}")
    if self.num_heads * self.head_dim != self.emb_dim:
      raise ValueError(
          f"RemBertConfig: num_heads * head_dim = {self.num_heads} * "
          f"{self.head_dim} = {self.num_heads * self.head_dim} must equal "
          f"emb_dim (H) = {self.emb_dim}")
    if self.tie_embeddings and self.input_embed_dim != self.output_embed_dim:
      raise ValueError(
          "RemBertConfig.tie_embeddings=True (coupled mode) needs "
          f"input_embed_dim == output_embed_dim, got {self.input_embed_dim} "
          f"and {self.output_embed_dim}")
    if (not isinstance(self.initializer_range, (int, float))
        or isinstance(self.initializer_range, bool)
        or not self.initializer_range > 0):
      raise ValueError("RemBertConfig.initializer_range must be a positive "
                       f"number, got {self.initializer_range!r}")
    for name in ("dropout_rate", "classifier_dropout_rate"):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(
            f"RemBertConfig.{name} must be in [0, 1), got {getattr(self, name)}")
    if self.attention_implementation not in layers.ATTENTION_IMPLEMENTATIONS:
      raise ValueError(
          "RemBertConfig.attention_implementation must be one of "
          f"{layers.ATTENTION_IMPLEMENTATIONS}, got "
          f"{self.attention_implementation!r}")
    if not isinstance(self.scan_layers, bool):
      raise ValueError("RemBertConfig.scan_layers must be True or False, got "
                       f"{self.scan_layers!r}")
    if self.remat_policy not in REMAT_POLICIES:
      raise ValueError(
          f"RemBertConfig.remat_policy must be one of {sorted(REMAT_POLICIES)}, "
          f"got {self.remat_policy!r}")
    for name in ("dtype", "param_dtype"):
      try:
        jnp.dtype(getattr(self, name))
      except TypeError as e:
        raise ValueError(
            f"RemBertConfig.{name}: unknown dtype {getattr(self, name)!r}") from e

  @property
  def kernel_init(self):
    """The initialiser of every kernel and embedding table."""
    return nn.initializers.truncated_normal(stddev=self.initializer_range)

  @property
  def compute_dtype(self):
    return jnp.dtype(self.dtype)

  @property
  def weight_dtype(self):
    return jnp.dtype(self.param_dtype)

  @property
  def num_pretraining_layers(self) -> int:
    return self.num_layers + self.num_pretraining_only_layers

  @property
  def padded_vocab_size(self) -> int:
    """Rows of the vocabulary parameters: `vocab_size` rounded up."""
    m = self.vocab_pad_multiple
    return -(-self.vocab_size // m) * m


def _dense(config: RemBertConfig, features, kernel_axes, name=None,
           wide_output=False, kernel_init=None):
  return layers.DenseGeneral(
      features, kernel_axes=kernel_axes, dtype=config.compute_dtype,
      param_dtype=config.weight_dtype, name=name, wide_output=wide_output,
      kernel_init=kernel_init or config.kernel_init)


def _layer_norm(config: RemBertConfig, axis_name: str, name=None):
  return layers.LayerNorm(
      axis_name=axis_name, epsilon=config.layer_norm_epsilon,
      dtype=config.compute_dtype, param_dtype=config.weight_dtype, name=name)


def check_length(config: RemBertConfig, length: int) -> None:
  """Refuses sequences longer than the position table, before any step runs.

  The encoder calls it while tracing (shapes are static), so every path
  (train, eval, infer, retrieval; T5X or the local runner) stops here
  instead of reading positions past the table.

  Raises:
    errors.UserError: `length` > `config.max_position_embeddings`.
  """
  if length > config.max_position_embeddings:
    raise errors.UserError(
        f"sequences of {length} tokens are longer than the model's position "
        f"table ({config.max_position_embeddings} rows, gin macro "
        "MAX_POSITION_EMBEDDINGS of the model file): set the run's "
        f"TASK_FEATURE_LENGTHS to at most {config.max_position_embeddings}")


class Embeddings(nn.Module):
  """Word + position + token-type embeddings of width E_in, then LayerNorm."""

  config: RemBertConfig

  def setup(self):
    cfg = self.config
    # Submodules created in setup take their names from the attributes.
    embed = lambda n, axes_: layers.Embed(  # pylint: disable=g-long-lambda
        n, cfg.input_embed_dim, embedding_axes=axes_,
        dtype=cfg.compute_dtype, param_dtype=cfg.weight_dtype,
        embedding_init=cfg.kernel_init)
    # Padded vocabulary rows start (and, never used, stay) at zero.
    self.word_embeddings = layers.Embed(
        cfg.padded_vocab_size, cfg.input_embed_dim,
        embedding_axes=(axes.VOCAB, axes.INPUT_EMBED),
        dtype=cfg.compute_dtype, param_dtype=cfg.weight_dtype,
        embedding_init=layers.zero_rows_from(
            cfg.kernel_init, cfg.vocab_size, axis=0))
    self.position_embeddings = embed(
        cfg.max_position_embeddings, (axes.POSITIONS, axes.INPUT_EMBED))
    self.token_type_embeddings = embed(
        cfg.type_vocab_size, (axes.TOKEN_TYPES, axes.INPUT_EMBED))
    self.layer_norm = _layer_norm(cfg, axes.INPUT_EMBED)
    self.dropout = nn.Dropout(cfg.dropout_rate)

  def __call__(self, input_tokens, token_types, positions, enable_dropout):
    # 3 x [batch, length] -> [batch, length, input_embed_dim]
    x = (self.word_embeddings(input_tokens)
         + self.token_type_embeddings(token_types)
         + self.position_embeddings(positions))
    x = self.layer_norm(x)
    return self.dropout(x, deterministic=not enable_dropout)

  def attend(self, x: Array) -> Array:
    # [..., input_embed_dim] -> [..., padded_vocab_size]
    return self.word_embeddings.attend(x)


class EncoderLayer(nn.Module):
  """Post-LayerNorm Transformer layer: x = LN(x + Attn(x)); x = LN(x + MLP(x))."""

  config: RemBertConfig

  @nn.compact
  def __call__(self, x: Array, mask: Array, enable_dropout: bool) -> Array:
    cfg = self.config
    dropout = nn.Dropout(cfg.dropout_rate)
    # [batch, length, emb_dim] -> [batch, length, emb_dim]
    y = layers.MultiHeadSelfAttention(
        num_heads=cfg.num_heads, head_dim=cfg.head_dim,
        dropout_rate=cfg.dropout_rate,
        implementation=cfg.attention_implementation, dtype=cfg.compute_dtype,
        param_dtype=cfg.weight_dtype, kernel_init=cfg.kernel_init,
        name="attention")(x, mask, enable_dropout)
    y = dropout(y, deterministic=not enable_dropout)
    x = _layer_norm(cfg, axes.EMBED, "attention_layer_norm")(x + y)
    # [batch, length, emb_dim] -> [batch, length, emb_dim]
    y = layers.MlpBlock(cfg.mlp_dim, dtype=cfg.compute_dtype,
                        param_dtype=cfg.weight_dtype,
                        kernel_init=cfg.kernel_init, name="mlp")(x)
    y = dropout(y, deterministic=not enable_dropout)
    x = _layer_norm(cfg, axes.EMBED, "mlp_layer_norm")(x + y)
    x = layers.with_sharding_constraint(
        x, (axes.BATCH, axes.LENGTH, axes.EMBED))
    # nn.scan's body maps (carry, inputs) -> (carry, outputs): the hidden
    # state is the carry and there is no per-layer output.
    return (x, None) if cfg.scan_layers else x


def _layer_stack(config: RemBertConfig, num_layers: int, name: str):
  """`num_layers` EncoderLayers, rematerialised and scanned as configured.

  Unscanned: a list of layers (named `{name}_0`, `{name}_1`, ... by Flax).
  Scanned: one module `name` whose parameters are the layers' parameters
  stacked on a leading axis with the logical name "layers" (T5X's standard
  rules replicate it), so T5X's partitioner still finds every axis name.
  """
  layer = EncoderLayer
  policy = REMAT_POLICIES[config.remat_policy]
  if config.remat_policy != "none":
    # `enable_dropout` (argument 2, not counting `self`) is a Python bool that
    # selects code paths: static. Inside a scan the loop already keeps XLA
    # from merging the recomputation with the forward pass (prevent_cse is
    # only needed without it, and costs performance there).
    layer = nn_partitioning.remat(
        layer, policy=policy, prevent_cse=not config.scan_layers,
        static_argnums=(2,))
  if not config.scan_layers:
    return [layer(config) for _ in range(num_layers)]
  stack = nn_partitioning.scan_with_axes(
      layer,
      variable_axes={"params": 0},
      split_rngs={"params": True, "dropout": True},
      # The mask and enable_dropout are the same for every layer.
      in_axes=(nn.broadcast, nn.broadcast),
      length=num_layers,
      axis_name=axes.LAYERS)
  return stack(config, name=name)


class RemBertEncoder(nn.Module):
  """Embeddings, the E_in -> H projection and the Transformer layers.

  This is the part of the model that fine-tuning keeps.

  Attributes:
    config: network sizes.
    include_pretraining_only_layers: also run the
      `num_pretraining_only_layers` layers on top (pre-training only).
    stop_after_layer: if set (1-based), build and run only the first this
      many layers and return their output (sentence retrieval reads an
      intermediate layer; see `RemBertForRetrieval`).
  """

  config: RemBertConfig
  include_pretraining_only_layers: bool = False
  stop_after_layer: Optional[int] = None

  def setup(self):
    cfg = self.config
    self.embeddings = Embeddings(cfg)
    if cfg.input_embed_dim != cfg.emb_dim:
      self.embedding_projection = _dense(
          cfg, cfg.emb_dim, (axes.INPUT_EMBED, axes.EMBED))
    else:
      self.embedding_projection = None
    # Unscanned, a list attribute names its items layers_0, layers_1, ...;
    # the pre-training-only layers continue that numbering. Scanned, they are
    # a stack of their own, so the kept `layers` stack has the same shape in
    # pre-training and fine-tuning (a T5X restore by name works).
    extra = (cfg.num_pretraining_only_layers
             if self.include_pretraining_only_layers else 0)
    if cfg.scan_layers:
      if self.stop_after_layer is not None:
        raise ValueError(
            "RemBertEncoder.stop_after_layer (sentence embeddings from a "
            "middle layer) needs SCAN_LAYERS = False: a scanned stack runs "
            "all its layers (rembert_t5x.layer_stacking converts the "
            "parameters)")
      self.layers = _layer_stack(cfg, cfg.num_layers, "layers")
      self.pretraining_only_layers = (
          _layer_stack(cfg, extra, "pretraining_only_layers") if extra
          else None)
    else:
      self.layers = _layer_stack(
          cfg, self._truncated_depth(cfg.num_layers + extra), "layers")
      self.pretraining_only_layers = None

  def __call__(
      self,
      input_tokens: Array,
      token_types: Optional[Array] = None,
      segment_ids: Optional[Array] = None,
      positions: Optional[Array] = None,
      *,
      enable_dropout: bool = False,
  ) -> Array:
    """Encodes `[batch, length]` token ids into `[batch, length, emb_dim]`.

    Args:
      input_tokens: `[batch, length]` int token ids.
      token_types: `[batch, length]` token-type (segment A/B) ids; zeros if None.
      segment_ids: `[batch, length]` packing segment ids, 0 for padding;
        tokens attend only within their segment. If None, every non-pad token
        is in segment 1.
      positions: `[batch, length]` position ids (restarting per packed
        segment); `0..length-1` if None.
      enable_dropout: apply dropout (training).

    Returns:
      `[batch, length, emb_dim]` hidden states of the last layer.
    """
    cfg = self.config
    check_length(cfg, input_tokens.shape[-1])
    if token_types is None:
      token_types = jnp.zeros_like(input_tokens)
    if segment_ids is None:
      segment_ids = (input_tokens != cfg.pad_id).astype(jnp.int32)
    if positions is None:
      positions = jnp.broadcast_to(
          jnp.arange(input_tokens.shape[-1], dtype=jnp.int32),
          input_tokens.shape)
    # [batch, length] -> [batch, length, input_embed_dim]
    x = self.embeddings(input_tokens, token_types, positions, enable_dropout)
    x = layers.with_sharding_constraint(
        x, (axes.BATCH, axes.LENGTH, axes.INPUT_EMBED))
    if self.embedding_projection is not None:
      # [batch, length, input_embed_dim] -> [batch, length, emb_dim]
      x = self.embedding_projection(x)
    mask = layers.make_attention_mask(segment_ids)  # [batch, 1, len, len]
    if self.config.scan_layers:
      # [batch, length, emb_dim] -> [batch, length, emb_dim]
      x, _ = self.layers(x, mask, enable_dropout)
      if self.pretraining_only_layers is not None:
        x, _ = self.pretraining_only_layers(x, mask, enable_dropout)
      return x
    for layer in self.layers:
      x = layer(x, mask, enable_dropout)
    return x

  def attend(self, x: Array) -> Array:
    """Tied decoder: `[..., input_embed_dim]` -> `[..., padded_vocab_size]`."""
    return self.embeddings.attend(x)

  # --- Intermediate layers (sentence retrieval) ---------------------------
  # `stop_after_layer=k` (1-based) builds and runs only layers 1..k, so the
  # encoder returns the hidden states after layer k. The parameter names of
  # those layers are unchanged (`layers_0` .. `layers_{k-1}`), so a full
  # checkpoint restores into it and its upper layers are simply not read.

  def _truncated_depth(self, num_layers: int) -> int:
    k = self.stop_after_layer
    if k is None:
      return num_layers
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= num_layers:
      raise ValueError(
          f"RemBertEncoder.stop_after_layer must be an integer in [1, "
          f"{num_layers}] (the encoder has {num_layers} layers), got {k!r}")
    return k


class MlmHead(nn.Module):
  """The output embedding: dense H -> E_out, GELU, LayerNorm, decoder -> vocab.

  In coupled mode the decoder is the transposed word-embedding matrix (passed
  in as `tied_decoder`) plus a bias of its own. With a padded vocabulary the
  logits of the padded rows are set to the most negative number: they drop
  out of the softmax, are never the argmax and pass no gradient back.
  """

  config: RemBertConfig

  @nn.compact
  def __call__(self, x: Array, tied_decoder=None) -> Array:
    cfg = self.config
    # [..., emb_dim] -> [..., output_embed_dim]
    x = _dense(cfg, cfg.output_embed_dim, (axes.EMBED, axes.OUTPUT_EMBED),
               "dense")(x)
    x = layers.gelu(x)
    x = _layer_norm(cfg, axes.OUTPUT_EMBED, "layer_norm")(x)
    if cfg.tie_embeddings:
      bias = layers.param_with_axes(
          "decoder_bias", nn.initializers.zeros, (cfg.padded_vocab_size,),
          cfg.weight_dtype, axes=(axes.VOCAB,))
      # [..., output_embed_dim] -> [..., padded_vocab_size]
      logits = tied_decoder(x) + jnp.asarray(bias, cfg.compute_dtype)
    else:
      # [..., output_embed_dim] -> [..., padded_vocab_size]
      logits = _dense(cfg, cfg.padded_vocab_size,
                      (axes.OUTPUT_EMBED, axes.VOCAB), "decoder",
                      wide_output=True,
                      kernel_init=layers.zero_rows_from(
                          cfg.kernel_init, cfg.vocab_size, axis=1)
                      )(x)
    if cfg.padded_vocab_size != cfg.vocab_size:
      real = jnp.arange(cfg.padded_vocab_size) < cfg.vocab_size
      logits = jnp.where(real, logits, jnp.finfo(logits.dtype).min)
    return logits


class RemBertForMaskedLM(nn.Module):
  """Pre-training network: encoder (with pre-training-only layers) + MLM head."""

  config: RemBertConfig

  def setup(self):
    self.encoder = RemBertEncoder(
        self.config, include_pretraining_only_layers=True)
    self.mlm_head = MlmHead(self.config)

  def __call__(
      self,
      input_tokens: Array,
      token_types: Optional[Array] = None,
      segment_ids: Optional[Array] = None,
      positions: Optional[Array] = None,
      masked_positions: Optional[Array] = None,
      *,
      enable_dropout: bool = False,
  ) -> Array:
    """Returns MLM logits.

    Args:
      input_tokens, token_types, segment_ids, positions: see `RemBertEncoder`.
      masked_positions: optional `[batch, num_predictions]` indices; if given,
        the head runs only at those positions (the loss needs no others), as
        the original BERT pre-training code does.
      enable_dropout: apply dropout.

    Returns:
      `[batch, length, padded_vocab_size]` logits, or `[batch,
      num_predictions, padded_vocab_size]` when `masked_positions` is given
      (padded rows, if any, hold the most negative number).
    """
    x = self.encoder(input_tokens, token_types, segment_ids, positions,
                     enable_dropout=enable_dropout)
    if masked_positions is not None:
      # [batch, length, emb_dim] -> [batch, num_predictions, emb_dim]
      x = jnp.take_along_axis(x, masked_positions[..., None], axis=1)
    tied = self.encoder.attend if self.config.tie_embeddings else None
    logits = self.mlm_head(x, tied_decoder=tied)
    return layers.with_sharding_constraint(
        logits, (axes.BATCH, axes.LENGTH, axes.VOCAB))


class RemBertForSequenceClassification(nn.Module):
  """Pair/sentence classification: pooler ([CLS]) -> dropout -> dense."""

  config: RemBertConfig
  num_classes: int

  @nn.compact
  def __call__(self, input_tokens, token_types=None, segment_ids=None,
               positions=None, cls_positions=None, *,
               enable_dropout: bool = False) -> Array:
    """Class logits of each row's [CLS], or of each packed example's.

    Args:
      input_tokens, token_types, segment_ids, positions: see
        `RemBertEncoder`.
      cls_positions: optional `[batch, slots]` positions of the [CLS] of
        each example packed into a row (`runner.finetune_packing`).

    Returns:
      `[batch, num_classes]` logits, or `[batch, slots, num_classes]` with
      `cls_positions`.
    """
    cfg = self.config
    x = RemBertEncoder(cfg, name="encoder")(
        input_tokens, token_types, segment_ids, positions,
        enable_dropout=enable_dropout)
    if cls_positions is None:
      cls = x[:, 0]  # [batch, length, emb_dim] -> [batch, emb_dim]
    else:
      # [batch, length, emb_dim] -> [batch, slots, emb_dim]
      cls = jnp.take_along_axis(x, cls_positions[..., None], axis=1)
    pooled = jnp.tanh(_dense(cfg, cfg.emb_dim, (axes.EMBED, axes.MLP),
                             "pooler")(cls))
    pooled = nn.Dropout(cfg.classifier_dropout_rate)(
        pooled, deterministic=not enable_dropout)
    # [..., emb_dim] -> [..., num_classes]
    return _dense(cfg, self.num_classes, (axes.MLP, axes.CLASSES),
                  "classifier")(pooled)


class RemBertForTokenClassification(nn.Module):
  """Token tagging (NER, POS): dropout -> dense on every token."""

  config: RemBertConfig
  num_classes: int

  @nn.compact
  def __call__(self, input_tokens, token_types=None, segment_ids=None,
               positions=None, *, enable_dropout: bool = False) -> Array:
    cfg = self.config
    x = RemBertEncoder(cfg, name="encoder")(
        input_tokens, token_types, segment_ids, positions,
        enable_dropout=enable_dropout)
    x = nn.Dropout(cfg.classifier_dropout_rate)(
        x, deterministic=not enable_dropout)
    # [batch, length, emb_dim] -> [batch, length, num_classes]
    return _dense(cfg, self.num_classes, (axes.EMBED, axes.CLASSES),
                  "classifier")(x)


class RemBertForQuestionAnswering(nn.Module):
  """Extractive QA: dense H -> 2 giving start and end logits per token."""

  config: RemBertConfig

  @nn.compact
  def __call__(self, input_tokens, token_types=None, segment_ids=None,
               positions=None, *, enable_dropout: bool = False):
    cfg = self.config
    x = RemBertEncoder(cfg, name="encoder")(
        input_tokens, token_types, segment_ids, positions,
        enable_dropout=enable_dropout)
    # [batch, length, emb_dim] -> [batch, length, 2]
    logits = _dense(cfg, 2, (axes.EMBED, axes.CLASSES), "qa_outputs")(x)
    # -> 2 x [batch, length]
    return logits[..., 0], logits[..., 1]


# --- Sentence retrieval (XTREME BUCC, Tatoeba) -----------------------------


def xtreme_retrieval_layer(num_layers: int) -> int:
  """The layer XTREME pools for retrieval: L/2 + 2 (1-based), at most L.

  XTREME's scripts pool hidden state index 7 of the 12 layer outputs
  (layer 8) for mBERT/XLM-R base and index 13 of 24 (layer 14) for XLM-R
  large (`scripts/run_tatoeba.sh`), i.e. L/2 + 2; for RemBERT's 32 layers
  that is layer 18. Tiny test models (L < 4) use their last layer.
  """
  return min(num_layers, num_layers // 2 + 2)


class RemBertForRetrieval(nn.Module):
  """Sentence embeddings: the pooled hidden states of one encoder layer.

  XTREME's protocol (`third_party/evaluate_retrieval.py`): run the
  pre-trained encoder without any fine-tuning, take the hidden states after
  a middle layer and average them over every real token, [CLS] and [SEP]
  included (its default `pool_skip_special_token=False`); similarity is the
  cosine of these vectors.

  Attributes:
    config: network sizes.
    layer: 1-based layer whose output is pooled; None picks XTREME's choice,
      `xtreme_retrieval_layer(config.num_layers)` (18 for RemBERT).
    pooling: "mean" (XTREME's default) or "cls" (the [CLS] hidden state,
      what XTREME's `run_bucc2018.sh` passes with `--pool_type cls`).
  """

  config: RemBertConfig
  layer: Optional[int] = None
  pooling: str = "mean"

  def pooled_layer(self) -> int:
    """The 1-based layer this module pools; checks `layer` and `pooling`."""
    cfg = self.config
    if self.pooling not in ("mean", "cls"):
      raise ValueError(f"RemBertForRetrieval.pooling must be 'mean' or "
                       f"'cls', got {self.pooling!r}")
    layer = (self.layer if self.layer is not None
             else xtreme_retrieval_layer(cfg.num_layers))
    if (isinstance(layer, bool) or not isinstance(layer, int)
        or not 1 <= layer <= cfg.num_layers):
      raise ValueError(
          f"RemBertForRetrieval.layer must be an integer in [1, "
          f"{cfg.num_layers}] (the model's layers), got {layer!r}")
    return layer

  @nn.compact
  def __call__(self, input_tokens, token_types=None, segment_ids=None,
               positions=None, *, enable_dropout: bool = False) -> Array:
    cfg = self.config
    x = RemBertEncoder(cfg, stop_after_layer=self.pooled_layer(),
                       name="encoder")(
        input_tokens, token_types, segment_ids, positions,
        enable_dropout=enable_dropout)
    x = x.astype(jnp.float32)
    if self.pooling == "cls":
      # [batch, length, emb_dim] -> [batch, emb_dim]
      return x[:, 0]
    if segment_ids is None:
      segment_ids = (input_tokens != cfg.pad_id).astype(jnp.int32)
    real = (segment_ids > 0).astype(jnp.float32)[..., None]  # [b, len, 1]
    # [batch, length, emb_dim] -> [batch, emb_dim]
    return jnp.sum(x * real, axis=1) / jnp.maximum(jnp.sum(real, axis=1), 1.0)
