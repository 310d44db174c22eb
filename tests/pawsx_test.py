"""Tests for the PAWS-X tasks (rembert_tasks.pawsx)."""


import numpy as np
import pytest
import seqio
import tensorflow_datasets as tfds

from rembert_t5x import feature_converters
import rembert_tasks.pawsx as pawsx
from tests import test_utils

LENGTHS = {"input_tokens": 12}


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return test_utils.train_tiny_vocab(tmp_path_factory.mktemp("spm"))


def test_default_registration():
  assert pawsx.PAWSX_LANGUAGES == ("de", "en", "es", "fr", "ja", "ko", "zh")
  for lang in pawsx.PAWSX_LANGUAGES:
    task = seqio.get_mixture_or_task(f"rembert_pawsx_{lang}")
    assert task.source.tfds_dataset.name == f"paws_x_wiki/{lang}:1.0.0"
    assert set(task.splits) == {"validation", "test"}
  train = seqio.get_mixture_or_task("rembert_pawsx_train_en")
  assert train.source.tfds_dataset.name == "paws_x_wiki/en:1.0.0"
  assert len(seqio.get_mixture_or_task("rembert_pawsx_zeroshot").tasks) == 8
  # The TFDS configs really exist under these names in tfds 4.9.10.
  configs = {c.name for c in tfds.builder_cls("paws_x_wiki").BUILDER_CONFIGS}
  assert set(pawsx.PAWSX_LANGUAGES) <= configs


def test_tfds_wiring_with_mock_data(vocab):
  # mock_data only checks the plumbing (features, splits, preprocessors).
  pawsx.register_pawsx(vocabulary=vocab, prefix="mock_", languages=("de",))
  task = seqio.get_mixture_or_task("mock_pawsx_de")
  with tfds.testing.mock_data(num_examples=3):
    ds = task.get_dataset(LENGTHS, split="validation", shuffle=False,
                          try_in_mem_cache=False)
    examples = list(ds.as_numpy_iterator())
  assert len(examples) == 3
  for ex in examples:
    assert ex["input_tokens"][0] == 2 and len(ex["input_tokens"]) <= 12
    assert ex["label"] in (0, 1)


def test_local_tasks_make_batches(vocab, tmp_path):
  (tmp_path / "pawsx").mkdir()
  rows = "The cat sat .\tThe cat sat .\t1\nParis is big .\tBerlin is big .\t0\n"
  for name in ("train-en.tsv", "dev-en.tsv", "dev-fr.tsv"):
    (tmp_path / "pawsx" / name).write_text(rows, encoding="utf-8")
  names = pawsx.register_pawsx_local(str(tmp_path), vocabulary=vocab,
                                     prefix="test_", languages=("en", "fr"))
  assert names == ["test_pawsx_train_en", "test_pawsx_en", "test_pawsx_fr"]
  task = seqio.get_mixture_or_task("test_pawsx_fr")
  ds = task.get_dataset(LENGTHS, split="validation", shuffle=False)
  converter = feature_converters.PairClassificationFeatureConverter(
      pack=False)
  batch = next(converter(ds, LENGTHS).batch(2).as_numpy_iterator())
  np.testing.assert_array_equal(batch["label"], [1, 0])
  assert batch["input_tokens"].shape == (2, 12)
  # Identical sentences: the second segment repeats the first one's ids.
  first = batch["input_tokens"][0]
  types = batch["token_types"][0]
  a = first[1:np.argmax(first == 3)]
  b = first[(types == 1)][:-1]
  np.testing.assert_array_equal(a[:len(b)], b)

  bad = tmp_path / "pawsx" / "dev-en.tsv"
  bad.write_text("x\ty\t2\n", encoding="utf-8")
  with pytest.raises(ValueError,
                     match=r"dev-en.tsv, line 1: field 'label' has value '2'"):
    seqio.get_mixture_or_task("test_pawsx_en").get_dataset(
        LENGTHS, split="validation", shuffle=False)
