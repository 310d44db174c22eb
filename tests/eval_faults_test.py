"""Bad input to the evaluation CLI: one `error:` line, early, nothing lost.

`python -m rembert_t5x.runner.eval` with an EVAL_OUTPUT_DIR it cannot write,
a dev file that is empty or has a row without its label, or a damaged
checkpoint ends with exit code 2 and one `error: ...` line naming the
setting or file; it fails before the work the check guards (the output
directory before anything is read, the data before the checkpoint is
loaded), and what EVAL_OUTPUT_DIR held is left as it was.

The data and checkpoint tests evaluate one tiny checkpoint, trained once
for the module, on PAWS-X-format files registered as local XTREME tasks;
the output-directory tests need neither.
"""

import errno
import os
import pathlib
import shutil

import jax
import pytest
import seqio
import tensorflow as tf

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x.scoring import metrics
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import eval as eval_lib
from rembert_t5x.runner import train
from rembert_tasks import pawsx
from rembert_tasks import registry
from tests import test_utils

PREFIX = "evalfaults_"
EVAL_GIN = "gin_configs/runs/local_tiny_eval_pair.gin"
# Ten labelled PAWS-X rows (labels "0" / "1") of the tiny corpus.
ROWS = "".join(
    f"{a}\t{b}\t{i % 2}\n" for i, (a, b) in enumerate(zip(
        test_utils.TINY_CORPUS, test_utils.TINY_CORPUS[1:] +
        test_utils.TINY_CORPUS[:1])))
NUM_ROWS = len(ROWS.splitlines())


class _Setup:
  """The module's vocabulary and trained MODEL_DIR (steps 1 and 2)."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    self.vocab = test_utils.train_tiny_vocab(root)
    self.register("good", {"en": ROWS})
    self.model_dir = root / "m"
    train._main(cli.parse_gin_args([
        "--gin_file=gin_configs/runs/local_tiny_finetune_pair.gin",
        f"--gin.MODEL_DIR='{self.model_dir}'", "--gin.TRAIN_STEPS=2",
        "--gin.BATCH_SIZE=8", "--gin.MIXTURE_OR_TASK_MODULE=None",
        f"--gin.MIXTURE_OR_TASK_NAME='{PREFIX}good_pawsx_train_en'",
        # Two checkpoints: a damaged one has another to point to.
        "--gin.train.train.checkpoint_period=1",
        "--gin.train.train.progress_bar=False"]))

  def register(self, name: str, dev_files: dict[str, str]) -> pathlib.Path:
    """PAWS-X tasks `evalfaults_<name>_pawsx_<lang>` (and their zero-shot
    mixture) over a folder with a good train file and these dev files."""
    folder = self.root / name / "pawsx"
    folder.mkdir(parents=True)
    (folder / "train-en.tsv").write_text(ROWS * 2, "utf-8")
    for lang, text in dev_files.items():
      (folder / f"dev-{lang}.tsv").write_text(text, "utf-8")
    pawsx.register_pawsx_local(str(self.root / name), self.vocab,
                               prefix=f"{PREFIX}{name}_",
                               languages=sorted(dev_files))
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  return _Setup(tmp_path_factory.mktemp("evalfaults"))


@pytest.fixture
def out(tmp_path):
  """An EVAL_OUTPUT_DIR holding an earlier evaluation's results."""
  directory = tmp_path / "eval"
  directory.mkdir()
  (directory / "results.json").write_text('{"old": 1}')
  return directory


def _contents(directory: pathlib.Path) -> dict[str, str]:
  return {p.name: p.read_text() for p in directory.iterdir()}


def _eval_error(capsys, checkpoint, output_dir, task, *bindings) -> str:
  """Runs the eval CLI in-process; asserts exit 2 and one `error:` line
  (after, at most, the `[eval]` progress lines); returns the error line."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:
    cli.run_main(eval_lib._main, [
        f"--gin_file={EVAL_GIN}", f"--gin.CHECKPOINT_PATH='{checkpoint}'",
        f"--gin.EVAL_OUTPUT_DIR='{output_dir}'",
        f"--gin.MIXTURE_OR_TASK_NAME='{task}'",
        "--gin.MIXTURE_OR_TASK_MODULE=None", "--gin.BATCH_SIZE=8", *bindings])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip()
  assert "Traceback" not in err, err
  *progress, last = err.splitlines()
  assert last.startswith("error: "), err
  assert all(line.startswith("[eval") for line in progress), err
  return last


@pytest.fixture
def nothing_loaded(monkeypatch):
  """Fails a test whose evaluation loads the checkpoint."""

  def fail(*args, **kwargs):
    raise AssertionError("the checkpoint was loaded before the error")

  monkeypatch.setattr(checkpoints, "load_params_for", fail)


# ----------------------------------------------------------------------------
# EVAL_OUTPUT_DIR: checked before anything is read.
# ----------------------------------------------------------------------------


# Neither the checkpoint nor the task exists: the output directory's error
# comes before either is looked at.
NO_CHECKPOINT = "/no/such/checkpoint"
NO_TASK = f"{PREFIX}no_such_task"


def test_output_dir_is_a_file(tmp_path, capsys, monkeypatch):
  blocker = tmp_path / "results"
  blocker.write_text("keep me")
  # Relative: the message names the absolute path it resolved to.
  monkeypatch.chdir(tmp_path)
  err = _eval_error(capsys, NO_CHECKPOINT, "results", NO_TASK)
  assert err == (f"error: EVAL_OUTPUT_DIR {blocker} is a file, not a "
                 "directory (the results are files written into it)")
  assert blocker.read_text() == "keep me"


def test_output_dir_under_a_file(tmp_path, capsys):
  blocker = tmp_path / "file"
  blocker.write_text("keep me")
  err = _eval_error(capsys, NO_CHECKPOINT, blocker / "eval", NO_TASK)
  assert err == (f"error: EVAL_OUTPUT_DIR {blocker / 'eval'} is not writable: "
                 "Not a directory")
  assert blocker.read_text() == "keep me"


def test_output_dir_not_writable(out, capsys, monkeypatch):
  before = _contents(out)
  out.chmod(0o500)
  if os.geteuid() == 0:
    # Root writes whatever the mode bits say: refuse as the kernel refuses
    # everyone else, for files created in the directory.
    write_text = pathlib.Path.write_text

    def refuse(path, *args, **kwargs):
      if path.parent == out:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES),
                              str(path))
      return write_text(path, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", refuse)
  try:
    err = _eval_error(capsys, NO_CHECKPOINT, out, NO_TASK)
  finally:
    out.chmod(0o700)
  assert err == (f"error: EVAL_OUTPUT_DIR {out} is not writable: "
                 "Permission denied")
  assert _contents(out) == before


def test_a_missing_output_dir_is_not_left_behind(tmp_path, capsys):
  """The up-front check creates EVAL_OUTPUT_DIR to probe it; a run refused
  later (here: the unknown task) removes it again."""
  err = _eval_error(capsys, NO_CHECKPOINT, tmp_path / "new" / "eval", NO_TASK)
  assert f"unknown task or mixture '{NO_TASK}'" in err
  assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------
# Data files: read before the checkpoint is loaded.
# ----------------------------------------------------------------------------


def test_empty_dev_file(setup, out, capsys, nothing_loaded):
  folder = setup.register("empty", {"en": ""})
  before = _contents(out)
  err = _eval_error(capsys, setup.model_dir, out, f"{PREFIX}empty_pawsx_en")
  assert err == (f"error: task {PREFIX}empty_pawsx_en, split validation: "
                 f"{folder / 'dev-en.tsv'}: file is empty (no non-blank "
                 "lines).")
  assert _contents(out) == before


def test_dev_row_without_its_label(setup, out, capsys, nothing_loaded):
  """In the second task of a mixture (en, fr): the error names that task."""
  folder = setup.register("nolabel", {"en": ROWS,
                                      "fr": ROWS + "une phrase\tune autre\n"})
  before = _contents(out)
  err = _eval_error(capsys, setup.model_dir, out,
                    f"{PREFIX}nolabel_pawsx_zeroshot")
  assert err.startswith(
      f"error: task {PREFIX}nolabel_pawsx_fr, split validation: "
      f"{folder / 'dev-fr.tsv'}, line {NUM_ROWS + 1}: field 'label' is "
      "missing")
  assert _contents(out) == before


def _tokenised_pair_task(name: str, rows, metric_fn) -> None:
  """A validation-only task over already-tokenised pair examples that
  `rows()` yields (a generator: it runs while tf.data iterates)."""
  spec = lambda shape: tf.TensorSpec(shape, tf.int32)
  signature = {"input_tokens": spec([None]), "token_types": spec([None]),
               "label": spec([]), "targets": spec([1])}

  def dataset_fn(split, shuffle_files, seed=0):
    del split, shuffle_files, seed
    return tf.data.Dataset.from_generator(rows, output_signature=signature)

  registry.add_task(
      name, source=seqio.FunctionDataSource(dataset_fn,
                                            splits=["validation"]),
      output_features=xp.pair_output_features(
          seqio.PassThroughVocabulary(97), 2),
      postprocess_fn=xp.pair_label_postprocessor, metric_fns=[metric_fn])


def _example():
  return {"input_tokens": [5, 6, 7], "token_types": [0, 0, 0], "label": 1,
          "targets": [1]}


def _tiny_pair_model():
  return models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(test_utils.TINY_CONFIG, 2))


def test_reader_error_inside_tf_data_keeps_the_readers_line():
  """A reader that fails while tf.data iterates (an OpError wrapping its
  ValueError): the message is the reader's line, not tf.data's wrapping."""
  bad = "/data/dev-xx.tsv, line 2: field 'label' is missing."

  def rows():
    yield _example()
    raise ValueError(bad)

  _tokenised_pair_task(f"{PREFIX}lazy_xx", rows, metrics.accuracy_metric)
  with pytest.raises(errors.UserError) as e:
    eval_lib.make_evaluator(_tiny_pair_model(), f"{PREFIX}lazy_xx",
                            "validation", {"input_tokens": 8})
  assert str(e.value) == f"task {PREFIX}lazy_xx, split validation: {bad}"
  assert isinstance(e.value.__cause__, tf.errors.OpError)


def test_a_task_without_examples():
  """A source that yields nothing (the local readers refuse an empty file
  themselves): refused before a metric is computed over nothing."""
  _tokenised_pair_task(f"{PREFIX}none_xx", lambda: iter([]),
                       metrics.accuracy_metric)
  with pytest.raises(errors.UserError) as e:
    eval_lib.make_evaluator(_tiny_pair_model(), f"{PREFIX}none_xx",
                            "validation", {"input_tokens": 8})
  assert str(e.value) == f"task {PREFIX}none_xx, split validation: no examples"


def test_a_metric_file_that_cannot_be_read():
  """A metric that reads its own file (BUCC's gold pairs) and fails: the
  task and the metric's line; any other error of a metric stays a bug."""
  bad = "/data/bucc2018/de-en.dev.gold, line 3: expected 2 fields, found 1."

  def gold_metric(targets, predictions):
    raise ValueError(bad)

  def buggy_metric(targets, predictions):
    raise TypeError("a bug")

  _tokenised_pair_task(f"{PREFIX}gold_xx", lambda: iter([_example()]),
                       gold_metric)
  _tokenised_pair_task(f"{PREFIX}buggy_xx", lambda: iter([_example()]),
                       buggy_metric)
  model = _tiny_pair_model()
  params = model.get_initial_variables(
      jax.random.PRNGKey(0), {"input_tokens": (1, 8)})["params"]
  with pytest.raises(errors.UserError) as e:
    eval_lib.evaluate_params(model, params, f"{PREFIX}gold_xx", "validation",
                             {"input_tokens": 8}, batch_size=2)
  assert str(e.value) == (f"task {PREFIX}gold_xx, split validation: "
                          f"computing its metrics: {bad}")
  with pytest.raises(ValueError) as e:
    eval_lib.evaluate_params(model, params, f"{PREFIX}buggy_xx", "validation",
                             {"input_tokens": 8}, batch_size=2)
  assert isinstance(e.value.__cause__, TypeError)
  assert not isinstance(e.value, errors.UserError)


# ----------------------------------------------------------------------------
# A damaged checkpoint: its step directory and the others.
# ----------------------------------------------------------------------------


def _truncate(path: pathlib.Path) -> None:
  path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


@pytest.mark.parametrize("damaged", ["arrays", "metadata"])
def test_damaged_checkpoint(setup, tmp_path, out, capsys, damaged):
  model_dir = tmp_path / "m"
  shutil.copytree(setup.model_dir, model_dir)
  step_dir = model_dir / "checkpoints" / "2"
  if damaged == "arrays":  # orbax's OCDBT data files of the arrays
    files = list(step_dir.glob("default/ocdbt.process_*/d/*"))
  else:  # the tree of array metadata
    files = [step_dir / "default" / "_METADATA"]
  assert files
  for path in files:
    _truncate(path)
  before = _contents(out)
  err = _eval_error(capsys, model_dir, out, f"{PREFIX}good_pawsx_en")
  assert err.startswith(f"error: checkpoint {step_dir}: cannot read its "
                        f"{damaged}: ")
  if damaged == "metadata":
    assert err.startswith(
        f"error: checkpoint {step_dir}: cannot read its metadata: orbax's "
        f"metadata file {files[0]} is unreadable: ")
  assert err.endswith(
      "; if it is damaged, set CHECKPOINT_PATH to another of its "
      f"checkpoints, e.g. {model_dir / 'checkpoints' / '1'} (steps there: "
      "1, 2)")
  assert _contents(out) == before
  if damaged == "arrays":
    # The advice works.
    cli.run_main(eval_lib._main, [
        f"--gin_file={EVAL_GIN}",
        f"--gin.CHECKPOINT_PATH='{model_dir / 'checkpoints' / '1'}'",
        f"--gin.EVAL_OUTPUT_DIR='{out}'",
        f"--gin.MIXTURE_OR_TASK_NAME='{PREFIX}good_pawsx_en'",
        "--gin.MIXTURE_OR_TASK_MODULE=None", "--gin.BATCH_SIZE=8"])
    assert "accuracy" in (out / "results.json").read_text()


def test_checkpoint_without_its_metadata_file(setup, tmp_path, out, capsys):
  """orbax reads no tree (only a logged warning) when `_METADATA` is gone:
  the error names the file and the checkpoints left to try."""
  model_dir = tmp_path / "m"
  shutil.copytree(setup.model_dir, model_dir)
  step_dir = model_dir / "checkpoints" / "2"
  (step_dir / "default" / "_METADATA").unlink()
  before = _contents(out)
  reason = (f"error: checkpoint {step_dir}: cannot read its metadata: "
            f"orbax's metadata file {step_dir / 'default' / '_METADATA'} is "
            "missing; ")
  err = _eval_error(capsys, model_dir, out, f"{PREFIX}good_pawsx_en")
  assert err == reason + (
      "if it is damaged, set CHECKPOINT_PATH to another of its checkpoints, "
      f"e.g. {model_dir / 'checkpoints' / '1'} (steps there: 1, 2)")
  shutil.rmtree(model_dir / "checkpoints" / "1")
  err = _eval_error(capsys, model_dir, out, f"{PREFIX}good_pawsx_en")
  assert err == reason + (
      f"it is the only checkpoint in {model_dir / 'checkpoints'}: if it is "
      "damaged, train or convert it again")
  assert _contents(out) == before
