"""T5X model adapters for RemBERT: one class per objective.

Each class implements T5X's `BaseModel` interface (`FEATURE_CONVERTER_CLS`,
`optimizer_def`, `get_initial_variables`, `loss_fn`, `eval_fn`,
`predict_batch`, `predict_batch_with_aux`, `score_batch`) without importing
t5x, so the same objects serve `t5x.train` and our local runner. T5X checks no
subclass relation: it only calls these methods.

Model features are those of `docs/DESIGN.md`. Losses are means over the loss
weights (BERT's normalisation), taken over the whole batch even when a
trainer splits it into microbatches (`FULL_BATCH_LOSS_WEIGHT`); metrics are
`clu.metrics` objects, as T5X expects.

Predictions (what `predict_batch` returns; SeqIO decodes them with the
task's `targets` vocabulary, a pass-through one for ids):
  * MLM: `[batch, length]` argmax token ids.
  * pair classification: `[batch, 1]` class ids.
  * token tagging: `[batch, length]` tag ids per sub-token.
  * extractive QA: `[batch, 2, length]` start (row 0) and end (row 1)
    logits per window; `rembert_t5x.data.qa` post-processing does the n-best
    search over windows and maps spans back to the context. The aux output
    carries the best in-window span and its score.
  * retrieval: `[batch, emb_dim]` float32 sentence embeddings (a pooled
    intermediate layer); no loss.
"""

import functools
from typing import Any, Callable, Mapping, Optional

from clu import metrics as clu_metrics
from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rembert_t5x.common import errors
from rembert_t5x.common import packed_features
from rembert_t5x import layer_stacking
from rembert_t5x import network

Array = jax.Array
Batch = Mapping[str, Array]
MetricsMap = dict[str, clu_metrics.Metric]

# Inputs every network call takes from the batch.
_INPUT_KEYS = ("input_tokens", "token_types", "segment_ids", "positions")

# Microbatching (T5X's `Trainer.num_microbatches`, our `grad_accum_steps`)
# computes the gradient of each microbatch and *sums* them
# (t5x/trainer.py `accumulate_grads_microbatched`). A loss that is a mean
# over its own microbatch then gives k times the gradient, and for tagging
# (loss weights that differ between microbatches) not even a multiple of
# it. So a trainer first writes the total loss weight of the whole batch
# into every row of this feature (`with_full_batch_loss_weight`), and
# `loss_fn` divides each row's weighted loss by it: the microbatch losses
# then add up to the full batch's mean, and so do their gradients. Without
# the feature (evaluation, a plain call) the batch normalises itself.
FULL_BATCH_LOSS_WEIGHT = "full_batch_loss_weight"


def _weighted_mean_metric(values: Array, weights: Array) -> clu_metrics.Average:
  return clu_metrics.Average(
      total=jnp.sum(values * weights).astype(jnp.float32),
      count=jnp.sum(weights).astype(jnp.float32))


def _normalized_loss(row_losses: Array, row_weights: Array,
                     batch: Batch) -> Array:
  """Sum of `row_losses` over the total loss weight of the full batch.

  Args:
    row_losses: `[batch]` weighted loss summed over each row.
    row_weights: `[batch]` loss weight of each row (used without the
      `FULL_BATCH_LOSS_WEIGHT` feature).
    batch: the (micro)batch.

  Returns:
    A scalar: this batch's share of the full batch's mean loss.
  """
  if FULL_BATCH_LOSS_WEIGHT in batch:
    total = batch[FULL_BATCH_LOSS_WEIGHT].astype(jnp.float32)  # [batch]
  else:
    total = jnp.sum(row_weights)
  return jnp.sum(row_losses / jnp.maximum(total, 1e-8))


def _loss_metric(row_losses: Array, row_weights: Array) -> clu_metrics.Average:
  """The mean loss as a metric: exact when microbatch metrics are merged."""
  return clu_metrics.Average(total=jnp.sum(row_losses).astype(jnp.float32),
                             count=jnp.sum(row_weights).astype(jnp.float32))


def with_full_batch_loss_weight(model: "RemBertBaseModel",
                                batch: Batch) -> dict[str, Array]:
  """`batch` plus `FULL_BATCH_LOSS_WEIGHT`; call it before splitting a batch.

  Args:
    model: the model whose `row_loss_weights` define the normaliser.
    batch: the whole batch of one optimizer step.

  Returns:
    A dict with every feature of `batch` and `[batch]` float32
    `FULL_BATCH_LOSS_WEIGHT`, the same total on every row.
  """
  row_weights = model.row_loss_weights(batch).astype(jnp.float32)  # [batch]
  total = jnp.sum(row_weights)
  return {**batch, FULL_BATCH_LOSS_WEIGHT: jnp.broadcast_to(
      total, row_weights.shape)}


def _cross_entropy(logits: Array, labels: Array) -> Array:
  """Per-position softmax cross entropy in float32: logsumexp - target logit.

  The target logit is picked with a comparison against the class index
  rather than a gather, so its gradient is element-wise (fused with the
  softmax) instead of a scatter into a `[..., vocab]` array.
  """
  logits = logits.astype(jnp.float32)
  return jax.nn.logsumexp(logits, axis=-1) - _target_logit(logits, labels)


def _target_logit(logits: Array, labels: Array) -> Array:
  """`logits[..., labels]` as a masked sum (element-wise gradient)."""
  hit = jnp.arange(logits.shape[-1]) == labels[..., None]
  return jnp.sum(jnp.where(hit, logits.astype(jnp.float32), 0.0), axis=-1)


class _ConverterClass:
  """A model's `FEATURE_CONVERTER_CLS`, imported when first read.

  T5X reads the attribute (`model.FEATURE_CONVERTER_CLS`) to build the
  model's input pipeline; the converters need SeqIO and TensorFlow, which
  the network, the losses and a bare accelerator machine do not, so the
  models module imports them only then.
  """

  def __init__(self, name: str):
    self.name = name

  def __get__(self, obj, objtype=None):
    # Deferred: SeqIO and TensorFlow (seconds), needed only for input
    # pipelines.
    from rembert_t5x import feature_converters  # pylint: disable=g-import-not-at-top
    return getattr(feature_converters, self.name)


class RemBertBaseModel:
  """What every RemBERT objective shares: init, eval, predict plumbing.

  Attributes:
    module: the Flax network.
    optimizer_def: the optimizer T5X uses (a `t5x.optimizers` definition);
      the local runner builds its own optax optimizer and passes None.
    input_vocabulary / output_vocabulary: checked by `t5x.infer` against the
      task's vocabularies.
  """

  FEATURE_CONVERTER_CLS: Callable[..., Any]

  def __init__(
      self,
      module: nn.Module,
      optimizer_def: Any = None,
      input_vocabulary: Any = None,
      output_vocabulary: Any = None,
  ):
    self.module = module
    self.optimizer_def = optimizer_def
    self.input_vocabulary = input_vocabulary
    self.output_vocabulary = output_vocabulary

  @property
  def config(self) -> network.RemBertConfig:
    return self.module.config

  def _inputs(self, batch: Batch) -> dict[str, Array]:
    return {k: batch[k] for k in _INPUT_KEYS if k in batch}

  def _apply(self, params, batch: Batch, dropout_rng=None, **kwargs):
    rngs = {"dropout": dropout_rng} if dropout_rng is not None else None
    return self.module.apply(
        {"params": params}, **self._inputs(batch), **kwargs,
        enable_dropout=dropout_rng is not None, rngs=rngs)

  def get_initial_variables(
      self,
      rng: Array,
      input_shapes: Mapping[str, Any],
      input_types: Optional[Mapping[str, Any]] = None,
  ):
    """Initialises from the shapes of the model features (T5X's signature)."""
    input_types = input_types or {}
    shape = tuple(input_shapes["input_tokens"])
    inputs = {
        k: jnp.ones(shape, input_types.get(k, jnp.int32))
        for k in _INPUT_KEYS if k in input_shapes or k == "input_tokens"
    }
    # One compiled program: run eagerly, every initializer and every layer
    # of the dummy forward pass compiles on its own (3.5 s for the tests'
    # tiny model on a CPU, 0.4 s jitted). Inside T5X's own jit it is inlined.
    init = jax.jit(functools.partial(self.module.init, enable_dropout=False))
    return init({"params": rng, "dropout": jax.random.fold_in(rng, 1)},
                **inputs)

  def row_loss_weights(self, batch: Batch) -> Array:
    """`[batch]` loss weight of each row: what the mean loss divides by."""
    raise NotImplementedError(
        f"{type(self).__name__} defines no row_loss_weights, so its loss "
        "cannot be normalised over a microbatched batch")

  def eval_fn(self, params, batch: Batch):
    return self.loss_fn(params, batch, dropout_rng=None)

  def predict_batch(self, params, batch: Batch, rng=None) -> Array:
    return self.predict_batch_with_aux(params, batch, rng=rng)[0]


class RemBertMLMModel(RemBertBaseModel):
  """Masked-language-model pre-training.

  Attributes:
    max_predictions_per_seq: if set, the MLM head (the output embedding)
      runs only at up to this many weighted positions per row, as the
      original BERT code does; the loss is the same as long as no row has more
      weighted positions (the metric `mlm/dropped_predictions` counts any
      that were not scored, so an overflow is never silent).
  """

  FEATURE_CONVERTER_CLS = _ConverterClass("MLMFeatureConverter")

  def __init__(self, module: network.RemBertForMaskedLM, optimizer_def=None,
               input_vocabulary=None, output_vocabulary=None,
               max_predictions_per_seq: Optional[int] = None):
    super().__init__(module, optimizer_def, input_vocabulary, output_vocabulary)
    self.max_predictions_per_seq = max_predictions_per_seq

  def _picked_weights(self, batch):
    """The loss weights the head scores and their positions (or None: all)."""
    weights = batch["weights"].astype(jnp.float32)
    if self.max_predictions_per_seq is None:
      return weights, None
    # Pick the weighted positions first (top_k keeps them in a fixed-size,
    # static-shaped set), then run the head only there.
    k = min(self.max_predictions_per_seq, weights.shape[-1])
    return jax.lax.top_k(weights, k)

  def row_loss_weights(self, batch: Batch) -> Array:
    return jnp.sum(self._picked_weights(batch)[0], axis=-1)

  def _logits_targets_weights(self, params, batch, dropout_rng):
    targets = batch["targets"]
    weights = batch["weights"].astype(jnp.float32)
    picked_weights, positions = self._picked_weights(batch)
    if positions is None:
      logits = self._apply(params, batch, dropout_rng)
      return logits, targets, weights, jnp.zeros((), jnp.float32)
    logits = self._apply(params, batch, dropout_rng, masked_positions=positions)
    picked_targets = jnp.take_along_axis(targets, positions, axis=-1)
    dropped = jnp.sum(weights) - jnp.sum(picked_weights)
    return logits, picked_targets, picked_weights, dropped

  def loss_fn(self, params, batch: Batch, dropout_rng=None):
    logits, targets, weights, dropped = self._logits_targets_weights(
        params, batch, dropout_rng)
    ce = _cross_entropy(logits, targets)
    row_losses = jnp.sum(ce * weights, axis=-1)  # [batch]
    row_weights = jnp.sum(weights, axis=-1)  # [batch]
    loss = _normalized_loss(row_losses, row_weights, batch)
    # Correct where the target logit is the largest: the same as argmax ==
    # target up to exact ties, and it reuses the max and target logit the
    # loss already computed instead of another pass over [.., vocab].
    correct = (_target_logit(logits, targets)
               >= jnp.max(logits.astype(jnp.float32), -1)).astype(jnp.float32)
    metrics = {
        "loss": _loss_metric(row_losses, row_weights),
        "mlm/loss_per_prediction": _weighted_mean_metric(ce, weights),
        "mlm/accuracy": _weighted_mean_metric(correct, weights),
        "mlm/num_predictions": clu_metrics.Average(
            total=jnp.sum(weights), count=jnp.float32(1.0)),
        "mlm/dropped_predictions": clu_metrics.Average(
            total=dropped, count=jnp.float32(1.0)),
        "num_tokens": clu_metrics.Average(
            total=jnp.sum(batch["segment_ids"] > 0).astype(jnp.float32)
            if "segment_ids" in batch else jnp.float32(batch["input_tokens"].size),
            count=jnp.float32(1.0)),
    }
    return loss, metrics

  def predict_batch_with_aux(self, params, batch: Batch, rng=None):
    logits = self._apply(params, batch)
    return jnp.argmax(logits, -1), {"scores": jnp.max(
        jax.nn.log_softmax(logits.astype(jnp.float32)), -1)}

  def score_batch(self, params, batch: Batch, return_intermediates=False):
    """Sum of log-likelihoods of the targets at the weighted positions."""
    logits = self._apply(params, batch)
    ll = -_cross_entropy(logits, batch["targets"])
    scores = jnp.sum(ll * batch["weights"], axis=-1)
    if return_intermediates:
      return scores, {"logits": logits}
    return scores


def _slots(batch: Batch, *names: str) -> tuple[Array, ...]:
  """Per-example features as `[batch, slots]`, and their `[batch, slots]`
  weights.

  A packed batch (`runner.finetune_packing`) has `[rows, slots]` features
  and `slot_weights` (0 for an empty slot); an unpacked one has `[batch]`
  (or `[batch, 1]`): one slot per row, weight 1.
  """
  rows = batch["input_tokens"].shape[0]
  values = tuple(batch[n].reshape(rows, -1) for n in names)
  weights = batch.get(SLOT_WEIGHTS)
  if weights is None:
    weights = jnp.ones(values[0].shape, jnp.float32)
  return (*values, weights.astype(jnp.float32))


# Features of a packed fine-tuning batch (`runner.finetune_packing`, or a
# fine-tuning converter with pack=True).
SLOT_OFFSETS = packed_features.SLOT_OFFSETS
SLOT_WEIGHTS = packed_features.SLOT_WEIGHTS


class RemBertPairClassificationModel(RemBertBaseModel):
  """Sentence-pair classification (XNLI, PAWS-X) from the pooled [CLS].

  Packed batches pool the [CLS] of every example of a row (`slot_offsets`)
  and weigh empty slots 0.
  """

  FEATURE_CONVERTER_CLS = _ConverterClass("PairClassificationFeatureConverter")

  def _logits(self, params, batch: Batch, dropout_rng=None) -> Array:
    """`[batch, slots, classes]` (one slot per row when unpacked)."""
    offsets = batch.get(SLOT_OFFSETS)
    logits = self._apply(params, batch, dropout_rng, cls_positions=offsets)
    return logits if offsets is not None else logits[:, None]

  def loss_fn(self, params, batch: Batch, dropout_rng=None):
    logits = self._logits(params, batch, dropout_rng)
    labels, weights = _slots(batch, "label")  # [batch, slots]
    ce = _cross_entropy(logits, labels) * weights
    row_losses = jnp.sum(ce, axis=-1)  # [batch]
    row_weights = jnp.sum(weights, axis=-1)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    loss = _normalized_loss(row_losses, row_weights, batch)
    return loss, {
        "loss": _loss_metric(row_losses, row_weights),
        "accuracy": _weighted_mean_metric(correct, weights),
    }

  def row_loss_weights(self, batch: Batch) -> Array:
    """Examples per row (1 unpacked): the loss is the mean over examples."""
    return jnp.sum(_slots(batch, "label")[-1], axis=-1)

  def predict_batch_with_aux(self, params, batch: Batch, rng=None):
    logits = self._apply(params, batch)
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
    return jnp.argmax(logits, -1)[:, None], {"log_probs": log_probs}

  def score_batch(self, params, batch: Batch, return_intermediates=False):
    logits = self._apply(params, batch)
    scores = -_cross_entropy(logits, batch["label"].reshape(-1))
    return (scores, {"logits": logits}) if return_intermediates else scores


class RemBertTaggingModel(RemBertBaseModel):
  """Token tagging (NER, POS): the loss on the first sub-token of each word."""

  FEATURE_CONVERTER_CLS = _ConverterClass("TaggingFeatureConverter")

  def loss_fn(self, params, batch: Batch, dropout_rng=None):
    logits = self._apply(params, batch, dropout_rng)  # [batch, length, tags]
    weights = batch["weights"].astype(jnp.float32)
    ce = _cross_entropy(logits, batch["targets"])
    row_losses = jnp.sum(ce * weights, axis=-1)  # [batch]
    row_weights = self.row_loss_weights(batch)
    loss = _normalized_loss(row_losses, row_weights, batch)
    correct = (jnp.argmax(logits, -1) == batch["targets"]).astype(jnp.float32)
    return loss, {
        "loss": _loss_metric(row_losses, row_weights),
        "token_accuracy": _weighted_mean_metric(correct, weights),
    }

  def row_loss_weights(self, batch: Batch) -> Array:
    """Labelled sub-tokens per row (the first sub-token of each word)."""
    return jnp.sum(batch["weights"].astype(jnp.float32), axis=-1)

  def predict_batch_with_aux(self, params, batch: Batch, rng=None):
    logits = self._apply(params, batch)
    return jnp.argmax(logits, -1), {}

  def score_batch(self, params, batch: Batch, return_intermediates=False):
    logits = self._apply(params, batch)
    ll = -_cross_entropy(logits, batch["targets"])
    scores = jnp.sum(ll * batch["weights"], axis=-1)
    return (scores, {"logits": logits}) if return_intermediates else scores


class RemBertRetrievalModel(RemBertBaseModel):
  """Sentence embeddings for retrieval (XTREME BUCC, Tatoeba).

  XTREME scores retrieval with the encoder as it is, without training on the
  task: the network (`network.RemBertForRetrieval`) pools the hidden states
  of one layer, and the task's metric compares the embeddings by cosine
  similarity. `predict_batch` returns the `[batch, emb_dim]` float32
  embeddings; SeqIO passes them through the task's pass-through `targets`
  vocabulary unchanged to the retrieval metrics. There is no loss.
  """

  FEATURE_CONVERTER_CLS = _ConverterClass("RetrievalFeatureConverter")

  def __init__(self, module: network.RemBertForRetrieval, optimizer_def=None,
               input_vocabulary=None, output_vocabulary=None):
    super().__init__(module, optimizer_def, input_vocabulary, output_vocabulary)
    try:  # a gin typo in the layer or pooling is reported before any work
      module.pooled_layer()
    except ValueError as e:
      raise errors.UserError(str(e)) from e

  def loss_fn(self, params, batch: Batch, dropout_rng=None):
    # A user error (one line from the local runner), not a missing feature.
    raise errors.UserError(
        "RemBertRetrievalModel has no training loss: XTREME's retrieval tasks "
        "(BUCC, Tatoeba) embed sentences with the encoder as it is. Evaluate "
        "it with `t5x.eval` (gin_configs/runs/eval_tatoeba.gin, "
        "eval_bucc.gin) or `python -m rembert_t5x.runner.eval`; train with another "
        "model class.")

  def row_loss_weights(self, batch: Batch) -> Array:
    # Trainers ask for it before the loss: the same user error.
    return self.loss_fn(None, batch)

  def predict_batch_with_aux(self, params, batch: Batch, rng=None):
    return self._apply(params, batch), {}

  def score_batch(self, params, batch: Batch, return_intermediates=False):
    """No likelihood to score: returns the `[batch, emb_dim]` embeddings."""
    embeddings = self._apply(params, batch)
    return (embeddings, {}) if return_intermediates else embeddings


def best_spans(start_logits: Array, end_logits: Array, context_mask: Array,
               max_answer_length: int) -> tuple[Array, Array]:
  """Best (start, end) with start <= end < start + max_answer_length.

  Args:
    start_logits, end_logits: `[batch, length]`.
    context_mask: `[batch, length]` bool, True where a span may start or end
      (context tokens).
    max_answer_length: longest answer in tokens.

  Returns:
    `[batch, 2]` int32 (start, end) and `[batch]` float32 scores
    (start logit + end logit); rows with no valid span get (0, 0).
  """
  length = start_logits.shape[-1]
  idx = jnp.arange(length)
  valid = ((idx[None, :] >= idx[:, None])
           & (idx[None, :] < idx[:, None] + max_answer_length))  # [start, end]
  valid = (valid[None] & context_mask[:, :, None] & context_mask[:, None, :])
  scores = (start_logits.astype(jnp.float32)[:, :, None]
            + end_logits.astype(jnp.float32)[:, None, :])
  scores = jnp.where(valid, scores, -jnp.inf)
  flat = jnp.argmax(scores.reshape(scores.shape[0], -1), axis=-1)
  start, end = flat // length, flat % length
  best = jnp.take_along_axis(scores.reshape(scores.shape[0], -1),
                             flat[:, None], axis=-1)[:, 0]
  has_span = jnp.isfinite(best)
  spans = jnp.stack([start, end], -1).astype(jnp.int32)
  spans = jnp.where(has_span[:, None], spans, 0)
  return spans, jnp.where(has_span, best, -jnp.inf)


class RemBertQAModel(RemBertBaseModel):
  """Extractive QA: start/end logits; loss is the mean of the two CEs."""

  FEATURE_CONVERTER_CLS = _ConverterClass("QAFeatureConverter")

  def __init__(self, module, optimizer_def=None, input_vocabulary=None,
               output_vocabulary=None, max_answer_length: int = 30,
               span_softmax: str = "own_tokens"):
    """Creates the adapter.

    Args:
      module, optimizer_def, input_vocabulary, output_vocabulary: as
        `RemBertBaseModel`.
      max_answer_length: longest predicted answer, in tokens.
      span_softmax: what the start/end softmax of the loss runs over:
        "own_tokens" (default), the window's own tokens; "row", every
        position of the row, padding included, as BERT's and Hugging Face's
        (unpacked batches only; docs/FIDELITY.md compares the two).

    Raises:
      errors.UserError: an unknown `span_softmax`.
    """
    super().__init__(module, optimizer_def, input_vocabulary, output_vocabulary)
    self.max_answer_length = max_answer_length
    if span_softmax not in ("own_tokens", "row"):
      raise errors.UserError("RemBertQAModel.span_softmax must be "
                             f"'own_tokens' or 'row', got {span_softmax!r}")
    self.span_softmax = span_softmax

  def loss_fn(self, params, batch: Batch, dropout_rng=None):
    """Mean over windows of the start and end cross entropies.

    Each window's softmax runs over its own tokens only (`segment_ids`
    equal to its slot), not over the padding of its row nor over the other
    windows packed beside it: a window's loss depends on its tokens alone,
    padded or packed. BERT's and Hugging Face's softmax also covers the
    row's padding (docs/FIDELITY.md).
    """
    start_logits, end_logits = self._apply(params, batch, dropout_rng)
    start, end, weights = _slots(batch, "start_positions", "end_positions")
    slots = weights.shape[-1]
    segment_ids = batch.get("segment_ids")
    if segment_ids is None:
      segment_ids = (batch["input_tokens"] != self.config.pad_id).astype(
          jnp.int32)
    # [batch, length] -> [batch, slots, length]: slot s sees segment s + 1.
    own = (segment_ids[:, None, :]
           == jnp.arange(1, slots + 1)[None, :, None])
    if self.span_softmax == "row":
      if SLOT_WEIGHTS in batch:
        raise errors.UserError(
            "RemBertQAModel.span_softmax='row' puts the row's padding into "
            "each window's softmax: it has no meaning for packed rows (train "
            "with pack=False)")
      own = jnp.ones_like(own)

    def per_slot(logits):
      # A large finite negative: an empty slot (no token) stays finite.
      return jnp.where(own, logits.astype(jnp.float32)[:, None, :], -1e9)

    start_logits, end_logits = per_slot(start_logits), per_slot(end_logits)
    ce = 0.5 * (_cross_entropy(start_logits, start)
                + _cross_entropy(end_logits, end)) * weights
    row_losses = jnp.sum(ce, axis=-1)  # [batch]
    row_weights = jnp.sum(weights, axis=-1)
    loss = _normalized_loss(row_losses, row_weights, batch)
    both = ((jnp.argmax(start_logits, -1) == start)
            & (jnp.argmax(end_logits, -1) == end)).astype(jnp.float32)
    return loss, {
        "loss": _loss_metric(row_losses, row_weights),
        "span_accuracy": _weighted_mean_metric(both, weights),
    }

  def row_loss_weights(self, batch: Batch) -> Array:
    """Windows per row (1 unpacked): the loss is the mean over windows."""
    return jnp.sum(_slots(batch, "start_positions")[-1], axis=-1)

  def predict_batch_with_aux(self, params, batch: Batch, rng=None):
    start_logits, end_logits = self._apply(params, batch)
    # Spans may only lie in the context: token type 1, not padding, and not
    # the final [SEP] (the last real token of the row).
    real = batch["segment_ids"] > 0 if "segment_ids" in batch else (
        batch["input_tokens"] != self.config.pad_id)
    last = jnp.sum(real, axis=-1) - 1
    not_last = jnp.arange(real.shape[-1])[None, :] != last[:, None]
    context = (batch["token_types"] == 1) & real & not_last
    spans, scores = best_spans(start_logits, end_logits, context,
                               self.max_answer_length)
    logits = jnp.stack([start_logits, end_logits], axis=1).astype(jnp.float32)
    return logits, {"best_span": spans, "best_score": scores}

  def score_batch(self, params, batch: Batch, return_intermediates=False):
    start_logits, end_logits = self._apply(params, batch)
    scores = -(_cross_entropy(start_logits, batch["start_positions"].reshape(-1))
               + _cross_entropy(end_logits, batch["end_positions"].reshape(-1)))
    if return_intermediates:
      return scores, {"start_logits": start_logits, "end_logits": end_logits}
    return scores


# The fine-tuning heads: the local runner packs their steps on the host.
FINETUNING_MODELS = (RemBertPairClassificationModel, RemBertTaggingModel,
                     RemBertQAModel)


def pretrained_encoder(pretrained: Mapping[str, Any], num_layers: int
                       ) -> dict[str, Any]:
  """The encoder of `RemBertForMaskedLM` params, per layer (unscanned), with
  its embeddings, projection and layers below `num_layers` only."""
  # Per-layer names, where "drop layers >= num_layers" is by name.
  encoder = layer_stacking.unstack_layers(pretrained)["encoder"]
  return {k: v for k, v in encoder.items()
          if not (k.startswith("layers_") and int(k[7:]) >= num_layers)}


def finetuning_params_from_pretraining(
    pretrained: Mapping[str, Any],
    initial: Mapping[str, Any],
    num_layers: int,
) -> dict[str, Any]:
  """Fine-tuning parameters: the pre-trained encoder, fresh task heads.

  Drops what the paper discards after pre-training — the MLM head (output
  embedding) and the layers at or above `num_layers` (pre-training only) —
  and keeps the freshly initialised task head from `initial`. Either tree
  may have scanned (stacked) layers (`RemBertConfig.scan_layers`): the
  pre-trained layers are brought to `initial`'s layout
  (`layer_stacking`), so a scanned pre-training run can initialise an
  unscanned fine-tuning run and vice versa.

  Args:
    pretrained: params of a `RemBertForMaskedLM`.
    initial: freshly initialised params of a fine-tuning network.
    num_layers: layers kept for fine-tuning.

  Returns:
    `initial` with its `encoder` subtree replaced by the pre-trained one.

  Raises:
    ValueError: naming the parameter, if the pre-trained encoder does not
      have the fine-tuning network's shapes (another architecture).
  """
  if "encoder" not in pretrained:
    raise ValueError("pre-trained parameters have no 'encoder' subtree; "
                     f"top-level keys are {sorted(pretrained)}")
  encoder = pretrained_encoder(pretrained, num_layers)
  if layer_stacking.is_scanned(initial):
    encoder = layer_stacking.stack_layers({"encoder": encoder},
                                          num_layers)["encoder"]
  flat_new = traverse_util.flatten_dict(encoder, sep="/")
  flat_init = traverse_util.flatten_dict(initial["encoder"], sep="/")
  if set(flat_new) != set(flat_init):
    missing = sorted(set(flat_init) - set(flat_new))
    extra = sorted(set(flat_new) - set(flat_init))
    raise ValueError("pre-trained encoder does not match the fine-tuning "
                     f"network: missing {missing[:3]}, unexpected {extra[:3]}")
  for path, value in flat_init.items():
    if tuple(np.shape(flat_new[path])) != tuple(np.shape(value)):
      raise ValueError(
          f"pre-trained parameter encoder/{path} has shape "
          f"{tuple(np.shape(flat_new[path]))}, the fine-tuning network "
          f"expects {tuple(np.shape(value))}")
  out = dict(initial)
  out["encoder"] = encoder
  return out


# T5X's RestoreCheckpointConfig.assignment_map for fine-tuning from a
# pre-training checkpoint. T5X matches the patterns against the *new* train
# state's keys: the fine-tuning network has no MLM head and no
# pre-training-only layers, so those are never read; the optimizer state
# (and step) is not restored, so fine-tuning starts at step 0 with fresh
# moments; task heads start from scratch with `fallback_to_scratch=True`.
FINETUNE_ASSIGNMENT_MAP = ((r"state/.*", None),)


def make_module(kind: str, config: network.RemBertConfig,
                num_classes: Optional[int] = None) -> nn.Module:
  """The network for an objective: 'mlm', 'pair', 'tagging', 'qa' or
  'retrieval' (XTREME's pooled layer, `network.xtreme_retrieval_layer`)."""
  if kind == "mlm":
    return network.RemBertForMaskedLM(config)
  if kind == "pair":
    return network.RemBertForSequenceClassification(config, num_classes)
  if kind == "tagging":
    return network.RemBertForTokenClassification(config, num_classes)
  if kind == "qa":
    return network.RemBertForQuestionAnswering(config)
  if kind == "retrieval":
    return network.RemBertForRetrieval(config)
  raise ValueError(f"unknown objective {kind!r}: expected mlm, pair, tagging, "
                   "qa or retrieval")


def make_model(kind: str, config: network.RemBertConfig,
               num_classes: Optional[int] = None,
               **qa_options: Any) -> RemBertBaseModel:
  """The fine-tuning model of an objective ('pair', 'tagging' or 'qa') over
  `make_module`'s network; `qa_options` go to `RemBertQAModel`."""
  module = make_module(kind, config, num_classes)
  if kind == "qa":
    return RemBertQAModel(module, **qa_options)
  return {"pair": RemBertPairClassificationModel,
          "tagging": RemBertTaggingModel}[kind](module)
