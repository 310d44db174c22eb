"""XTREME submission folders: layout, formats, completeness, the T5X path.

No model here: the format rules of XTREME's `evaluate.py` (its readers are
restated below in a few lines, since the script is not a dependency), our
metrics on what a file reads back, and `from_t5x` over hand-written infer
outputs. The local runner's folders are built end to end by
tests/xtreme_road_test.py.
"""

import csv
import json
import os

import pytest

from rembert_t5x.common import errors
from rembert_t5x.experiments import submission
from rembert_t5x.experiments import sweep
from rembert_t5x import metrics


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
  parts = [["B-PER", None], submission.xp.ContinuedSentence(["O"]), ["O"]]
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
