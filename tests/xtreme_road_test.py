"""The road from a released-like RemBERT to the Table-16 table, end to end.

scripts/xtreme_road.py's steps on two families (PAWS-X: pairs; TyDiQA-GoldP:
QA) and two languages besides English, one fine-tuning step each: a tiny
random Hugging Face RemBERT whose vocabulary has the released layout, its
conversion, the table15 sweep over a tiny XTREME folder, the table.
"""

import json

import pytest
import seqio

from rembert_t5x.data import pieces
from rembert_t5x.data import vocabulary
from rembert_t5x.experiments import xtreme_road
from tests import test_utils

# Minutes on a loaded 2-core machine (2-3 idle-ish: a vocabulary, a model,
# two fine-tunes, ~10 task pipelines); `-m 'not slow'` leaves it out.
pytestmark = pytest.mark.slow


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
