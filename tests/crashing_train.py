"""The local runner with a SIGKILL armed, for tests/resume_test.py.

  python -m tests.crashing_train step:N|save:N --gin_file=... --gin.MODEL_DIR=...

step:N kills the process right after the update of step N (before that step
is logged or saved); save:N kills it inside the checkpoint save of step N,
after every file is written and just before orbax's rename commits it. The
hooks live here, not in the runner: they wrap the runner's jitted step and
a private orbax class, which production code must not touch.

Exits 3 if the run ends without the kill firing (e.g. orbax's commit path
changed), so a test expecting -9 cannot pass by accident.
"""

import os
import pathlib
import signal
import sys

import jax

from rembert_t5x.common import cli
from rembert_t5x.runner import train
from rembert_t5x.runner import train_lib


def _kill_self():
  os.kill(os.getpid(), signal.SIGKILL)


def after_step(original, step: int, action=_kill_self):
  """`train_lib.jit_train_step` (`original`) whose steps call `action()`
  once the state of `step` is computed (by default: SIGKILL)."""

  def jit_train_step(*args, **kwargs):
    step_fn = original(*args, **kwargs)

    def crashing_step(state, batch, rng, *extra):
      state, metrics = step_fn(state, batch, rng, *extra)
      if int(jax.device_get(state.step)) == step:
        jax.block_until_ready(state)
        action()
      return state, metrics
    return crashing_step

  return jit_train_step


def arm_after_step(step: int) -> None:
  """SIGKILLs the process once the state of `step` is computed."""
  train_lib.jit_train_step = after_step(train_lib.jit_train_step, step)


def arm_in_save(step: int) -> None:
  """SIGKILLs the process inside the save of `step`, just before its commit.

  Wraps orbax's commit of a temporary checkpoint directory (the rename that
  makes it `<step>`): every file of the checkpoint is then on disk under the
  temporary name, the worst moment for a crash.
  """
  from orbax.checkpoint._src.path import atomicity  # pylint: disable=g-import-not-at-top
  cls = atomicity.AtomicRenameTemporaryPath
  original = cls.finalize

  async def finalize(self, *args, **kwargs):
    if pathlib.Path(str(self.get_final())).name == str(step):
      _kill_self()
    return await original(self, *args, **kwargs)

  cls.finalize = finalize


def main(argv) -> None:
  kind, _, step = argv[0].partition(":")
  if kind not in ("step", "save") or not step.isdigit():
    sys.exit(f"expected step:N or save:N, got {argv[0]!r}")
  (arm_after_step if kind == "step" else arm_in_save)(int(step))
  cli.run_main(train._main, argv[1:])
  sys.exit(3)  # the kill did not fire


if __name__ == "__main__":
  main(sys.argv[1:])
