"""Tests for the PAN-X (WikiANN NER) tasks (rembert_tasks.panx)."""


import numpy as np
import pytest
import seqio
import tensorflow_datasets as tfds

from rembert_t5x import feature_converters
from rembert_t5x.scoring import metrics
import rembert_tasks.panx as panx
from tests import test_utils

# Raw PAN-X layout: every token carries a "{lang}:" prefix.
DEV_DE = ("de:Angela\tB-PER\nde:Merkel\tI-PER\nde:sprach\tO\nde:in\tO\n"
          "de:Berlin\tB-LOC\nde:.\tO\n\n"
          "de:Die\tO\nde:Vereinten\tB-ORG\nde:Nationen\tI-ORG\n\n"
          "de:Der\tO\nde:Hund\tO\n")
LENGTHS = {"input_tokens": 48}


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return test_utils.train_tiny_vocab(tmp_path_factory.mktemp("spm"))


@pytest.fixture(scope="module")
def local_task(vocab, tmp_path_factory):
  root = tmp_path_factory.mktemp("download")
  (root / "panx").mkdir()
  (root / "panx" / "dev-de.tsv").write_text(DEV_DE, encoding="utf-8")
  (root / "panx" / "train-en.tsv").write_text(
      DEV_DE.replace("de:", "en:"), encoding="utf-8")
  panx.register_panx_local(str(root), vocabulary=vocab, prefix="test_",
                           languages=("de",))
  return seqio.get_mixture_or_task("test_panx_de")


def test_default_registration():
  assert len(panx.PANX_LANGUAGES) == 40
  for lang in panx.PANX_LANGUAGES:
    task = seqio.get_mixture_or_task(f"rembert_panx_{lang}")
    assert task.source.tfds_dataset.name == f"wikiann/{lang}:1.0.0"
  configs = {c.name for c in tfds.builder_cls("wikiann").BUILDER_CONFIGS}
  assert set(panx.PANX_LANGUAGES) <= configs
  assert len(seqio.get_mixture_or_task("rembert_panx_zeroshot").tasks) == 41


def test_labels_match_tfds_class_label(tmp_path):
  builder = tfds.builder("wikiann/en:1.0.0", data_dir=str(tmp_path))
  assert tuple(builder.info.features["tags"].feature.names) == panx.LABELS


def test_local_task_examples_and_batches(local_task):
  ds = local_task.get_dataset(LENGTHS, split="validation", shuffle=False)
  examples = list(ds.as_numpy_iterator())
  assert [list(ex["tokens"]) for ex in examples][1] == [
      b"Die", b"Vereinten", b"Nationen"]
  for ex in examples:
    # One weight per word (nothing truncated at this length), on tag ids.
    assert ex["weights"].sum() == len(ex["tags"])
    np.testing.assert_array_equal(ex["targets"][ex["weights"] > 0],
                                  ex["tags"])
  converter = feature_converters.TaggingFeatureConverter(pack=False)
  batch = next(converter(ds, LENGTHS).batch(3).as_numpy_iterator())
  for name in ("input_tokens", "token_types", "targets", "weights"):
    assert batch[name].shape == (3, 48), name


def _evaluate(task_name, predict, length=LENGTHS["input_tokens"]):
  """Runs seqio's evaluator with `predict(model_example) -> tag ids`."""
  evaluator = seqio.Evaluator(
      task_name,
      feature_converter=feature_converters.TaggingFeatureConverter(
          pack=False),
      eval_split="validation", use_cached=False,
      # The evaluator fills unnamed lengths from the data, so name them all.
      sequence_length={name: length for name in (
          "input_tokens", "token_types", "targets", "weights")})

  def predict_fn(ds, model_feature_shapes=None):
    del model_feature_shapes
    return [(i, predict(ex)) for i, ex in ds.as_numpy_iterator()]

  metrics, _ = evaluator.evaluate(compute_metrics=True,
                                  predict_fn=predict_fn)
  return metrics.result()[task_name]


def test_seqio_evaluation_entity_f1(local_task):
  # A perfect tagger predicts the gold tag on every first sub-token (and
  # anything elsewhere: those positions are ignored).
  perfect = _evaluate(local_task.name,
                      lambda ex: np.where(ex["weights"] > 0, ex["targets"], 5))
  assert perfect == {"f1": 100.0}
  nothing = _evaluate(local_task.name,
                      lambda ex: np.zeros_like(ex["targets"]))
  assert nothing == {"f1": 0.0}


def _dev_sentences():
  sentences = [[line.split("\t") for line in block.splitlines()]
               for block in DEV_DE.strip().split("\n\n")]
  return ([[w.split(":", 1)[1] for w, _ in s] for s in sentences],
          [[t for _, t in s] for s in sentences])


def test_long_sentences_are_split_and_scored_whole(local_task, vocab):
  words, gold = _dev_sentences()
  length = 6  # 4 sub-tokens per part: every sentence here is longer
  assert all(sum(len(vocab.encode(w)) for w in s) > length - 2 for s in words)
  parts = list(local_task.get_dataset(
      {"input_tokens": length}, split="validation",
      shuffle=False).as_numpy_iterator())
  assert len(parts) > len(words)
  # Every word is in exactly one part, in order, with its first sub-token
  # labelled (nothing is cut).
  assert [w.decode() for p in parts for w in p["tokens"]] == [
      w for s in words for w in s]
  for part in parts:
    assert part["weights"].sum() == len(part["tags"])
  # A perfect tagger scores 100 over all words of every sentence.
  perfect = _evaluate(local_task.name,
                      lambda ex: np.where(ex["weights"] > 0, ex["targets"], 5),
                      length=length)
  assert perfect == {"f1": 100.0}
  # A tagger that writes B- for every I- breaks each multi-word entity into
  # single words. Scored over whole sentences (XTREME's evaluate.py) only
  # Berlin is right: 1 of 3 gold and 5 predicted entities.
  names = panx.LABELS
  to_b = np.array([names.index(n.replace("I-", "B-")) for n in names])
  split_entities = _evaluate(
      local_task.name,
      lambda ex: np.where(ex["weights"] > 0, to_b[ex["targets"]], 0),
      length=length)
  predicted = [[n.replace("I-", "B-") for n in s] for s in gold]
  assert split_entities["f1"] == pytest.approx(
      100 * metrics.entity_f1(gold, predicted))
  assert split_entities["f1"] == pytest.approx(100 * 2 * 1 / (3 + 5))
  # Scored part by part (run_tag.py's dev loop), an entity cut at a part
  # boundary would be two gold entities and count as right.
  part_gold = [[names[t] for t in p["tags"]] for p in parts]
  part_predicted = [[n.replace("I-", "B-") for n in g] for g in part_gold]
  assert metrics.entity_f1(part_gold, part_predicted) > 0.25
