"""Tests for the QA tasks (rembert_tasks.qa): registration, batches, eval."""

import importlib
import json
import os

import numpy as np
import pytest
import seqio

from rembert_t5x.data import pieces
from rembert_t5x.data import qa
from rembert_t5x.data import vocabulary
from rembert_t5x import feature_converters
import rembert_tasks.qa as qa_tasks
from tests import test_utils

XQUAD_DIR = test_utils.SHARED_DATA / "xquad"
LENGTH = 64
PREFIX = "test_qa_"


def _squad_file(path, paragraphs):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps({"version": "1.1", "data": [
      {"title": "t", "paragraphs": paragraphs}]}, ensure_ascii=False),
                  encoding="utf-8")


def _xquad_paragraphs(lang, count=2):
  if not XQUAD_DIR.is_dir():
    if os.environ.get("CI") == "true":
      pytest.fail(f"Real test data missing: {XQUAD_DIR} (CI=true).")
    pytest.skip(f"Real test data not found at {XQUAD_DIR}.")
  data = json.loads((XQUAD_DIR / f"xquad.{lang}.json").read_text("utf-8"))
  paragraphs = data["data"][0]["paragraphs"][:count]
  for p in paragraphs:
    p["qas"] = p["qas"][:2]
  return paragraphs


HAND_MADE = [{"context": "Ann met Bob in Paris. Bob later moved to Berlin.",
              "qas": [{"id": "english-1-0", "question": "Where did Bob go?",
                       "answers": [{"text": "Berlin",
                                    "answer_start": 41}]}]}]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  """A small vocabulary covering the scripts of the local test files.

  (A vocabulary without Chinese would turn every run of Han characters into
  one [UNK] piece, and no answer boundary inside it could be represented.)
  """
  _xquad_paragraphs("en")  # fails in CI / skips without the real data
  directory = tmp_path_factory.mktemp("spm")
  files = {}
  for lang in ("de", "en", "zh"):
    data = json.loads((XQUAD_DIR / f"xquad.{lang}.json").read_text("utf-8"))
    text = directory / f"{lang}.txt"
    text.write_text("\n".join(p["context"] for a in data["data"][:20]
                              for p in a["paragraphs"]), encoding="utf-8")
    files[lang] = [str(text)]
  path = pieces.train_sentencepiece(files, str(directory / "qa"),
                                        vocab_size=2000, max_sentences=1000,
                                        character_coverage=1.0)
  return vocabulary.RemBertVocabulary(path)


@pytest.fixture(scope="module")
def local_tasks(vocab, tmp_path_factory):
  """XTREME's download layout with a few real XQuAD paragraphs."""
  root = tmp_path_factory.mktemp("download")
  files = qa_tasks.LOCAL_FILES
  _squad_file(root / files["squad_train"], HAND_MADE)
  _squad_file(root / files["squad_dev"], HAND_MADE)
  _squad_file(root / files["xquad_test"].format(lang="de"),
              _xquad_paragraphs("de"))
  zh = _xquad_paragraphs("zh")
  _squad_file(root / files["mlqa_dev"].format(lang="zh"), zh)
  _squad_file(root / files["mlqa_test"].format(lang="zh"), zh)
  _squad_file(root / files["tydiqa_train"], HAND_MADE)
  _squad_file(root / files["tydiqa_dev"].format(lang="en"), HAND_MADE)
  names = qa_tasks.register_qa_local(
      str(root), vocabulary=vocab, prefix=PREFIX, xquad_languages=("de",),
      mlqa_languages=("zh",), tydiqa_languages=("en",),
      max_seq_length=LENGTH, doc_stride=16, max_query_length=16)
  return names


def test_default_registration():
  names = set(seqio.TaskRegistry.names())
  for lang in qa_tasks.XQUAD_LANGUAGES:
    task = seqio.get_mixture_or_task(f"rembert_xquad_{lang}")
    assert task.source.tfds_dataset.name == f"xquad/{lang}:3.0.0"
    assert list(task.splits) == ["test"]
  for lang in qa_tasks.MLQA_LANGUAGES:
    task = seqio.get_mixture_or_task(f"rembert_mlqa_{lang}")
    assert task.source.tfds_dataset.name == f"mlqa/{lang}:1.0.0"
    assert set(task.splits) == {"validation", "test"}
    assert task.metric_fns[0].__name__ == f"mlqa_metric_{lang}"
  for lang in qa_tasks.TYDIQA_LANGUAGES:
    task = seqio.get_mixture_or_task(f"rembert_tydiqa_{lang}")
    assert task.source.tfds_dataset.name == "tydi_qa/goldp:3.0.0"
    assert list(task.splits) == ["validation"]
    # seqio maps the task split onto the per-language TFDS split.
    assert task.source.tfds_dataset._split_map == {
        "validation": f"validation-{lang}"}
  train = seqio.get_mixture_or_task("rembert_squad_train_en")
  assert train.source.tfds_dataset.name == "squad/v1.1:3.0.0"
  assert list(train.splits) == ["train"]
  assert "rembert_squad_en" in names and "rembert_tydiqa_train_en" in names
  assert len(qa_tasks.XQUAD_LANGUAGES) == 11
  assert len(seqio.get_mixture_or_task("rembert_xquad_zeroshot").tasks) == 13
  assert len(seqio.get_mixture_or_task("rembert_mlqa_zeroshot").tasks) == 9
  assert len(seqio.get_mixture_or_task("rembert_tydiqa_zeroshot").tasks) == 10
  assert set(train.output_features) == {"input_tokens", "token_types",
                                        "targets"}


def test_reimport_is_idempotent():
  before = sorted(seqio.TaskRegistry.names())
  importlib.reload(qa_tasks)
  qa_tasks.register_qa()
  assert sorted(seqio.TaskRegistry.names()) == before


def test_tydiqa_language_filter():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ds = tf.data.Dataset.from_tensor_slices(
      {"id": ["english-1-0", "arabic-2-0", "englishx-3"]})
  kept = [x["id"] for x in qa_tasks.keep_tydiqa_language(ds, "en")
          .as_numpy_iterator()]
  assert kept == [b"english-1-0"]


def test_local_tasks_make_batches(local_tasks, vocab):
  assert f"{PREFIX}xquad_de" in local_tasks
  task = seqio.get_mixture_or_task(f"{PREFIX}xquad_de")
  ds = task.get_dataset(None, split="test", shuffle=False)
  windows = list(ds.as_numpy_iterator())
  assert len(windows) > 4  # two paragraphs, two questions each, windowed
  for w in windows:
    assert len(w["input_tokens"]) <= LENGTH
    assert w["token_offsets"].shape == (len(w["input_tokens"]), 2)
    assert list(w["targets"]) == [w["start_positions"], w["end_positions"]]
  converter = feature_converters.QAFeatureConverter(pack=False)
  batches = converter(ds, {"input_tokens": LENGTH}).batch(4)
  batch = next(iter(batches.as_numpy_iterator()))
  assert batch["input_tokens"].shape == (4, LENGTH)
  assert batch["start_positions"].shape == (4,)
  # Training task over the hand-made SQuAD file.
  train = seqio.get_mixture_or_task(f"{PREFIX}squad_train_en")
  (window,) = list(train.get_dataset(None, split="train", shuffle=False)
                   .as_numpy_iterator())
  s, e = window["start_positions"], window["end_positions"]
  offsets = window["token_offsets"]
  assert HAND_MADE[0]["context"][offsets[s, 0]:offsets[e, 1]] == "Berlin"


class _LengthFilteringQAConverter(feature_converters.QAFeatureConverter):
  """QAFeatureConverter that ignores lengths of features it does not read.

  seqio's Evaluator passes a length for every task output feature, "targets"
  included, and seqio's FeatureConverter rejects lengths outside
  TASK_FEATURES; until QAFeatureConverter drops them itself this subclass
  does (see `test_evaluator_with_project_converter`).
  """

  def __call__(self, ds, task_feature_lengths):
    return super().__call__(ds, {k: v for k, v in task_feature_lengths.items()
                                 if k in self.TASK_FEATURES})


def _evaluate_with_gold_logits(task_name, split, converter):
  evaluator = seqio.Evaluator(mixture_or_task_name=task_name,
                              feature_converter=converter, eval_split=split,
                              sequence_length=None)

  def predict_fn(ds):
    outputs = []
    for index, features in ds.as_numpy_iterator():
      logits = np.full((2, features["input_tokens"].shape[0]), -1.0)
      if features["start_positions"]:
        logits[0, features["start_positions"]] = 10.0
        logits[1, features["end_positions"]] = 10.0
      outputs.append((index, logits))
    return outputs

  metrics, _ = evaluator.evaluate(compute_metrics=True, predict_fn=predict_fn)
  return metrics.result()[task_name]


@pytest.mark.parametrize("task_suffix,split", [("xquad_de", "test"),
                                               ("mlqa_zh", "validation"),
                                               ("tydiqa_en", "validation")])
def test_seqio_evaluator_with_gold_logits(local_tasks, task_suffix, split):
  """A perfect model through seqio's Evaluator scores EM 100."""
  del local_tasks
  scores = _evaluate_with_gold_logits(
      PREFIX + task_suffix, split, _LengthFilteringQAConverter(pack=False))
  assert scores["exact_match"] == pytest.approx(100.0)
  assert scores["f1"] == pytest.approx(100.0)
  assert scores["xtreme"] == pytest.approx(100.0)


def test_evaluator_with_project_converter(local_tasks):
  del local_tasks
  scores = _evaluate_with_gold_logits(
      PREFIX + "xquad_de", "test",
      feature_converters.QAFeatureConverter(pack=False))
  assert scores["exact_match"] == pytest.approx(100.0)


def test_local_file_errors_name_the_file(local_tasks, tmp_path, vocab):
  del local_tasks
  bad = tmp_path / "squad" / "dev-v1.1.json"
  bad.parent.mkdir()
  bad.write_text("{broken", encoding="utf-8")
  qa_tasks.register_qa_local(str(tmp_path), vocabulary=vocab,
                             prefix="test_qa_bad_", xquad_languages=(),
                             mlqa_languages=(), tydiqa_languages=())
  task = seqio.get_mixture_or_task("test_qa_bad_squad_en")
  with pytest.raises(ValueError, match="dev-v1.1.json: not valid JSON"):
    task.get_dataset(None, split="validation")
  missing = seqio.get_mixture_or_task("test_qa_bad_squad_train_en")
  with pytest.raises(ValueError, match="train-v1.1.json: cannot read"):
    missing.get_dataset(None, split="train")
  assert qa.MAX_SEQ_LENGTH == 384  # BERT's / XTREME's run_squad default


@pytest.mark.parametrize("table", ["current", "old"])
def test_tydiqa_local_files_in_either_xtreme_layout(vocab, tmp_path, table):
  files = qa_tasks.LOCAL_FILES if table == "current" else (
      qa_tasks.LOCAL_FILES_OLD)
  _squad_file(tmp_path / files["tydiqa_train"], HAND_MADE)
  _squad_file(tmp_path / files["tydiqa_dev"].format(lang="en"), HAND_MADE)
  prefix = f"test_qa_{table}_"
  qa_tasks.register_qa_local(str(tmp_path), vocabulary=vocab, prefix=prefix,
                             xquad_languages=(), mlqa_languages=(),
                             tydiqa_languages=("en",), max_seq_length=LENGTH,
                             doc_stride=16, max_query_length=16)
  for name, split in (("tydiqa_train_en", "train"), ("tydiqa_en", "validation")):
    task = seqio.get_mixture_or_task(prefix + name)
    ids = [x["example_id"] for x in task.get_dataset(
        None, split=split, shuffle=False).as_numpy_iterator()]
    assert ids == [b"english-1-0"]


def test_blank_gold_answers_are_an_error_naming_the_file(vocab, tmp_path):
  blank = json.loads(json.dumps(HAND_MADE))
  blank[0]["qas"][0]["answers"] = [{"text": "", "answer_start": -1}]
  path = tmp_path / qa_tasks.LOCAL_FILES["tydiqa_dev"].format(lang="en")
  _squad_file(path, blank)
  qa_tasks.register_qa_local(str(tmp_path), vocabulary=vocab,
                             prefix="test_qa_blank_", xquad_languages=(),
                             mlqa_languages=(), tydiqa_languages=("en",))
  task = seqio.get_mixture_or_task("test_qa_blank_tydiqa_en")
  with pytest.raises(ValueError, match=r"tydiqa\.goldp\.en\.dev\.json: every "
                     r"one of the 1 questions has blank gold answers"):
    task.get_dataset(None, split="validation")


def test_blanked_xquad_file_reads_only_for_predictions(vocab, tmp_path):
  """XTREME's XQuAD layout with blank answers: the prediction-only task
  builds windows (no metric), the evaluation task still refuses the file."""
  blank = json.loads(json.dumps(HAND_MADE))
  blank[0]["qas"][0]["answers"] = [{"text": "", "answer_start": -1}]
  _squad_file(tmp_path / qa_tasks.LOCAL_FILES["xquad_test"].format(lang="de"),
              blank)
  prefix = "test_qa_hidden_"
  names = qa_tasks.register_qa_local(
      str(tmp_path), vocabulary=vocab, prefix=prefix, xquad_languages=("de",),
      mlqa_languages=(), tydiqa_languages=(), max_seq_length=LENGTH,
      doc_stride=16, max_query_length=16)
  name = qa_tasks.predict_task_name(prefix, "xquad", "de")
  assert name == "test_qa_hidden_xquad_predict_de" and name in names
  task = seqio.get_mixture_or_task(name)
  assert not task.metric_fns
  windows = list(task.get_dataset(None, split="test", shuffle=False)
                 .as_numpy_iterator())
  assert [w["example_id"] for w in windows] == [b"english-1-0"]
  assert name not in [t.name for t in seqio.get_mixture_or_task(
      prefix + "xquad_zeroshot").tasks]
  with pytest.raises(ValueError, match="every one of the 1 questions has "
                     "blank gold answers"):
    seqio.get_mixture_or_task(prefix + "xquad_de").get_dataset(
        None, split="test")
