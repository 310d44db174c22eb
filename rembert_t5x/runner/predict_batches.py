"""Prediction batches for evaluation: length-sorted, each cut to its bucket.

seqio's `Evaluator` hands a predict function each task's enumerated
model-feature dataset and sorts what comes back by index. `make_predict_fn`
reads the examples, batches them longest first and cuts every batch's token
features to its longest example rounded up to a power of two (few compiled
shapes), then pads the predictions back to the full-length layout: the same
predictions at every example's tokens as full-length batches, for a fraction
of the compute (real sentences fill 14-27% of a 128-token row).
"""

import weakref
from typing import Mapping

import jax
import numpy as np

# The datasets below are seqio's `tf.data.Dataset`s; this module does not
# import TensorFlow itself, so that `jitted_predict` and `bucket_length`
# (the corpus embedder's) run on a machine with only JAX.


# A model's jitted predict function and the shapes of its full-length
# predictions, kept per model object: checkpoint selection evaluates several
# checkpoints of one model, which must not recompile.
_PREDICTORS = weakref.WeakKeyDictionary()

# The shortest length a length-sorted batch is cut to; then powers of two up
# to the full length: ceil(log2(length / 16)) + 1 shapes to compile at most
# (4 at 128 tokens, 6 at 384; multiples of 16 would compile 8 and 24).
MIN_BUCKET_LENGTH = 16

# What length-sorted predictions hold past the length their batch was cut
# to (before it, past the example, the model's outputs on the cut row's
# padding); the full-length path has its outputs on padding in both. No
# postprocessor reads past an example's tokens: tagging reads one tag per
# word at its `weights` (`xtreme_preprocessors.word_level_predictions`), QA
# only the window's tokens (`qa.best_span` cuts the logits to its
# `token_offsets`), pair and retrieval predictions have no length axis, MLM
# tasks no metric. So ids get 0, and floats (QA's start/end logits) a large
# finite negative number that no span search or softmax picks.
_ID_FILL = 0
_FLOAT_FILL = -1e9


class _Predictor:
  """A model's jitted `predict_batch_with_aux`, and the shape of its
  predictions for each full-length batch shape (`full_output`)."""

  def __init__(self, model):
    self.predict = jax.jit(model.predict_batch_with_aux)
    self._full_outputs = {}

  def full_output(self, params, features: Mapping[str, np.ndarray],
                  batch_size: int) -> jax.ShapeDtypeStruct:
    """Shape and dtype of the predictions for `batch_size` rows of the
    full-length `features`.

    By abstract evaluation (a trace, no compilation): which axes follow the
    row length is the model's business (`[batch, 2, length]` QA logits;
    `[batch, emb_dim]` embeddings, whose emb_dim may equal a cut length).
    """
    spec = {k: jax.ShapeDtypeStruct((batch_size, *v.shape[1:]), v.dtype)
            for k, v in features.items()}
    key = tuple(sorted((k, v.shape, v.dtype.name) for k, v in spec.items()))
    if key not in self._full_outputs:
      self._full_outputs[key] = jax.eval_shape(self.predict, params, spec)[0]
    return self._full_outputs[key]


def make_predict_fn(model, params, batch_size: int, length_sorted: bool = True):
  """A seqio predict function over an enumerated model-feature dataset.

  The parameters go to the device once, here, not with every batch (host
  numpy parameters would be copied on every call: 314 ms per batch measured
  for a 256 MB tree; RemBERT's is ~2.3 GB). Batches go in and predictions
  come back by explicit transfers only. Every call has `batch_size` rows
  (the last batch is padded with empty rows).

  Args:
    model: a `models` adapter.
    params: its parameters (host or device arrays).
    batch_size: rows per call of the model.
    length_sorted: read the split's examples, batch them longest first and
      cut each batch's token features to its longest example, rounded up
      to a power of two from `MIN_BUCKET_LENGTH` (`bucket_length`); the
      predictions are padded back to the full length (see `_FLOAT_FILL`
      for what they hold there). False: batches in dataset order at the
      full length.

  Returns:
    `predict_fn(ds, model_feature_shapes=None)` -> [(index, prediction)],
    one per example of the enumerated `ds`, in any order (seqio sorts them
    by index); each prediction has the layout of a row of `predict_batch` on
    a full-length batch, and its values (up to float rounding) at the
    example's tokens.
  """
  predictor = _predictor(model)
  params = jax.device_put(params)

  def predict_fn(ds, model_feature_shapes=None):
    del model_feature_shapes
    if length_sorted:
      return _predict_length_sorted(predictor, params, ds, batch_size,
                                    model.config.pad_id)
    return _predict_in_order(predictor, params, ds, batch_size)

  return predict_fn


def _predictor(model) -> _Predictor:
  if model not in _PREDICTORS:
    _PREDICTORS[model] = _Predictor(model)
  return _PREDICTORS[model]


def jitted_predict(model):
  """The model's jitted `predict_batch_with_aux`, compiled once per model
  object and batch shape (shared with `make_predict_fn`)."""
  return _predictor(model).predict


def _predict_in_order(predictor: _Predictor, params, ds: "tf.data.Dataset",
                      batch_size: int) -> list[tuple[int, np.ndarray]]:
  """Batches of `ds` in its order, at the full length."""
  outputs = []
  for indices, features in ds.batch(batch_size).as_numpy_iterator():
    batch = jax.device_put({k: _pad(v, batch_size)
                            for k, v in _numeric(features).items()})
    predictions, _ = predictor.predict(params, batch)
    predictions = jax.device_get(predictions)[:len(indices)]
    outputs.extend(zip(indices.tolist(), list(predictions)))
  return outputs


def _predict_length_sorted(predictor: _Predictor, params, ds: "tf.data.Dataset",
                           batch_size: int, pad_id: int
                           ) -> list[tuple[int, np.ndarray]]:
  """Batches of `ds`'s examples longest first, each cut to its bucket."""
  # An evaluation split fits in memory: seqio's Evaluator holds its task
  # examples and every prediction anyway.
  indices, features = _read_examples(ds)
  if not len(indices):
    return []
  full_length = features["input_tokens"].shape[1]
  lengths = real_lengths(features, pad_id)
  # Longest first: the largest shape compiles, and fails if it does not fit
  # in memory, on the first batch; the padded last batch is the shortest.
  order = np.argsort(-lengths, kind="stable")
  full_output = predictor.full_output(params, features, batch_size)
  outputs = []
  for start in range(0, len(order), batch_size):
    rows = order[start:start + batch_size]
    length = bucket_length(int(lengths[rows].max()), full_length)
    batch = jax.device_put({k: _pad(_cut(v[rows], full_length, length),
                                    batch_size)
                            for k, v in features.items()})
    predictions, _ = predictor.predict(params, batch)
    predictions = _pad_to(jax.device_get(predictions)[:len(rows)], full_output)
    outputs.extend(zip(indices[rows].tolist(), list(predictions)))
  return outputs


def bucket_length(length: int, full_length: int) -> int:
  """The row length a batch whose longest example has `length` tokens is cut
  to: the next power of two from `MIN_BUCKET_LENGTH`, at most `full_length`."""
  bucket = MIN_BUCKET_LENGTH
  while bucket < length:
    bucket *= 2
  return min(bucket, full_length)


def real_lengths(features: Mapping[str, np.ndarray], pad_id: int) -> np.ndarray:
  """`[rows]` tokens of each row up to its last real one.

  Real as the network sees it: `segment_ids > 0`, or without them any token
  other than `pad_id`. Whatever follows is padding no real token attends to,
  so a row cut there predicts the same at its real tokens.
  """
  if "segment_ids" in features:
    real = features["segment_ids"] > 0
  else:
    real = features["input_tokens"] != pad_id
  return np.max(real * np.arange(1, real.shape[1] + 1), axis=1)


def _read_examples(ds: "tf.data.Dataset"
                   ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
  """(indices `[n]`, {feature: `[n, ...]`}) of a whole enumerated dataset."""
  chunks = list(ds.batch(1024).as_numpy_iterator())
  if not chunks:
    return np.zeros(0, np.int64), {}
  features = [_numeric(f) for _, f in chunks]
  return (np.concatenate([i for i, _ in chunks]),
          {k: np.concatenate([f[k] for f in features]) for k in features[0]})


def _numeric(features: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The features a model can read (seqio may pass strings along)."""
  return {k: v for k, v in features.items()
          if np.issubdtype(v.dtype, np.number)}


def _cut(x: np.ndarray, full_length: int, length: int) -> np.ndarray:
  """A `[rows, full_length, ...]` token feature cut to `length`, else `x`."""
  if x.ndim >= 2 and x.shape[1] == full_length:
    return x[:, :length]
  return x


def _pad(x: np.ndarray, size: int) -> np.ndarray:
  if x.shape[0] == size:
    return x
  pad = [(0, size - x.shape[0])] + [(0, 0)] * (x.ndim - 1)
  return np.pad(x, pad)


def _pad_to(predictions: np.ndarray,
            full: jax.ShapeDtypeStruct) -> np.ndarray:
  """Predictions of a cut batch, padded to the full-length layout `full`
  (rows kept) with `_ID_FILL` or `_FLOAT_FILL`."""
  pad = [(0, 0)] + [(0, f - n) for n, f in zip(predictions.shape[1:],
                                               full.shape[1:])]
  if not any(after for _, after in pad):
    return predictions
  fill = (_FLOAT_FILL if np.issubdtype(predictions.dtype, np.floating)
          else _ID_FILL)
  return np.pad(predictions, pad, constant_values=fill)
