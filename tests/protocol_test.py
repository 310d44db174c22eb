"""Tests for rembert_t5x.protocol: steps of a packed T5X fine-tuning epoch."""

import numpy as np
import seqio
import tensorflow as tf

from rembert_t5x import protocol


def test_greedy_rows_pack_in_order_one_open_row():
  # 5 + 3 fit in 8; 6 does not fit beside them; 2 fits beside 6.
  assert protocol.greedy_rows([5, 3, 6, 2], 8) == 2
  assert protocol.greedy_rows([5, 6, 3], 8) == 3  # in order, no look-back
  assert protocol.greedy_rows([8] * 3, 8) == 3
  assert protocol.greedy_rows([], 8) == 0
  # seqio packs `length` examples at a time: the open row closes there.
  assert protocol.greedy_rows([1] * 5, 4) == 2
  assert protocol.greedy_rows([20], 8) == 1  # trimmed to the row


def test_packed_epoch_counts_rows():
  lengths = [3, 4, 9, 2, 2, 7, 5, 1] * 4
  tokens = np.zeros((len(lengths), 16), np.int32)
  for i, n in enumerate(lengths):
    tokens[i, :n] = 5

  def dataset_fn(split, shuffle_files, seed=None):
    del split, shuffle_files, seed
    return tf.data.Dataset.from_tensor_slices({"input_tokens": tokens})

  def strip(ex):
    n = tf.reduce_sum(tf.cast(ex["input_tokens"] > 0, tf.int32))
    return {"input_tokens": ex["input_tokens"][:n]}

  name = "protocoltest_packed"
  seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(
      name, source=seqio.FunctionDataSource(dataset_fn, splits=["train"]),
      preprocessors=[seqio.map_over_dataset(strip)],
      output_features={"input_tokens": seqio.Feature(
          seqio.PassThroughVocabulary(100), add_eos=False)})
  rows = protocol.greedy_rows(lengths, 10)
  assert rows < len(lengths)
  assert protocol.train_steps(name, 4, epochs=2) == 2 * 8  # 32 examples
  assert protocol.train_steps(
      name, 4, epochs=2, pack=True,
      task_feature_lengths={"input_tokens": 10}) == 2 * -(-rows // 4)
