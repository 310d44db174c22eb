"""One training run per MODEL_DIR at a time: an advisory lock file.

Two runs writing one MODEL_DIR interleave their checkpoints, their
`metrics.jsonl` lines and their `config.gin`; orbax does not stop them. The
runner holds `MODEL_DIR/.train.lock` for the whole run: an exclusive
`flock` on it, and in it the holder's host, pid and start time, which the
second run's error names.

Stale locks need no clean-up: the kernel releases a `flock` when its
process ends, however it ends (SIGKILL, a crash, a machine reboot), so the
file a killed run leaves behind is taken over by the next run, which logs
whose it was. On a filesystem without `flock` (some FUSE mounts) the run
goes on unlocked, with a warning. Linux NFS maps `flock` to byte-range
locks, so runs on two hosts sharing one NFS MODEL_DIR exclude each other.
"""

import contextlib
import errno
import fcntl
import json
import os
import pathlib
import socket
import time
from typing import Iterator, Optional

from absl import logging

from rembert_t5x.common import errors

LOCK_FILE = ".train.lock"

# errnos of a filesystem that does not implement flock.
_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def _read_holder(fd: int) -> Optional[dict]:
  """The JSON the lock file holds, or None (empty, or not ours)."""
  try:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", "replace")
    holder = json.loads(text) if text.strip() else None
  except (OSError, ValueError):
    return None
  return holder if isinstance(holder, dict) else None


def _describe(holder: Optional[dict]) -> str:
  if not holder:
    return "a run that has not written its name yet"
  started = holder.get("started")
  since = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
           if isinstance(started, (int, float)) else "?")
  return (f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, "
          f"started {since}")


def _open_locked(path: pathlib.Path) -> Optional[int]:
  """An fd of `path` holding its exclusive flock; None where unsupported.

  Raises:
    errors.UserError: another live process holds it.
  """
  while True:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = _read_holder(fd)
      os.close(fd)
      raise errors.UserError(
          f"MODEL_DIR {path.parent} is in use by another training run "
          f"({_describe(holder)}; lock file {path}): wait for it to end or "
          "use another MODEL_DIR") from None
    except OSError as e:
      os.close(fd)
      if e.errno in _UNSUPPORTED:
        logging.warning("MODEL_DIR %s: its filesystem does not support "
                        "locks (%s); a second run on it would not be "
                        "stopped", path.parent, e.strerror)
        return None
      raise
    # The holder we waited on may have deleted the file between our open
    # and our flock: then we hold a lock on a name nobody else sees.
    try:
      same = os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
      same = False
    if same:
      return fd
    os.close(fd)


@contextlib.contextmanager
def hold(model_dir: pathlib.Path) -> Iterator[None]:
  """Holds MODEL_DIR's lock for the body; released (file removed) after.

  Raises:
    errors.UserError: another process holds the lock (naming its host, pid
      and start time), or the lock file cannot be created.
  """
  path = pathlib.Path(model_dir) / LOCK_FILE
  try:
    fd = _open_locked(path)
  except OSError as e:
    raise errors.UserError(f"MODEL_DIR {model_dir}: cannot create the lock "
                           f"file {path}: {e.strerror or e}") from e
  if fd is None:
    yield
    return
  try:
    previous = _read_holder(fd)
    if previous and previous.get("pid") != os.getpid():
      logging.warning("MODEL_DIR %s: taking over the lock left by a run that "
                      "ended without releasing it (%s)", model_dir,
                      _describe(previous))
    me = {"host": socket.gethostname(), "pid": os.getpid(),
          "started": time.time()}
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(me) + "\n").encode("utf-8"))
    yield
  finally:
    # Unlink before unlocking: a run that opens the name after this finds
    # a new file; one that opened the old file sees the inode change.
    try:
      os.unlink(path)
    except OSError:
      pass
    os.close(fd)
