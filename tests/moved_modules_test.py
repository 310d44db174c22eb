"""Old module paths after issue 14's move (rembert_t5x/_moved.py).

The only test that imports moved modules by their old names: each old name
is the new module object itself, `python -m` of an old name runs the new
module, and a gin binding written with an old full path fails with one line
naming the new path.
"""

import importlib
import subprocess
import sys

import pytest

from rembert_t5x import _moved
from rembert_t5x import configs
from rembert_t5x.runner import train
from tests import test_utils

REPO = test_utils.REPO_ROOT


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_old_path_is_the_new_module(old):
  new = importlib.import_module(f"rembert_t5x.{_moved.MOVED[old]}.{old}")
  assert importlib.import_module(f"rembert_t5x.{old}") is new
  assert sys.modules[f"rembert_t5x.{old}"] is new
  # The shim is all that is left at the old path.
  shim = (REPO / "rembert_t5x" / f"{old}.py").read_text()
  assert len(shim.splitlines()) <= 6, shim


def test_monkeypatching_the_old_name_patches_the_new_module(monkeypatch):
  from rembert_t5x import train as old_train  # pylint: disable=g-import-not-at-top
  from rembert_t5x.cli import UserError  # pylint: disable=g-import-not-at-top
  from rembert_t5x import errors  # pylint: disable=g-import-not-at-top
  def fake_train(*args, **kwargs):
    del args, kwargs
  monkeypatch.setattr(old_train, "train", fake_train)
  assert train.train is fake_train
  assert UserError is errors.UserError


def test_new_path():
  assert (_moved.new_path("rembert_t5x.train.train")
          == "rembert_t5x.runner.train.train")
  assert (_moved.new_path("rembert_t5x.vocabulary.checkpoint_vocabulary")
          == "rembert_t5x.data.vocabulary.checkpoint_vocabulary")
  assert _moved.new_path("rembert_t5x.models.RemBertMLMModel") is None
  assert _moved.new_path("rembert_t5x.runner.train.train") is None
  assert _moved.new_path("train.train") is None


@pytest.mark.parametrize("text", [
    "rembert_t5x.train.train.batch_size = 3",
    "x = @rembert_t5x.train.train",
])
def test_old_gin_name_names_the_new_one(tmp_path, text):
  gin_file = tmp_path / "old.gin"
  gin_file.write_text(text + "\n")
  with pytest.raises(configs.GinConfigError) as e:
    configs.parse_gin([str(gin_file)])
  assert str(e.value) == (
      f"gin file {gin_file}: rembert_t5x.train.train is now "
      "rembert_t5x.runner.train.train (its module moved; update the gin file)")
  # A binding on the command line gets the same message.
  with pytest.raises(configs.GinConfigError, match="is now rembert_t5x."
                     "runner.train.train"):
    configs.parse_gin([], [text])


def test_old_gin_names_work_through_dynamic_registration(tmp_path):
  """Run files that import the old module name (T5X style) keep working."""
  gin_file = tmp_path / "old.gin"
  gin_file.write_text("from __gin__ import dynamic_registration\n"
                      "from rembert_t5x import train\n"
                      "train.train.batch_size = 3\n")
  configs.parse_gin([str(gin_file)])
  import gin  # pylint: disable=g-import-not-at-top
  assert gin.query_parameter("rembert_t5x.runner.train.train.batch_size") == 3


def _run(*args):
  return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True,
                        text=True, timeout=300, check=False)


def test_python_m_old_name_runs_the_new_module(tmp_path):
  """`python -m rembert_t5x.train` runs the runner's main: its gin parsing
  reports an old gin name with the new one, one line, exit 2."""
  gin_file = tmp_path / "old.gin"
  gin_file.write_text("rembert_t5x.train.train.batch_size = 3\n")
  result = _run("-m", "rembert_t5x.train", f"--gin_file={gin_file}")
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.strip().splitlines()[-1] == (
      f"error: gin file {gin_file}: rembert_t5x.train.train is now "
      "rembert_t5x.runner.train.train (its module moved; update the gin file)")


def test_python_m_old_flags_entry_point():
  result = _run("-m", "rembert_t5x.sweep", "--help")
  assert result.returncode == 0, result.stderr[-2000:]
  assert "--experiment" in result.stdout
