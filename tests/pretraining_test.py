"""Tests for the MLM pre-training tasks (rembert_tasks.pretraining)."""

import importlib
import os
from pathlib import Path

import numpy as np
import pytest
import seqio
import tensorflow_datasets as tfds

from rembert_t5x.data import pieces
from rembert_t5x.data import vocabulary
from rembert_t5x import feature_converters
from rembert_tasks import pretraining
from tests import test_utils

TATOEBA = test_utils.SHARED_DATA / "tatoeba"
LENGTH = 32


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """Two small 'languages' in two scripts, one file each, and their vocab."""
  tmp = tmp_path_factory.mktemp("corpus")
  rng = np.random.RandomState(0)
  words = {"en": ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far"],
           "ru": ["кошка", "сидела", "на", "ковре", "собака", "бежала"]}
  lines = {"en": 120, "ru": 30}
  for lang, ws in words.items():
    text = "\n".join(" ".join(rng.choice(ws, 7)) for _ in range(lines[lang]))
    (tmp / f"{lang}.txt").write_text(text + "\n\n", "utf-8")
  files = {lang: [str(tmp / f"{lang}.txt")] for lang in words}
  model = pieces.train_sentencepiece(files, str(tmp / "spm"), 45,
                                         character_coverage=1.0)
  return tmp, files, vocabulary.RemBertVocabulary(model)


def test_registered_on_import():
  mixture = seqio.get_mixture_or_task("rembert_mlm_mc4")
  assert len(mixture.tasks) == len(pretraining.MC4_LANGUAGES) == 101
  task = seqio.get_mixture_or_task("rembert_mlm_mc4_sw")
  assert task.source.tfds_dataset.name == "c4/multilingual:3.1.0"
  assert set(task.output_features) == {"input_tokens", "token_types",
                                       "targets", "weights"}
  wiki = seqio.get_mixture_or_task("rembert_mlm_wikipedia_iw")
  assert wiki.source.tfds_dataset.name == "wikipedia/20230601.he:1.0.0"
  assert len(seqio.get_mixture_or_task("rembert_mlm_wikipedia").tasks) == 100


def test_reimport_is_idempotent():
  before = sorted(seqio.TaskRegistry.names())
  mixtures = sorted(seqio.MixtureRegistry.names())
  importlib.reload(pretraining)
  importlib.reload(pretraining)
  assert sorted(seqio.TaskRegistry.names()) == before
  assert sorted(seqio.MixtureRegistry.names()) == mixtures
  assert "rembert_mlm_mc4_en" in before


def test_unknown_language():
  with pytest.raises(ValueError, match=r"Unknown mC4 language code\(s\) "
                     r"\['xx'\]"):
    pretraining.register_mc4_mlm(["en", "xx"], prefix="test_bad")
  with pytest.raises(ValueError, match="Unknown Wikipedia"):
    pretraining.register_wikipedia_mlm(["hmn"], prefix="test_bad")


def test_explicit_counts_give_alpha_rates(corpus):
  name = pretraining.register_mc4_mlm(
      ["en", "sw"], vocabulary=corpus[2], prefix="test_counts",
      example_counts={"en": 10_000, "sw": 100})
  mixture = seqio.get_mixture_or_task(name)
  en = seqio.get_mixture_or_task("test_counts_mc4_en")
  sw = seqio.get_mixture_or_task("test_counts_mc4_sw")
  assert mixture.get_rate(en) / mixture.get_rate(sw) == pytest.approx(10.0)


def _batches(name, num_batches):
  ds = seqio.get_dataset(
      name, task_feature_lengths={"input_tokens": LENGTH},
      dataset_split="train", shuffle=False, num_epochs=1,
      feature_converter=feature_converters.MLMFeatureConverter(pack=True),
      use_cached=False)
  return list(ds.batch(4).take(num_batches).as_numpy_iterator())


def _check_mlm_batch(batch, vocab_size, ids=pieces.TRAINED_LAYOUT):
  assert batch["input_tokens"].shape[1] == LENGTH
  real = batch["segment_ids"] > 0
  special = np.isin(batch["targets"], ids.as_tuple())
  assert (batch["weights"][~real] == 0).all()
  assert (batch["weights"][special] == 0).all()
  assert batch["weights"].sum() > 0
  assert (batch["input_tokens"] < vocab_size).all()
  changed = batch["input_tokens"] != batch["targets"]
  assert (batch["weights"][changed] == 1).all()
  # Every packed sequence starts with [CLS] at position 0.
  starts = (batch["positions"] == 0) & real
  assert (batch["targets"][starts] == ids.cls).all()


def test_local_text_shuffle_buffer_reaches_every_task(corpus):
  _, files, vocab = corpus
  name = pretraining.register_local_text_mlm(
      "test_mlm_buffer", files_by_lang=files, vocabulary=vocab,
      shuffle_buffer_size=7)
  sizes = {t.name: t.shuffle_buffer_size
           for t in seqio.get_mixture_or_task(name).tasks}
  assert sizes == {f"test_mlm_buffer_{lang}": 7 for lang in files}
  default = pretraining.register_local_text_mlm(
      "test_mlm_buffer", files_by_lang=files, vocabulary=vocab)
  assert {t.shuffle_buffer_size
          for t in seqio.get_mixture_or_task(default).tasks} == {
              seqio.dataset_providers.SHUFFLE_BUFFER_SIZE}


def test_local_text_task_end_to_end(corpus):
  tmp, files, vocab = corpus
  name = pretraining.register_local_text_mlm(
      "test_mlm_local", files_by_lang=files, vocabulary=vocab, alpha=0.5)
  assert name == "test_mlm_local"
  mixture = seqio.get_mixture_or_task(name)
  rates = {t.name: mixture.get_rate(t) for t in mixture.tasks}
  # 120 and 30 non-blank lines: rates ∝ sqrt(n).
  assert rates["test_mlm_local_en"] / rates["test_mlm_local_ru"] == (
      pytest.approx(2.0))
  task = seqio.get_mixture_or_task("test_mlm_local_ru")
  assert task.num_input_examples("train") == 30
  batches = _batches("test_mlm_local_ru", 2)
  assert batches
  for batch in batches:
    _check_mlm_batch(batch, vocab.vocab_size)
  # The unmasked text of the first sequence is the start of the file.
  first = batches[0]["targets"][0]
  body = first[(batches[0]["segment_ids"][0] == 1)][1:-1]
  assert vocab.decode(body.tolist()).startswith(
      Path(files["ru"][0]).read_text("utf-8").split("\n")[0])
  mixed = _batches(name, 2)
  _check_mlm_batch(mixed[0], vocab.vocab_size)


def test_local_text_from_directory_and_fixed_length(corpus, tmp_path):
  tmp, files, vocab = corpus
  (tmp_path / "sw").mkdir()
  (tmp_path / "sw" / "part0.txt").write_text("the cat\nsat on\n", "utf-8")
  (tmp_path / "en.txt").write_text(Path(files["en"][0]).read_text("utf-8"),
                                   "utf-8")
  name = pretraining.register_local_text_mlm(
      "test_mlm_dir", directory=str(tmp_path), vocabulary=vocab,
      sequence_length=8)
  assert {t.name for t in seqio.get_mixture_or_task(name).tasks} == {
      "test_mlm_dir_en", "test_mlm_dir_sw"}
  ds = seqio.get_mixture_or_task("test_mlm_dir_en").get_dataset(
      sequence_length={"input_tokens": LENGTH}, shuffle=False, num_epochs=1)
  lengths = [len(ex["input_tokens"]) for ex in ds.as_numpy_iterator()]
  assert max(lengths) == 8  # The fixed length wins over seqio's.


def test_local_text_bad_input(corpus, tmp_path):
  vocab = corpus[2]
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n", "utf-8")
  with pytest.raises(ValueError, match=r"empty\.txt: file is empty"):
    pretraining.register_local_text_mlm(
        "test_bad_local", {"en": [str(empty)]}, vocabulary=vocab)
  with pytest.raises(ValueError, match=r"missing\.txt: cannot read"):
    pretraining.register_local_text_mlm(
        "test_bad_local", {"en": [str(tmp_path / "missing.txt")]},
        vocabulary=vocab)
  with pytest.raises(ValueError, match="not a language code"):
    pretraining.register_local_text_mlm(
        "test_bad_local", {"english!": corpus[1]["en"]}, vocabulary=vocab)
  (tmp_path / "dir").mkdir()
  (tmp_path / "dir" / "notes.readme").write_text("x\n", "utf-8")
  with pytest.raises(ValueError, match=r"notes\.readme.*'readme'"):
    pretraining.register_local_text_mlm(
        "test_bad_local", directory=str(tmp_path / "dir"), vocabulary=vocab)
  with pytest.raises(ValueError, match="exactly one of"):
    pretraining.register_local_text_mlm("test_bad_local", vocabulary=vocab)


def test_tfds_wiring_with_mock_data(corpus):
  vocab = corpus[2]
  pretraining.register_wikipedia_mlm(["sw"], vocabulary=vocab,
                                     prefix="test_mock")
  task = seqio.get_mixture_or_task("test_mock_wikipedia_sw")
  with tfds.testing.mock_data(num_examples=6):
    ds = task.get_dataset(sequence_length={"input_tokens": 16},
                          split="train", shuffle=False, num_epochs=1,
                          try_in_mem_cache=False)
    examples = list(ds.as_numpy_iterator())
  assert examples
  for ex in examples:
    assert ex["input_tokens"][0] == vocab.cls_id
    assert ex["targets"][-1] == vocab.sep_id
    assert len(ex["input_tokens"]) <= 16


def test_tatoeba_local_text_many_scripts(tmp_path):
  if not TATOEBA.is_dir():
    if os.environ.get("CI") == "true":
      pytest.fail(f"Real test data missing: {TATOEBA} (CI=true).")
    pytest.skip(f"Real test data not found at {TATOEBA}.")
  files = {l: [str(TATOEBA / f"tatoeba.{l}-eng.{l}")]
           for l in ("tha", "cmn", "hin", "ell")}
  model = pieces.train_sentencepiece(files, str(tmp_path / "spm"), 3000)
  vocab = vocabulary.RemBertVocabulary(model)
  name = pretraining.register_local_text_mlm(
      "test_mlm_tatoeba", files_by_lang=files, vocabulary=vocab)
  for batch in _batches(name, 3):
    _check_mlm_batch(batch, vocab.vocab_size)


def test_mixture_tasks_mask_with_seeds_of_their_own(corpus, tmp_path):
  # seqio gives every task of a mixture the same seed: two languages with
  # the same text must still be masked differently (each task keys its masks
  # by its name), and a task read twice with one seed alike.
  tmp, files, vocab = corpus
  text = Path(files["en"][0]).read_text("utf-8")
  same = {}
  for lang in ("en", "de"):
    same[lang] = tmp_path / f"{lang}.txt"
    same[lang].write_text(text, "utf-8")
  pretraining.register_local_text_mlm(
      "test_mlm_seeds", files_by_lang={l: [str(p)] for l, p in same.items()},
      vocabulary=vocab, sequence_length=LENGTH)

  def weights(task_name):
    ds = seqio.get_mixture_or_task(task_name).get_dataset(
        sequence_length={"input_tokens": LENGTH}, shuffle=False,
        num_epochs=1, seed=7)
    return [(ex["targets"].tolist(), ex["weights"].tolist())
            for ex in ds.as_numpy_iterator()]

  en, de = weights("test_mlm_seeds_en"), weights("test_mlm_seeds_de")
  assert len(en) == len(de) > 5
  assert [t for t, _ in en] == [t for t, _ in de]  # the same rows ...
  # ... masked at other positions (the same mask in a row by chance: rare).
  assert sum(we != wd for (_, we), (_, wd) in zip(en, de)) > 0.8 * len(en)
  assert weights("test_mlm_seeds_en") == en
  assert (pretraining.mlm_task_seed_key("test_mlm_seeds_en") !=
          pretraining.mlm_task_seed_key("test_mlm_seeds_de"))
