"""Length-sorted evaluation batches (`runner.predict_batches`) give the
predictions and metrics of full-length batches, on real text.

The tasks are the local XTREME ones (PAWS-X, PAN-X, XQuAD, Tatoeba) over
files made from ../shared/data: Tatoeba's German-English pairs as PAWS-X
rows (a pair is a translation or not), its German sentences as PAN-X rows
(capitalised words after the first tagged B-LOC), real XQuAD paragraphs,
and a Tatoeba retrieval task; a small SentencePiece vocabulary trained on
the same text, and randomly initialised tiny models.
"""

import json

import jax
import numpy as np
import pytest

from rembert_t5x.data import pieces
from rembert_t5x.data import qa
from rembert_t5x.data import vocabulary
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import eval as eval_lib
from rembert_t5x.runner import predict_batches
from rembert_tasks import panx
from rembert_tasks import pawsx
from rembert_tasks import qa as qa_tasks
from rembert_tasks import retrieval
from tests import test_utils

PREFIX = "packtest_"
LENGTH = 128  # XTREME's rows for pairs, tags and retrieval
QA_LENGTH = qa.MAX_SEQ_LENGTH  # and for QA windows (384)
BATCH = 16
SENTENCES = 160  # of each Tatoeba file: the pair, tagging, retrieval tasks
VOCAB_SIZE = 1000

CONFIG = network.RemBertConfig(
    vocab_size=VOCAB_SIZE, input_embed_dim=16, emb_dim=32,
    output_embed_dim=24, num_layers=2, num_heads=2, head_dim=16, mlp_dim=64,
    max_position_embeddings=QA_LENGTH)


def _write(path, text):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
  """{family: (task name, split)} of tasks over real text."""
  tatoeba = test_utils.shared_data_dir("tatoeba")
  xquad = test_utils.shared_data_dir("xquad")
  root = tmp_path_factory.mktemp("xtreme")
  german = (tatoeba / "tatoeba.deu-eng.deu").read_text("utf-8").splitlines()
  english = (tatoeba / "tatoeba.deu-eng.eng").read_text("utf-8").splitlines()
  german, english = german[:SENTENCES], english[:SENTENCES]
  paragraphs = json.loads((xquad / "xquad.de.json").read_text("utf-8"))[
      "data"][0]["paragraphs"]

  corpus = root / "corpus.txt"
  _write(corpus, "\n".join(german + english +
                           [p["context"] for p in paragraphs] +
                           [q["question"] for p in paragraphs
                            for q in p["qas"]]))
  vocab = vocabulary.RemBertVocabulary(pieces.train_sentencepiece(
      {"xx": [str(corpus)]}, str(root / "spm"), vocab_size=VOCAB_SIZE,
      character_coverage=1.0))

  # Every other pair is a translation; the others pair sentence i with
  # the English of sentence i + 7.
  _write(root / "pawsx" / "dev-de.tsv", "".join(
      f"{de}\t{english[i if i % 2 else (i + 7) % len(english)]}\t{i % 2}\n"
      for i, de in enumerate(german)))
  _write(root / "panx" / "dev-de.tsv", "\n".join(
      "".join(f"de:{word}\t{'B-LOC' if j and word[0].isupper() else 'O'}\n"
              for j, word in enumerate(sentence.split()))
      for sentence in german))
  _write(root / "tatoeba" / "tatoeba.deu-eng.deu", "\n".join(german) + "\n")
  _write(root / "tatoeba" / "tatoeba.deu-eng.eng", "\n".join(english) + "\n")
  _write(root / qa_tasks.LOCAL_FILES["xquad_test"].format(lang="de"),
         json.dumps({"version": "1.1", "data": [
             {"title": "t", "paragraphs": paragraphs}]}, ensure_ascii=False))

  data = str(root)
  pawsx.register_pawsx_local(data, vocab, PREFIX, ("de",))
  panx.register_panx_local(data, vocab, PREFIX, ("de",))
  retrieval.register_tatoeba_local(data, vocab, PREFIX, {"de": "deu"})
  # XTREME's windows (384 tokens, stride 128): a short paragraph is one
  # window, a long one several, the last of them shorter.
  qa_tasks.register_qa_local(
      data, vocabulary=vocab, prefix=PREFIX, xquad_languages=("de",),
      mlqa_languages=(), tydiqa_languages=())
  return {"pair": (f"{PREFIX}pawsx_de", "validation"),
          "tagging": (f"{PREFIX}panx_de", "validation"),
          "qa": (f"{PREFIX}xquad_de", "test"),
          "retrieval": (f"{PREFIX}tatoeba_de", "test")}


MODELS = {
    "pair": lambda: models.RemBertPairClassificationModel(
        models.make_module("pair", CONFIG, num_classes=2)),
    "tagging": lambda: models.RemBertTaggingModel(
        models.make_module("tagging", CONFIG, num_classes=len(panx.LABELS))),
    "qa": lambda: models.RemBertQAModel(models.make_module("qa", CONFIG)),
    "retrieval": lambda: models.RemBertRetrievalModel(
        models.make_module("retrieval", CONFIG)),
}


def _random_params(model):
  """Every parameter drawn at N(0, 0.2) (layer norm scales around 1).

  BERT's initialisation (0.02) leaves [CLS] almost the same for every
  input: the pair model predicted one class for all of them, and a metric
  that cannot tell two models apart tests nothing.
  """
  params = model.get_initial_variables(
      jax.random.PRNGKey(0), {"input_tokens": (1, LENGTH)})["params"]
  leaves, tree = jax.tree_util.tree_flatten_with_path(params)
  keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
  drawn = [0.2 * jax.random.normal(key, leaf.shape, leaf.dtype)
           + ("scale" in jax.tree_util.keystr(path))
           for key, (path, leaf) in zip(keys, leaves)]
  return jax.tree_util.tree_unflatten(tree, drawn)


def _setup(tasks, family):
  """(model, random params, evaluator of the family's task)."""
  model = MODELS[family]()
  params = _random_params(model)
  name, split = tasks[family]
  length = QA_LENGTH if family == "qa" else LENGTH
  evaluator = eval_lib.make_evaluator(model, name, split,
                                      {"input_tokens": length})
  return model, params, evaluator


@pytest.fixture(scope="module")
def setup(tasks):
  """family -> `_setup(tasks, family)`, made once."""
  made = {}

  def get(family):
    if family not in made:
      made[family] = _setup(tasks, family)
    return made[family]

  return get


def _evaluate(evaluator, model, params, length_sorted):
  """(metrics, [(index, prediction)] as predicted, {index: segment_ids})
  through seqio's evaluator, as `evaluate_with` runs it."""
  predict_fn = predict_batches.make_predict_fn(model, params, BATCH, length_sorted)
  seen = {}

  def recording(ds, model_feature_shapes=None):
    seen["outputs"] = predict_fn(ds, model_feature_shapes)
    seen["segment_ids"] = {int(i): f["segment_ids"]
                           for i, f in ds.as_numpy_iterator()}
    return seen["outputs"]

  results, _ = evaluator.evaluate(compute_metrics=True, predict_fn=recording,
                                  predict_with_aux_fn=recording)
  (metrics,) = results.result().values()
  return metrics, seen["outputs"], seen["segment_ids"]


@pytest.mark.parametrize("family", ["pair", "tagging", "qa", "retrieval"])
def test_length_sorted_predictions_and_metrics_are_the_full_lengths(
    setup, family):
  model, params, evaluator = setup(family)
  full_metrics, full, segment_ids = _evaluate(evaluator, model, params, False)
  cut_metrics, cut, _ = _evaluate(evaluator, model, params, True)

  assert cut_metrics == full_metrics
  full, order = dict(full), [i for i, _ in cut]
  # Out of order (seqio sorts by index): the metrics above saw that sorted.
  assert sorted(order) == sorted(full) and order != sorted(order)
  lengths = {i: int(np.sum(s > 0)) for i, s in segment_ids.items()}
  # Real text: of many lengths, most of them far shorter than the rows.
  row = QA_LENGTH if family == "qa" else LENGTH
  assert np.median(list(lengths.values())) <= row / 2
  assert len(set(lengths.values())) > 5
  for index, prediction in cut:
    want = full[index]
    assert prediction.shape == want.shape and prediction.dtype == want.dtype
    n = lengths[index]
    if family == "pair":
      np.testing.assert_array_equal(prediction, want)
    elif family == "tagging":  # tag ids per sub-token
      np.testing.assert_array_equal(prediction[:n], want[:n])
    elif family == "qa":  # [2, length] start and end logits
      np.testing.assert_allclose(prediction[:, :n], want[:, :n], atol=1e-5)
      np.testing.assert_array_equal(np.argmax(prediction[:, :n], -1),
                                    np.argmax(want[:, :n], -1))
    else:  # an embedding
      np.testing.assert_allclose(prediction, want, atol=1e-5)
  if family in ("pair", "tagging"):  # the metric can tell models apart
    predicted = {int(t) for i, p in full.items() for t in p[:lengths[i]]}
    assert len(predicted) > 1


class _TracedShapes:
  """A model whose jitted predict function records each shape it is traced
  (so compiled) for."""

  def __init__(self, model):
    self._model = model
    self.config = model.config
    self.shapes = []

  def predict_batch_with_aux(self, params, batch, rng=None):
    self.shapes.append(batch["input_tokens"].shape)
    return self._model.predict_batch_with_aux(params, batch, rng)


def test_cut_lengths_are_few_and_compiled_once_per_model(setup):
  model, params, evaluator = setup("tagging")
  traced = _TracedShapes(model)
  # Explicit transfers only: the cut batches are put on the device, not
  # copied into the jitted call.
  with jax.transfer_guard("disallow"):
    first = eval_lib.evaluate_with(evaluator, traced, params, BATCH)
  buckets = {(BATCH, n) for n in (16, 32, 64, 128)}
  assert set(traced.shapes) <= buckets and len(traced.shapes) >= 2
  assert len(traced.shapes) == len(set(traced.shapes))  # each shape once
  # Another checkpoint of the same model compiles nothing again.
  count = len(traced.shapes)
  again = eval_lib.evaluate_with(
      evaluator, traced, jax.tree_util.tree_map(lambda x: x * 1.0, params),
      BATCH)
  assert len(traced.shapes) == count and again == first
  assert first == eval_lib.evaluate_with(evaluator, model, params, BATCH,
                                         length_sorted=False)


def test_bucket_lengths():
  assert [predict_batches.bucket_length(n, 128) for n in (0, 1, 16, 17, 33, 100,
                                                    128)] == [
                                                        16, 16, 16, 32, 64,
                                                        128, 128]
  assert {predict_batches.bucket_length(n, 128) for n in range(129)} == {
      16, 32, 64, 128}
  assert {predict_batches.bucket_length(n, 384) for n in range(385)} == {
      16, 32, 64, 128, 256, 384}
  assert predict_batches.bucket_length(5, 8) == 8  # never longer than the rows


def test_real_lengths_end_at_the_last_real_token():
  segment_ids = np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
  tokens = np.array([[5, 6, 7, 0, 0], [5, 0, 9, 0, 0], [0, 0, 0, 0, 0]])
  assert predict_batches.real_lengths({"segment_ids": segment_ids,
                                "input_tokens": tokens}, 0).tolist() == [3, 1, 0]
  # Without segment ids the network masks the pad id, so do the lengths.
  assert predict_batches.real_lengths({"input_tokens": tokens}, 0).tolist() == [3, 3, 0]
