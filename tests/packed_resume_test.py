"""A packed fine-tuning run killed mid-way resumes to the uninterrupted losses.

The local runner packs each step's examples on the host (fine-tuning's
default); the packing is a function of the step's batch, so a run killed
after an update (tests/crashing_train.py) and restarted with the same
command logs the losses of a run that was never interrupted.
"""

import json
import pathlib
import textwrap

import numpy as np
import pytest

from rembert_t5x.common import cli
from rembert_t5x.runner import train
from tests import test_utils

pytestmark = pytest.mark.slow

STEPS = 6
BATCH_SIZE = 16


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


def test_killed_packed_run_resumes_to_the_uninterrupted_losses(
    setup, tmp_path, monkeypatch, capsys):
  monkeypatch.syspath_prepend(str(setup))
  killed = tmp_path / "killed"
  result = test_utils.run_train_process(setup, killed, crash_at="step:3")
  assert result.returncode == -9, result.stderr[-2000:]
  capsys.readouterr()
  cli.run_main(train._main, [f"--gin_file={setup / 'run.gin'}",
                            f"--gin.MODEL_DIR='{killed}'"])
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
