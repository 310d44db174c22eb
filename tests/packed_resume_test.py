"""A packed fine-tuning run stopped mid-way resumes to the uninterrupted losses.

The local runner packs each step's examples on the host (fine-tuning's
default); the packing is a function of the step's batch, so a run stopped
after an update and restarted with the same command logs the losses of a
run that was never interrupted. The run stops by an exception raised after
its step-3 update (tests/crashing_train.py's hook, in this process):
tests/resume_test.py kills real processes (SIGKILL between steps and inside
a save); this test is about the packed batches after a restore, and a
process of its own cost ~15 s of start-up.
"""

import json
import pathlib
import textwrap

import numpy as np
import pytest

from rembert_t5x.common import cli
from rembert_t5x.runner import train
from rembert_t5x.runner import train_lib
from tests import crashing_train
from tests import test_utils

pytestmark = pytest.mark.slow

STEPS = 6
BATCH_SIZE = 16


class _Interrupted(Exception):
  """Raised after the update of step 3 (the run's crash)."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """Synthetic pair data, a module registering its tasks, and a run file."""
  tmp = tmp_path_factory.mktemp("packed_resume")
  (tmp / "packed_resume_tasks.py").write_text(textwrap.dedent(f"""\
      from tests import test_utils
      test_utils.register_tiny_synthetic({str(tmp / 'data')!r}, "pr_")
      """))
  run = test_utils.tiny_run_gin(
      "pr_pair_train", imports=["packed_resume_tasks"], vocab_size=400,
      length=64, model="RemBertPairClassificationModel",
      module="RemBertForSequenceClassification",
      bindings=["network.RemBertForSequenceClassification.num_classes = 2"],
      train_steps=STEPS, batch_size=BATCH_SIZE, learning_rate=1e-3,
      checkpoint_period=2, log_period=1)
  (tmp / "run.gin").write_text(run)
  return tmp


def _losses(model_dir):
  return [json.loads(l)["loss"] for l in
          (pathlib.Path(model_dir) / "metrics.jsonl").read_text().splitlines()]


def test_stopped_packed_run_resumes_to_the_uninterrupted_losses(
    setup, tmp_path, monkeypatch, capsys):
  monkeypatch.syspath_prepend(str(setup))
  killed = tmp_path / "killed"
  argv = [f"--gin_file={setup / 'run.gin'}", f"--gin.MODEL_DIR='{killed}'"]

  def interrupt():
    raise _Interrupted

  with monkeypatch.context() as patch:
    patch.setattr(train_lib, "jit_train_step", crashing_train.after_step(
        train_lib.jit_train_step, 3, interrupt))
    with pytest.raises(_Interrupted):
      train._main(cli.parse_gin_args(argv))
  # Stopped after step 3's update: logged up to 2, checkpoint 2 its last.
  assert len(_losses(killed)) == 2
  assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == ["2"]
  capsys.readouterr()
  cli.run_main(train._main, argv)
  resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert 1 <= resumed["step_shapes"] <= 8  # a bounded number of programs
  # Packed: fewer rows than the 16 examples of a step (with packing off,
  # every step has 16).
  assert resumed["step_rows"] < BATCH_SIZE
  whole = tmp_path / "whole"
  cli.run_main(train._main, [f"--gin_file={setup / 'run.gin'}",
                            f"--gin.MODEL_DIR='{whole}'"])
  np.testing.assert_allclose(_losses(killed), _losses(whole), rtol=0,
                             atol=1e-6)
  assert len(_losses(whole)) == STEPS
