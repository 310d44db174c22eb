"""Tests for the retrieval tasks (rembert_tasks.retrieval) on real Tatoeba."""

import dataclasses
import os
import zlib
from pathlib import Path

import jax
import numpy as np
import pytest
import seqio
import tensorflow_datasets as tfds

from rembert_t5x.data import xtreme_readers
from rembert_t5x import feature_converters
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import eval as eval_lib
import rembert_tasks.retrieval as retrieval
from tests import test_utils

# Minutes, not seconds: `-m 'not slow'` leaves it out of a quick loop
# (.ci/run runs everything).
pytestmark = pytest.mark.slow

SHARED_DATA = test_utils.SHARED_DATA
LENGTHS = {"input_tokens": 64, "token_types": 64}


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
  return test_utils.train_tiny_vocab(tmp_path_factory.mktemp("spm"))


class _Scorer:
  """seqio evaluation of one task with `embed(side, index, model_example)`.

  The evaluator is built (and the task tokenised) once; the model features
  (those of the real RetrievalFeatureConverter) do not carry the sentence
  key, so `embed` gets it from the example's position.
  """

  def __init__(self, task_name, split="test"):
    self.task_name = task_name
    self.evaluator = seqio.Evaluator(
        task_name,
        feature_converter=feature_converters.RetrievalFeatureConverter(),
        eval_split=split, use_cached=False, sequence_length=LENGTHS)
    self.keys = [tuple(int(v) for v in ex["targets"]) for ex in
                 self.evaluator.cached_task_datasets[task_name]
                 .as_numpy_iterator()]

  def __call__(self, embed):
    def predict_fn(ds, model_feature_shapes=None):
      del model_feature_shapes
      return [(i, embed(*self.keys[i], ex)) for i, ex in ds.as_numpy_iterator()]

    metrics, _ = self.evaluator.evaluate(compute_metrics=True,
                                         predict_fn=predict_fn)
    return metrics.result()[self.task_name]


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

  def identical(side, index, ex):
    del side, ex
    return pair_vectors[index]

  def shuffled(side, index, ex):
    del ex
    return pair_vectors[shuffle[index] if side == 1 else index]

  def char_trigrams(side, index, ex, dim=512):
    # A "model" that sees only the input ids: hashed character trigrams of
    # the decoded input.
    del side, index
    vector = np.zeros(dim)
    text = f"  {vocab.decode(ex['input_tokens'].tolist()).lower()}  "
    for i in range(len(text) - 2):
      vector[zlib.crc32(text[i:i + 3].encode()) % dim] += 1
    return vector

  score = _Scorer(task.name)
  assert score(identical) == {"accuracy": 100.0}
  assert score(shuffled)["accuracy"] < 2.0  # chance: 0.1
  # Real text, no model: shared names and numbers already beat chance.
  assert score(char_trigrams)["accuracy"] > 5.0


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

  def embed(side, index, ex):
    del ex
    pair = index if side == 0 else index - 5
    if pair in shared and (side == 0 or index >= 5):
      return shared[pair] + 0.01 * noise[(side, index)]
    return noise[(side, index)]

  scores = _Scorer("test_bucc_de", split="validation")(embed)
  assert scores["f1"] == 100.0
  assert scores["precision"] == 100.0 and scores["recall"] == 100.0


# --- The retrieval model class on real Tatoeba pairs --------------------------


def _random_model(vocab, seed=0):
  """A tiny RemBertRetrievalModel with random weights and its params."""
  config = dataclasses.replace(
      test_utils.TINY_CONFIG, vocab_size=vocab.vocab_size,
      max_position_embeddings=LENGTHS["input_tokens"])
  model = models.RemBertRetrievalModel(network.RemBertForRetrieval(config))
  # One compiled init (eager init compiles every op on its own).
  init = jax.jit(lambda rng: model.get_initial_variables(
      rng, {"input_tokens": (2, 8)})["params"])
  return model, init(jax.random.PRNGKey(seed))


def _tatoeba_copy(directory, pairs, code="xxx"):
  """Writes line-aligned pairs in the LASER Tatoeba layout; returns the dir."""
  folder = directory / "tatoeba"
  folder.mkdir(parents=True)
  for side, lines in ((code, [s for s, _ in pairs]),
                      ("eng", [e for _, e in pairs])):
    (folder / f"tatoeba.{code}-eng.{side}").write_text(
        "".join(line + "\n" for line in lines), encoding="utf-8")
  return directory


def test_random_weight_model_is_near_chance_on_real_tatoeba(vocab, tmp_path):
  data = _shared_data()
  # The first 500 German-English pairs (a subset keeps the test short).
  pairs = xtreme_readers.read_parallel_lines(
      *xtreme_readers.tatoeba_files(str(data), "deu"))[:500]
  retrieval.register_tatoeba_local(
      str(_tatoeba_copy(tmp_path / "de", pairs, "deu")), vocabulary=vocab,
      prefix="model_", languages={"de": "deu"})
  model, params = _random_model(vocab)
  # The real local evaluation path (rembert_t5x.runner.eval), real model class.
  scores = eval_lib.evaluate_params(model, params, "model_tatoeba_de", "test",
                                    LENGTHS, batch_size=100)
  chance = 100.0 / len(pairs)  # 0.2: one right answer among 500
  assert scores["model_tatoeba_de"]["accuracy"] < 10 * chance
  # The same random encoder finds an English sentence among English
  # sentences (identical text, identical embedding): the sides, the keys and
  # the pooling line up, so the low score above is the weights', not the
  # pipeline's. Distinct sentences only, so every query has one answer.
  english = list(dict.fromkeys(e for _, e in pairs))
  retrieval.register_tatoeba_local(
      str(_tatoeba_copy(tmp_path / "en", [(e, e) for e in english])),
      vocabulary=vocab, prefix="copy_", languages={"en": "xxx"})
  scores = eval_lib.evaluate_params(model, params, "copy_tatoeba_en", "test",
                                    LENGTHS, batch_size=100)
  assert scores["copy_tatoeba_en"]["accuracy"] == 100.0


def _bucc_from_tatoeba(root, pairs, rng):
  """A BUCC-layout corpus: gold pairs among sentences with no translation.

  German sentences of pairs [0, 2n/3), English of pairs [n/3, n): the middle
  third are the gold pairs, the rest distractors; rows are shuffled and
  carry BUCC-style ids.
  """
  n = len(pairs)
  german = [(f"de-{i:06d}", pairs[i][0]) for i in range(2 * n // 3)]
  english = [(f"en-{i:06d}", pairs[i][1]) for i in range(n // 3, n)]
  gold = [(f"de-{i:06d}", f"en-{i:06d}") for i in range(n // 3, 2 * n // 3)]
  folder = root / "bucc2018"
  folder.mkdir()
  for suffix, rows in (("de", german), ("en", english)):
    rows = [rows[i] for i in rng.permutation(len(rows))]
    (folder / f"de-en.dev.{suffix}").write_text(
        "".join(f"{i}\t{s}\n" for i, s in rows), encoding="utf-8")
  (folder / "de-en.dev.gold").write_text(
      "".join(f"{a}\t{b}\n" for a, b in gold), encoding="utf-8")
  return xtreme_readers.bucc_files(str(root), "de", "dev")


def test_bucc_on_tatoeba_pairs_with_distractors(vocab, tmp_path):
  data = _shared_data()
  pairs = xtreme_readers.read_parallel_lines(
      *xtreme_readers.tatoeba_files(str(data), "deu"))[:240]
  # Distinct sentences on each side, so every gold pair can be extracted
  # (XTREME drops sentences that occur under two ids).
  seen_de, seen_en, distinct = set(), set(), []
  for de, en in pairs:
    if de not in seen_de and en not in seen_en:
      distinct.append((de, en))
    seen_de.add(de)
    seen_en.add(en)
  rng = np.random.RandomState(0)
  files = _bucc_from_tatoeba(tmp_path, distinct, rng)
  retrieval.register_bucc_local(str(tmp_path), vocabulary=vocab,
                                prefix="model_", languages=("de",))
  rows = [[text for _, text in xtreme_readers.read_bucc_sentences(path)]
          for path in (files["source"], files["target"])]
  pair_of = {text: i for i, (de, en) in enumerate(distinct)
             for text in (de, en)}
  vectors = rng.normal(size=(len(distinct), 32))

  def oracle(side, index, ex):
    del ex  # one vector per translation pair, whatever the side
    return vectors[pair_of[rows[side][index]]]

  scores = _Scorer("model_bucc_de", split="validation")(oracle)
  assert scores["f1"] == 100.0
  model, params = _random_model(vocab)
  scores = eval_lib.evaluate_params(model, params, "model_bucc_de",
                                    "validation", LENGTHS, batch_size=100)
  # A random encoder mines next to nothing; the threshold tuned on the gold
  # can at best keep a lucky pair or two.
  assert scores["model_bucc_de"]["f1"] < 10.0
