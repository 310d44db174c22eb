"""Packed fine-tuning batches: layout, and the same loss and gradients.

The equivalence tests compare one example per row with the same examples
packed, on the tiny model in float32 without dropout (parameters scaled so
that a leak between packed examples shows, `PARAM_SCALE`): loss and
gradients within float32's bound for the computation, for rows with several segments,
a segment that ends at the row's last token, an empty slot, empty padding
rows, and a QA answer in the second segment of a row.
"""

import dataclasses
import functools

import jax
import numpy as np
import optax
import pytest

from rembert_t5x.common import errors
from rembert_t5x.runner import finetune_packing
from rembert_t5x.runner import train_config
from rembert_t5x.runner import train_lib
from tests import test_utils
from tests import tolerances

LENGTH = 16
# Example lengths: 16 fills a row alone; 9 + 7 end at the row's last token.
LENGTHS = (5, 16, 9, 3, 7, 4, 6, 2)


def _unpacked(kind: str, lengths=LENGTHS, seed: int = 0):
  """One example per row of LENGTH tokens (test_utils.unpacked_finetune_batch)."""
  return test_utils.unpacked_finetune_batch(kind, lengths, LENGTH, seed)


# The equivalence tests scale the initial parameters by this: attention gets
# sharp enough that letting packed examples attend to each other moves the
# loss by 1.5e-3 (pair) to 0.28 (QA) relative, far above the float32 bound
# on the loss (`_loss_rtol`, ~9e-5). At BERT's 0.02 initialisation such a
# leak moves it by only 7e-7..2e-5, inside that bound: a tolerance that
# caught it there would hold on one machine only. `test_a_leak_between_
# packed_examples_fails_the_check` keeps this true.
PARAM_SCALE = 5.0


def _params(model, seed: int):
  params = model.get_initial_variables(
      jax.random.PRNGKey(seed), {"input_tokens": (1, LENGTH)})["params"]
  return jax.tree_util.tree_map(lambda x: PARAM_SCALE * x, params)


def _loss_rtol(kind: str, length: int = LENGTH) -> float:
  """float32 bound on the loss of two evaluations of one tiny-model loss
  (tolerances.float32_chain_rtol over the encoder, head and mean)."""
  cfg = test_utils.TINY_CONFIG
  return tolerances.float32_chain_rtol(tolerances.tiny_network_reductions(
      cfg, length, tolerances.tiny_head(kind, length), len(LENGTHS) * length))


def _loss_and_grads(model, params, batch):
  """Loss and gradient without dropout, one compiled program (eagerly,
  ~350 programs compile one op each)."""
  (loss, _), grads = jax.jit(jax.value_and_grad(
      lambda p, b: model.loss_fn(p, b, None), has_aux=True))(params, batch)
  return float(loss), grads


def _assert_same_gradients(a, b, kind: str = "qa"):
  """Normwise within the float32 bound of a tiny model's gradient."""
  cfg = test_utils.TINY_CONFIG
  tolerances.assert_trees_close_normwise(
      b, a, tolerances.tiny_gradient_rtol(
          cfg, LENGTH, tolerances.tiny_head(kind, LENGTH),
          len(LENGTHS) * LENGTH), num_terms=len(LENGTHS) * LENGTH)


def test_pack_layout():
  batch = _unpacked("qa")
  packed = finetune_packing.pack(batch, max_segments=3, num_rows=6)
  assert packed["input_tokens"].shape == (6, LENGTH)
  assert packed["start_positions"].shape == (6, 3)
  rows = finetune_packing.assign_rows(np.array(LENGTHS), LENGTH, 3)
  # First fit by decreasing length, rows of <= 3: 16 | 9 7 | 6 5 4 | 3 2.
  assert rows[0] == [1] and rows[1] == [2, 4]
  assert sum(len(r) for r in rows) == len(LENGTHS)
  assert len(rows) < 6  # padding rows follow
  assert not packed["segment_ids"][len(rows):].any()
  assert not packed["slot_weights"][len(rows):].any()
  for r, members in enumerate(rows):
    offset = 0
    for s, i in enumerate(members):
      m = LENGTHS[i]
      span = slice(offset, offset + m)
      np.testing.assert_array_equal(packed["input_tokens"][r, span],
                                    batch["input_tokens"][i, :m])
      assert (packed["segment_ids"][r, span] == s + 1).all()
      np.testing.assert_array_equal(packed["positions"][r, span],
                                    np.arange(m))
      assert packed["slot_offsets"][r, s] == offset
      assert packed["start_positions"][r, s] == (
          batch["start_positions"][i] + offset)
      offset += m
    assert packed["slot_weights"][r].sum() == len(members)
  # 9 + 7: the second segment ends at the row's last token.
  assert packed["segment_ids"][1, -1] == 2
  with pytest.raises(ValueError, match="8 examples need 4 packed rows, more than 2"):
    finetune_packing.pack(batch, max_segments=3, num_rows=2)


def test_tagging_batches_are_bounded_by_the_row_only():
  batch = _unpacked("tagging")
  assert not finetune_packing.has_slot_features(batch)
  packed = finetune_packing.pack_step(batch, grad_accum_steps=1)
  assert set(packed) == set(batch)
  assert np.sum(packed["weights"]) == np.sum(batch["weights"])
  assert packed["segment_ids"].max() > 2  # 5 + 4 + 3 + 2 in one row


def test_row_buckets_bound_the_shapes():
  assert finetune_packing.row_bucket(5, 32) == 8
  assert finetune_packing.row_bucket(9, 32) == 12
  assert finetune_packing.row_bucket(32, 32) == 32
  assert finetune_packing.row_bucket(3, 32, multiple=8) == 8
  shapes = {finetune_packing.row_bucket(k, 32) for k in range(1, 33)}
  assert len(shapes) == 8


def _packed(kind: str, batch):
  # 3 slots: the row 5 + 4 + 3 (+ 2 would fit by length) is closed by the
  # slot count; rows with one or two examples have empty slots; 6 rows
  # leave padding rows.
  return finetune_packing.pack(
      batch, max_segments=3 if kind != "tagging" else LENGTH, num_rows=6)


@functools.lru_cache(maxsize=None)
def _unpacked_case(kind: str):
  """(model, params, unpacked batch, its loss and gradients) of `kind`: the
  reference both tests below compare a packed batch with."""
  model = test_utils.tiny_model(kind)
  params = _params(model, 0)
  batch = _unpacked(kind)
  return (model, params, batch, *_loss_and_grads(model, params, batch))


@pytest.mark.parametrize("kind", ["pair", "tagging", "qa"])
def test_packed_loss_and_gradients_equal_unpacked(kind):
  model, params, batch, loss, grads = _unpacked_case(kind)
  packed = _packed(kind, batch)
  packed_loss, packed_grads = _loss_and_grads(model, params, packed)
  np.testing.assert_allclose(packed_loss, loss, rtol=_loss_rtol(kind))
  _assert_same_gradients(grads, packed_grads, kind)


@pytest.mark.parametrize("kind", ["pair", "tagging", "qa"])
def test_a_leak_between_packed_examples_fails_the_check(kind):
  """The defect the equivalence test is for: examples of a row attending to
  each other (one segment id for the whole row) moves the loss by more than
  ten times its tolerance."""
  model, params, batch, loss, _ = _unpacked_case(kind)
  leaky = _packed(kind, batch)
  leaky["segment_ids"] = (leaky["segment_ids"] > 0).astype(np.int32)
  leaky_loss, _ = _loss_and_grads(model, params, leaky)
  assert abs(leaky_loss - loss) > 10 * _loss_rtol(kind) * abs(loss)


def test_qa_answer_in_a_second_segment():
  """The 7-token window after the 9-token one: its answer positions are
  shifted by 9 and its softmax sees only its own 7 tokens."""
  model = test_utils.tiny_model("qa")
  params = _params(model, 1)
  batch = {k: v[[2, 4]] for k, v in _unpacked("qa", seed=3).items()}
  packed = finetune_packing.pack(batch, max_segments=2)
  assert packed["input_tokens"].shape[0] == 1
  assert packed["start_positions"][0, 1] == batch["start_positions"][1] + 9
  loss, grads = _loss_and_grads(model, params, batch)
  packed_loss, packed_grads = _loss_and_grads(model, params, packed)
  np.testing.assert_allclose(packed_loss, loss, rtol=_loss_rtol("qa"))
  _assert_same_gradients(grads, packed_grads, "qa")


def test_qa_loss_ignores_padding():
  """An example's QA loss depends on its own tokens only: more padding (a
  longer row) changes nothing."""
  model = test_utils.tiny_model("qa")
  params = model.get_initial_variables(
      jax.random.PRNGKey(2), {"input_tokens": (1, LENGTH)})["params"]
  batch = _unpacked("qa")
  wider = {k: (np.pad(v, ((0, 0), (0, 8))) if v.ndim == 2 else v)
           for k, v in batch.items()}
  loss, _ = _loss_and_grads(model, params, batch)
  wider_loss, _ = _loss_and_grads(model, params, wider)
  np.testing.assert_allclose(wider_loss, loss, rtol=_loss_rtol("qa", 2 * LENGTH))


@pytest.mark.parametrize("kind", ["pair", "tagging", "qa"])
def test_accumulated_packed_step_equals_the_unpacked_step(kind):
  """Two packed micro batches (`pack_step`, each padded to one bucket) and
  the optimizer update equal to one unpacked step over the same batch."""
  model = test_utils.tiny_model(kind)
  tx = optax.sgd(1.0)
  schedule = optax.constant_schedule(1.0)
  params = _params(model, 0)
  state = train_lib.TrainState(step=np.int32(0), params=params,
                               opt_state=tx.init(params))
  batch = _unpacked(kind)
  rng = jax.random.PRNGKey(3)
  step = train_lib.make_train_step(model, tx, schedule, 1)
  accumulated = train_lib.make_train_step(model, tx, schedule, 2)
  packed = finetune_packing.pack_step(batch, grad_accum_steps=2,
                                      max_segments=3)
  assert packed["input_tokens"].shape[0] % 2 == 0
  assert packed["input_tokens"].shape[0] < len(LENGTHS)
  # No dropout: the step's rng feeds only dropout, so evaluate the loss
  # without it by calling the model's deterministic loss through the step.
  model_loss = model.loss_fn
  model.loss_fn = lambda p, b, rng=None: model_loss(p, b, None)
  try:
    new, metrics = jax.jit(step)(state, batch, rng)
    new_packed, metrics_packed = jax.jit(accumulated)(state, packed, rng)
  finally:
    model.loss_fn = model_loss
  np.testing.assert_allclose(float(metrics_packed["loss"]),
                             float(metrics["loss"]), rtol=_loss_rtol(kind))
  _assert_same_gradients(
      jax.tree_util.tree_map(lambda a, b: a - b, new.params, params),
      jax.tree_util.tree_map(lambda a, b: a - b, new_packed.params, params),
      kind)


def test_an_example_of_zero_tokens_is_refused():
  """An empty example would take a slot past its row's end (a NaN loss)."""
  batch = _unpacked("pair", lengths=(5, 0, 3))
  with pytest.raises(errors.UserError) as e:
    finetune_packing.check_examples(batch, "task t, batch of step 3")
  assert str(e.value) == (
      "task t, batch of step 3: example 1 (0-based row of the unpacked "
      "batch) has no tokens (segment_ids all 0); packing cannot place an "
      "empty example: its [CLS] slot would lie past its row (1 empty of 3)")
  with pytest.raises(ValueError, match=r"^pack: example 1 \(0-based row"):
    finetune_packing.pack(batch, max_segments=3)
  finetune_packing.check_examples(_unpacked("pair"), "ok")


@pytest.mark.parametrize("kind", ["pair", "tagging"])
def test_positions_are_made_when_the_batch_has_none(kind):
  """Each packed example's positions restart at 0, given or not."""
  batch = _unpacked(kind)
  without = {k: v for k, v in batch.items() if k != "positions"}
  segments = 3 if kind == "pair" else LENGTH
  packed = finetune_packing.pack(batch, max_segments=segments, num_rows=6)
  made = finetune_packing.pack(without, max_segments=segments, num_rows=6)
  assert set(made) == set(packed)
  for key in packed:
    np.testing.assert_array_equal(made[key], packed[key], err_msg=key)
    assert made[key].dtype == packed[key].dtype, key


def test_row_span_softmax_with_packing_is_refused_with_the_settings():
  """Checked by `train_config.validate`, before any data or compilation."""
  model = test_utils.tiny_model("qa")
  model.span_softmax = "row"
  config = train_config.TrainConfig(
      mixture_or_task_name="t", task_feature_lengths={"input_tokens": LENGTH},
      train_steps=1)
  with pytest.raises(errors.UserError) as e:
    train_config.validate(model, config)
  assert str(e.value) == (
      "RemBertQAModel.span_softmax='row' needs one example per row, but "
      "train.pack is None (packs the fine-tuning batches): set "
      "train.pack=False, or span_softmax='own_tokens'")
  train_config.validate(model, dataclasses.replace(config, pack=False))
