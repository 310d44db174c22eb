"""Tests for rembert_t5x.feature_converters (packed and unpacked)."""

import numpy as np
import pytest
import seqio
from seqio import test_utils
import tensorflow as tf

from rembert_t5x import feature_converters as fc


def _mlm_examples():
  return [
      {"input_tokens": [2, 9, 4, 3], "token_types": [0, 0, 0, 0],
       "targets": [2, 9, 7, 3], "weights": [0., 0., 1., 0.]},
      {"input_tokens": [2, 5, 3], "token_types": [0, 1, 1],
       "targets": [2, 8, 3], "weights": [0., 0.5, 0.]},
      {"input_tokens": [2, 6, 6, 4, 4, 3], "token_types": [0] * 6,
       "targets": [2, 6, 6, 11, 12, 3], "weights": [0., 1., 0., 1., 1., 0.]},
  ]


_SCALARS = ("label", "start_positions", "end_positions", "idx", "unique_id")


def _dataset(examples, extra=None):
  """A tf.data.Dataset of the examples; scalars rank 0, the rest rank 1."""
  examples = [dict(ex, **(extra or {})) for ex in examples]
  signature = {
      k: tf.TensorSpec([] if k in _SCALARS else [None],
                       tf.float32 if k == "weights" else tf.int32)
      for k in examples[0]}
  return tf.data.Dataset.from_generator(lambda: iter(examples),
                                        output_signature=signature)


def test_mlm_packed():
  converter = fc.MLMFeatureConverter(pack=True)
  ds = converter(_dataset(_mlm_examples()), {"input_tokens": 8})
  expected = [{
      "input_tokens": [2, 9, 4, 3, 2, 5, 3, 0],
      "token_types": [0, 0, 0, 0, 0, 1, 1, 0],
      "targets": [2, 9, 7, 3, 2, 8, 3, 0],
      "weights": [0., 0., 1., 0., 0., 0.5, 0., 0.],
      "segment_ids": [1, 1, 1, 1, 2, 2, 2, 0],
      "positions": [0, 1, 2, 3, 0, 1, 2, 0],
  }, {
      "input_tokens": [2, 6, 6, 4, 4, 3, 0, 0],
      "token_types": [0] * 8,
      "targets": [2, 6, 6, 11, 12, 3, 0, 0],
      "weights": [0., 1., 0., 1., 1., 0., 0., 0.],
      "segment_ids": [1, 1, 1, 1, 1, 1, 0, 0],
      "positions": [0, 1, 2, 3, 4, 5, 0, 0],
  }]
  test_utils.assert_dataset(ds, expected)
  assert ds.element_spec["weights"].dtype == tf.float32


def test_mlm_packing_keeps_every_weight():
  rng = np.random.RandomState(0)
  examples = []
  for _ in range(40):
    n = rng.randint(3, 12)
    tokens = [2] + list(rng.randint(5, 100, size=n - 2)) + [3]
    weights = list((rng.rand(n) < 0.3).astype(np.float32))
    examples.append({"input_tokens": tokens, "token_types": [0] * n,
                     "targets": [t + 1000 for t in tokens],
                     "weights": weights})
  ds = fc.MLMFeatureConverter(pack=True)(
      _dataset(examples), {"input_tokens": 16, "token_types": 16,
                           "targets": 16, "weights": 16})
  rows = list(ds.as_numpy_iterator())
  assert len(rows) < len(examples)  # Something was packed.
  total_weight = sum(r["weights"].sum() for r in rows)
  assert total_weight == sum(sum(ex["weights"]) for ex in examples)
  for r in rows:
    real = r["segment_ids"] > 0
    np.testing.assert_array_equal(r["targets"][real],
                                  r["input_tokens"][real] + 1000)
    assert (r["weights"][~real] == 0).all()
    assert (r["targets"][~real] == 0).all()
    # Positions restart at every [CLS].
    np.testing.assert_array_equal(r["positions"] == 0,
                                  (r["input_tokens"] == 2) | ~real)


def test_mlm_unpacked_trims_and_pads():
  converter = fc.MLMFeatureConverter(pack=False)
  ds = converter(_dataset(_mlm_examples()[:2]), {"input_tokens": 3})
  expected = [{
      "input_tokens": [2, 9, 4], "token_types": [0, 0, 0],
      "targets": [2, 9, 7], "weights": [0., 0., 1.],
      "segment_ids": [1, 1, 1], "positions": [0, 1, 2],
  }, {
      "input_tokens": [2, 5, 3], "token_types": [0, 1, 1],
      "targets": [2, 8, 3], "weights": [0., 0.5, 0.],
      "segment_ids": [1, 1, 1], "positions": [0, 1, 2],
  }]
  test_utils.assert_dataset(ds, expected)
  ds = converter(_dataset(_mlm_examples()[1:2]), {"input_tokens": 5})
  test_utils.assert_dataset(ds, [{
      "input_tokens": [2, 5, 3, 0, 0], "token_types": [0, 1, 1, 0, 0],
      "targets": [2, 8, 3, 0, 0], "weights": [0., 0.5, 0., 0., 0.],
      "segment_ids": [1, 1, 1, 0, 0], "positions": [0, 1, 2, 0, 0]}])


def test_mlm_custom_packing_ops_ignored():
  converter = fc.MLMFeatureConverter(pack=True, use_custom_packing_ops=True)
  ds = converter(_dataset(_mlm_examples()), {"input_tokens": 8})
  assert len(list(ds)) == 2


def test_mlm_interior_padding_rejected():
  bad = [{"input_tokens": [2, 0, 5, 3], "token_types": [0] * 4,
          "targets": [2, 1, 5, 3], "weights": [0., 1., 0., 0.]}]
  ds = fc.MLMFeatureConverter(pack=True)(_dataset(bad), {"input_tokens": 8})
  with pytest.raises(tf.errors.InvalidArgumentError, match="PAD"):
    list(ds)


def test_pair_classification():
  examples = [
      {"input_tokens": [2, 7, 3, 8, 3], "token_types": [0, 0, 0, 1, 1],
       "label": 2},
      {"input_tokens": [2, 7, 3], "token_types": [0, 0, 0], "label": 0},
  ]
  converter = fc.PairClassificationFeatureConverter(
      pack=False, use_custom_packing_ops=False)
  ds = converter(_dataset(examples, {"idx": 5}), {"input_tokens": 4})
  test_utils.assert_dataset(ds, [
      {"input_tokens": [2, 7, 3, 8], "token_types": [0, 0, 0, 1],
       "segment_ids": [1, 1, 1, 1], "positions": [0, 1, 2, 3], "label": 2},
      {"input_tokens": [2, 7, 3, 0], "token_types": [0, 0, 0, 0],
       "segment_ids": [1, 1, 1, 0], "positions": [0, 1, 2, 0], "label": 0},
  ])
  batch = next(ds.batch(2).as_numpy_iterator())
  assert batch["label"].shape == (2,)


def test_tagging():
  examples = [{"input_tokens": [2, 7, 8, 3], "token_types": [0] * 4,
               "targets": [0, 3, 0, 0], "weights": [0., 1., 0., 0.]}]
  ds = fc.TaggingFeatureConverter(pack=False)(
      _dataset(examples), {"input_tokens": 6, "token_types": 6,
                           "targets": 6, "weights": 6})
  test_utils.assert_dataset(ds, [{
      "input_tokens": [2, 7, 8, 3, 0, 0], "token_types": [0] * 6,
      "targets": [0, 3, 0, 0, 0, 0], "weights": [0., 1., 0., 0., 0., 0.],
      "segment_ids": [1, 1, 1, 1, 0, 0], "positions": [0, 1, 2, 3, 0, 0]}])


def test_qa():
  examples = [{"input_tokens": [2, 7, 3, 8, 9, 3], "token_types": [0, 0, 0,
                                                                   1, 1, 1],
               "start_positions": 3, "end_positions": 4, "unique_id": 17}]
  ds = fc.QAFeatureConverter(pack=False)(_dataset(examples),
                                         {"input_tokens": 6})
  test_utils.assert_dataset(ds, [{
      "input_tokens": [2, 7, 3, 8, 9, 3], "token_types": [0, 0, 0, 1, 1, 1],
      "segment_ids": [1] * 6, "positions": [0, 1, 2, 3, 4, 5],
      "start_positions": 3, "end_positions": 4}])


def _pair_examples():
  return [
      {"input_tokens": [2, 7, 3, 8, 3], "token_types": [0, 0, 0, 1, 1],
       "label": 2},
      {"input_tokens": [2, 5, 3], "token_types": [0, 0, 1], "label": 1},
      {"input_tokens": [2, 6, 6, 3, 9, 9, 9, 3], "token_types": [0] * 4 + [1] * 4,
       "label": 0},
  ]


def test_pair_packed_has_one_slot_per_example():
  """T5X's DatasetConfig.pack=True: per-example features in slots."""
  ds = fc.PairClassificationFeatureConverter(pack=True)(
      _dataset(_pair_examples()), {"input_tokens": 8})
  test_utils.assert_dataset(ds, [
      {"input_tokens": [2, 7, 3, 8, 3, 2, 5, 3],
       "token_types": [0, 0, 0, 1, 1, 0, 0, 1],
       "segment_ids": [1, 1, 1, 1, 1, 2, 2, 2],
       "positions": [0, 1, 2, 3, 4, 0, 1, 2],
       "label": [2, 1, 0, 0], "slot_offsets": [0, 5, 0, 0],
       "slot_weights": [1., 1., 0., 0.]},
      {"input_tokens": [2, 6, 6, 3, 9, 9, 9, 3],
       "token_types": [0, 0, 0, 0, 1, 1, 1, 1],
       "segment_ids": [1] * 8, "positions": list(range(8)),
       "label": [0, 0, 0, 0], "slot_offsets": [0, 0, 0, 0],
       "slot_weights": [1., 0., 0., 0.]}])
  lengths = fc.PairClassificationFeatureConverter(
      pack=True).get_model_feature_lengths({"input_tokens": 8})
  assert lengths["label"] == lengths["slot_offsets"] == fc.max_slots(8) == 4


def test_qa_packed_positions_are_shifted_into_the_row():
  examples = [
      {"input_tokens": [2, 7, 3, 8, 9, 3], "token_types": [0, 0, 0, 1, 1, 1],
       "start_positions": 3, "end_positions": 4},
      {"input_tokens": [2, 5, 3, 6, 3], "token_types": [0, 0, 0, 1, 1],
       "start_positions": 0, "end_positions": 0},
      {"input_tokens": [2, 4, 3, 4, 3], "token_types": [0, 0, 0, 1, 1],
       "start_positions": 3, "end_positions": 3},
  ]
  ds = fc.QAFeatureConverter(pack=True)(_dataset(examples),
                                        {"input_tokens": 12})
  rows = list(ds.as_numpy_iterator())
  assert len(rows) == 2
  np.testing.assert_array_equal(rows[0]["start_positions"][:2], [3, 6])
  np.testing.assert_array_equal(rows[0]["end_positions"][:2], [4, 6])
  np.testing.assert_array_equal(rows[0]["slot_offsets"][:2], [0, 6])
  assert rows[1]["start_positions"][0] == 3


@pytest.mark.parametrize("kind", ["pair", "qa", "tagging"])
def test_converter_packed_loss_equals_unpacked(kind):
  """The model's loss on the converter's packed rows (T5X's pack=True) is
  its loss on the same examples one per row: the mean over examples."""
  import jax  # pylint: disable=g-import-not-at-top
  from tests import test_utils as our_utils  # pylint: disable=g-import-not-at-top
  from tests import tolerances  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  examples = []
  for m in (5, 9, 3, 7, 4, 16, 6):
    ex = {"input_tokens": [2] + list(rng.integers(5, 90, m - 1)),
          "token_types": [0] * (m // 2) + [1] * (m - m // 2)}
    if kind == "pair":
      ex["label"] = int(rng.integers(0, 7))
    elif kind == "qa":
      ex["start_positions"] = int(rng.integers(0, m))
      ex["end_positions"] = min(ex["start_positions"] + 1, m - 1)
    else:
      ex["targets"] = list(rng.integers(0, 7, m))
      ex["weights"] = list((rng.random(m) < 0.6).astype(np.float32))
    examples.append(ex)
  cls = {"pair": fc.PairClassificationFeatureConverter,
         "qa": fc.QAFeatureConverter, "tagging": fc.TaggingFeatureConverter}
  lengths = {"input_tokens": 16}
  batches = [next(cls[kind](pack=pack)(_dataset(examples), lengths)
                  .batch(16).as_numpy_iterator()) for pack in (False, True)]
  assert len(batches[1]["input_tokens"]) < len(examples)
  model = our_utils.tiny_model(kind)
  # Scaled as in finetune_packing_test.py (PARAM_SCALE): there a leak
  # between packed examples moves the loss 16x or more beyond the float32
  # bound used here; at the 0.02 initialisation it would hide inside it.
  params = jax.tree_util.tree_map(lambda x: 5.0 * x, model.get_initial_variables(
      jax.random.PRNGKey(0), {"input_tokens": (1, 16)})["params"])
  unpacked, packed = (float(our_utils.jit_loss(model, params, b)[0])
                      for b in batches)
  rtol = tolerances.float32_chain_rtol(tolerances.tiny_network_reductions(
      our_utils.TINY_CONFIG, 16, tolerances.tiny_head(kind, 16),
      len(examples) * 16))
  np.testing.assert_allclose(packed, unpacked, rtol=rtol)


@pytest.mark.parametrize("cls,pack", [
    (fc.MLMFeatureConverter, True), (fc.MLMFeatureConverter, False),
    (fc.PairClassificationFeatureConverter, True),
    (fc.PairClassificationFeatureConverter, False),
    (fc.TaggingFeatureConverter, True), (fc.TaggingFeatureConverter, False),
    (fc.QAFeatureConverter, True), (fc.QAFeatureConverter, False)])
def test_every_output_feature_has_its_model_length(cls, pack):
  """What seqio's length checks (off by default: the converter's
  docstring) would assert: each output feature, per row, is exactly as long
  as `get_model_feature_lengths` says, inputs longer than it included."""
  # 9 > the length: trimmed (QA refuses a window longer than the row,
  # tests/bad_inputs_test.py, so 8 there).
  lengths = {1: 3, 2: 8 if cls is fc.QAFeatureConverter else 9, 3: 5}
  examples = []
  for i, n in lengths.items():
    ex = {"input_tokens": [2] + [7] * (n - 2) + [3], "token_types": [0] * n}
    if "targets" in cls.TOKEN_FEATURES:
      ex.update(targets=[4] * n, weights=[1.0] * n)
    ex.update({k: i for k in cls.SCALAR_FEATURES})
    examples.append(ex)
  converter = cls(pack=pack)
  want = converter.get_model_feature_lengths({"input_tokens": 8})
  rows = list(converter(_dataset(examples), {"input_tokens": 8})
              .as_numpy_iterator())
  assert rows and len(rows) <= len(examples)
  ranks = {k: spec.rank for k, spec in converter.MODEL_FEATURES.items()}
  assert set(ranks) == set(want)
  for row in rows:
    assert set(row) == set(want)
    for name, length in want.items():
      # Rank-0 features (unpacked labels and positions) have no length.
      want_shape = () if ranks[name] == 0 else (length,)
      assert np.shape(row[name]) == want_shape, name


def test_model_feature_lengths():
  assert fc.MLMFeatureConverter(pack=True).get_model_feature_lengths(
      {"input_tokens": 16}) == {
          "input_tokens": 16, "token_types": 16, "targets": 16,
          "weights": 16, "segment_ids": 16, "positions": 16}
  lengths = fc.QAFeatureConverter(pack=False).get_model_feature_lengths(
      {"input_tokens": 8})
  assert lengths["input_tokens"] == 8 and "start_positions" in lengths
  # seqio's evaluator passes measured (shorter) lengths and lengths of
  # output features that are not task features: aligned to input_tokens.
  assert fc.TaggingFeatureConverter(pack=False).get_model_feature_lengths(
      {"input_tokens": 8, "targets": 6, "unrelated": 3})["targets"] == 8
  with pytest.raises(ValueError, match="exceeds the input_tokens length"):
    fc.TaggingFeatureConverter(pack=False).get_model_feature_lengths(
        {"input_tokens": 8, "targets": 12})
  with pytest.raises(ValueError, match="no 'input_tokens' length"):
    fc.MLMFeatureConverter().get_model_feature_lengths({"targets": 8})


def test_missing_task_feature_is_reported():
  examples = [{"input_tokens": [2, 3], "token_types": [0, 0]}]
  with pytest.raises(ValueError, match="'label'"):
    fc.PairClassificationFeatureConverter(pack=False)(
        _dataset(examples), {"input_tokens": 4})


def test_is_seqio_feature_converter():
  assert issubclass(fc.MLMFeatureConverter, seqio.FeatureConverter)
  # T5X's export reads the feature specs from the class itself.
  assert fc.PairClassificationFeatureConverter.MODEL_FEATURES["label"].rank == 0
  assert set(fc.MLMFeatureConverter.MODEL_FEATURES) == {
      "input_tokens", "token_types", "targets", "weights", "segment_ids",
      "positions"}
