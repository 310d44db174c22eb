"""Tests for the retrieval tasks (rembert_tasks.retrieval) on real Tatoeba."""

import os
import zlib
from pathlib import Path

import numpy as np
import pytest
import seqio
import tensorflow as tf
import tensorflow_datasets as tfds

from rembert_t5x import xtreme_readers
import rembert_tasks.retrieval as retrieval
from tests.xtreme_preprocessors_test import train_tiny_vocab

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LENGTHS = {"input_tokens": 64, "token_types": 64}


class _EmbedConverter(seqio.FeatureConverter):
  """Stand-in for the model's retrieval converter: pads tokens, keeps keys."""

  TASK_FEATURES = {
      "input_tokens": seqio.FeatureConverter.FeatureSpec(dtype=tf.int32),
      "token_types": seqio.FeatureConverter.FeatureSpec(dtype=tf.int32),
      "targets": seqio.FeatureConverter.FeatureSpec(dtype=tf.int32),
  }
  MODEL_FEATURES = TASK_FEATURES
  PACKING_FEATURE_DTYPES = {}

  def __init__(self):
    super().__init__(pack=False)

  def _convert_features(self, ds, task_feature_lengths):
    ds = ds.map(lambda ex: {k: ex[k] for k in self.TASK_FEATURES})
    return seqio.utils.trim_and_pad_dataset(ds, task_feature_lengths)

  def get_model_feature_lengths(self, task_feature_lengths):
    return task_feature_lengths


def _shared_data() -> Path:
  if not (SHARED_DATA / "tatoeba").is_dir():
    message = (f"real test data {SHARED_DATA / 'tatoeba'} is missing "
               "(expected ../shared/data beside the repository)")
    if os.environ.get("CI") == "true":
      pytest.fail(message)
    pytest.skip(message)
  return SHARED_DATA


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return train_tiny_vocab(tmp_path_factory.mktemp("spm"))


def _evaluate(task_name, embed, num_examples=None, split="test"):
  """seqio evaluation with `embed(model_example) -> vector` as the model."""
  evaluator = seqio.Evaluator(
      task_name, feature_converter=_EmbedConverter(),
      eval_split=split, use_cached=False, sequence_length=LENGTHS,
      num_examples=num_examples)

  def predict_fn(ds, model_feature_shapes=None):
    del model_feature_shapes
    return [(i, embed(ex)) for i, ex in ds.as_numpy_iterator()]

  metrics, _ = evaluator.evaluate(compute_metrics=True,
                                  predict_fn=predict_fn)
  return metrics.result()[task_name]


def test_default_registration():
  assert len(retrieval.TATOEBA_LANGUAGES) == 36
  configs = {c.name for c in tfds.builder_cls("tatoeba").BUILDER_CONFIGS}
  for lang in retrieval.TATOEBA_LANGUAGES:
    task = seqio.get_mixture_or_task(f"rembert_tatoeba_{lang}")
    assert task.source.tfds_dataset.name == (
        f"tatoeba/tatoeba_{lang}:1.0.0")
    assert f"tatoeba_{lang}" in configs
    assert list(task.splits) == ["test"]
  # Our ISO 639-3 file codes are the ones the TFDS builder downloads.
  from tensorflow_datasets.datasets.tatoeba import tatoeba_dataset_builder as builder  # pylint: disable=g-import-not-at-top
  assert builder._LANGS == retrieval.TATOEBA_LANGUAGES  # pylint: disable=protected-access


def test_tfds_wiring_with_mock_data(vocab):
  retrieval.register_tatoeba(vocabulary=vocab, prefix="mock_",
                             languages={"de": "deu"})
  task = seqio.get_mixture_or_task("mock_tatoeba_de")
  with tfds.testing.mock_data(num_examples=3):
    examples = list(task.get_dataset(
        LENGTHS, split="test", shuffle=False,
        try_in_mem_cache=False).as_numpy_iterator())
  assert [list(ex["targets"]) for ex in examples] == [
      [0, 0], [1, 0], [0, 1], [1, 1], [0, 2], [1, 2]]


def test_reader_on_real_tatoeba():
  data = _shared_data()
  for lang3 in ("deu", "cmn", "tha", "ara"):
    pairs = xtreme_readers.read_parallel_lines(
        *xtreme_readers.tatoeba_files(str(data), lang3))
    assert 100 <= len(pairs) <= 1000
    assert all(s and e for s, e in pairs)
  pairs = xtreme_readers.read_parallel_lines(
      *xtreme_readers.tatoeba_files(str(data), "deu"))
  assert pairs[0] == ("Maria sagte, sie wisse nicht, wo Tom sei.",
                      "Mary said she didn't know where Tom was.")


def test_local_tatoeba_task_and_metric(vocab):
  data = _shared_data()
  retrieval.register_tatoeba_local(str(data), vocabulary=vocab,
                                   prefix="test_", languages={"de": "deu"})
  task = seqio.get_mixture_or_task("test_tatoeba_de")
  examples = list(task.get_dataset(LENGTHS, split="test",
                                   shuffle=False).as_numpy_iterator())
  assert len(examples) == 2000
  assert [list(ex["targets"]) for ex in examples[:4]] == [
      [0, 0], [1, 0], [0, 1], [1, 1]]
  assert examples[1]["text"] == b"Mary said she didn't know where Tom was."
  assert all(ex["input_tokens"][0] == 2 and len(ex["input_tokens"]) <= 64
             for ex in examples)

  rng = np.random.RandomState(0)
  pair_vectors = rng.normal(size=(1000, 32))
  shuffle = rng.permutation(1000)

  def identical(ex):
    return pair_vectors[ex["targets"][1]]

  def shuffled(ex):
    side, index = ex["targets"]
    return pair_vectors[shuffle[index] if side == 1 else index]

  def char_trigrams(ex, dim=512):
    # A "model" that sees only the input ids: hashed character trigrams of
    # the decoded input.
    vector = np.zeros(dim)
    text = f"  {vocab.decode(ex['input_tokens'].tolist()).lower()}  "
    for i in range(len(text) - 2):
      vector[zlib.crc32(text[i:i + 3].encode()) % dim] += 1
    return vector

  assert _evaluate(task.name, identical) == {"accuracy": 100.0}
  assert _evaluate(task.name, shuffled)["accuracy"] < 2.0  # chance: 0.1
  # Real text, no model: shared names and numbers already beat chance.
  assert _evaluate(task.name, char_trigrams)["accuracy"] > 5.0


def test_local_bucc_task_finds_gold_among_distractors(vocab, tmp_path):
  folder = tmp_path / "bucc2018"
  folder.mkdir()
  source = [f"de-{i:06d}\tSatz {i}" for i in range(12)]
  english = [f"en-{i:06d}\tsentence {i}" for i in range(15)]
  gold = [(f"de-{i:06d}", f"en-{i + 5:06d}") for i in range(6)]
  (folder / "de-en.dev.de").write_text("\n".join(source) + "\n")
  (folder / "de-en.dev.en").write_text("\n".join(english) + "\n")
  (folder / "de-en.dev.gold").write_text(
      "\n".join("\t".join(p) for p in gold) + "\n")
  retrieval.register_bucc_local(str(tmp_path), vocabulary=vocab,
                                prefix="test_", languages=("de",))
  rng = np.random.RandomState(3)
  shared = {i: rng.normal(size=16) for i in range(6)}
  noise = {(side, i): rng.normal(size=16) for side in (0, 1)
           for i in range(15)}

  def embed(ex):
    side, index = (int(v) for v in ex["targets"])
    pair = index if side == 0 else index - 5
    if pair in shared and (side == 0 or index >= 5):
      return shared[pair] + 0.01 * noise[(side, index)]
    return noise[(side, index)]

  scores = _evaluate("test_bucc_de", embed, split="validation")
  assert scores["f1"] == 100.0
  assert scores["precision"] == 100.0 and scores["recall"] == 100.0
