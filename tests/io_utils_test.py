"""Atomic writes (rembert_t5x/common/io_utils.py)."""

import errno
import json
import os
import pathlib
import stat

import pytest

from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from tests import test_utils


def test_write_text_creates_and_replaces(tmp_path):
  path = tmp_path / "config.gin"
  io_utils.atomic_write_text(path, "a = 1\n")
  assert path.read_text() == "a = 1\n"
  io_utils.atomic_write_text(str(path), "b = 2\n")
  assert path.read_text() == "b = 2\n"
  assert os.listdir(tmp_path) == ["config.gin"]  # no temporary left


def test_write_json_round_trip_and_unicode(tmp_path):
  path = tmp_path / "results.json"
  io_utils.atomic_write_json(path, {"f1": 81.5, "lang": "日本語"}, indent=1)
  assert json.loads(path.read_text("utf-8")) == {"f1": 81.5, "lang": "日本語"}
  assert "日本語" in path.read_text("utf-8")
  assert path.read_text().endswith("}\n")


def test_unserialisable_object_leaves_the_file_untouched(tmp_path):
  path = tmp_path / "results.json"
  io_utils.atomic_write_json(path, {"ok": 1})
  with pytest.raises(TypeError):
    io_utils.atomic_write_json(path, {"bad": object()})
  assert json.loads(path.read_text()) == {"ok": 1}


def test_permissions_follow_the_umask(tmp_path):
  old = os.umask(0o022)
  try:
    io_utils.atomic_write_text(tmp_path / "f", "x")
  finally:
    os.umask(old)
  assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o644


def test_short_writes_are_completed(tmp_path, monkeypatch):
  real_write = os.write
  monkeypatch.setattr(io_utils.os, "write",
                      lambda fd, data: real_write(fd, bytes(data[:3])))
  text = "0123456789" * 10
  io_utils.atomic_write_text(tmp_path / "f", text)
  assert (tmp_path / "f").read_text() == text


def test_failure_before_the_rename_keeps_the_old_file(tmp_path, monkeypatch):
  """A crash at the last moment leaves the old contents, no temporary."""
  path = tmp_path / "metrics.jsonl"
  io_utils.atomic_write_text(path, "old\n")

  def broken_replace(src, dst):
    raise OSError(errno.EIO, os.strerror(errno.EIO))

  monkeypatch.setattr(io_utils.os, "replace", broken_replace)
  with pytest.raises(OSError) as e:
    io_utils.atomic_write_text(path, "new\n")
  assert not isinstance(e.value, errors.UserError) and e.value.errno == errno.EIO
  assert path.read_text() == "old\n"
  assert os.listdir(tmp_path) == ["metrics.jsonl"]


@pytest.mark.parametrize("code,reason", [
    (errno.ENOSPC, "no space left on device"),
    (errno.EACCES, "permission denied"),
    (errno.EROFS, "read-only file system"),
])
def test_user_errors_name_the_file(tmp_path, monkeypatch, code, reason):
  path = tmp_path / "results.json"
  io_utils.atomic_write_json(path, [1])

  def failing_write(fd, data):
    raise OSError(code, os.strerror(code))

  monkeypatch.setattr(io_utils.os, "write", failing_write)
  with pytest.raises(errors.UserError, match=f"^cannot write {path}: {reason}$"):
    io_utils.atomic_write_json(path, [2])
  assert json.loads(path.read_text()) == [1]
  assert os.listdir(tmp_path) == ["results.json"]


def test_append_line(tmp_path):
  path = tmp_path / "metrics.jsonl"
  io_utils.append_line(path, '{"step": 1}')
  io_utils.append_line(path, '{"step": 2}')
  assert path.read_text() == '{"step": 1}\n{"step": 2}\n'


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_append_to_a_full_device():
  with pytest.raises(errors.UserError, match="^cannot write /dev/full: no space "
                     "left on device$"):
    io_utils.append_line("/dev/full", "x")


# ----------------------------------------------------------------------------
# atomic_output_dir never writes over its own inputs.
# ----------------------------------------------------------------------------


@pytest.fixture
def model_dir(tmp_path, monkeypatch):
  """A MODEL_DIR-like tree `m` (one step, a vocabulary), cwd its parent."""
  root = pathlib.Path(os.path.realpath(tmp_path))  # paths as messages show
  step = root / "m" / "checkpoints" / "0"
  step.mkdir(parents=True)
  (step / "params").write_bytes(b"\x00" * 16)
  (root / "m" / "sentencepiece.model").write_bytes(b"spm")
  (root / "link").symlink_to(root / "m")
  monkeypatch.chdir(root)
  return root


# (output, source, relation shown), relative to `model_dir`'s root.
OVERLAPS = [
    ("m", "m", "is"),
    ("m/", "m", "is"),  # a trailing slash
    ("x/../m", "m", "is"),  # `..` over a directory that does not exist
    ("m/checkpoints/0", "m", "lies inside"),  # a step directory
    ("m/export", "m", "lies inside"),
    ("m", "m/checkpoints/0", "contains"),
    ("m", "m/sentencepiece.model", "contains"),  # a file input
    ("link", "m", "is"),
    ("m", "link/checkpoints/0", "contains"),
    ("link/export", "m", "lies inside"),
]


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("out,source,relation", OVERLAPS)
def test_an_output_overlapping_an_input_is_refused(model_dir, out, source,
                                                   relation, overwrite):
  before = test_utils.tree_snapshot(model_dir)
  with pytest.raises(errors.UserError) as e:
    with io_utils.atomic_output_dir(out, overwrite,
                                    sources=[("--checkpoint_dir", source)]):
      pytest.fail("the body ran")
  message = str(e.value)
  assert message.startswith(f"--output_dir {out}")
  assert f" {relation} the input --checkpoint_dir {source}" in message
  assert message.endswith(": write the output to another directory")
  assert test_utils.tree_snapshot(model_dir) == before


def test_the_message_names_both_paths_and_what_a_link_resolves_to(model_dir):
  with pytest.raises(errors.UserError) as e:
    io_utils.check_output_dir("link/export", True, sources=[
        ("--hf_dir", None), ("--vocab", "gs://bucket/spm.model"),
        ("--checkpoint_dir", f"{model_dir}/m")])
  assert str(e.value) == (
      f"--output_dir link/export (= {model_dir}/m/export) lies inside the "
      f"input --checkpoint_dir {model_dir}/m: write the output to another "
      "directory")


@pytest.mark.parametrize("out", ["m2", "m-export", "checkpoints", "x/m"])
def test_an_output_beside_its_inputs_is_written(model_dir, out):
  """Siblings sharing a name prefix do not overlap; a None source and a URL
  are skipped."""
  with io_utils.atomic_output_dir(out, sources=[
      ("--checkpoint_dir", "m"), ("--gin_file", None),
      ("--vocab", "gs://m/sentencepiece.model")]) as tmp:
    (tmp / "f").write_text("x")
  assert (model_dir / out / "f").read_text() == "x"
