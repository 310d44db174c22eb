"""The catalogue of bad inputs (docs/ERRORS.md): one clear message each.

Every test feeds one kind of bad input to a CLI or library entry point and
checks the message names the file / line / field, that CLIs end with exit
code 2 and a single `error: ...` line (no traceback), and, where something
was already written, that it is left as it was. Most run in-process; a few
run the scripts as a user would.
"""

import errno
import json
import os

import numpy as np
import orbax.checkpoint as ocp
import pytest
import sentencepiece as spm
import seqio

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x.data import inputs
from rembert_t5x.data import pieces
from rembert_t5x.data import qa
from rembert_t5x.data import squad_files
from rembert_t5x.data import text_sources
from rembert_t5x.data import vocabulary
from rembert_t5x.data import xtreme_readers
from rembert_t5x.scoring import metrics
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import eval as eval_lib
from rembert_t5x.runner import train
from rembert_tasks import panx
from rembert_tasks import pretraining
from rembert_tasks import udpos
from rembert_tasks import xnli
from tests import test_utils

REPO = test_utils.REPO_ROOT

# 2 steps of the tiny MLM model on test_random_mlm.
RUN_GIN = test_utils.tiny_run_gin()
BAD_LINE = len(RUN_GIN.splitlines()) + 1  # a line appended to RUN_GIN


# The tiny MLM task RUN_GIN names; `run_gin` (conftest.py) writes RUN_GIN.
pytestmark = pytest.mark.usefixtures("random_mlm_task")


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
  """A tiny RemBERT SentencePiece model (two scripts)."""
  tmp = tmp_path_factory.mktemp("spm")
  files = {}
  for lang, words in (("en", "the cat sat on a mat"),
                      ("ru", "кошка сидела на ковре")):
    path = tmp / f"{lang}.txt"
    path.write_text("\n".join([words, words[::-1]] * 40) + "\n", "utf-8")
    files[lang] = [str(path)]
  return pieces.train_sentencepiece(files, str(tmp / "spm"), 30,
                                        character_coverage=1.0)


def _cli_error(main, argv, capsys) -> str:
  """Runs a runner-style CLI in-process; returns its one error line."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:
    cli.run_main(main, [str(a) for a in argv])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1, err
  assert err.startswith("error: ") and "Traceback" not in err
  return err


def _train_error(run_gin, model_dir, capsys, *bindings) -> str:
  return _cli_error(train._main, [f"--gin_file={run_gin}",
                                 f"--gin.MODEL_DIR='{model_dir}'", *bindings],
                    capsys)


def _tiny_mlm():
  return models.RemBertMLMModel(network.RemBertForMaskedLM(
      test_utils.TINY_CONFIG))


# ----------------------------------------------------------------------------
# The local runner (python -m rembert_t5x.runner.train), in-process.
# ----------------------------------------------------------------------------


def test_gin_syntax_error(run_gin, tmp_path, capsys):
  run_gin.write_text(RUN_GIN + "train.train.batch_size = = 3\n")
  err = _train_error(run_gin, tmp_path / "m", capsys)
  assert f"gin file {run_gin}" in err and f"line {BAD_LINE}" in err


def test_gin_file_missing(tmp_path, capsys):
  err = _train_error(tmp_path / "nope.gin", tmp_path / "m", capsys)
  assert f"gin file {tmp_path / 'nope.gin'}: Unable to open file" in err


def test_gin_unknown_parameter_in_binding(run_gin, tmp_path, capsys):
  err = _train_error(run_gin, tmp_path / "m", capsys,
                     "--gin.train.train.batch_sise=3")
  assert "gin binding 'train.train.batch_sise = 3'" in err
  assert "batch_sise" in err


def test_gin_unknown_parameter_in_file(run_gin, tmp_path, capsys):
  run_gin.write_text(RUN_GIN + "train.train.learning_rat = 0.1\n")
  err = _train_error(run_gin, tmp_path / "m", capsys)
  assert f"gin file {run_gin}" in err and "learning_rat" in err


def test_unknown_task(run_gin, tmp_path, capsys):
  err = _train_error(run_gin, tmp_path / "m", capsys,
                     "--gin.train.train.mixture_or_task_name='no_such_task'")
  assert "unknown task or mixture 'no_such_task'" in err


def test_unknown_task_named_by_macro(tmp_path, capsys):
  """MIXTURE_OR_TASK_NAME on a shipped run file: the task it names is used."""
  err = _cli_error(train._main, [
      "--gin_file=gin_configs/runs/local_tiny_pretrain.gin",
      f"--gin.MODEL_DIR='{tmp_path / 'm'}'",
      "--gin.MIXTURE_OR_TASK_NAME='rembert_no_such_task'",
      # Registered already (imported above): no need for the file's default
      # module, rembert_tasks.synthetic.
      "--gin.MIXTURE_OR_TASK_MODULE='rembert_tasks'"], capsys)
  assert "unknown task or mixture 'rembert_no_such_task'" in err
  assert not (tmp_path / "m" / "checkpoints").exists()


def test_binding_a_macro_the_run_does_not_use(run_gin, tmp_path, capsys):
  # RUN_GIN names its task directly: gin would define the macro and ignore it.
  err = _train_error(run_gin, tmp_path / "m", capsys,
                     "--gin.MIXTURE_OR_TASK_NAME='other_task'")
  assert ("gin binding \"MIXTURE_OR_TASK_NAME = 'other_task'\": no gin file "
          "of this run uses the macro MIXTURE_OR_TASK_NAME") in err


def test_old_macro_name_points_to_the_new_one(tmp_path, capsys):
  err = _cli_error(eval_lib._main, [
      "--gin_file=gin_configs/runs/local_tiny_eval_pair.gin",
      f"--gin.CHECKPOINT_DIR='{tmp_path}'",
      f"--gin.EVAL_OUTPUT_DIR='{tmp_path / 'eval'}'"], capsys)
  assert "uses the macro CHECKPOINT_DIR (did you mean CHECKPOINT_PATH?)" in err
  assert not (tmp_path / "eval").exists()


def test_task_module_not_importable(tmp_path, capsys):
  err = _cli_error(train._main, [
      "--gin_file=gin_configs/runs/local_tiny_pretrain.gin",
      f"--gin.MODEL_DIR='{tmp_path / 'm'}'",
      "--gin.MIXTURE_OR_TASK_MODULE='no_such_module'"], capsys)
  assert ("MIXTURE_OR_TASK_MODULE 'no_such_module' cannot be imported: "
          "No module named 'no_such_module'") in err


def test_unquoted_path_in_a_binding_says_to_quote_it(run_gin, capsys):
  err = _cli_error(train._main, [f"--gin_file={run_gin}",
                                 "--gin.MODEL_DIR=/tmp/m"], capsys)
  assert err == ("error: gin binding 'MODEL_DIR = /tmp/m': Unable to parse "
                 "value. (line 1) (gin values are Python literals: quote "
                 "strings, e.g. --gin.MODEL_DIR=\"'/tmp/m'\")")


@pytest.mark.parametrize("entry", ["train", "eval"])
def test_model_sizes_that_do_not_fit(run_gin, tmp_path, capsys, entry):
  """EMBED_DIM alone changed: 4 heads of 16 no longer make H."""
  argv = ([train._main, f"--gin_file={run_gin}",
           f"--gin.MODEL_DIR='{tmp_path / 'm'}'"] if entry == "train" else
          [eval_lib._main, "--gin_file=gin_configs/runs/local_tiny_eval_pair.gin",
           f"--gin.CHECKPOINT_PATH='{tmp_path / 'm'}'",
           f"--gin.EVAL_OUTPUT_DIR='{tmp_path / 'out'}'"])
  err = _cli_error(argv[0], argv[1:] + ["--gin.EMBED_DIM=128"], capsys)
  assert err.startswith(f"error: the model of gin files {argv[1][11:]} ")
  assert err.endswith(" --gin.EMBED_DIM=128: RemBertConfig: num_heads * "
                      "head_dim = 4 * 16 = 64 must equal emb_dim (H) = 128")
  assert not (tmp_path / "m").exists() and not (tmp_path / "out").exists()


def test_model_dir_not_set(run_gin, capsys):
  err = _cli_error(train._main, [f"--gin_file={run_gin}"], capsys)
  assert "MODEL_DIR is not set" in err


def test_model_dir_not_writable(run_gin, tmp_path, capsys):
  blocker = tmp_path / "file"
  blocker.write_text("keep me")
  err = _train_error(run_gin, blocker / "m", capsys)
  assert f"MODEL_DIR {blocker / 'm'} is not writable" in err
  assert blocker.read_text() == "keep me"


def test_unknown_command_line_argument(run_gin, capsys):
  err = _cli_error(train._main, [f"--gin_file={run_gin}", "--lr=3"], capsys)
  assert "unknown flag --lr=3 (see --help)" in err


def test_no_gin_file(capsys):
  err = _cli_error(train._main, ["--gin.MODEL_DIR='/tmp/x'"], capsys)
  assert "no --gin_file given" in err


def test_bad_nonfinite_policy(run_gin, tmp_path, capsys):
  err = _train_error(run_gin, tmp_path / "m", capsys,
                     "--gin.train.train.nonfinite='ignore'")
  assert "train.nonfinite must be 'stop' or 'skip', got 'ignore'" in err


def test_batch_not_divisible_by_accumulation(run_gin, tmp_path, capsys):
  err = _train_error(run_gin, tmp_path / "m", capsys,
                     "--gin.train.train.grad_accum_steps=3")
  assert "batch_size 8 is not divisible by grad_accum_steps 3" in err


@pytest.mark.parametrize("shape,message", [
    ("(2, 16)", "train.mesh_shape (2, 16) needs 32 devices; "),
    ("(-1, -1)", "train.mesh_shape: at most one of (data, model) may be -1"),
    ("(0, 1)", "train.mesh_shape (0, 1): sizes must be >= 1"),
])
def test_impossible_mesh_shape(run_gin, tmp_path, capsys, shape, message):
  err = _train_error(run_gin, tmp_path / "m", capsys,
                     f"--gin.train.train.mesh_shape={shape}")
  assert message in err


def test_task_vocabulary_larger_than_the_model(run_gin, tmp_path, capsys):
  test_utils.register_random_mlm_task("test_big_vocab_mlm", vocab_size=200)
  err = _train_error(run_gin, tmp_path / "m", capsys,
                     "--gin.train.train.mixture_or_task_name='test_big_vocab_mlm'")
  assert ("task test_big_vocab_mlm: its vocabulary has 200 ids but the "
          "model's VOCAB_SIZE is 97") in err
  assert not (tmp_path / "m" / "checkpoints").exists()


def test_training_the_retrieval_model(run_gin, tmp_path, capsys):
  run_gin.write_text(RUN_GIN + (
      "train.train.model = @models.RemBertRetrievalModel()\n"
      "models.RemBertRetrievalModel.module = @network.RemBertForRetrieval()\n"))
  err = _train_error(run_gin, tmp_path / "m", capsys)
  assert "RemBertRetrievalModel has no training loss" in err


def test_retrieval_layer_beyond_the_model(tmp_path, capsys):
  run = tmp_path / "run.gin"
  run.write_text(
      "include 'gin_configs/models/tiny.gin'\n"
      "include 'gin_configs/runs/local_eval_retrieval.gin'\n"
      "VOCAB_SIZE = 97\nRETRIEVAL_LAYER = 40\n")
  err = _cli_error(eval_lib._main, [
      f"--gin_file={run}", f"--gin.CHECKPOINT_PATH='{tmp_path / 'm'}'",
      f"--gin.EVAL_OUTPUT_DIR='{tmp_path / 'out'}'"], capsys)
  assert err == ("error: RemBertForRetrieval.layer must be an integer in "
                 "[1, 2] (the model's layers), got 40")
  assert not (tmp_path / "out").exists()


def test_checkpoint_of_another_architecture(run_gin, tmp_path, capsys):
  """A MODEL_DIR holding a checkpoint of a wider model is refused, untouched."""
  model_dir = tmp_path / "m"
  params = {"encoder": {"embeddings": {"word_embeddings": {
      "embedding": np.zeros((97, 64), np.float32)}}}}
  ocp.PyTreeCheckpointer().save(
      model_dir / "checkpoints" / "2" / "default",
      {"step": np.int32(2), "params": params, "opt_state": {}})
  (model_dir / "metrics.jsonl").write_text('{"step": 2, "loss": 1.0}\n')
  before = sorted(str(p) for p in model_dir.rglob("*"))
  err = _train_error(run_gin, model_dir, capsys)
  assert f"checkpoint {model_dir / 'checkpoints' / '2'}" in err
  assert "another architecture" in err
  assert sorted(str(p) for p in model_dir.rglob("*")) == before
  assert (model_dir / "metrics.jsonl").read_text() == '{"step": 2, "loss": 1.0}\n'


def test_init_checkpoint_without_checkpoints(run_gin, tmp_path, capsys):
  empty = tmp_path / "pretrained"
  empty.mkdir()
  err = _train_error(run_gin, tmp_path / "m", capsys,
                     f"--gin.train.train.init_checkpoint='{empty}'")
  assert f"checkpoint {empty}: no checkpoint found" in err


def test_incomplete_checkpoint_is_never_latest(tmp_path):
  """A temporary left by a killed save is not a checkpoint to resume from."""
  root = tmp_path / "checkpoints"
  (root / "4" / "default").mkdir(parents=True)
  (root / "8.orbax-checkpoint-tmp-1700000000" / "default").mkdir(parents=True)
  assert checkpoints.latest_checkpoint_dir(str(tmp_path)) == root / "4"
  (root / "4").rename(root / "4.orbax-checkpoint-tmp-1")
  with pytest.raises(errors.UserError, match="no checkpoint found"):
    checkpoints.latest_checkpoint_dir(str(tmp_path))


# Range checks on each batch: ids beyond a table are clamped silently by
# JAX gathers and one_hot, so the runner refuses them before the step.


def _batch(**extra):
  tokens = np.full((2, 8), 5, np.int32)
  return {"input_tokens": tokens, "token_types": np.zeros_like(tokens),
          "segment_ids": np.ones_like(tokens), **extra}


def test_token_id_beyond_the_model_vocabulary():
  batch = _batch(targets=np.full((2, 8), 5, np.int32),
                 weights=np.ones((2, 8), np.float32))
  batch["input_tokens"][1, 3] = 97
  with pytest.raises(errors.UserError, match=r"task t, batch of step 3: field "
                     r"'input_tokens' has id 97 outside the model's "
                     r"vocabulary \[0, 97\)"):
    inputs.check_batch(_tiny_mlm(), batch, "t", 2)


def test_classification_label_out_of_range():
  model = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(test_utils.TINY_CONFIG, 3))
  with pytest.raises(errors.UserError, match=r"field 'label' has value 3 "
                     r"outside \[0, 3\) \(the model has 3 classes\)"):
    inputs.check_batch(model, _batch(label=np.array([0, 3], np.int32)), "t", 0)


def test_tag_out_of_range():
  model = models.RemBertTaggingModel(
      network.RemBertForTokenClassification(test_utils.TINY_CONFIG, 7))
  targets = np.zeros((2, 8), np.int32)
  weights = np.zeros((2, 8), np.float32)
  targets[0, 1], weights[0, 1] = 9, 1.0
  targets[1, 2] = 99  # weight 0: not a first sub-token, never scored
  with pytest.raises(errors.UserError, match=r"field 'targets' has value 9 "
                     r"outside \[0, 7\) \(7 tags\)"):
    inputs.check_batch(model, _batch(targets=targets, weights=weights), "t", 0)
  weights[0, 1] = 0.0
  inputs.check_batch(model, _batch(targets=targets, weights=weights), "t", 0)


def test_qa_position_beyond_the_sequence():
  model = models.RemBertQAModel(
      network.RemBertForQuestionAnswering(test_utils.TINY_CONFIG))
  batch = _batch(start_positions=np.array([1, 2], np.int32),
                 end_positions=np.array([1, 8], np.int32))
  with pytest.raises(errors.UserError, match=r"field 'end_positions' has value "
                     r"8 outside the sequence \[0, 8\)"):
    inputs.check_batch(model, batch, "t", 0)


def test_qa_feature_length_shorter_than_the_task_windows(spm_model, tmp_path):
  """TASK_FEATURE_LENGTHS below the QA task's window length is refused."""
  import functools  # pylint: disable=g-import-not-at-top
  from rembert_tasks import registry  # pylint: disable=g-import-not-at-top
  from rembert_tasks import qa as qa_tasks  # pylint: disable=g-import-not-at-top
  context = "the cat sat on a mat " * 6
  (tmp_path / "train.json").write_text(json.dumps({"data": [{"paragraphs": [{
      "context": context, "qas": [{"id": "q1", "question": "the cat sat?",
                                   "answers": [{"text": "mat",
                                                "answer_start": 17}]}]}]}]}))
  registry.add_task(
      "test_bad_qa_windows",
      source=qa_tasks.squad_file_source({"train": str(tmp_path / "train.json")}),
      preprocessors=[functools.partial(
          qa.qa_windows_preprocessor, max_seq_length=32, doc_stride=8,
          source=str(tmp_path / "train.json"))],
      output_features=qa.output_features(
          vocabulary.RemBertVocabulary(spm_model), 32))
  model = models.RemBertQAModel(
      network.RemBertForQuestionAnswering(test_utils.TINY_CONFIG))
  # The runner (and T5X) give the task the lengths: refused before reading.
  with pytest.raises(errors.UserError) as e:
    inputs.make_dataset(model, "test_bad_qa_windows", {"input_tokens": 16}, 2,
                       "train", 0, False)
  assert str(e.value) == (
      f"task test_bad_qa_windows, split train: {tmp_path / 'train.json'}: "
      "task_feature_lengths['input_tokens'] = 16 is shorter than this QA "
      "task's windows (max_seq_length = 32): windows would be cut, losing "
      "context and answer positions. Set TASK_FEATURE_LENGTHS = "
      "{'input_tokens': 32} (or register the task with max_seq_length <= 16).")
  # A dataset built without lengths: the converter refuses the cut.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  windows = seqio.get_mixture_or_task("test_bad_qa_windows").get_dataset(
      None, split="train", shuffle=False)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"the input_tokens length 16 \(TASK_FEATURE_LENGTHS\) "
                     r"is shorter than a QA window of\] \[32\] \[tokens;"):
    list(model.FEATURE_CONVERTER_CLS(pack=False)(windows,
                                                 {"input_tokens": 16}))
  # At the window length the same data converts.
  data = inputs.make_dataset(model, "test_bad_qa_windows",
                            {"input_tokens": 32}, 2, "train", 0, False)
  assert inputs.next_batch(data, "test_bad_qa_windows", 0)[
      "input_tokens"].shape == (2, 32)


def test_malformed_task_data_while_training(spm_model, tmp_path):
  """A malformed training TSV of a registered task stops with its line."""
  (tmp_path / "xnli").mkdir()
  (tmp_path / "xnli" / "train-en.tsv").write_text(
      "a cat\ta mat\tentailment\na cat\ta dog\tmaybe\n", "utf-8")
  xnli.register_xnli_local(str(tmp_path), vocabulary.RemBertVocabulary(
      spm_model), prefix="test_bad_", languages=["en"])
  model = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(test_utils.TINY_CONFIG, 3))
  with pytest.raises(errors.UserError) as e:
    data = inputs.make_dataset(model, "test_bad_xnli_train_en",
                              {"input_tokens": 16}, 2, "train", 0, False)
    inputs.next_batch(data, "test_bad_xnli_train_en", 0)
  message = str(e.value)
  assert "task test_bad_xnli_train_en" in message
  assert (f"{tmp_path / 'xnli' / 'train-en.tsv'}, line 2: field 'label' has "
          "value 'maybe'") in message


# ----------------------------------------------------------------------------
# Writing outputs: disk full, unwritable directories.
# ----------------------------------------------------------------------------


def test_disk_full_keeps_the_previous_results_file(tmp_path, monkeypatch):
  results = tmp_path / "results.json"
  io_utils.atomic_write_json(results, {"f1": 1.0})

  def full(fd, data):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  monkeypatch.setattr(io_utils.os, "write", full)
  with pytest.raises(errors.UserError, match=f"cannot write {results}: no space "
                     "left on device"):
    io_utils.atomic_write_json(results, {"f1": 2.0})
  assert json.loads(results.read_text()) == {"f1": 1.0}
  assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_disk_full_appending_a_log():
  with pytest.raises(errors.UserError, match="cannot write /dev/full: no space "
                     "left on device"):
    io_utils.append_line("/dev/full", '{"step": 1}')


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_results_directory_not_writable(tmp_path):
  locked = tmp_path / "locked"
  locked.mkdir(mode=0o500)
  with pytest.raises(errors.UserError, match="permission denied"):
    io_utils.atomic_write_text(locked / "config.gin", "x")


def test_results_directory_missing(tmp_path):
  with pytest.raises(errors.UserError, match=f"cannot write {tmp_path / 'no' / 'r.json'}"
                     ": no such directory"):
    io_utils.atomic_write_json(tmp_path / "no" / "r.json", {})


# ----------------------------------------------------------------------------
# Data files (library readers), one format at a time.
# ----------------------------------------------------------------------------


def _file(tmp_path, name, content):
  path = tmp_path / name
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content, "utf-8")
  return str(path)


@pytest.mark.parametrize("content,label_ids,message", [
    ("a\tb\tentailment\na\tb\n", xtreme_readers.XNLI_LABEL_IDS,
     "line 2: field 'label' is missing"),
    ("a\tb\tc\tentailment\n", xtreme_readers.XNLI_LABEL_IDS,
     "line 1: expected 3 tab-separated fields"),
    ("a\tb\tneutral\na\tb\tcontradicts\n", xtreme_readers.XNLI_LABEL_IDS,
     "line 2: field 'label' has value 'contradicts'"),
    ("a\tb\t1\na\tb\t2\n", xtreme_readers.PAWSX_LABEL_IDS,
     "line 2: field 'label' has value '2', expected one of ['0', '1']"),
    ("a\t \t0\n", xtreme_readers.PAWSX_LABEL_IDS,
     "line 1: field 'sentence2' is empty"),
    ("\n\n", xtreme_readers.XNLI_LABEL_IDS, "file is empty"),
    (b"a\tb\tneutral\n\xff\xfe\tb\tneutral\n", xtreme_readers.XNLI_LABEL_IDS,
     "line 2: not valid UTF-8"),
], ids=["xnli_missing_label", "xnli_extra_field", "xnli_unknown_label",
        "pawsx_label_out_of_range", "pawsx_empty_sentence", "tsv_empty_file",
        "tsv_not_utf8"])
def test_pair_tsv(tmp_path, content, label_ids, message):
  path = _file(tmp_path, "train-en.tsv", content)
  with pytest.raises(ValueError, match=None) as e:
    xtreme_readers.read_pair_tsv(path, label_ids)
  assert str(e.value).startswith(path) and message in str(e.value)


def test_pair_tsv_missing(tmp_path):
  with pytest.raises(ValueError, match=f"{tmp_path / 'nope.tsv'}: cannot read"):
    xtreme_readers.read_pair_tsv(str(tmp_path / "nope.tsv"),
                                 xtreme_readers.XNLI_LABEL_IDS)


@pytest.mark.parametrize("content,labels,message", [
    ("Paris\tB-LOC\nis\tO\nnice\tB-MISC\n", panx.LABELS,
     "line 3: field 'tag' has value 'B-MISC'"),
    ("Paris\tB-LOC\tX\n", panx.LABELS, "line 1: expected 'token<TAB>tag', "
     "found 3 fields"),
    ("\tO\n", panx.LABELS, "line 1: field 'token' is empty"),
    ("The\tDET\ncat\tNOUNS\n", udpos.LABELS,
     "line 2: field 'tag' has value 'NOUNS'"),
    ("The\tDET\ncat\n", udpos.LABELS, "line 2: field 'tag' is missing"),
], ids=["panx_unknown_tag", "panx_extra_field", "panx_empty_token",
        "udpos_unknown_tag", "udpos_missing_tag"])
def test_conll(tmp_path, content, labels, message):
  path = _file(tmp_path, "train-en.tsv", content)
  with pytest.raises(ValueError) as e:
    xtreme_readers.read_conll_tags(path, labels)
  assert str(e.value).startswith(path) and message in str(e.value)


def test_tatoeba_files_of_different_lengths(tmp_path):
  src = _file(tmp_path, "tatoeba.deu-eng.deu", "eins\nzwei\ndrei\n")
  eng = _file(tmp_path, "tatoeba.deu-eng.eng", "one\ntwo\n")
  with pytest.raises(ValueError, match=f"{src} has 3 lines but {eng} has 2"):
    xtreme_readers.read_parallel_lines(src, eng)


def test_tatoeba_blank_line(tmp_path):
  src = _file(tmp_path, "tatoeba.deu-eng.deu", "eins\n\ndrei\n")
  eng = _file(tmp_path, "tatoeba.deu-eng.eng", "one\ntwo\nthree\n")
  with pytest.raises(ValueError, match=f"{src}, line 2: field 'sentence' is "
                     "empty"):
    xtreme_readers.read_parallel_lines(src, eng)


_SQUAD = {"data": [{"paragraphs": [{"context": "The cat sat on the mat.",
                                    "qas": [{"id": "q1", "question": "Who?",
                                             "answers": [{"text": "cat",
                                                          "answer_start": 4}]}]}]}]}


def _squad(mutate):
  data = json.loads(json.dumps(_SQUAD))
  mutate(data["data"][0]["paragraphs"][0])
  return data


@pytest.mark.parametrize("mutate,message", [
    (lambda p: p.pop("context"), "data[0].paragraphs[0].context: expected a "
     "string"),
    (lambda p: p["qas"][0]["answers"][0].update(answer_start=5),
     "question 'q1': answers[0].answer_start=5 points at 'at ' in the "
     "context, not at the answer text 'cat'"),
    (lambda p: p["qas"][0]["answers"][0].update(answer_start=400),
     "question 'q1': answers[0].answer_start=400 points at ''"),
    (lambda p: p["qas"][0].update(question="  "),
     "data[0].paragraphs[0].qas[0].question: is empty"),
    (lambda p: p.update(qas=[]), "data: the file holds no questions"),
], ids=["missing_context", "answer_offset_mismatch", "answer_start_beyond_context",
        "empty_question", "no_questions"])
def test_squad_json(tmp_path, mutate, message):
  path = _file(tmp_path, "squad.json", json.dumps(_squad(mutate)))
  with pytest.raises(ValueError) as e:
    squad_files.read_squad_file(path)
  assert str(e.value).startswith(path) and message in str(e.value)


def test_squad_blank_gold_answers(tmp_path):
  data = _squad(lambda p: p["qas"][0].update(answers=[]))
  path = _file(tmp_path, "tydiqa.goldp.en.dev.json", json.dumps(data))
  with pytest.raises(ValueError, match=f"{path}: every one of the 1 questions "
                     "has blank gold answers"):
    squad_files.squad_file_dataset(path)


def test_squad_not_json(tmp_path):
  path = _file(tmp_path, "squad.json", '{"data": [')
  with pytest.raises(ValueError, match=f"{path}: not valid JSON"):
    squad_files.read_squad_file(path)


def test_qa_question_too_long_for_the_window(spm_model):
  vocab = vocabulary.RemBertVocabulary(spm_model)
  example = squad_files.parse_squad_json(_SQUAD, "squad.json")[0]
  example = qa.QAExample(example.example_id, "the cat sat on a mat " * 5,
                         example.context, example.answer_texts,
                         example.answer_starts)
  with pytest.raises(ValueError, match="max_seq_length=16 leaves no room for "
                     "context"):
    qa.make_windows(example, vocab, max_seq_length=16, max_query_length=64)


def test_text_corpus_file_name_not_a_language(tmp_path):
  _file(tmp_path, "english.txt", "hello\n")
  with pytest.raises(ValueError, match="english.txt: 'english' is not a "
                     "language code"):
    text_sources.find_language_files(input_dir=str(tmp_path))


def test_text_corpus_dir_missing(tmp_path):
  with pytest.raises(ValueError, match="not a directory"):
    text_sources.find_language_files(input_dir=str(tmp_path / "nope"))


def test_text_corpus_empty_file(tmp_path, spm_model):
  path = _file(tmp_path, "sw.txt", "\n  \n")
  with pytest.raises(ValueError, match=f"{path}: file is empty"):
    pretraining.register_local_text_mlm(
        "test_bad_corpus", files_by_lang={"sw": [path]},
        vocabulary=vocabulary.RemBertVocabulary(spm_model))


def test_text_corpus_not_utf8(tmp_path):
  path = _file(tmp_path, "sw.txt", b"habari\n\xc3\x28\n")
  with pytest.raises(ValueError, match=f"{path}, line 2: not valid UTF-8"):
    text_sources.read_text_lines(path)


def test_text_corpus_file_missing(tmp_path, spm_model):
  path = str(tmp_path / "sw.txt")
  with pytest.raises(ValueError, match=f"{path}: no such file"):
    pretraining.register_local_text_mlm(
        "test_bad_corpus", files_by_lang={"sw": [path]},
        vocabulary=vocabulary.RemBertVocabulary(spm_model),
        example_counts={"sw": 3})


# ----------------------------------------------------------------------------
# SentencePiece model files.
# ----------------------------------------------------------------------------


def test_sentencepiece_model_missing(tmp_path):
  path = str(tmp_path / "nope.model")
  with pytest.raises(ValueError, match=f"{path}: no such SentencePiece model"):
    _ = vocabulary.RemBertVocabulary(path).vocab_size


def test_sentencepiece_model_corrupt(tmp_path):
  path = _file(tmp_path, "bad.model", b"this is not a protobuf \x00\xff")
  with pytest.raises(ValueError, match=f"{path}: cannot load it as a "
                     "SentencePiece model"):
    _ = vocabulary.RemBertVocabulary(path).vocab_size


def test_sentencepiece_model_without_rembert_special_ids(tmp_path):
  corpus = _file(tmp_path, "c.txt", "the cat sat on a mat\n" * 30)
  spm.SentencePieceTrainer.train(input=corpus,
                                 model_prefix=str(tmp_path / "plain"),
                                 vocab_size=14, minloglevel=2)
  path = str(tmp_path / "plain.model")
  with pytest.raises(ValueError, match=f"{path}: SentencePiece model has "
                     "no piece '\\[PAD\\]'"):
    _ = vocabulary.RemBertVocabulary(path).vocab_size


def test_sentencepiece_model_missing_one_special_piece(tmp_path, spm_model):
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(open(spm_model, "rb").read())
  for piece in proto.pieces:
    if piece.piece == "[MASK]":
      piece.piece = "<mask>"
  path = _file(tmp_path, "nomask.model", proto.SerializeToString())
  with pytest.raises(ValueError, match=f"{path}: SentencePiece model has no "
                     "piece '\\[MASK\\]'"):
    _ = vocabulary.RemBertVocabulary(path).mask_id


def test_sentencepiece_model_pad_not_at_id_0(tmp_path, spm_model):
  path = vocabulary.move_special_pieces(spm_model, str(tmp_path / "p.model"),
                                        {"[PAD]": 7})
  with pytest.raises(ValueError, match=f"{path}: \\[PAD\\] is id 7, but "
                     "seqio pads with id 0"):
    _ = vocabulary.RemBertVocabulary(path).vocab_size


def test_model_dir_holds_another_vocabulary(tmp_path, spm_model):
  other = vocabulary.move_special_pieces(
      spm_model, str(tmp_path / "other.model"), {"[CLS]": 20})
  vocabulary.save_vocabulary(other, str(tmp_path / "m"))
  with pytest.raises(ValueError, match=r"m/sentencepiece\.model differs from "
                     "the vocabulary this run uses"):
    vocabulary.save_vocabulary(spm_model, str(tmp_path / "m"))


def _tiny_hf_dir(path, vocab_size):
  transformers = pytest.importorskip("transformers")
  import dataclasses  # pylint: disable=g-import-not-at-top
  config = dataclasses.replace(test_utils.TINY_CONFIG, vocab_size=vocab_size)
  transformers.RemBertForMaskedLM(
      test_utils.hf_config(config)).save_pretrained(path)
  return str(path)


def test_converter_vocabulary_larger_than_the_embedding(tmp_path, spm_model):
  hf_dir = _tiny_hf_dir(tmp_path / "hf", vocab_size=20)  # spm_model: 30
  from rembert_t5x.convert import checkpoint_io  # pylint: disable=g-import-not-at-top
  with pytest.raises(errors.UserError, match=f"{spm_model}: 30 pieces, but .*hf "
                     "has 20 vocabulary rows"):
    checkpoint_io.hf_to_t5x(hf_dir, str(tmp_path / "out"), vocab=spm_model)
  assert not (tmp_path / "out").exists()


def test_converter_vocabulary_missing(tmp_path):
  hf_dir = _tiny_hf_dir(tmp_path / "hf", vocab_size=40)
  from rembert_t5x.convert import checkpoint_io  # pylint: disable=g-import-not-at-top
  with pytest.raises(errors.UserError, match=r"--vocab: .*/nope\.model: no such "
                     "SentencePiece model file"):
    checkpoint_io.hf_to_t5x(hf_dir, str(tmp_path / "out"),
                            vocab=str(tmp_path / "nope.model"))


def test_sentencepiece_path_variable_unset(monkeypatch):
  monkeypatch.delenv(vocabulary.SPM_PATH_ENV, raising=False)
  with pytest.raises(ValueError, match="REMBERT_SPM_PATH is not set"):
    _ = vocabulary.default_vocabulary().vocab_size


def test_vocabulary_too_large_for_the_corpus(tmp_path):
  path = _file(tmp_path, "sw.txt", "habari yako\n" * 5)
  with pytest.raises(pieces.VocabularyTooLarge, match=(
      r"v\.model: vocab_size 5000 is more pieces than the training text "
      r"holds \(SentencePiece makes at most \d+ of it\)")) as e:
    pieces.train_sentencepiece({"sw": [path]}, str(tmp_path / "v"), 5000)
  assert 5 < e.value.limit < 5000
  assert not (tmp_path / "v.model").exists()


# ----------------------------------------------------------------------------
# QA scoring (parameter counting and the demo: bad_inputs_tools_test.py).
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("predictions,message", [
    ('{"q1": "cat"', "the prediction file is not valid JSON"),
    ('["cat"]', "expected a JSON object mapping question id -> answer text"),
    ('{"q1": 3}', "prediction for id 'q1' is int, expected a string"),
    ('{"xquad-de-1": "Katze", "xquad-de-2": "Matte"}',
     "none of its 2 question ids (e.g. 'xquad-de-1') is in"),
], ids=["not_json", "not_an_object", "answer_not_a_string", "wrong_file"])
def test_qa_prediction_file(tmp_path, predictions, message):
  dataset = _file(tmp_path, "gold.json", json.dumps(_SQUAD))
  pred = _file(tmp_path, "pred.json", predictions)
  with pytest.raises(ValueError) as e:
    metrics.evaluate_prediction_file(dataset, pred)
  assert str(e.value).startswith(pred) and message in str(e.value)


def test_qa_dataset_file_without_data(tmp_path):
  dataset = _file(tmp_path, "gold.json", '{"version": "1.1"}')
  pred = _file(tmp_path, "pred.json", '{"q1": "cat"}')
  with pytest.raises(ValueError, match=f"{dataset}: data: expected a "
                     "top-level object with a 'data' list"):
    metrics.evaluate_prediction_file(dataset, pred)


# ----------------------------------------------------------------------------
# The scripts, run as a user would: exit 2, one line, no traceback.
# ----------------------------------------------------------------------------


def test_cli_train_gin_syntax_error(run_gin, tmp_path):
  run_gin.write_text(RUN_GIN + "train.train.batch_size = = 3\n")
  line = test_utils.run_script_user_error(
      ["-m", "rembert_t5x.runner.train", f"--gin_file={run_gin}",
       f"--gin.MODEL_DIR='{tmp_path / 'm'}'"])
  assert f"gin file {run_gin}" in line and f"line {BAD_LINE}" in line


def test_cli_evaluate_qa_wrong_prediction_file(tmp_path):
  dataset = _file(tmp_path, "gold.json", json.dumps(_SQUAD))
  pred = _file(tmp_path, "pred.json", '{"other-1": "x"}')
  line = test_utils.run_script_user_error(
      ["scripts/evaluate_qa.py", f"--dataset_file={dataset}",
       f"--prediction_file={pred}"])
  assert f"error: {pred}: none of its 1 question ids" in line
