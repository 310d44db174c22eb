"""Tests for rembert_t5x.runner.input_checkpoints (and inputs.InputIterator):
the input iterator's state saved beside the checkpoints and restored."""

import functools
import gc
import logging
import weakref

import numpy as np
import pytest
import seqio
import tensorflow as tf

from rembert_t5x.common import errors
from rembert_t5x.data import inputs
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import input_checkpoints
from tests import test_utils

LENGTHS = {"input_tokens": 16}


def _make(task, seed=0):
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(
      test_utils.TINY_CONFIG))
  return functools.partial(inputs.make_dataset, model, task, LENGTHS, 4,
                           "train", seed, False)


def _assert_same(got, want):
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.keys() == w.keys()
    for key in w:
      np.testing.assert_array_equal(g[key], w[key], err_msg=key)


@pytest.fixture(scope="module")
def task():
  # Shuffled by seqio (a 1000-example buffer), so the state holds a buffer.
  return test_utils.register_random_mlm_task("test_input_checkpoints",
                                             num_examples=64)


@pytest.fixture(scope="module")
def batches(task):
  """The first batches of an uninterrupted pipeline."""
  data = _make(task)()
  return [next(data) for _ in range(9)]


@pytest.mark.parametrize("skip", [0, 3])
def test_restored_iterator_continues_where_the_saved_one_stopped(
    task, batches, tmp_path, skip):
  """With `skip`, the saving pipeline was built skipping (a resume by skip)
  and the restoring one is built the same way (pipeline.json)."""
  make = _make(task)
  data = make(skip_batches=skip)
  for _ in range(2):
    next(data)
  assert input_checkpoints.save(data, tmp_path, skip + 2)
  assert sorted(p.name for p in (tmp_path / "input_iterator").iterdir()) == [
      str(skip + 2)]
  restored = input_checkpoints.restore(make, tmp_path, skip + 2)
  assert restored is not None and restored.skip_batches == skip
  _assert_same([next(restored) for _ in range(4)], batches[skip + 2:skip + 6])
  # A fresh pipeline starts elsewhere: the equality above is the restore's.
  assert not np.array_equal(batches[0]["input_tokens"],
                            batches[skip + 2]["input_tokens"])


def test_missing_or_foreign_state_is_none_with_a_warning(task, tmp_path,
                                                         caplog):
  make = _make(task)
  with caplog.at_level(logging.WARNING):
    assert input_checkpoints.restore(make, tmp_path, 4) is None
  assert "no input iterator state of step 4" in caplog.text
  assert "skipping the 4 consumed batches instead" in caplog.text
  # The state of another pipeline does not restore: here one said to have
  # been built skipping a batch (a SkipDataset that this state lacks).
  data = make()
  next(data)
  assert input_checkpoints.save(data, tmp_path, 4)
  (input_checkpoints.state_dir(tmp_path, 4) / "pipeline.json").write_text(
      '{"skip_batches": 1}')
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    assert input_checkpoints.restore(make, tmp_path, 4) is None
  assert "cannot be restored" in caplog.text


def test_a_killed_save_is_never_read_and_is_pruned(task, tmp_path):
  """A temporary left by a save killed mid-write has another name than the
  step's; restore never reads it, prune deletes it with the stale steps."""
  make = _make(task)
  data = make()
  next(data)
  for step in (2, 4, 6):
    assert input_checkpoints.save(data, tmp_path, step)
  killed = input_checkpoints.state_dir(tmp_path, 8).with_name("8.tmp-123")
  killed.mkdir()
  (killed / "state.index").write_bytes(b"half written")
  assert input_checkpoints.restore(make, tmp_path, 8) is None
  input_checkpoints.prune(tmp_path, [4, 6])
  assert sorted(p.name for p in (tmp_path / "input_iterator").iterdir()) == [
      "4", "6"]


def test_a_pipeline_tf_data_cannot_save_is_reported_and_writes_nothing(
    tmp_path, caplog):
  """Python generators (the XTREME readers, QA windows) hold state outside
  tf.data: `save` says so (INFO) and the runner resumes by skipping."""

  def dataset_fn(split, shuffle_files, seed=0):
    del split, shuffle_files, seed
    rng = np.random.default_rng(0)

    def examples():
      for _ in range(32):
        tokens = rng.integers(5, 97, 16).astype(np.int32)
        yield {"input_tokens": tokens, "token_types": np.zeros_like(tokens),
               "targets": tokens, "weights": np.ones(16, np.float32)}

    spec = {k: tf.TensorSpec([16], tf.float32 if k == "weights" else tf.int32)
            for k in ("input_tokens", "token_types", "targets", "weights")}
    return tf.data.Dataset.from_generator(examples, output_signature=spec)

  name = "test_input_checkpoints_generator"
  if name in seqio.TaskRegistry.names():
    seqio.TaskRegistry.remove(name)
  vocab = seqio.PassThroughVocabulary(97)
  seqio.TaskRegistry.add(
      name, source=seqio.FunctionDataSource(dataset_fn, splits=["train"]),
      preprocessors=[], output_features={
          k: seqio.Feature(vocab, add_eos=False,
                           dtype=tf.float32 if k == "weights" else tf.int32)
          for k in ("input_tokens", "token_types", "targets", "weights")})
  data = _make(name)()
  next(data)
  with caplog.at_level(logging.INFO):
    assert not input_checkpoints.save(data, tmp_path, 2)
  assert "cannot be checkpointed" in caplog.text
  assert not list((tmp_path / "input_iterator").iterdir())


def test_a_state_that_cannot_be_written_is_one_user_error(task, tmp_path):
  data = _make(task)()
  next(data)
  (tmp_path / "input_iterator").write_text("a file where the folder goes")
  with pytest.raises(errors.UserError, match=(
      r"input iterator state .*input_iterator/2: cannot write it: ")):
    input_checkpoints.save(data, tmp_path, 2)


def test_close_stops_the_pipeline_without_the_garbage_collector(task):
  data = _make(task)()
  next(data)
  pipeline = weakref.ref(data._iterator)  # pylint: disable=protected-access
  gc.disable()
  try:
    data.close()
    assert pipeline() is None and data.closed
  finally:
    gc.enable()
  with pytest.raises(StopIteration):
    next(data)
