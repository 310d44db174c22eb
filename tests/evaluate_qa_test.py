"""Tests for scripts/evaluate_qa.py.

Run as a subprocess like a user would for the scores, the real XQuAD file
and one bad file; the other flag and file cases call the `main` the script
runs in this process (the same flag parsing, exit code and `error:` line,
without an interpreter start-up of ~1 s CPU per case).
"""

import json
import os
import subprocess
import sys

import pytest

from rembert_t5x.tools import evaluate_qa
from tests import test_utils

REPO = test_utils.REPO_ROOT
SCRIPT = REPO / "scripts" / "evaluate_qa.py"
XQUAD_EN = test_utils.SHARED_DATA / "xquad" / "xquad.en.json"

DATASET = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
    {"context": "The Denver Broncos won in 2016 in Santa Clara.",
     "qas": [
         {"id": "q1", "question": "Who won?",
          "answers": [{"text": "Denver Broncos", "answer_start": 4},
                      {"text": "The Denver Broncos", "answer_start": 0}]},
         {"id": "q2", "question": "When?",
          "answers": [{"text": "2016", "answer_start": 26}]},
         {"id": "q3", "question": "Where?",
          "answers": [{"text": "Santa Clara", "answer_start": 34}]},
     ]}]}]}


def _write(tmp_path, dataset, predictions):
  """(dataset file, prediction file) with these contents (JSON unless str)."""
  dataset_file = tmp_path / "dataset.json"
  prediction_file = tmp_path / "predictions.json"
  for path, content in ((dataset_file, dataset),
                        (prediction_file, predictions)):
    path.write_text(content if isinstance(content, str) else
                    json.dumps(content, ensure_ascii=False), encoding="utf-8")
  return dataset_file, prediction_file


def _run(tmp_path, dataset, predictions, *flags):
  dataset_file, prediction_file = _write(tmp_path, dataset, predictions)
  return subprocess.run(
      [sys.executable, str(SCRIPT), f"--dataset_file={dataset_file}",
       f"--prediction_file={prediction_file}", *flags],
      capture_output=True, text=True, cwd=REPO, timeout=120)


def _run_main(capsys, tmp_path, dataset, predictions, *flags):
  """`_run`'s result, from the script's `main` in this process."""
  dataset_file, prediction_file = _write(tmp_path, dataset, predictions)
  argv = [f"--dataset_file={dataset_file}",
          f"--prediction_file={prediction_file}", *flags]
  capsys.readouterr()
  try:
    evaluate_qa.main(argv)
    code = 0
  except SystemExit as e:
    code = e.code
  out = capsys.readouterr()
  return subprocess.CompletedProcess(argv, code, out.out, out.err)


def _error_line(result):
  assert result.returncode != 0
  assert "Traceback" not in result.stderr
  lines = [l for l in result.stderr.splitlines() if l.startswith("error:")]
  assert len(lines) == 1, result.stderr
  return lines[0]


def test_scores_and_missing_predictions(tmp_path):
  # q1: "the broncos" vs "denver broncos": P=1, R=1/2 -> F1 2/3, EM 0.
  # q2: exact. q3: missing -> 0 and a note on stderr.
  result = _run(tmp_path, DATASET, {"q1": "the Broncos", "q2": "2016."})
  assert result.returncode == 0, result.stderr
  scores = json.loads(result.stdout.strip())
  assert scores["exact_match"] == pytest.approx(100 / 3)
  assert scores["f1"] == pytest.approx(100 * (2 / 3 + 1) / 3)
  assert "Unanswered question q3 will receive score 0." in result.stderr


def test_mlqa_normalization(tmp_path, capsys):
  dataset = json.loads(json.dumps(DATASET))
  qas = dataset["data"][0]["paragraphs"][0]["qas"]
  qas[0]["answers"] = [{"text": "北京市", "answer_start": 0}]
  dataset["data"][0]["paragraphs"][0]["qas"] = qas[:1]
  dataset["data"][0]["paragraphs"][0]["context"] = "北京市"
  result = _run_main(capsys, tmp_path, dataset, {"q1": "北京"},
                     "--normalization=mlqa", "--lang=zh")
  assert result.returncode == 0, result.stderr
  assert json.loads(result.stdout) == {"exact_match": 0.0,
                                       "f1": pytest.approx(80.0)}
  # SQuAD rules give no partial credit without whitespace.
  result = _run_main(capsys, tmp_path, dataset, {"q1": "北京"})
  assert json.loads(result.stdout)["f1"] == 0.0


def test_bad_prediction_file(tmp_path, capsys):
  line = _error_line(_run(tmp_path, DATASET, "{oops"))  # as a user sees it
  assert "predictions.json" in line and "not valid JSON" in line
  line = _error_line(_run_main(capsys, tmp_path, DATASET, ["q1"]))
  assert "predictions.json" in line and "expected a JSON object" in line
  line = _error_line(_run_main(capsys, tmp_path, DATASET, {"q1": 3}))
  assert "predictions.json" in line and "id 'q1'" in line


def test_bad_dataset_file(tmp_path, capsys):
  line = _error_line(_run_main(capsys, tmp_path, "not json", {}))
  assert "dataset.json" in line and "not valid JSON" in line
  bad = json.loads(json.dumps(DATASET))
  bad["data"][0]["paragraphs"][0]["qas"][1]["answers"] = [{"txt": "2016"}]
  line = _error_line(_run_main(capsys, tmp_path, bad, {}))
  assert "dataset.json" in line
  assert "data[0].paragraphs[0].qas[1].answers (id 'q2')" in line
  line = _error_line(_run_main(capsys, tmp_path, {"articles": []}, {}))
  assert "dataset.json: data: expected" in line


def test_bad_language(tmp_path, capsys):
  line = _error_line(_run_main(capsys, tmp_path, DATASET, {},
                               "--normalization=mlqa", "--lang=fr"))
  assert "Unknown MLQA language 'fr'" in line
  line = _error_line(_run_main(capsys, tmp_path, DATASET, {},
                               "--normalization=mlqa"))
  assert "needs --lang" in line


def test_real_xquad_gold_answers_score_100(tmp_path):
  if not XQUAD_EN.exists():
    if os.environ.get("CI") == "true":
      pytest.fail(f"Real test data missing: {XQUAD_EN} (CI=true).")
    pytest.skip(f"Real test data not found at {XQUAD_EN}.")
  data = json.loads(XQUAD_EN.read_text("utf-8"))
  predictions = {qa["id"]: qa["answers"][0]["text"]
                 for a in data["data"] for p in a["paragraphs"]
                 for qa in p["qas"]}
  prediction_file = tmp_path / "p.json"
  prediction_file.write_text(json.dumps(predictions), encoding="utf-8")
  result = subprocess.run(
      [sys.executable, str(SCRIPT), f"--dataset_file={XQUAD_EN}",
       f"--prediction_file={prediction_file}"],
      capture_output=True, text=True, cwd=REPO, timeout=120)
  assert result.returncode == 0, result.stderr
  assert json.loads(result.stdout) == {"exact_match": 100.0, "f1": 100.0}
