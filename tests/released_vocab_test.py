"""The released RemBERT vocabulary layout, end to end.

The synthetic SentencePiece model with its special pieces moved to the
released positions ([PAD]=0, [UNK]=2, [CLS]=312, [SEP]=313, [MASK]=336;
tests/test_utils.RELEASED_LAYOUT) goes through every task family, Hugging
Face's tokenizer, the checkpoint converters and a short fine-tune with the
local runner. Moving pieces changes ids, not segmentation, so every example
must equal the one built with the original (0-4) model, id for id under the
permutation: anything that still assumes 0-4 breaks that.
"""

import dataclasses
import json
import pathlib

import numpy as np
import pytest
import seqio
import sentencepiece as spm

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x import configs
from rembert_t5x.convert import checkpoint_io
from rembert_t5x.data import lazy_vocabulary
from rembert_t5x.data import pieces
from rembert_t5x.data import vocabulary
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import eval as eval_lib
from rembert_t5x.runner import train
from rembert_tasks import retrieval
from rembert_tasks import synthetic as synthetic_tasks
from tests import test_utils

RELEASED = test_utils.RELEASED_LAYOUT_IDS
LENGTHS = {"mlm": 32, "pair": 64, "tag": 64, "qa": 96}
# The tiny model file's network, with rows for the 380-piece synthetic vocabulary.
CONFIG = dataclasses.replace(
    configs.config_from_gin("gin_configs/models/tiny.gin"), vocab_size=400)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """Synthetic data, its (0-4) vocabulary and a released-layout copy."""
  tmp = tmp_path_factory.mktemp("released")
  # The released layout puts [MASK] at id 336, so the vocabulary needs 337+
  # pieces: a fifth language's words make room for 380 (four languages of
  # 300 sentences support at most 337).
  manifest = synthetic_tasks.prepare(
      str(tmp / "synthetic"), corpus_sentences=300, pair_train=64,
      tag_train=64, qa_train=64, eval_examples=16, num_languages=5,
      vocab_size=380)
  released = test_utils.released_layout_vocabulary(
      manifest["vocab"], str(tmp / "released.model"))
  # Retrieval files in the XTREME/LASER Tatoeba layout, from two synthetic
  # languages' corpora (line i "translates" line i).
  corpus = manifest["files"]["corpus"]
  lines = {lang: (pathlib.Path(manifest["dir"]) / corpus[lang]).read_text(
      "utf-8").splitlines()[:20] for lang in ("qla", "qcy")}
  (tmp / "tatoeba").mkdir()
  (tmp / "tatoeba" / "tatoeba.qcy-eng.qcy").write_text(
      "\n".join(lines["qcy"]) + "\n", "utf-8")
  (tmp / "tatoeba" / "tatoeba.qcy-eng.eng").write_text(
      "\n".join(lines["qla"]) + "\n", "utf-8")
  return {"manifest": manifest, "original": manifest["vocab"],
          "released": released, "dir": tmp}


def _register(data, prefix, vocab):
  names = synthetic_tasks.register_synthetic(
      data["manifest"], prefix=prefix, vocabulary=vocab,
      shuffle_buffer_size=test_utils.TINY_SHUFFLE_BUFFER)
  names["retrieval"] = retrieval.register_tatoeba_local(
      str(data["dir"]), vocabulary=vocab, prefix=prefix,
      languages={"qcy": "qcy"})[0]
  return names


@pytest.fixture(scope="module")
def tasks(data):
  return {
      "released": _register(data, "relvocab_",
                            vocabulary.RemBertVocabulary(data["released"])),
      "original": _register(data, "origvocab_",
                            vocabulary.RemBertVocabulary(data["original"])),
  }


def _permutation(data) -> np.ndarray:
  """original id -> released id, through the piece names."""
  original = spm.SentencePieceProcessor(model_file=data["original"])
  released = spm.SentencePieceProcessor(model_file=data["released"])
  return np.array([released.PieceToId(original.IdToPiece(i))
                   for i in range(original.GetPieceSize())])


def _examples(name, family, n=8):
  task = seqio.get_mixture_or_task(name)
  subtask = task.tasks[0] if hasattr(task, "tasks") else task
  split = "test" if family == "retrieval" else "train"
  if family != "retrieval" and "train" not in subtask.splits:
    split = "validation"
  ds = subtask.get_dataset({"input_tokens": LENGTHS.get(family, 32)},
                           split=split, shuffle=False, seed=0,
                           use_cached=False)
  return list(ds.take(n).as_numpy_iterator())


def test_released_layout_is_read_by_name(data):
  vocab = vocabulary.RemBertVocabulary(data["released"])
  assert vocab.special_ids == RELEASED
  assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id,
          vocab.mask_id) == (0, 2, 312, 313, 336)
  # Ids 1-4 are ordinary pieces now.
  assert all(not vocab.tokenizer.IdToPiece(i).startswith("[")
             for i in (1, 3, 4))
  assert vocabulary.RemBertVocabulary(
      data["original"]).special_ids == pieces.TRAINED_LAYOUT


@pytest.mark.parametrize("family", ["pair", "tag", "qa", "retrieval"])
def test_task_family_equals_the_original_under_the_permutation(
    data, tasks, family):
  perm = _permutation(data)
  train_name = (tasks["released"][family] if family == "retrieval"
                else f"relvocab_{family}_train")
  released = _examples(train_name, family)
  original = _examples(train_name.replace("relvocab_", "origvocab_"), family)
  assert released and len(released) == len(original)
  for rel, orig in zip(released, original):
    tokens = rel["input_tokens"]
    assert tokens[0] == RELEASED.cls and tokens[-1] == RELEASED.sep
    np.testing.assert_array_equal(tokens, perm[orig["input_tokens"]])
    np.testing.assert_array_equal(rel["token_types"], orig["token_types"])
    for key in ("targets", "weights", "start_positions", "end_positions",
                "label"):
      if key in orig:
        np.testing.assert_array_equal(rel[key], orig[key])
  if family == "pair":
    assert all((ex["input_tokens"] == RELEASED.sep).sum() >= 2
               for ex in released)


def test_mlm_masks_with_the_vocabulary_ids(tasks):
  del tasks
  masked = special = selected = 0
  for ex in _examples("relvocab_mlm", "mlm", n=32):
    targets, inputs, weights = (ex["targets"], ex["input_tokens"],
                                ex["weights"])
    assert targets[0] == RELEASED.cls and targets[-1] == RELEASED.sep
    is_special = np.isin(targets, RELEASED.as_tuple())
    special += is_special.sum()
    selected += weights.sum()
    assert (weights[is_special] == 0).all()
    masked += (inputs[weights > 0] == RELEASED.mask).sum()
    # Random replacements are ordinary pieces.
    changed = (inputs != targets) & (inputs != RELEASED.mask)
    assert not np.isin(inputs[changed], RELEASED.as_tuple()).any()
  assert special > 0 and selected > 0
  assert masked / selected > 0.6  # 80% [MASK], i.e. id 336


def test_pair_ids_equal_hugging_face_on_this_vocabulary(data, tasks):
  transformers = pytest.importorskip("transformers")
  del tasks
  hf_dir = test_utils.write_hf_tokenizer_files(data["released"],
                                               data["dir"] / "hf_tokenizer")
  tokenizer = transformers.RemBertTokenizer.from_pretrained(str(hf_dir))
  pair_file = data["manifest"]["files"]["pair"]["train"]["qla"]
  rows = (pathlib.Path(data["manifest"]["dir"]) / pair_file).read_text(
      "utf-8").splitlines()[:8]
  examples = _examples("relvocab_pair_train", "pair")
  assert len(examples) == len(rows) == 8
  for row, ex in zip(rows, examples):
    first, second = row.split("\t")[:2]
    expected = tokenizer(first, second, return_token_type_ids=True)
    assert ex["input_tokens"].tolist() == expected["input_ids"]
    assert ex["token_types"].tolist() == expected["token_type_ids"]


def _hf_checkpoint(data, path):
  """A tiny random RemBertForMaskedLM with the released-layout vocabulary."""
  transformers = pytest.importorskip("transformers")
  model = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(CONFIG)))
  model.save_pretrained(path)
  test_utils.write_hf_tokenizer_files(data["released"], path)
  return path


@pytest.fixture(scope="module")
def converted(data):
  hf_dir = _hf_checkpoint(data, data["dir"] / "hf")
  out = data["dir"] / "converted"
  summary = checkpoint_io.hf_to_t5x(str(hf_dir), str(out))
  return out, summary


def test_hf_to_ours_carries_the_vocabulary_and_back(data, converted):
  out, summary = converted
  released = pathlib.Path(data["released"]).read_bytes()
  assert summary.vocabulary == str(out / pieces.VOCABULARY_FILENAME)
  assert (out / pieces.VOCABULARY_FILENAME).read_bytes() == released
  assert vocabulary.find_checkpoint_vocabulary(
      str(out / "checkpoints" / "0")) == str(
          out / pieces.VOCABULARY_FILENAME)
  back = data["dir"] / "back"
  summary = checkpoint_io.t5x_to_hf(str(out), str(back))
  assert (back / pieces.VOCABULARY_FILENAME).read_bytes() == released
  config = json.loads((back / "config.json").read_text())
  assert (config["pad_token_id"], config["bos_token_id"],
          config["eos_token_id"]) == (0, 312, 313)


def test_fine_tune_from_the_converted_directory(data, converted, tmp_path,
                                                monkeypatch):
  """Lazy tasks (as `rembert_tasks` registers them) pick the vocabulary up."""
  monkeypatch.delenv(vocabulary.SPM_PATH_ENV, raising=False)
  out, _ = converted
  names = synthetic_tasks.register_synthetic(
      data["manifest"], prefix="lazyvocab_",
      vocabulary=lazy_vocabulary.DefaultVocabulary())
  task = seqio.get_mixture_or_task("lazyvocab_pair_train")
  with pytest.raises(ValueError, match="REMBERT_SPM_PATH is not set"):
    _ = task.output_features["input_tokens"].vocabulary.vocab_size
  run_gin = tmp_path / "run.gin"
  run_gin.write_text(test_utils.tiny_run_gin(
      "lazyvocab_pair_train", vocab_size=400, length=64,
      model="RemBertPairClassificationModel",
      module="RemBertForSequenceClassification",
      bindings=["INITIAL_CHECKPOINT_PATH = None",
                "network.RemBertForSequenceClassification.num_classes = 2"],
      log_period=1, init_checkpoint="%INITIAL_CHECKPOINT_PATH"))
  ft = tmp_path / "ft"
  # The local runner's command line, INITIAL_CHECKPOINT_PATH at the converted dir.
  train._main(cli.parse_gin_args([f"--gin_file={run_gin}",
                                 f"--gin.MODEL_DIR='{ft}'",
                                 f"--gin.INITIAL_CHECKPOINT_PATH='{out}'"]))
  configs.parse_gin([])
  model = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(CONFIG, 2))
  released = pathlib.Path(data["released"]).read_bytes()
  assert (ft / pieces.VOCABULARY_FILENAME).read_bytes() == released
  assert vocabulary.special_ids(
      task.output_features["input_tokens"].vocabulary) == RELEASED

  # A fresh evaluation of the fine-tuned directory finds it there.
  vocabulary.use_checkpoint_vocabulary()
  del names
  record = eval_lib.evaluate(str(ft), str(tmp_path / "eval"), model=model,
                             mixture_or_task_name="lazyvocab_pair_qcy",
                             task_feature_lengths={"input_tokens": 64},
                             batch_size=8)
  assert record["tasks"]
  assert vocabulary.default_model_file() == str(
      ft / pieces.VOCABULARY_FILENAME)

  # $REMBERT_SPM_PATH naming another vocabulary than the checkpoint's is
  # refused unless asked for; then it wins, and a run into `ft` with it is
  # still refused, as ft's checkpoints were made with the other vocabulary.
  monkeypatch.setenv(vocabulary.SPM_PATH_ENV, data["original"])
  with pytest.raises(errors.UserError, match="differs from the checkpoint's"):
    vocabulary.use_checkpoint_vocabulary(str(out))
  monkeypatch.setenv(vocabulary.ALLOW_OTHER_VOCABULARY_ENV, "1")
  assert vocabulary.use_checkpoint_vocabulary(str(out)) == data["original"]
  assert vocabulary.special_ids(task.output_features["input_tokens"]
                                .vocabulary) == pieces.TRAINED_LAYOUT
  with pytest.raises(errors.UserError, match=r"ft/sentencepiece\.model differs "
                     "from the vocabulary this run uses"):
    train.train(str(ft), model=model,
                mixture_or_task_name="lazyvocab_pair_train",
                task_feature_lengths={"input_tokens": 64}, train_steps=4,
                batch_size=8, mesh_shape=(1, 1), progress_bar=False,
                init_checkpoint=str(out))


def test_explicit_choice_wins_over_environment_and_checkpoint(
    data, converted, monkeypatch):
  out, _ = converted
  monkeypatch.setenv(vocabulary.SPM_PATH_ENV, data["original"])
  chosen = vocabulary.use_checkpoint_vocabulary(
      str(out), sentencepiece_model=data["released"])
  assert chosen == data["released"]
  monkeypatch.delenv(vocabulary.SPM_PATH_ENV)
  assert vocabulary.use_checkpoint_vocabulary(str(out)) == str(
      out / pieces.VOCABULARY_FILENAME)
  assert vocabulary.use_checkpoint_vocabulary(None) is None
