"""The local runner under the fault probe's cases (docs/ERRORS.md, "Nothing lost").

Each case checks the one `error:` line (or the documented safe behaviour)
and that nothing already in MODEL_DIR changed: settings are refused before
anything is read, compiled or written; a state whose parameters went
non-finite is never saved; a finished run's rerun changes nothing; a second
run on a held MODEL_DIR is refused; an unreadable latest checkpoint is set
aside and the run resumes from the one before.
"""

import json
import os
import shutil

import jax
import numpy as np
import pytest

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import model_dir_lock
from rembert_t5x.runner import train
from tests import test_utils

# 4 steps of the tiny MLM model, checkpoints at 2 and 4.
RUN_GIN = test_utils.tiny_run_gin(train_steps=4, checkpoint_period=2)


# The tiny MLM task RUN_GIN names; `run_gin` (conftest.py) writes RUN_GIN.
pytestmark = pytest.mark.usefixtures("random_mlm_task")


def _train_cli(run_gin, model_dir, *bindings):
  return cli.run_main(train._main, [f"--gin_file={run_gin}",
                                   f"--gin.MODEL_DIR='{model_dir}'",
                                   *bindings])


def _error(capsys, run_gin, model_dir, *bindings) -> str:
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:
    _train_cli(run_gin, model_dir, *bindings)
  assert e.value.code == 2
  err = [l for l in capsys.readouterr().err.splitlines()
         if l.startswith("error: ")]
  assert len(err) == 1, err
  return err[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A finished 4-step MODEL_DIR, trained from a relative MODEL_DIR with
  `~` in it (both made absolute before the first step)."""
  test_utils.register_random_mlm_task()
  home = tmp_path_factory.mktemp("home")
  run_gin = home / "run.gin"
  run_gin.write_text(RUN_GIN)
  cwd = os.getcwd()
  saved_home = os.environ.get("HOME")
  os.environ["HOME"] = str(home)
  os.chdir(home)
  try:
    _train_cli(run_gin, "~/sub/../m")
  finally:
    os.chdir(cwd)
    if saved_home is None:
      del os.environ["HOME"]
    else:
      os.environ["HOME"] = saved_home
  return home / "m"


@pytest.fixture
def model_dir(trained, tmp_path):
  """A copy of `trained` a test may change."""
  copy = tmp_path / "m"
  shutil.copytree(trained, copy)
  return copy


def test_relative_and_home_model_dir_are_made_absolute(trained):
  assert checkpoints.steps(str(trained)) == [2, 4]
  assert not (trained / model_dir_lock.LOCK_FILE).exists()  # released


@pytest.mark.parametrize("binding,message", [
    ("train.train.keep_checkpoints=0",
     "train.keep_checkpoints must be >= 1 or None, got 0"),
    ("train.train.keep_checkpoints=-1",
     "train.keep_checkpoints must be >= 1 or None, got -1"),
    ("train.train.train_steps=-5", "train.train_steps must be >= 1, got -5"),
    ("train.train.batch_size=0", "train.batch_size must be >= 1, got 0"),
    ("train.train.grad_accum_steps=0",
     "train.grad_accum_steps must be >= 1, got 0"),
    ("train.train.checkpoint_period=0",
     "train.checkpoint_period must be >= 1, got 0"),
    ("train.train.log_period=0", "train.log_period must be >= 1, got 0"),
    ("train.train.train_steps=2.5",
     "train.train_steps must be an integer, got 2.5"),
    ("train.train.learning_rate='nan'",
     "train.learning_rate must be a number in [0, inf), got 'nan' (a "
     "string: write the number without quotes)"),
    ("train.train.learning_rate=1e999",
     "train.learning_rate must be a number in [0, inf), got inf"),
    ("train.train.learning_rate=-0.1",
     "train.learning_rate must be a number in [0, inf), got -0.1"),
    ("train.train.adam_b2=1.0",
     "train.adam_b2 must be a number in [0, 1), got 1.0"),
    ("train.train.clip_norm=0.0",
     "train.clip_norm must be a number in (0, inf), got 0.0"),
    ("train.train.adam_eps=0.0",
     "train.adam_eps must be a number in (0, inf), got 0.0"),
    ("train.train.task_feature_lengths={'inputs': 16, 'targets': 16}",
     "train.task_feature_lengths {'inputs': 16, 'targets': 16}: "
     "RemBertMLMModel reads no feature ['inputs'] (T5-style "
     "'inputs'/'targets' do not apply); give the length as "
     "{'input_tokens': N}"),
    ("train.train.task_feature_lengths={'input_tokens': 0}",
     "train.task_feature_lengths['input_tokens'] must be a positive integer, "
     "got 0"),
    ("MODEL_DIR='gs://bucket/m'",
     "train.model_dir 'gs://bucket/m': the local runner writes local paths "
     "only"),
])
def test_bad_setting_is_refused_before_anything_changes(
    capsys, run_gin, model_dir, binding, message):
  before = test_utils.tree_snapshot(model_dir, mtimes=False)
  err = _error(capsys, run_gin, model_dir, f"--gin.{binding}")
  assert message in err
  assert test_utils.tree_snapshot(model_dir, mtimes=False) == before


def test_a_new_model_dir_is_not_created_for_a_refused_setting(
    capsys, run_gin, tmp_path):
  _error(capsys, run_gin, tmp_path / "new", "--gin.train.train.batch_size=0")
  assert not (tmp_path / "new").exists()


def test_fewer_steps_than_saved_is_refused_and_changes_nothing(
    capsys, run_gin, model_dir):
  before = test_utils.tree_snapshot(model_dir, mtimes=False)
  err = _error(capsys, run_gin, model_dir, "--gin.train.train.train_steps=2")
  assert (f"MODEL_DIR {model_dir} holds a checkpoint of step 4, past "
          "train_steps 2: nothing to train") in err
  assert test_utils.tree_snapshot(model_dir, mtimes=False) == before


def test_rerunning_a_finished_run_changes_nothing(capsys, run_gin, model_dir):
  before = test_utils.tree_snapshot(model_dir, mtimes=False)
  capsys.readouterr()
  _train_cli(run_gin, model_dir)
  out, err = capsys.readouterr()
  assert "already holds step 4 = train_steps: nothing to train" in err
  assert json.loads(out.strip().splitlines()[-1])["step"] == 4
  assert test_utils.tree_snapshot(model_dir, mtimes=False) == before


def test_a_second_run_on_a_held_model_dir_is_refused(
    capsys, run_gin, model_dir):
  before = test_utils.tree_snapshot(model_dir, mtimes=False)
  with model_dir_lock.hold(model_dir):
    err = _error(capsys, run_gin, model_dir, "--gin.train.train.train_steps=6",
                 "--gin.train.train.seed=3")
  assert (f"MODEL_DIR {model_dir} is in use by another training run (host "
          f"{os.uname().nodename}, pid {os.getpid()}, started ") in err
  assert "wait for it to end or use another MODEL_DIR" in err
  assert test_utils.tree_snapshot(model_dir, mtimes=False) == before


def test_a_lock_left_by_a_dead_run_is_taken_over(tmp_path):
  lock = tmp_path / model_dir_lock.LOCK_FILE
  lock.write_text(json.dumps({"host": "h", "pid": 2 ** 22 + 7,
                              "started": 0}))
  with model_dir_lock.hold(tmp_path):  # no process holds its flock
    holder = json.loads(lock.read_text())
    assert holder["pid"] == os.getpid()
    with pytest.raises(errors.UserError, match="is in use by another"):
      with model_dir_lock.hold(tmp_path):
        pass
  assert not lock.exists()


def test_nonfinite_parameters_are_never_saved(capsys, run_gin, tmp_path):
  """A step size that overflows the weights while the loss and gradient are
  finite: step 1 (learning rate 0 in warm-up) is saved, step 2 is not."""
  model_dir = tmp_path / "nan"
  err = _error(capsys, run_gin, model_dir,
               "--gin.train.train.learning_rate=1e38",
               "--gin.train.train.warmup_steps=2",
               "--gin.train.train.checkpoint_period=1")
  assert "error: non-finite parameters after the update at step 2 " in err
  assert (f"the last good checkpoint is {model_dir / 'checkpoints' / '1'}"
          in err)
  assert checkpoints.steps(str(model_dir)) == [1]
  params = checkpoints.load_params(str(model_dir))
  assert all(np.isfinite(x).all() for x in jax.tree_util.tree_leaves(params))


def test_unreadable_latest_checkpoint_is_set_aside_and_the_run_resumes(
    capsys, run_gin, model_dir):
  """Checkpoint 4 truncated on disk, and the input iterator state of 2: the
  run moves 4 to unreadable_checkpoints/, resumes from 2 by skipping the
  consumed batches, and logs steps 3..6 once each."""
  data = max((p for p in (model_dir / "checkpoints" / "4").rglob("*")
              if p.is_file()), key=lambda p: p.stat().st_size)
  with data.open("r+b") as f:
    f.truncate(100)
  state = next((model_dir / "input_iterator" / "2").glob("state.data*"))
  with state.open("r+b") as f:
    f.truncate(50)
  damaged = data.read_bytes()
  capsys.readouterr()
  _train_cli(run_gin, model_dir, "--gin.train.train.train_steps=6")
  err = capsys.readouterr().err
  assert (f"warning: checkpoint {model_dir / 'checkpoints' / '4'} cannot be "
          "read (") in err
  moved = model_dir / train.CORRUPT_DIRECTORY / "4"
  assert (moved / data.relative_to(model_dir / "checkpoints" / "4")
          ).read_bytes() == damaged  # kept as it was, not deleted
  assert checkpoints.steps(str(model_dir)) == [2, 4, 6]
  steps = [json.loads(l)["step"] for l in
           (model_dir / "metrics.jsonl").read_text().splitlines()]
  assert steps == sorted(set(steps)) and steps[-1] == 6


@pytest.mark.parametrize("binding,name,old,new", [
    ("train.train.batch_size=4", "train.batch_size (BATCH_SIZE)", "8", "4"),
    ("train.train.task_feature_lengths={'input_tokens': 8}",
     "train.task_feature_lengths (TASK_FEATURE_LENGTHS)",
     "{'input_tokens': 16}", "{'input_tokens': 8}"),
])
def test_resuming_with_another_batch_shape_is_refused_and_changes_nothing(
    capsys, run_gin, model_dir, binding, name, old, new):
  """Its saved input pipeline would fail at the first batch, after
  config.gin was replaced: refused before anything is written."""
  before = test_utils.tree_snapshot(model_dir, mtimes=False)
  err = _error(capsys, run_gin, model_dir, "--gin.train.train.train_steps=6",
               f"--gin.{binding}")
  assert err == (f"error: MODEL_DIR {model_dir} was trained with {name} = "
                 f"{old}, this run sets {new}: a resume cannot change the "
                 "batch's shape (its saved input pipeline is of the old one); "
                 f"set it back to {old}, or use a new MODEL_DIR")
  assert test_utils.tree_snapshot(model_dir, mtimes=False) == before
