"""Atomic file writes: a reader sees the old file or the new one, never half.

Each write goes to a temporary name in the destination's directory (so the
final `os.replace` is a rename within one filesystem, which POSIX makes
atomic), is flushed and fsynced, and then replaces the destination. A process
killed at any point leaves either the previous file or the complete new one,
plus at worst a stray `.<name>.tmp.*` file that the next write ignores.

A full disk (ENOSPC), a read-only filesystem (EROFS) or a permission error
(EACCES/EPERM) becomes a `errors.UserError` naming the file; the destination is
left as it was.

An output directory built from inputs (`atomic_output_dir`) never overlaps
them: with `overwrite` the old directory is deleted whole, so an output that
is or contains an input would take the input with it, and one inside an input
would replace part of it.
"""

import contextlib
import errno
import json
import os
import pathlib
import shutil
import tempfile
from typing import Any, Iterator, Optional, Sequence, Tuple, Union

from rembert_t5x.common import errors

PathLike = Union[str, os.PathLike]
# An input of a command: (the flag or name that gave it, its path or None).
Source = Tuple[str, Optional[PathLike]]

_USER_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOENT: "no such directory",
    errno.ENOTDIR: "a parent is not a directory",
}


def _user_error(path: PathLike, e: OSError) -> errors.UserError:
  reason = _USER_ERRNOS.get(e.errno, e.strerror or str(e))
  return errors.UserError(f"cannot write {path}: {reason}")


def make_writable_dir(path: PathLike, what: str) -> pathlib.Path:
  """Creates directory `path` (and its parents) and checks it takes a file.

  Raises:
    errors.UserError: `{what} {path} is not writable: <reason>` (read-only,
      under a file, no permission to create it).
  """
  path = pathlib.Path(path)
  try:
    path.mkdir(parents=True, exist_ok=True)
    probe = path / f".write_probe_{os.getpid()}"
    probe.write_text("ok")
    probe.unlink()
  except OSError as e:
    raise errors.UserError(
        f"{what} {path} is not writable: {e.strerror or e}") from e
  return path


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
  """Writes `data` to `path` atomically (temp file, fsync, rename).

  Raises:
    errors.UserError: the disk is full, or the directory is not writable; the
      previous contents of `path` are kept.
  """
  path = pathlib.Path(path)
  fd = None
  tmp = None
  try:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp.", dir=path.parent)
    view = memoryview(data)
    while view:  # os.write may write less than asked
      written = os.write(fd, view)
      view = view[written:]
    os.fsync(fd)
    os.close(fd)
    fd = None
    # mkstemp creates 0600; give the file the permissions a plain open() would.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)
    tmp = None
  except OSError as e:
    if e.errno in _USER_ERRNOS:
      raise _user_error(path, e) from e
    raise
  finally:
    if fd is not None:
      os.close(fd)
    if tmp is not None:
      try:
        os.unlink(tmp)
      except OSError:
        pass
  _fsync_dir(path.parent)


def _fsync_dir(directory: pathlib.Path) -> None:
  """Makes the rename itself durable (best effort: not every FS allows it)."""
  try:
    fd = os.open(directory, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def atomic_write_text(path: PathLike, text: str) -> None:
  """Writes `text` (UTF-8) to `path` atomically; see `atomic_write_bytes`."""
  atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: PathLike, obj: Any, **dumps_kwargs) -> None:
  """Writes `obj` as JSON (plus a newline) to `path` atomically.

  The object is serialised before anything is written, so an unserialisable
  object leaves `path` untouched.
  """
  dumps_kwargs.setdefault("ensure_ascii", False)
  text = json.dumps(obj, **dumps_kwargs) + "\n"
  atomic_write_text(path, text)


def append_line(path: PathLike, line: str) -> None:
  """Appends one line (a newline is added) and fsyncs it.

  A crash can at worst leave a partial last line; readers of such logs
  (e.g. the runner's metrics.jsonl) drop an unparsable last line.

  Raises:
    errors.UserError: the disk is full or the file is not writable.
  """
  path = pathlib.Path(path)
  try:
    with path.open("a", encoding="utf-8") as f:
      f.write(line + "\n")
      f.flush()
      os.fsync(f.fileno())
  except OSError as e:
    if e.errno in _USER_ERRNOS:
      raise _user_error(path, e) from e
    raise


def read_json(path: pathlib.Path) -> Any:
  """The JSON value in `path`.

  Raises:
    errors.UserError: the file cannot be read or is not JSON (naming it).
  """
  try:
    return json.loads(pathlib.Path(path).read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise errors.UserError(f"{path}: cannot read JSON: {e}") from e


def _overlap(out: str, source: str) -> Optional[str]:
  """How real path `out` overlaps real path `source`, or None."""
  if out == source:
    return "is"
  if pathlib.PurePath(out).is_relative_to(source):
    return "lies inside"
  if pathlib.PurePath(source).is_relative_to(out):
    return "contains"
  return None


def _shown(given: PathLike, real: str) -> str:
  # A symlink is named with what it points to: that is why two different
  # spellings were found to overlap.
  given = os.fspath(given)
  return given if os.path.abspath(given) == real else f"{given} (= {real})"


def check_output_dir(path: PathLike, overwrite: bool = False, *,
                     sources: Sequence[Source] = (),
                     output_flag: str = "--output_dir") -> pathlib.Path:
  """Checks an output directory before anything is read or written.

  Args:
    path: the directory to write.
    overwrite: whether a non-empty `path` may be replaced.
    sources: every input of the command, as (flag, path); a path of None is
      skipped, and so is a URL (gs://...), which no local path overlaps. A
      file counts as its own path (an output containing it would delete it);
      give a path prefix (a TF checkpoint's) as its directory.
    output_flag: the flag that named `path`, for the message.

  Returns:
    `path`, absolute.

  Raises:
    errors.UserError: `path` is, contains or lies inside a source (whatever
      `overwrite` says: replacing it would delete or rewrite the input);
      `path` exists and is not a directory; or it is a non-empty directory
      and not `overwrite`.
  """
  out = pathlib.Path(path).absolute()
  # Real paths, so that symlinks, `..`, relative paths and trailing slashes
  # cannot hide an overlap.
  real_out = os.path.realpath(out)
  for flag, source in sources:
    if source is None or "://" in os.fspath(source):
      continue
    real_source = os.path.realpath(source)
    relation = _overlap(real_out, real_source)
    if relation:
      raise errors.UserError(
          f"{output_flag} {_shown(path, real_out)} {relation} the input "
          f"{flag} {_shown(source, real_source)}: write the output to "
          "another directory")
  if out.exists() and not out.is_dir():
    raise errors.UserError(f"output {out} exists and is not a directory")
  if out.is_dir() and any(out.iterdir()) and not overwrite:
    raise errors.UserError(f"output directory {out} exists and is not empty "
                    "(pass --overwrite to replace it)")
  return out


@contextlib.contextmanager
def atomic_output_dir(path: PathLike, overwrite: bool = False, *,
                      sources: Sequence[Source] = (),
                      output_flag: str = "--output_dir"
                      ) -> Iterator[pathlib.Path]:
  """Yields a temporary sibling of `path`; renames it to `path` on success.

  Args:
    path: the directory to write.
    overwrite: replace a non-empty `path`.
    sources: the command's inputs, as (flag, path): see `check_output_dir`.
    output_flag: the flag that named `path`, for messages.

  Yields:
    The temporary directory to fill.

  Raises:
    errors.UserError: before anything is created, what `check_output_dir`
      raises; or the parent of `path` is not writable.
  """
  out = check_output_dir(path, overwrite, sources=sources,
                         output_flag=output_flag)
  try:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp-",
                                        dir=out.parent))
  except OSError as e:
    raise errors.UserError(f"cannot create output directory {out}: "
                    f"{e.strerror or e}") from e
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700
  try:
    yield tmp
    if out.exists():
      old = pathlib.Path(tempfile.mkdtemp(prefix=f"{out.name}.old-",
                                          dir=out.parent))
      os.replace(out, old / "replaced")
      os.replace(tmp, out)
      shutil.rmtree(old, ignore_errors=True)
    else:
      os.replace(tmp, out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
