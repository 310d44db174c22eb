"""XTREME submission folders: layout, formats, completeness, the T5X path.

The format rules of XTREME's `evaluate.py` (its readers are restated below
in a few lines, since the script is not a dependency), our metrics on what a
file reads back, and `from_t5x` over hand-written infer outputs. BUCC runs a
tiny random encoder over a few sentences. The local runner's folders are
built end to end by tests/xtreme_road_test.py.
"""

import csv
import json
import os

import numpy as np
import pytest

from rembert_t5x.common import errors
from rembert_t5x.data import vocabulary
from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x.data import xtreme_readers
from rembert_t5x.experiments import submission
from rembert_t5x.experiments import sweep
from rembert_t5x import feature_converters
from rembert_t5x.scoring import metrics
from rembert_t5x import models
from rembert_t5x.scoring import retrieval_metrics
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import predict_batches
from tests import test_utils


def _read_tag(text):
  """`evaluate.py`'s read_tag: stripped lines, a blank line ends a sentence."""
  sentences, sentence = [], []
  for line in text.splitlines():
    if line.strip():
      sentence.append(line.strip())
    else:
      sentences.append(sentence)
      sentence = []
  if sentence:
    sentences.append(sentence)
  return sentences


def _read_label(text):
  return [line.strip() for line in text.splitlines()]


def test_layout_follows_evaluate_py():
  assert submission.file_name("xnli", "de") == "xnli/test-de.tsv"
  assert submission.file_name("tydiqa", "ar") == "tydiqa/test-ar.json"
  assert submission.file_name("bucc2018", "zh") == "bucc2018/test-zh.tsv"
  # XTREME's TyDiQA-GoldP test set is TyDi's dev set; XQuAD has one file.
  assert submission.seqio_split("tydiqa", "test") == "validation"
  assert submission.seqio_split("xquad", "dev") == "test"
  assert submission.seqio_split("mlqa", "dev") == "validation"
  assert "kk" in submission.required_languages("udpos", "test")
  assert "kk" not in submission.required_languages("udpos", "dev")
  assert submission.required_languages("xnli", "dev", ("en", "de")) == [
      "de", "en"]


def test_tags_read_back_as_sentences_and_score_as_our_metric():
  gold = [["B-PER", "I-PER", "O"], ["O"], ["B-LOC", "O"]]
  predicted = [["B-PER", "O", "O"], ["O"], ["B-LOC", "O"]]
  text = submission.render("panx", predicted)
  assert "\n\n\n" not in text  # no empty sentence
  back = _read_tag(text)
  assert back == predicted
  assert metrics.entity_f1(gold, back) == metrics.entity_f1(gold, predicted)


def test_labels_qa_bucc_tatoeba_formats():
  assert _read_label(submission.render("xnli", ["entailment", "neutral"])) == [
      "entailment", "neutral"]
  # PAWS-X files spell the classes "0" / "1".
  assert submission.family_predictions("pawsx", [1, 0]) == ["1", "0"]
  assert submission.family_predictions("xnli", [2]) == ["contradiction"]
  answers = {"q1": "Denver Broncos", "q2": "Über"}
  assert json.loads(submission.render("xquad", answers)) == answers
  pairs = [("de-000001", "en-000007")]
  assert submission.render("bucc2018", pairs) == "de-000001\ten-000007\n"
  assert _read_label(submission.render("tatoeba", [3, 0])) == ["3", "0"]


def test_tagging_parts_join_and_cut_words_score_as_o():
  parts = [["B-PER", None], xp.ContinuedSentence(["O"]), ["O"]]
  assert submission.family_predictions("panx", parts) == [
      ["B-PER", "O", "O"], ["O"]]


def test_qa_keeps_each_questions_best_window():
  windows = [{"example_id": "q", "score": 1.0, "text": "a"},
             {"example_id": "q", "score": 3.0, "text": "b"},
             {"example_id": "r", "score": None, "text": ""}]
  assert submission.family_predictions("mlqa", windows) == {"q": "b",
                                                             "r": ""}


@pytest.mark.parametrize("task,predictions,expected,message", [
    ("xnli", ["neutral"], 2, "xnli de (F): 1 predictions for 2 examples"),
    ("udpos", [["NOUN"]], [2], "udpos de (F): sentence 1 has 2 words"),
    ("mlqa", {"a": "x"}, ["a", "b"], "1 of 2 questions have no answer"),
    ("bucc2018", [("de-9", "en-1")], ({"de-1"}, {"en-1"}),
     "1 mined pairs name ids not in the corpus"),
])
def test_check_names_task_language_and_file(task, predictions, expected,
                                            message):
  with pytest.raises(errors.UserError, match=message.replace("(", r"\(")
                     .replace(")", r"\)")):
    submission.check_predictions(task, "de", predictions, expected, "F")


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def _pawsx_folder(root, split, rows=3):
  for lang in submission.required_languages("pawsx", split):
    with open(_make(root, f"pawsx/{split}-{lang}.tsv"), "w") as f:
      writer = csv.writer(f, delimiter="\t")
      for i in range(rows):
        # XTREME's test rows have no label column.
        writer.writerow([f"a {i}", f"b {i}"] + ([] if split == "test"
                                                else [str(i % 2)]))


def _make(root, rel):
  path = os.path.join(root, rel)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  return path


def _infer(directory, task, records):
  _write(os.path.join(directory,
                      f"{task}-predict.jsonl-00000-of-00001"),
         "".join(json.dumps(r) + "\n" for r in records))


def _squad(questions):
  return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [
      {"context": "Some context.", "qas": [
          {"id": q, "question": "?", "answers": [
              {"answer_start": 0, "text": ""}]} for q in questions]}]}]})


def test_from_t5x_writes_a_checked_folder(tmp_path):
  xtreme, infer = str(tmp_path / "xtreme"), str(tmp_path / "infer")
  _pawsx_folder(xtreme, "test")
  for lang in submission.required_languages("pawsx", "test"):
    _infer(infer, f"rembert_local_pawsx_{lang}", [
        {"index": i, "prediction": ("different_meaning", "paraphrase")[i % 2]}
        for i in range(3)])
  for lang in submission.required_languages("tydiqa", "test"):
    _write(_make(xtreme, "tydiqa/tydiqa-goldp-v1.1-dev/"
                 f"tydiqa.goldp.{lang}.dev.json"), _squad([f"{lang}-1"]))
    _infer(infer, f"rembert_local_tydiqa_predict_{lang}",
           [{"id": f"{lang}-1", "prediction": "Some"}])
  out = tmp_path / "out"
  submission.main([f"--infer_dirs={infer}", f"--xtreme_dir={xtreme}",
                   "--split=test", f"--output_dir={out}"])
  assert _read_label((out / "pawsx/test-ko.tsv").read_text()) == ["0", "1",
                                                                 "0"]
  assert json.loads((out / "tydiqa/test-sw.json").read_text()) == {
      "sw-1": "Some"}
  manifest = json.loads((out / submission.MANIFEST).read_text())
  assert manifest["split"] == "test" and "xnli" in manifest["missing"]
  assert sorted(p.name for p in out.iterdir()) == [
      "pawsx", submission.MANIFEST, "tydiqa"]


def test_from_t5x_refuses_an_incomplete_folder(tmp_path, capsys):
  xtreme, infer = str(tmp_path / "xtreme"), str(tmp_path / "infer")
  _pawsx_folder(xtreme, "dev")
  for lang in submission.required_languages("pawsx", "dev"):
    if lang != "ja":
      _infer(infer, f"rembert_local_pawsx_{lang}",
             [{"index": i, "prediction": "paraphrase"} for i in range(3)])
  out = tmp_path / "out"
  args = [f"--infer_dirs={infer}", f"--xtreme_dir={xtreme}", "--split=dev",
          f"--output_dir={out}"]
  with pytest.raises(SystemExit):
    submission.main(args)
  err = capsys.readouterr().err
  assert "pawsx ja: no t5x.infer output rembert_local_pawsx_ja" in err
  assert not out.exists()
  # A count that differs from XTREME's file: also nothing written.
  _infer(infer, "rembert_local_pawsx_ja", [{"index": 0,
                                            "prediction": "paraphrase"}])
  with pytest.raises(SystemExit):
    submission.main(args)
  err = capsys.readouterr().err
  assert "pawsx ja" in err and "1 predictions for 3 examples" in err
  assert "pawsx/dev-ja.tsv" in err
  assert not out.exists() and not list(tmp_path.glob("out.tmp-*"))


@pytest.mark.parametrize("output", ["infer", "infer/out", "."])
def test_the_folder_never_overwrites_its_inputs(tmp_path, capsys, output):
  xtreme, infer = tmp_path / "xtreme", tmp_path / "infer"
  _pawsx_folder(str(xtreme), "dev")
  _infer(str(infer), "rembert_local_pawsx_en", [{"index": 0,
                                                 "prediction": "paraphrase"}])
  before = sorted((p, p.read_bytes()) for p in tmp_path.rglob("*")
                  if p.is_file())
  with pytest.raises(SystemExit):
    submission.main([f"--infer_dirs={infer}", f"--xtreme_dir={xtreme}",
                     "--split=dev", f"--output_dir={tmp_path / output}",
                     "--overwrite"])
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: --output_dir ") and "the input --" in err
  assert err.endswith("write the output to another directory")
  assert sorted((p, p.read_bytes()) for p in tmp_path.rglob("*")
                if p.is_file()) == before


def test_sweep_prints_infer_and_folder_commands(tmp_path):
  grid = {"squad": sweep.EXPERIMENTS["table15"]["squad"]}
  points = sweep.expand_grid(grid, seeds=[0, 1])
  request = submission.Request(str(tmp_path / "sub"), str(tmp_path / "x"))
  lines = sweep.t5x_commands("/out", points, "m.gin", "/pre",
                             request=request)
  infer = [l for l in lines if l.startswith("for t in ")]
  assert len(infer) == 4  # xquad and mlqa, two seeds
  # QA predicts through the prediction-only tasks (blanked hidden sets).
  assert "rembert_local_xquad_predict_th" in infer[0]
  assert "rembert_local_xquad_th" not in infer[0].replace(";", " ").split()
  assert "--gin_file=gin_configs/runs/infer_mlqa.gin" in infer[1]
  assert "--gin.utils.DatasetConfig.split=\"'test'\"" in infer[1]
  assert ("--gin.INFER_OUTPUT_DIR=\"'/out/runs/squad/lr=9e-06/seed=0/"
          "infer_test'\"") in infer[0]
  last = lines[-2:]
  assert all(l.startswith("python -m rembert_t5x.experiments.submission ")
             for l in last)
  assert f"--output_dir={tmp_path}/sub/seed-1" in last[1]
  several = sweep.expand_grid(grid, [1e-5, 2e-5], seeds=[0])
  with pytest.raises(errors.UserError, match="one learning rate per grid"):
    sweep.t5x_commands("/out", several, "m.gin", "/pre", request=request)


def test_sweep_checks_the_submission_files_before_training(tmp_path, capsys):
  xtreme = str(tmp_path / "xtreme")
  _pawsx_folder(xtreme, "dev")
  _write(os.path.join(xtreme, "pawsx/train-en.tsv"), "a\tb\t1\n")
  with pytest.raises(SystemExit):
    sweep.main(["--experiment=table15", "--runner=t5x", "--workdir=/w",
                "--pretrained=/p", f"--xtreme_dir={xtreme}", "--tasks=pawsx",
                f"--submission_dir={tmp_path / 'sub'}"])
  err = capsys.readouterr().err
  assert f"pawsx de: {xtreme}/pawsx/test-de.tsv: no such file" in err
  assert "6 more are missing" in err


# --- BUCC 2018 from the pre-trained encoder --------------------------------


def _bucc_metric_path(encoder_dir, files):
  """`retrieval_metrics.bucc_metric` on the evaluation's embeddings of every
  row of a BUCC split (the task preprocessing, the retrieval feature
  converter, `predict_batches`), as tasks/retrieval.py's BUCC task."""
  config = test_utils.TINY_CONFIG
  model = models.RemBertRetrievalModel(models.make_module("retrieval",
                                                          config))
  params = checkpoints.load_params_for(model, encoder_dir)
  vocab = vocabulary.RemBertVocabulary(
      os.path.join(encoder_dir, "sentencepiece.model"))
  lengths = {"input_tokens": config.max_position_embeddings}
  ds = xtreme_readers.bucc_source(files["source"], files["target"],
                                  "validation").get_dataset("validation")
  targets = [tuple(ex["targets"]) for ex in ds.as_numpy_iterator()]
  ds = feature_converters.RetrievalFeatureConverter(pack=False)(
      xp.encode_single_sentence(
          ds, sequence_length=lengths,
          output_features=xp.retrieval_output_features(vocab)), lengths)
  outputs = dict(predict_batches.make_predict_fn(model, params, 4)(
      ds.enumerate()))
  rows = [xtreme_readers.read_bucc_sentences(files[k])
          for k in ("source", "target")]
  return retrieval_metrics.bucc_metric(
      targets, [outputs[i] for i in range(len(targets))], rows,
      xtreme_readers.read_bucc_gold(files["gold"]),
      (files["source"], files["target"]))


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
  """A random pre-trained MODEL_DIR with a tiny vocabulary."""
  root = tmp_path_factory.mktemp("encoder")
  vocab = test_utils.train_tiny_vocab(root)
  return str(test_utils.write_random_checkpoint(
      root / "model", "mlm", test_utils.TINY_CONFIG,
      vocab_file=vocab.sentencepiece_model_file))


def _bucc_split(xtreme, lang, split, gold):
  """A corpus in XTREME's BUCC layout: six source sentences (one also under
  a second id, which XTREME drops), their English sides shuffled, and the
  gold pairs if `gold`."""
  lines = test_utils.TINY_CORPUS[:6]
  base = os.path.join(xtreme, "bucc2018", f"{lang}-en.{split}")
  source = [(f"{lang}-{split}-{i}", s) for i, s in enumerate(lines)]
  source.append((f"{lang}-{split}-twin", lines[2]))
  english = [(f"en-{split}-{i}", lines[i]) for i in (3, 0, 5, 1, 4, 2)]
  _write(f"{base}.{lang}", "".join(f"{i}\t{s}\n" for i, s in source))
  _write(f"{base}.en", "".join(f"{i}\t{s}\n" for i, s in english))
  if gold:
    _write(f"{base}.gold", "".join(f"{lang}-{split}-{i}\ten-{split}-{i}\n"
                                   for i in range(6)))


def test_bucc_test_corpus_without_gold_gets_a_file_and_no_metric(
    encoder_dir, tmp_path):
  xtreme = str(tmp_path / "xtreme")
  _bucc_split(xtreme, "de", "dev", gold=True)
  _bucc_split(xtreme, "de", "test", gold=False)
  request = submission.Request(str(tmp_path / "sub"), xtreme, "test", ("de",))
  submission.check_inputs(request, [])
  logs = []
  out = submission.retrieval_files(request, encoder_dir, log=logs.append)
  assert sorted(out.files) == [("bucc2018", "de")]
  assert "no tatoeba/ folder" in out.missing["tatoeba"]
  summary = out.bucc["de"]
  assert summary["scores"] is None  # no test gold: no metric
  assert any("no gold file, no score" in line for line in logs)
  # The file: the test corpus's ids (never the dropped twin), one pair a
  # line, as many as mined at the dev threshold.
  pairs = [line.split("\t") for line in
           out.files[("bucc2018", "de")].splitlines()]
  assert len(pairs) == summary["pairs"] > 0
  assert all(s.startswith("de-test-") and s != "de-test-twin"
             and e.startswith("en-test-") for s, e in pairs)
  # The dev threshold and F1: those of the BUCC metric's path (every row
  # embedded by the evaluation's predict function, then unified).
  dev = _bucc_metric_path(encoder_dir, xtreme_readers.bucc_files(
      xtreme, "de", "dev"))
  assert summary["threshold"] == pytest.approx(dev["threshold"], rel=1e-4)
  assert summary["dev"]["f1"] == pytest.approx(dev["f1"], abs=0.01)
  assert np.load(tmp_path / "sub" / "embeddings" / "bucc2018-de-dev-source"
                 / "embeddings.npy").shape[0] == 6  # the twin's once
  # With a test gold file the same run scores it (the embeddings reused).
  _bucc_split(xtreme, "de", "test", gold=True)
  logs.clear()
  scored = submission.retrieval_files(request, encoder_dir, log=logs.append)
  assert scored.files == out.files
  assert scored.bucc["de"]["scores"]["f1"] > 0
  assert any("embedded before" in line for line in logs)


def test_from_t5x_with_pretrained_adds_bucc_test_files(encoder_dir, tmp_path):
  """The T5X road's folder command: BUCC from the pre-trained encoder for
  every language, embeddings beside the folder, no score without gold."""
  xtreme = str(tmp_path / "xtreme")
  for lang in submission.required_languages("bucc2018", "test"):
    _bucc_split(xtreme, lang, "dev", gold=True)
    _bucc_split(xtreme, lang, "test", gold=False)
  out = tmp_path / "sub" / "seed-0"
  submission.main([f"--xtreme_dir={xtreme}", "--split=test",
                   f"--output_dir={out}", f"--pretrained={encoder_dir}"])
  manifest = json.loads((out / submission.MANIFEST).read_text())
  assert manifest["tasks"] == {"bucc2018": ["de", "fr", "ru", "zh"]}
  assert "no tatoeba/ folder" in manifest["missing"]["tatoeba"]
  assert all(manifest["bucc2018"][lang]["scores"] is None
             for lang in ("de", "fr", "ru", "zh"))
  for lang in ("de", "zh"):
    lines = (out / f"bucc2018/test-{lang}.tsv").read_text().splitlines()
    assert lines and all(l.startswith(f"{lang}-test-") for l in lines)
  assert (tmp_path / "sub" / "embeddings" / "bucc2018-zh-test-target"
          / "embeddings.npy").is_file()
