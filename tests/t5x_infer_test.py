"""Tests for rembert_t5x.t5x_infer: readable predictions of t5x.infer.

Without t5x: registered tasks over hand-made files, a tiny RemBERT model,
and the loop t5x/infer.py runs around its `write_fn` / `merge_fn` (task and
model datasets zipped, padded into chunks, one write per chunk, a merge at
the end), so the writers see what T5X hands them, padding included. The
real `python -m t5x.infer` runs them in scripts/t5x_smoke.sh.
"""

import dataclasses
import functools
import json
import os
import types

import jax
import numpy as np
import pytest
import seqio
import tensorflow as tf

from rembert_t5x.common import errors
from rembert_t5x.data import qa
from rembert_t5x.data import xtreme_readers
from rembert_t5x import models
from rembert_t5x import t5x_datasets
from rembert_t5x import t5x_infer
from rembert_tasks import panx
from rembert_tasks import pawsx
from rembert_tasks import qa as qa_tasks
from rembert_tasks import registry
from tests import test_utils

CONFIG = test_utils.TINY_CONFIG  # vocab 97 >= the tiny vocabulary's 80
PAIRS = [("The cat sat on the mat .", "A dog runs through the park .", 0),
         ("Paris is the capital of France .", "Paris is the capital of France",
          1),
         ("Der Hund läuft .", "Die Katze sitzt auf der Matte .", 0),
         ("Tom and Mary say they do not want to sing .", "Tom sang .", 1),
         ("John Smith works for the United Nations .", "John works .", 1)]
SENTENCES = [[("Angela", "B-PER"), ("Merkel", "I-PER"), ("spoke", "O"),
              ("in", "O"), ("Berlin", "B-LOC"), (".", "O")],
             [("The", "O"), ("United", "B-ORG"), ("Nations", "I-ORG")],
             [("John", "B-PER"), ("Smith", "I-PER"), ("works", "O"),
              ("for", "O"), ("the", "O"), ("United", "B-ORG"),
              ("Nations", "I-ORG"), ("in", "O"), ("New", "B-LOC"),
              ("York", "I-LOC"), (".", "O")]]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return test_utils.train_tiny_vocab(tmp_path_factory.mktemp("spm"))


@pytest.fixture(scope="module")
def xtreme_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("xtreme")
  (root / "pawsx").mkdir()
  (root / "panx").mkdir()
  for name in ("train-en", "test-de"):
    (root / "pawsx" / f"{name}.tsv").write_text(
        "".join(f"{a}\t{b}\t{label}\n" for a, b, label in PAIRS),
        encoding="utf-8")
    (root / "panx" / f"{name}.tsv").write_text("\n".join(
        "".join(f"{word}\t{tag}\n" for word, tag in sentence)
        for sentence in SENTENCES), encoding="utf-8")
  return root


def _infer_like_t5x(task, split, lengths, model, params, mode, write_fn,
                    out_dir, chunk_size, merge_fn=None):
  """The loop of t5x/infer.py's `infer_task` around write_fn and merge_fn.

  Returns:
    The model's per-example predictions (unpadded, dataset order) and the
    merged output file's records.
  """
  ds = task.get_dataset(lengths, split=split, shuffle=False, num_epochs=1,
                        use_cached=False)
  model_ds = model.FEATURE_CONVERTER_CLS(pack=False)(ds, lengths)
  fname = f"{task.name}-{mode}.jsonl-00000-of-00001"
  tmp_dir = os.path.join(out_dir, f"tmp-{task.name}")
  os.makedirs(tmp_dir)
  vocabulary = task.output_features["targets"].vocabulary
  all_predictions = []
  predict = jax.jit(model.predict_batch_with_aux)
  chunks = tf.data.Dataset.zip((ds, model_ds)).padded_batch(chunk_size)
  for chunk, (task_batch, model_batch) in enumerate(
      chunks.as_numpy_iterator()):
    predictions, aux = predict(params, model_batch)
    predictions = list(np.asarray(predictions))
    aux = {} if mode == "predict" else {
        k: list(np.asarray(v)) for k, v in aux.items()}
    all_predictions.extend(predictions)
    write_fn(os.path.join(tmp_dir, f"{fname}-chunk{chunk:05}"),
             (predictions, aux), tf.data.Dataset.from_tensor_slices(
                 task_batch), mode, vocabulary)
  if merge_fn is None:  # T5X's merge_chunks_to_file: concatenation
    with open(os.path.join(out_dir, fname), "w", encoding="utf-8") as out:
      for chunk in sorted(os.listdir(tmp_dir)):
        with open(os.path.join(tmp_dir, chunk), encoding="utf-8") as f:
          out.write(f.read())
  else:
    merge_fn(out_dir, fname, tmp_dir, None)
  with open(os.path.join(out_dir, fname), encoding="utf-8") as f:
    return all_predictions, [json.loads(line) for line in f]


def _model(kind, num_classes=None):
  model_cls = {"pair": models.RemBertPairClassificationModel,
               "tagging": models.RemBertTaggingModel,
               "qa": models.RemBertQAModel}[kind]
  model = model_cls(models.make_module(kind, CONFIG, num_classes))
  params = model.get_initial_variables(
      jax.random.PRNGKey(1), {"input_tokens": (1, 8)})["params"]
  return model, params


def test_pair_predictions_have_ids_sentences_and_class_names(
    vocab, xtreme_dir, tmp_path):
  pawsx.register_pawsx_local(str(xtreme_dir), vocabulary=vocab,
                             prefix="infer_", languages=("de",))
  task = seqio.get_mixture_or_task("infer_pawsx_de")
  model, params = _model("pair", 2)
  # Chunks of 2 over 5 pairs: the last chunk is short, as in T5X.
  predictions, records = _infer_like_t5x(
      task, "test", {"input_tokens": 32}, model, params, "predict_with_aux",
      t5x_infer.write_pair_predictions, str(tmp_path), chunk_size=2)
  assert [r["index"] for r in records] == list(range(len(PAIRS)))
  names = xtreme_readers.PAWSX_LABELS
  for record, (a, b, label), prediction in zip(records, PAIRS, predictions):
    assert (record["sentence1"], record["sentence2"]) == (a, b)
    assert record["gold"] == names[label]
    assert record["prediction"] == names[int(prediction[0])]
    probs = record["probabilities"]
    assert set(probs) == set(names)
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-3)
    assert max(probs, key=probs.get) == record["prediction"]


def test_pair_writer_refuses_score_mode_and_falls_back_to_ids(vocab):
  with pytest.raises(ValueError, match="not mode 'score'"):
    t5x_infer.write_pair_predictions("/unused", ([], {}), None, "score")
  record = t5x_infer.pair_record(
      {"label": np.int32(1)}, np.array([0]), {},
      seqio.PassThroughVocabulary(2))
  assert record == {"prediction": 0, "gold": 1}


def test_tagging_predictions_are_word_tags_of_whole_sentences(
    vocab, xtreme_dir, tmp_path):
  panx.register_panx_local(str(xtreme_dir), vocabulary=vocab,
                           prefix="infer_", languages=("de",))
  task = seqio.get_mixture_or_task("infer_panx_de")
  model, params = _model("tagging", len(panx.LABELS))
  lengths = {"input_tokens": 12}  # long sentences are split into parts
  predictions, records = _infer_like_t5x(
      task, "test", lengths, model, params, "predict",
      t5x_infer.write_tagging_predictions, str(tmp_path), chunk_size=2,
      merge_fn=t5x_infer.merge_tagging_predictions)
  parts = list(task.get_dataset(lengths, split="test", shuffle=False)
               .as_numpy_iterator())
  assert len(parts) > len(SENTENCES)  # so parts straddle the 2-row chunks
  # Independently: each part's tags at its words' first sub-tokens, the
  # parts of a sentence concatenated.
  expected = {}
  for part, prediction in zip(parts, predictions):
    firsts = np.flatnonzero(part["weights"])
    assert len(firsts) == len(part["tokens"])  # no word lost
    expected.setdefault(int(part["index"]), []).extend(
        panx.LABELS[int(prediction[i])] for i in firsts)
  assert [r["index"] for r in records] == [0, 1, 2]
  for record, sentence in zip(records, SENTENCES):
    assert record["words"] == [w for w, _ in sentence]
    assert record["gold"] == [t for _, t in sentence]
    assert record["prediction"] == expected[record["index"]]
    assert "chunk_index" not in record


def test_label_less_test_files_give_records_without_gold(vocab, tmp_path):
  """XTREME's test files (no label column, words without tags): predicted,
  and no record says what the gold is."""
  (tmp_path / "pawsx").mkdir()
  (tmp_path / "panx").mkdir()
  (tmp_path / "pawsx" / "test-de.tsv").write_text(
      "".join(f"{a}\t{b}\n" for a, b, _ in PAIRS), encoding="utf-8")
  (tmp_path / "panx" / "test-de.tsv").write_text("\n".join(
      "".join(f"{word}\n" for word, _ in sentence) for sentence in SENTENCES),
      encoding="utf-8")
  pawsx.register_pawsx_local(str(tmp_path), vocabulary=vocab,
                             prefix="hidden_", languages=("de",))
  panx.register_panx_local(str(tmp_path), vocabulary=vocab,
                           prefix="hidden_", languages=("de",))
  out = tmp_path / "out"
  out.mkdir()
  for name, kind, classes, write, merge in (
      ("pawsx", "pair", 2, t5x_infer.write_pair_predictions, None),
      ("panx", "tagging", len(panx.LABELS),
       t5x_infer.write_tagging_predictions,
       t5x_infer.merge_tagging_predictions)):
    model, params = _model(kind, classes)
    _, records = _infer_like_t5x(
        seqio.get_mixture_or_task(f"hidden_{name}_de"), "test",
        {"input_tokens": 32}, model, params, "predict", write, str(out),
        chunk_size=2, merge_fn=merge)
    assert len(records) == {"pawsx": len(PAIRS),
                            "panx": len(SENTENCES)}[name]
    assert all("prediction" in r and "gold" not in r for r in records), name


def test_tagging_parts_out_of_order_are_an_error():
  first = {"index": 0, "chunk_index": 0, "words": ["a"], "prediction": ["O"]}
  stray = {"index": 1, "chunk_index": 1, "words": ["b"], "prediction": ["O"]}
  with pytest.raises(ValueError, match="part 1 of sentence 1 does not "
                     "follow its sentence"):
    t5x_infer.join_tagging_parts([first, stray])


# --- QA -----------------------------------------------------------------------

CONTEXT = ("Angela Merkel spoke in Berlin yesterday . The cat sat on the mat "
           "and looked at the dog . A dog runs through the park every morning "
           ". Paris is the capital of France .")
QA_SETTINGS = dict(max_seq_length=24, doc_stride=6, max_query_length=8)


def _squad_file(path):
  qas = [("q-paris", "Paris is the capital of ?", "France"),
         ("q-dog", "A dog runs through the ?", "park"),
         ("q-cat", "The cat sat on the ?", "mat")]
  data = {"data": [{"paragraphs": [{"context": CONTEXT, "qas": [
      {"id": qid, "question": q,
       "answers": [{"text": a, "answer_start": CONTEXT.index(a)}]}
      for qid, q, a in qas]}]}]}
  path.write_text(json.dumps(data), encoding="utf-8")
  return [qa.QAExample(qid, q, CONTEXT, (a,), (CONTEXT.index(a),))
          for qid, q, a in qas]


def test_qa_windows_merge_per_question_like_the_qa_evaluation(vocab,
                                                              tmp_path):
  examples = _squad_file(tmp_path / "dev.json")
  registry.add_task(
      "infer_qa_test",
      source=qa_tasks.squad_file_source({"test": str(tmp_path / "dev.json")}),
      preprocessors=[functools.partial(qa.qa_windows_preprocessor,
                                       **QA_SETTINGS)],
      output_features=qa.output_features(vocab, 24))
  task = seqio.get_mixture_or_task("infer_qa_test")
  model, params = _model("qa")
  out = tmp_path / "out"
  out.mkdir()
  write = functools.partial(t5x_infer.write_qa_windows, max_answer_length=5)
  # Chunks of 4 windows: a question's windows straddle chunk files.
  logits, records = _infer_like_t5x(
      task, "test", {"input_tokens": 24}, model, params, "predict", write,
      str(out), chunk_size=4, merge_fn=t5x_infer.merge_qa_predictions)
  windows = [w for ex in examples
             for w in qa.make_windows(ex, vocab, **QA_SETTINGS)]
  assert len(windows) == len(logits) > 2 * len(examples)  # several each
  assert len(os.listdir(out / "tmp-infer_qa_test")) > len(examples)
  # The local QA evaluation's answers over the same windows and logits.
  expected = qa.answers_from_logits(windows, logits, max_answer_length=5)
  assert [r["id"] for r in records] == [ex.example_id for ex in examples]
  for record, example in zip(records, examples):
    assert record["prediction"] == expected[example.example_id]
    assert record["question"] == example.question
    assert record["gold"] == list(example.answer_texts)
    mine = [i for i, w in enumerate(windows)
            if w.example_id == example.example_id]
    assert record["windows"] == len(mine)
    scores = [qa.best_span(*qa.split_prediction(logits[i],
                                                len(windows[i].input_tokens)),
                           windows[i].token_offsets,
                           windows[i].token_is_max_context,
                           max_answer_length=5) for i in mine]
    best = max(s[0] for s in scores if s is not None)
    assert record["score"] == pytest.approx(best, abs=1e-4)


def test_qa_predict_task_reads_a_blanked_hidden_set(vocab, tmp_path):
  """XTREME's XQuAD layout with its answers blanked: the prediction-only
  task (what the printed t5x.infer lines name) predicts every question."""
  examples = _squad_file(tmp_path / "dev.json")
  data = json.loads((tmp_path / "dev.json").read_text(encoding="utf-8"))
  for q in data["data"][0]["paragraphs"][0]["qas"]:
    q["answers"] = [{"text": "", "answer_start": -1}]
  hidden = tmp_path / qa_tasks.LOCAL_FILES["xquad_test"].format(lang="de")
  hidden.parent.mkdir(parents=True)
  hidden.write_text(json.dumps(data), encoding="utf-8")
  qa_tasks.register_qa_local(str(tmp_path), vocabulary=vocab,
                             prefix="infer_hidden_", xquad_languages=("de",),
                             mlqa_languages=(), tydiqa_languages=(),
                             **QA_SETTINGS)
  task = seqio.get_mixture_or_task("infer_hidden_xquad_predict_de")
  model, params = _model("qa")
  out = tmp_path / "out"
  out.mkdir()
  _, records = _infer_like_t5x(
      task, "test", {"input_tokens": 24}, model, params, "predict",
      functools.partial(t5x_infer.write_qa_windows, max_answer_length=5),
      str(out), chunk_size=4, merge_fn=t5x_infer.merge_qa_predictions)
  assert [r["id"] for r in records] == [ex.example_id for ex in examples]
  assert not any("gold" in r for r in records)


def test_qa_merge_keeps_the_best_window_and_no_span_is_empty():
  windows = [
      {"id": "a", "question": "Q?", "score": 1.5, "text": "x", "gold": ["y"]},
      {"id": "b", "question": "R?", "score": None, "text": "", "gold": []},
      {"id": "a", "question": "Q?", "score": 2.25, "text": "y", "gold": ["y"]},
      {"id": "a", "question": "Q?", "score": 2.25, "text": "z", "gold": ["y"]},
  ]
  assert t5x_infer.merge_qa_windows(windows) == [
      {"id": "a", "question": "Q?", "prediction": "y", "score": 2.25,
       "windows": 3, "gold": ["y"]},
      {"id": "b", "question": "R?", "prediction": "", "score": None,
       "windows": 1}]


def test_qa_merge_without_chunks_names_the_directory(tmp_path):
  with pytest.raises(FileNotFoundError, match="no chunk files"):
    t5x_infer.merge_qa_predictions(str(tmp_path), "t-predict.jsonl",
                                   str(tmp_path))


# --- Checks the run files bind --------------------------------------------------


def test_verify_task_vocabulary_names_task_and_sizes(vocab, xtreme_dir):
  pawsx.register_pawsx_local(str(xtreme_dir), vocabulary=vocab,
                             prefix="infer_", languages=("de",))
  cfg = types.SimpleNamespace(mixture_or_task_name="infer_pawsx_de",
                              module=None)
  model, _ = _model("pair", 2)
  t5x_infer.verify_task_vocabulary(cfg, model)  # 80 ids fit in 97
  small = models.RemBertPairClassificationModel(models.make_module(
      "pair", dataclasses.replace(CONFIG, vocab_size=50), 2))
  with pytest.raises(errors.UserError,
                     match="infer_pawsx_de: its vocabulary has 80 ids but "
                     "the model's VOCAB_SIZE is 50"):
    t5x_infer.verify_task_vocabulary(cfg, small)


def test_train_eval_config_only_for_tasks_with_the_split(vocab, xtreme_dir):
  name = test_utils.register_random_mlm_task()  # a 'train' split only
  cfg = types.SimpleNamespace(mixture_or_task_name=name, module=None,
                              split="validation")
  assert t5x_datasets.if_split_exists(cfg) is None
  pawsx.register_pawsx_local(str(xtreme_dir), vocabulary=vocab,
                             prefix="infer_", languages=("de",))
  cfg = types.SimpleNamespace(mixture_or_task_name="infer_pawsx_de",
                              module=None, split="validation")
  assert t5x_datasets.if_split_exists(cfg) is cfg
  cfg.mixture_or_task_name = "infer_pawsx_zeroshot"  # + the train task
  assert t5x_datasets.if_split_exists(cfg) is None
