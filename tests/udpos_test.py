"""Tests for the UD-POS tasks (rembert_tasks.udpos)."""

import inspect

import numpy as np
import pytest
import seqio
import tensorflow_datasets as tfds

from rembert_t5x import feature_converters
import rembert_tasks.udpos as udpos
from tests import test_utils

# XTREME's udpos/{split}-{lang}.tsv: word<TAB>UPOS, blank line between.
DEV_FR = ("Le\tDET\nchat\tNOUN\nest\tAUX\nassis\tVERB\n.\tPUNCT\n\n"
          "Il\tPRON\npleut\tVERB\n.\tPUNCT\n")
LENGTHS = {"input_tokens": 16}


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return test_utils.train_tiny_vocab(tmp_path_factory.mktemp("spm"))


def test_default_registration_and_tfds_names():
  assert len(udpos.UDPOS_LANGUAGES) == 33
  configs = {c.name for c in tfds.builder_cls("xtreme_pos").BUILDER_CONFIGS}
  for lang in udpos.UDPOS_LANGUAGES:
    task = seqio.get_mixture_or_task(f"rembert_udpos_{lang}")
    name = task.source.tfds_dataset.name
    assert name.split("/")[1].split(":")[0] in configs
  assert len(seqio.get_mixture_or_task("rembert_udpos_zeroshot").tasks) == 34
  assert udpos.tfds_name("en") == "xtreme_pos/xtreme_pos_en:1.0.0"
  assert set(seqio.get_mixture_or_task("rembert_udpos_th").splits) == {"test"}
  assert set(seqio.get_mixture_or_task("rembert_udpos_de").splits) == {
      "validation", "test"}


def test_tagalog_tamil_swap_matches_tfds_source():
  # Read the installed builder: its language table is what the mapping in
  # udpos.TFDS_CONFIG_LANGUAGE works around.
  from tensorflow_datasets.datasets.xtreme_pos import xtreme_pos_dataset_builder as builder  # pylint: disable=g-import-not-at-top
  assert builder._LANGS["ta"] == "Tagalog"  # pylint: disable=protected-access
  assert builder._LANGS["tl"] == "Tamil"  # pylint: disable=protected-access
  assert udpos.tfds_name("ta") == "xtreme_pos/xtreme_pos_tl:1.0.0"
  assert udpos.tfds_name("tl") == "xtreme_pos/xtreme_pos_ta:1.0.0"
  # Test-only languages as the builder's split logic has them.
  source = inspect.getsource(builder.Builder._split_generators)  # pylint: disable=protected-access
  assert '["Tagalog", "Thai", "Yoruba"]' in source


def test_labels_match_tfds_class_label(tmp_path):
  info = tfds.builder("xtreme_pos/xtreme_pos_en:1.0.0",
                      data_dir=str(tmp_path)).info
  assert tuple(info.features["upos"].feature.names) == udpos.LABELS


def test_local_task_batches_and_accuracy(vocab, tmp_path):
  (tmp_path / "udpos").mkdir()
  (tmp_path / "udpos" / "dev-fr.tsv").write_text(DEV_FR, encoding="utf-8")
  udpos.register_udpos_local(str(tmp_path), vocabulary=vocab, prefix="test_",
                             languages=("fr",))
  task = seqio.get_mixture_or_task("test_udpos_fr")
  ds = task.get_dataset(LENGTHS, split="validation", shuffle=False)
  examples = list(ds.as_numpy_iterator())
  assert [list(ex["tags"]) for ex in examples] == [[5, 7, 3, 15, 12],
                                                    [10, 15, 12]]
  converter = feature_converters.TaggingFeatureConverter(pack=False)
  batch = next(converter(ds, LENGTHS).batch(2).as_numpy_iterator())
  assert batch["targets"].shape == (2, 16)
  assert batch["weights"].sum() == 8  # one per word

  (metric,) = task.metric_fns
  targets = [task.postprocess_fn(None, example=ex, is_target=True)
             for ex in examples]
  assert targets[1] == ["PRON", "VERB", "PUNCT"]
  perfect = [task.postprocess_fn(ex["targets"], example=ex)
             for ex in examples]
  assert metric(targets, perfect) == {"f1": 100.0, "accuracy": 100.0}
  # Everything tagged NOUN: only "chat" is right, 1 of 8 words; for seqeval
  # each sentence is one NOUN run (one chunk of 5 words, one of 3) and none
  # of the 8 gold chunks matches.
  nouns = [task.postprocess_fn(np.full(16, 7), example=ex)
           for ex in examples]
  assert metric(targets, nouns) == {"f1": 0.0, "accuracy": 12.5}


def test_long_sentences_split_and_every_word_scored(vocab, tmp_path):
  (tmp_path / "udpos").mkdir()
  (tmp_path / "udpos" / "dev-fr.tsv").write_text(DEV_FR, encoding="utf-8")
  udpos.register_udpos_local(str(tmp_path), vocabulary=vocab, prefix="split_",
                             languages=("fr",))
  task = seqio.get_mixture_or_task("split_udpos_fr")
  length = 5  # 3 sub-tokens per part: the first sentence needs several
  parts = list(task.get_dataset({"input_tokens": length}, split="validation",
                                shuffle=False).as_numpy_iterator())
  assert len(parts) > 2
  assert [int(t) for p in parts for t in p["tags"]] == [5, 7, 3, 15, 12,
                                                         10, 15, 12]
  (metric,) = task.metric_fns
  targets = [task.postprocess_fn(None, example=p, is_target=True)
             for p in parts]
  nouns = [task.postprocess_fn(np.full(length, 7), example=p) for p in parts]
  perfect = [task.postprocess_fn(p["targets"], example=p) for p in parts]
  # The same scores as on whole sentences: every word counted once, the
  # parts joined before seqeval.
  assert metric(targets, perfect) == {"f1": 100.0, "accuracy": 100.0}
  assert metric(targets, nouns) == {"f1": 0.0, "accuracy": 12.5}
