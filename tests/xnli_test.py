"""Tests for the XNLI tasks (rembert_tasks.xnli)."""

import importlib

import numpy as np
import pytest
import seqio

from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x import feature_converters
import rembert_tasks.xnli as xnli
from tests import test_utils

DEV = ("The cat sat .\tA cat sits .\tentailment\n"
       "The dog runs .\tNo dog moves .\tcontradiction\n"
       '"Paris" is big .\tParis is in France .\tneutral\n')


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return test_utils.train_tiny_vocab(tmp_path_factory.mktemp("spm"))


@pytest.fixture(scope="module")
def xtreme_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("download")
  (root / "xnli").mkdir()
  (root / "xnli" / "train-en.tsv").write_text(DEV * 2, encoding="utf-8")
  for lang in ("en", "de"):
    (root / "xnli" / f"dev-{lang}.tsv").write_text(DEV, encoding="utf-8")
    # XTREME's test files carry no labels.
    (root / "xnli" / f"test-{lang}.tsv").write_text(
        "a\tb\n", encoding="utf-8")
  return root


def test_default_registration():
  names = set(seqio.TaskRegistry.names())
  assert "rembert_xnli_train_en" in names
  for lang in xnli.XNLI_LANGUAGES:
    task = seqio.get_mixture_or_task(f"rembert_xnli_{lang}")
    assert task.source.tfds_dataset.name == "xnli:1.1.0"
    assert set(task.splits) == {"validation", "test"}
  assert len(xnli.XNLI_LANGUAGES) == 15
  train = seqio.get_mixture_or_task("rembert_xnli_train_en")
  assert train.source.tfds_dataset.name == "multi_nli:1.1.0"
  assert list(train.splits) == ["train"]
  mixture = seqio.get_mixture_or_task("rembert_xnli_zeroshot")
  assert len(mixture.tasks) == 16
  assert set(train.output_features) == {"input_tokens", "token_types",
                                        "targets"}


def test_reimport_is_idempotent():
  before = sorted(seqio.TaskRegistry.names())
  importlib.reload(xnli)
  xnli.register_xnli()
  assert sorted(seqio.TaskRegistry.names()) == before


def test_local_tasks_make_batches(vocab, xtreme_dir):
  names = xnli.register_xnli_local(str(xtreme_dir), vocabulary=vocab,
                                   prefix="test_", languages=("en", "de"))
  assert names == ["test_xnli_train_en", "test_xnli_en", "test_xnli_de"]
  lengths = {"input_tokens": 16}
  task = seqio.get_mixture_or_task("test_xnli_de")
  ds = task.get_dataset(lengths, split="validation", shuffle=False)
  examples = list(ds.as_numpy_iterator())
  assert [int(ex["label"]) for ex in examples] == [0, 2, 1]
  for ex in examples:
    assert ex["input_tokens"][0] == 2 and ex["input_tokens"][-1] == 3
    assert len(ex["input_tokens"]) <= 16

  converter = feature_converters.PairClassificationFeatureConverter(
      pack=False)
  batch = next(converter(ds, lengths).batch(3).as_numpy_iterator())
  assert batch["input_tokens"].shape == (3, 16)
  assert batch["token_types"].shape == (3, 16)
  np.testing.assert_array_equal(batch["label"], [0, 2, 1])

  # Training reads the mixture: only the English train task has "train".
  mixture = seqio.get_mixture_or_task("test_xnli_zeroshot")
  train = mixture.get_dataset(lengths, split="train", shuffle=False)
  assert len(list(train.take(6).as_numpy_iterator())) == 6

  # XTREME's test files carry no labels: read for prediction, every label
  # NO_LABEL (no gold; submission folders are how test predictions leave).
  test = list(task.get_dataset(lengths, split="test", shuffle=False)
              .as_numpy_iterator())
  assert test and all(int(ex["label"]) == xp.NO_LABEL for ex in test)


def test_local_postprocess_and_metric(vocab, xtreme_dir):
  xnli.register_xnli_local(str(xtreme_dir), vocabulary=vocab, prefix="test_",
                           languages=("de",))
  task = seqio.get_mixture_or_task("test_xnli_de")
  examples = list(task.get_dataset({"input_tokens": 16}, split="validation",
                                   shuffle=False).as_numpy_iterator())
  # What seqio's evaluator does: targets from the example, predictions from
  # the model output (a length-1 class id row per example).
  targets = [task.postprocess_fn(list(ex["targets"]),
                                 example=ex, is_target=True)
             for ex in examples]
  perfect = [task.postprocess_fn([t], example=ex)
             for t, ex in zip(targets, examples)]
  wrong = [task.postprocess_fn([(t + 1) % 3], example=ex)
           for t, ex in zip(targets, examples)]
  (metric,) = task.metric_fns
  assert metric(targets, perfect) == {"accuracy": 100.0}
  assert metric(targets, wrong) == {"accuracy": 0.0}


def test_local_tasks_registered_from_env(xtreme_dir, monkeypatch):
  monkeypatch.setenv(xnli.XTREME_DIR_ENV, str(xtreme_dir))
  importlib.reload(xnli)
  task = seqio.get_mixture_or_task("rembert_local_xnli_de")
  assert set(task.splits) == {"validation", "test"}
  assert "rembert_local_xnli_zeroshot" in seqio.MixtureRegistry.names()
