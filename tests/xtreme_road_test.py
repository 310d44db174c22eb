"""The road from a released-like RemBERT to the Table-16 table, end to end.

scripts/xtreme_road.py's steps on two families (PAWS-X: pairs; TyDiQA-GoldP:
QA) and two languages besides English, one fine-tuning step each: a tiny
random Hugging Face RemBERT whose vocabulary has the released layout, its
conversion, the table15 sweep over a tiny XTREME folder, the table, and the
dev and test submission folders (the dev one checked against the sweep's own
per-language numbers, as XTREME's `evaluate.py` would score it).
"""

import csv
import json

import pytest
import seqio

from rembert_t5x.data import pieces
from rembert_t5x.data import vocabulary
from rembert_t5x.data import xtreme_readers
from rembert_t5x.experiments import submission
from rembert_t5x.experiments import sweep
from rembert_t5x.experiments import xtreme_local
from rembert_t5x.experiments import xtreme_road
from rembert_t5x.scoring import metrics
from tests import test_utils


def test_tiny_folder_holds_what_the_sweep_reads_with_english_added(
    tmp_path):
  data = test_utils.shared_data_dir("tatoeba").parent
  xtreme_road.write_tiny_xtreme(str(tmp_path), str(data), ["squad"],
                                examples=3, qa_paragraphs=1,
                                languages=["de", "zh"])
  spec = xtreme_local.local_spec(sweep.EXPERIMENTS["table15"]["squad"])
  # The sweep keeps English (XQuAD's and MLQA's English files included).
  xtreme_local.check_files(str(tmp_path), [spec], ["en", "de", "zh"])
  assert (tmp_path / "xquad/xquad.en.json").is_file()
  # Test files as XTREME's: MLQA's answers blanked; retrieval files.
  test = json.loads((tmp_path / "mlqa/MLQA_V1/test/"
                     "test-context-de-question-de.json").read_text())
  answers = [a for art in test["data"] for p in art["paragraphs"]
             for q in p["qas"] for a in q["answers"]]
  assert answers and all(a["text"] == "" for a in answers)
  english = (tmp_path / "tatoeba/de-en.en").read_text().splitlines()
  assert english == sorted(english) and len(english) == 3
  assert (tmp_path / "bucc2018/de-en.dev.gold").is_file()
  assert (tmp_path / "bucc2018/zh-en.test.zh").is_file()


@pytest.fixture(scope="module")
def road(tmp_path_factory):
  data = test_utils.shared_data_dir("tatoeba").parent
  work = tmp_path_factory.mktemp("road")
  logs = []
  result = xtreme_road.run_road(
      str(work), str(data), grids=("pawsx", "tydiqa"), train_steps=1,
      seeds="0", examples=4, qa_paragraphs=1, languages=("de", "ar"),
      log=logs.append)
  return result, logs


# Minutes on a loaded 2-core machine (a vocabulary, a model, two fine-tunes,
# ~20 task pipelines); `-m 'not slow'` leaves them out.
@pytest.mark.slow
def test_released_layout_ids_reach_the_model(road):
  result, _ = road
  spm_file = f"{result['model_dir']}/{pieces.VOCABULARY_FILENAME}"
  vocab = vocabulary.RemBertVocabulary(spm_file)
  assert vocab.special_ids == test_utils.RELEASED_LAYOUT_IDS
  hf_config = json.loads(open(f"{result['hf_dir']}/config.json").read())
  assert (hf_config["bos_token_id"], hf_config["eos_token_id"]) == (312, 313)
  # The converted checkpoint's vocabulary is the one the tasks use.
  vocabulary.use_checkpoint_vocabulary(result["model_dir"])
  for task, length in (("rembert_local_pawsx_de", 128),
                       ("rembert_local_tydiqa_ar", 384)):
    ex = next(seqio.get_mixture_or_task(task).get_dataset(
        {"input_tokens": length}, split="validation", shuffle=False,
        use_cached=False).as_numpy_iterator())
    tokens = ex["input_tokens"]
    assert tokens[0] == 312, task  # [CLS]
    assert 313 in tokens.tolist(), task  # [SEP]


@pytest.mark.slow
def test_results_per_language_with_selection_and_paper(road):
  result, logs = road
  table = result["table"]
  runs = {r["task"]: r for r in table["runs"]}
  assert set(runs) == {"pawsx", "tydiqa"}
  assert set(runs["pawsx"]["evaluations"]["pawsx"]["tasks"]) == {
      "rembert_local_pawsx_de", "rembert_local_pawsx_en"}
  assert set(runs["tydiqa"]["evaluations"]["tydiqa"]["tasks"]) == {
      "rembert_local_tydiqa_ar", "rembert_local_tydiqa_en"}
  for grid, run in runs.items():
    # Table 15's batch sizes; the checkpoint selected on English dev.
    assert run["batch_size"] == 128 and run["train_steps"] == 1
    sel = run["selection"]
    assert sel["task"] == f"rembert_local_{grid}_en"
    assert sel["split"] == "validation" and str(sel["step"]) in sel["scores"]
  assert set(table["families"]["tydiqa"]["languages"]) == {"ar", "en"}
  assert table["paper"]["scores"]["pawsx"] == 87.5
  assert table["paper"]["em_f1"]["tydiqa"] == [63.0, 77.0]
  md = result["markdown"]
  assert "| | pawsx | tydiqa | avg |" in md
  assert "| paper | 87.5 | 70.0 (63.0 / 77.0) | 78.8 |" in md
  assert "| ours (mean ± std, 1 seed) |" in md
  # Each step logged as the command that does it by hand.
  assert any("rembert-convert hf-to-t5x" in l for l in logs)
  assert any("rembert_t5x.experiments.sweep --experiment=table15" in l and
             "--xtreme_dir=" in l for l in logs)
  manifest = json.loads(open(f"{result['xtreme_dir']}/MANIFEST.json").read())
  assert "SYNTHETIC" in manifest["note"]
  assert "tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.ar.dev.json" in (
      manifest["files"])


def _pawsx_dev_labels(xtreme_dir, lang):
  with open(f"{xtreme_dir}/pawsx/dev-{lang}.tsv", encoding="utf-8") as f:
    return [row[2] for row in csv.reader(f, delimiter="\t")]


@pytest.mark.slow
def test_dev_folder_scores_as_the_sweep_and_test_folder_is_complete(road):
  result, logs = road
  xtreme = result["xtreme_dir"]
  dev = f"{result['submissions']['dev']}/seed-0"
  test = f"{result['submissions']['test']}/seed-0"
  languages = result["table"]["families"]
  for lang in ("de", "en"):
    # What XTREME's `accuracy` computes from the two files.
    predicted = open(f"{dev}/pawsx/test-{lang}.tsv").read().splitlines()
    gold = _pawsx_dev_labels(xtreme, lang)
    score = 100 * sum(p == g for p, g in zip(predicted, gold)) / len(gold)
    assert score == pytest.approx(languages["pawsx"]["languages"][lang][0])
  for lang in ("ar", "en"):
    # XTREME scores TyDiQA-GoldP with the SQuAD v1.1 script: ours is it.
    scores = metrics.evaluate_prediction_file(
        submission.input_file(xtreme, "tydiqa", "dev", lang),
        f"{dev}/tydiqa/test-{lang}.json")
    assert metrics.xtreme_qa_score(scores) == pytest.approx(
        languages["tydiqa"]["languages"][lang][0])
  # Test: XTREME's label-less files, every language, one line per example.
  for lang in ("de", "en"):
    rows = xtreme_readers.read_pair_tsv(f"{xtreme}/pawsx/test-{lang}.tsv",
                                        xtreme_readers.PAWSX_LABEL_IDS,
                                        require_labels=False)
    lines = open(f"{test}/pawsx/test-{lang}.tsv").read().splitlines()
    assert len(lines) == len(rows) and set(lines) <= {"0", "1"}
  manifest = json.loads(open(f"{test}/{submission.MANIFEST}").read())
  assert manifest["split"] == "test"
  assert manifest["tasks"] == {"bucc2018": ["de"], "pawsx": ["de", "en"],
                               "tatoeba": ["ar", "de"],
                               "tydiqa": ["ar", "en"]}
  assert "xnli" in manifest["missing"]
  tatoeba = open(f"{test}/tatoeba/test-de.tsv").read().split()
  assert len(tatoeba) == 4 and all(0 <= int(i) < 4 for i in tatoeba)
  for line in open(f"{dev}/bucc2018/test-de.tsv").read().splitlines():
    source, english = line.split("\t")
    assert source.startswith("de-") and english.startswith("en-")
  assert any("--submission_split=test" in c for c in result["commands"])
  assert any("--submission_dir=" in c and "--runner=t5x" in c
             for c in result["commands"])
