"""Feature converters: RemBERT task features -> model features.

The names are the contract in docs/DESIGN.md. Every converter emits

  input_tokens  [length] int32   word-piece ids, 0 = [PAD]
  token_types   [length] int32   segment A/B ids (all 0 for MLM)
  segment_ids   [length] int32   1, 2, ... per packed example, 0 on padding
  positions     [length] int32   0, 1, ... restarting in every packed example

plus the objective's own features. Example (MLM, packed, length 8):

  task examples:
    {"input_tokens": [2, 9, 4, 3], "token_types": [0, 0, 0, 0],
     "targets": [2, 9, 7, 3], "weights": [0., 0., 1., 0.]}
    {"input_tokens": [2, 5, 3], "token_types": [0, 0, 0],
     "targets": [2, 8, 3], "weights": [0., 1., 0.]}
  model example:
    {"input_tokens": [2, 9, 4, 3, 2, 5, 3, 0],
     "token_types":  [0, 0, 0, 0, 0, 0, 0, 0],
     "targets":      [2, 9, 7, 3, 2, 8, 3, 0],
     "weights":      [0, 0, 1, 0, 0, 1, 0, 0],
     "segment_ids":  [1, 1, 1, 1, 2, 2, 2, 0],
     "positions":    [0, 1, 2, 3, 0, 1, 2, 0]}

Unlike seqio's `EncoderFeatureConverter`, which puts loss only where the input
equals the mask id, the loss weights are carried explicitly: RemBERT (like
BERT) also scores the 10% random and 10% unchanged selections.

Task feature lengths may be given in full ({"input_tokens": L, "token_types":
L, ...}) or as just {"input_tokens": L}: every per-token feature is aligned
with `input_tokens`, so the others default to its length, and scalar features
(labels, answer positions) have no length.
"""

from typing import Dict, Mapping, Optional

from absl import logging
import seqio
import tensorflow as tf

from rembert_t5x.common import packed_features

_Spec = seqio.FeatureConverter.FeatureSpec

# The packed layout's feature names live with the models' (no SeqIO there).
SLOT_OFFSETS = packed_features.SLOT_OFFSETS
SLOT_WEIGHTS = packed_features.SLOT_WEIGHTS
POSITION_FEATURES = packed_features.POSITION_FEATURES
max_slots = packed_features.max_slots


# Model features added by every converter (packed or not).
_SEQUENCE_INFO_FEATURES = {
    "segment_ids": _Spec(dtype=tf.int32),
    "positions": _Spec(dtype=tf.int32),
}
_BASE_TOKEN_FEATURES = {
    "input_tokens": _Spec(dtype=tf.int32),
    "token_types": _Spec(dtype=tf.int32),
}


class _RemBertFeatureConverter(seqio.FeatureConverter):
  """Shared logic: per-token features aligned with `input_tokens`.

  Subclasses set TOKEN_FEATURES (per-token task features, `input_tokens`
  first) and SCALAR_FEATURES (rank-0 task features); model features are the
  same names plus `segment_ids` and `positions`.
  """

  TOKEN_FEATURES: Mapping[str, _Spec] = {}
  SCALAR_FEATURES: Mapping[str, _Spec] = {}
  SUPPORTS_PACKING = False
  # Packing adds no features here: segment_ids/positions are always present.
  PACKING_FEATURE_DTYPES: Mapping[str, tf.dtypes.DType] = {}

  def __init__(self,
               pack: bool = False,
               use_custom_packing_ops: bool = False,
               apply_length_check: Optional[bool] = None,
               passthrough_features: Optional[Mapping[str, _Spec]] = None,
               **kwargs):
    """Creates the converter; T5X calls it as `Cls(pack=..., ...)`.

    Args:
      pack: pack several examples into one row (MLM only).
      use_custom_packing_ops: seqio's custom packing ops need tensor2tensor,
        which is not installed here; the flag is ignored with a warning and
        seqio's TF-op packing is used.
      apply_length_check: seqio's length checks (a `map` of assertions on
        the input and another on the output). None (the default): only with
        passthrough features, whose lengths nothing here controls. Every
        other feature needs none: `__call__` trims the per-token features to
        their lengths before seqio sees them, and `_convert_features` emits
        exactly the model lengths (tests/feature_converters_test.py). The
        checks were ~75% of the CPU time of building a converter's pipeline
        (~150 ms of ~200 ms per pipeline, paid by every evaluation task and
        language).
      passthrough_features: passed to seqio (incompatible with packing).
      **kwargs: other seqio.FeatureConverter arguments (e.g. bos_id, unused).

    Raises:
      ValueError: `pack=True` for a converter that does not pack.
    """
    if pack and not self.SUPPORTS_PACKING:
      raise ValueError(
          f"{type(self).__name__} does not support pack=True: its model "
          "reads one example per row. Use pack=False (in gin: "
          "train/utils.DatasetConfig.pack = False).")
    if use_custom_packing_ops:
      logging.warning(
          "%s: use_custom_packing_ops=True needs tensor2tensor; ignoring it "
          "and packing with seqio's TF ops.", type(self).__name__)
    super().__init__(
        pack=pack,
        use_custom_packing_ops=False,
        apply_length_check=(bool(passthrough_features)
                            if apply_length_check is None
                            else apply_length_check),
        passthrough_features=passthrough_features,
        **kwargs)
    if pack and self.SCALAR_FEATURES:
      # Packed, each per-example feature has one slot per example of the
      # row (`_to_slots`): rank 1, as seqio requires of packed features.
      self.MODEL_FEATURES = {
          **self.TOKEN_FEATURES, **_SEQUENCE_INFO_FEATURES,
          **{k: _Spec(dtype=v.dtype) for k, v in self.SCALAR_FEATURES.items()},
          SLOT_OFFSETS: _Spec(dtype=tf.int32),
          SLOT_WEIGHTS: _Spec(dtype=tf.float32)}

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    # Plain class attributes, as seqio and T5X read them from the class.
    cls.TASK_FEATURES = {**cls.TOKEN_FEATURES, **cls.SCALAR_FEATURES}
    cls.MODEL_FEATURES = {**cls.TOKEN_FEATURES, **_SEQUENCE_INFO_FEATURES,
                          **cls.SCALAR_FEATURES}

  def _complete_lengths(
      self, task_feature_lengths: Mapping[str, int]) -> Dict[str, int]:
    """Fills in per-token lengths from `input_tokens` and scalar lengths."""
    if "input_tokens" not in task_feature_lengths:
      raise ValueError(
          f"{type(self).__name__}: task_feature_lengths "
          f"{dict(task_feature_lengths)} has no 'input_tokens' length.")
    length = task_feature_lengths["input_tokens"]
    # Only our task features: seqio's evaluator passes a measured length for
    # every output feature (e.g. `targets` kept for decoding predictions), and
    # seqio rejects length keys that are not task features.
    lengths = {k: v for k, v in task_feature_lengths.items()
               if k in self.TASK_FEATURES}
    for name in self.TOKEN_FEATURES:
      lengths.setdefault(name, length)
      # The evaluator measures each feature's longest example, which may be
      # shorter than the input length; per-token features are aligned with
      # `input_tokens`, so they take its length. Longer is an error.
      if lengths[name] > length:
        raise ValueError(
            f"{type(self).__name__}: task_feature_lengths[{name!r}] = "
            f"{lengths[name]} exceeds the input_tokens length {length}; "
            "per-token features are aligned and must have one length.")
      lengths[name] = length
    for name in self.SCALAR_FEATURES:
      # Scalars have no sequence length; seqio skips rank-0 length checks.
      lengths.setdefault(name, 1)
    return lengths

  def __call__(self, ds: tf.data.Dataset,
               task_feature_lengths: Mapping[str, int]) -> tf.data.Dataset:
    """Converts `ds`; accepts the short form {"input_tokens": L} of lengths.

    Per-token features are trimmed to L first, as a Task would have done had
    it been given their lengths.
    """
    lengths = self._complete_lengths(task_feature_lengths)

    def trim(example):
      example = dict(example)
      for name in self.TOKEN_FEATURES:
        if name in example:
          example[name] = example[name][:lengths[name]]
      return example

    ds = ds.map(trim, num_parallel_calls=tf.data.AUTOTUNE)
    return super().__call__(ds, lengths)

  def get_model_feature_lengths(
      self, task_feature_lengths: Mapping[str, int]) -> Dict[str, int]:
    """Model lengths: every per-token feature has the input length."""
    lengths = self._complete_lengths(task_feature_lengths)
    length = lengths["input_tokens"]
    model_lengths = {name: length for name in self.TOKEN_FEATURES}
    model_lengths.update({name: length for name in _SEQUENCE_INFO_FEATURES})
    if self.pack and self.SCALAR_FEATURES:
      model_lengths.update({name: max_slots(length) for name in
                            (*self.SCALAR_FEATURES, SLOT_OFFSETS,
                             SLOT_WEIGHTS)})
    else:
      model_lengths.update(
          {name: lengths[name] for name in self.SCALAR_FEATURES})
    model_lengths.update(
        {name: lengths[name] for name in self._passthrough_features})
    return model_lengths

  def _convert_features(
      self, ds: tf.data.Dataset,
      task_feature_lengths: Mapping[str, int]) -> tf.data.Dataset:
    length = task_feature_lengths["input_tokens"]
    if self.pack and self.SCALAR_FEATURES:
      return _pack_with_slots(ds, list(self.TOKEN_FEATURES),
                              list(self.SCALAR_FEATURES), length)
    if self.pack:
      return _pack_aligned(ds, list(self.TOKEN_FEATURES), length)
    keep = (list(self.TOKEN_FEATURES) + list(self.SCALAR_FEATURES) +
            list(self._passthrough_features))
    ds = seqio.utils.trim_and_pad_dataset(
        ds, {name: length for name in self.TOKEN_FEATURES})

    def add_sequence_info(example):
      out = {name: example[name] for name in keep}
      segment_ids = tf.cast(
          tf.not_equal(example["input_tokens"], 0), tf.int32)
      out["segment_ids"] = segment_ids
      out["positions"] = tf.range(length, dtype=tf.int32) * segment_ids
      return out

    return ds.map(add_sequence_info, num_parallel_calls=tf.data.AUTOTUNE)


def _pack_aligned(ds: tf.data.Dataset, names, length: int) -> tf.data.Dataset:
  """Packs per-token features that are aligned with `input_tokens`.

  seqio's TF-op packing treats every feature as its own sequence whose length
  is its count of non-zero values; `token_types` (mostly 0) and `weights`
  (float, mostly 0) would lose their alignment. So every other feature is
  sent through the packer as `bitcast(value) + 1`, which is never 0 (except
  for a NaN bit pattern), trimmed to the token count, and decoded after.

  Args:
    ds: examples with the features in `names`, `input_tokens` first; padding
      (id 0) may only trail the tokens.
    names: the per-token features.
    length: packed row length.

  Returns:
    Packed examples with `names`, `segment_ids` and `positions`.
  """
  dtypes = {name: ds.element_spec[name].dtype for name in names}
  for name, dtype in dtypes.items():
    if dtype not in (tf.int32, tf.float32):
      raise ValueError(
          f"Cannot pack feature {name!r} of dtype {dtype.name}; expected "
          "int32 or float32.")
  others = [name for name in names if name != "input_tokens"]

  def encode(example):
    tokens = example["input_tokens"]
    num_tokens = tf.reduce_sum(tf.cast(tf.not_equal(tokens, 0), tf.int32))
    tokens = tokens[:num_tokens]
    check = tf.debugging.assert_none_equal(
        tokens, 0, message="input_tokens has [PAD]=0 before its last token")
    with tf.control_dependencies([check]):
      out = {"input_tokens": tf.identity(tokens)}
    for name in others:
      value = example[name][:num_tokens]
      if dtypes[name] == tf.float32:
        value = tf.bitcast(value, tf.int32)
      out[name] = value + 1
    return out

  ds = ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE)
  ds = seqio.utils.trim_and_pack_dataset(
      ds, {name: length for name in names}, use_custom_ops=False)

  def decode(packed):
    segment_ids = packed["input_tokens_segment_ids"]
    out = {
        "input_tokens": packed["input_tokens"],
        "segment_ids": segment_ids,
        "positions": packed["input_tokens_positions"],
    }
    for name in others:
      value = tf.where(segment_ids > 0, packed[name] - 1, 0)
      if dtypes[name] == tf.float32:
        value = tf.bitcast(value, tf.float32)
      out[name] = value
    return out

  return ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)


class MLMFeatureConverter(_RemBertFeatureConverter):
  """Masked-LM pre-training: packs by default, carries explicit weights.

  Task features: input_tokens, token_types, targets (int32), weights
  (float32). Model features: those plus segment_ids and positions.
  """

  TOKEN_FEATURES = {
      **_BASE_TOKEN_FEATURES,
      "targets": _Spec(dtype=tf.int32),
      "weights": _Spec(dtype=tf.float32),
  }
  SUPPORTS_PACKING = True

  def __init__(self, pack: bool = True, **kwargs):
    super().__init__(pack=pack, **kwargs)


class PairClassificationFeatureConverter(_RemBertFeatureConverter):
  """Sentence-pair classification (XNLI, PAWS-X).

  Task features: input_tokens, token_types, label (int32 scalar). Model
  features: those plus segment_ids and positions; `label` is [batch]. With
  pack=True, several examples per row: `label`, `slot_offsets` and
  `slot_weights` are [batch, max_slots(length)] (`_pack_with_slots`).
  """

  TOKEN_FEATURES = dict(_BASE_TOKEN_FEATURES)
  SCALAR_FEATURES = {"label": _Spec(dtype=tf.int32, rank=0)}
  SUPPORTS_PACKING = True


class TaggingFeatureConverter(_RemBertFeatureConverter):
  """Token tagging (NER, POS): one example per row, or packed (pack=True).

  Task features: input_tokens, token_types, targets (tag ids, int32),
  weights (float32, 1 on the first sub-token of a word).
  """

  SUPPORTS_PACKING = True

  TOKEN_FEATURES = {
      **_BASE_TOKEN_FEATURES,
      "targets": _Spec(dtype=tf.int32),
      "weights": _Spec(dtype=tf.float32),
  }


class QAFeatureConverter(_RemBertFeatureConverter):
  """Extractive QA: one window per row, or packed (pack=True).

  Task features: input_tokens, token_types, start_positions, end_positions
  (int32 scalars; 0 = [CLS] when the answer is outside the window). Packed,
  the positions are [batch, max_slots(length)] row positions (each window's
  shifted by its offset), with `slot_offsets` and `slot_weights`.

  The task cuts contexts into windows of its own `max_seq_length`; a shorter
  `input_tokens` feature length would cut windows again, losing context and
  moving answers out of the row while their positions stay, so a window
  longer than the feature length is an error (raised when the dataset is
  read; the window length is only known per example). Tasks given the
  lengths refuse them earlier (`qa.qa_windows_preprocessor`, before seqio's
  own trimming); this catches datasets built without lengths.
  """

  TOKEN_FEATURES = dict(_BASE_TOKEN_FEATURES)
  SCALAR_FEATURES = {
      "start_positions": _Spec(dtype=tf.int32, rank=0),
      "end_positions": _Spec(dtype=tf.int32, rank=0),
  }
  SUPPORTS_PACKING = True

  def __call__(self, ds: tf.data.Dataset,
               task_feature_lengths: Mapping[str, int]) -> tf.data.Dataset:
    length = self._complete_lengths(task_feature_lengths)["input_tokens"]

    def check_window_fits(example):
      window = tf.size(example["input_tokens"])
      # No quotes in the message: TF escapes them when it reports it.
      fits = tf.debugging.Assert(window <= length, [
          f"QAFeatureConverter: the input_tokens length {length} "
          "(TASK_FEATURE_LENGTHS) is shorter than a QA window of", window,
          "tokens; cutting it would lose context and answer positions. Set "
          "the input_tokens length to at least the max_seq_length of the "
          "task (384 for the XTREME QA tasks)."])
      with tf.control_dependencies([fits]):
        return {**example,
                "input_tokens": tf.identity(example["input_tokens"])}

    return super().__call__(
        ds.map(check_window_fits, num_parallel_calls=tf.data.AUTOTUNE),
        task_feature_lengths)


class RetrievalFeatureConverter(_RemBertFeatureConverter):
  """Sentence embedding (Tatoeba, BUCC): one sentence per row, no labels.

  Task features: input_tokens, token_types. The task's `targets` (the
  sentence's [side, index] key) stays with the example for the metric and is
  not a model feature.
  """

  TOKEN_FEATURES = dict(_BASE_TOKEN_FEATURES)


def _pack_with_slots(ds: tf.data.Dataset, token_names, scalar_names,
                     length: int) -> tf.data.Dataset:
  """Packs a head's examples whose per-example features become slots.

  Each per-example feature is spread over its example's tokens, packed with
  them (`_pack_aligned`), and read back at each example's first token: the
  `max_slots(length)` slots of the row, in packing order, `SLOT_OFFSETS`
  at those tokens, `SLOT_WEIGHTS` 1 (0 for the empty slots), and the
  `POSITION_FEATURES` shifted by the offset into row positions. Example
  (length 8, two pair examples of 3 and 4 tokens): `label` [1] and [0]
  become `label` [1, 0, 0, 0], `slot_offsets` [0, 3, 0, 0], `slot_weights`
  [1, 1, 0, 0].

  Args:
    ds: unpacked examples: per-token features `token_names` and rank-0
      int32 features `scalar_names`.
    token_names: the per-token features, `input_tokens` first.
    scalar_names: the per-example features.
    length: packed row length.

  Returns:
    Packed examples: the token features, `segment_ids`, `positions`, and
    `[max_slots(length)]` per-example features, offsets and weights.
  """
  slots = max_slots(length)
  spread_names = {name: f"{name}__per_token" for name in scalar_names}

  def spread(example):
    out = {name: example[name] for name in token_names}
    count = tf.size(example["input_tokens"])
    for name, spread_name in spread_names.items():
      out[spread_name] = tf.fill([count], tf.cast(example[name], tf.int32))
    return out

  ds = ds.map(spread, num_parallel_calls=tf.data.AUTOTUNE)
  ds = _pack_aligned(ds, list(token_names) + list(spread_names.values()),
                     length)

  def to_slots(row):
    first = (row["positions"] == 0) & (row["segment_ids"] > 0)
    offsets = tf.cast(tf.where(first)[:, 0], tf.int32)  # [examples]
    count = tf.size(offsets)
    fits = tf.debugging.assert_less_equal(
        count, slots, message="more examples in a packed row than slots")
    with tf.control_dependencies([fits]):
      pad = [[0, slots - count]]
    out = {name: row[name] for name in (*token_names, "segment_ids",
                                        "positions")}
    for name, spread_name in spread_names.items():
      value = tf.gather(row[spread_name], offsets)
      if name in POSITION_FEATURES:
        value += offsets
      out[name] = tf.ensure_shape(tf.pad(value, pad), [slots])
    out[SLOT_OFFSETS] = tf.ensure_shape(tf.pad(offsets, pad), [slots])
    out[SLOT_WEIGHTS] = tf.ensure_shape(
        tf.pad(tf.ones([count], tf.float32), pad), [slots])
    return out

  return ds.map(to_slots, num_parallel_calls=tf.data.AUTOTUNE)
