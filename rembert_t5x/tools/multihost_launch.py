r"""Runs a Python module as one process of a multi-process JAX cluster.

  python -m rembert_t5x.tools.multihost_launch \
      --coordinator_address=HOST:PORT --process_count=N --process_index=I \
      [--local_device_count=D] [--heartbeat_timeout=S] \
      -- t5x.eval --gin_file=... --gin.CHECKPOINT_PATH="'...'"

joins JAX's distributed runtime (`jax.distributed.initialize`) and then runs
the module after `--` as `python -m` would, with the arguments that follow
it. Start the same command once per process, each with its own
`--process_index`; process 0's address is the coordinator.

Where it is needed: on a TPU VM pod slice the runtime connects the hosts by
itself and every T5X command runs as it is (docs/T5X.md, "Pods"). On GPU
clusters `t5x.train` has `--multiprocess_gpu`, but `t5x.eval` and
`t5x.infer` do not; and on one CPU machine a pod is simulated with several
processes, each with `--local_device_count` CPU devices and gloo collectives
(`scripts/t5x_multihost_smoke.sh`). This launcher serves the last two.

One failing process ends them all: an exception in the module is printed
with its traceback (or as one `error: ...` line for a user error), and the
process exits at once without the shutdown barrier, which would wait for
processes that may be stuck in a collective with it. The others then stop
within `--heartbeat_timeout` seconds, when the coordination service misses
the failed process (sooner when the coordinator itself is the one that
failed), with an error rather than a hang.
"""

import os
import runpy
import sys
import traceback
from typing import Optional, Sequence

from absl import flags
import jax

from rembert_t5x.common import cli
from rembert_t5x.common import errors

USAGE = ("usage: python -m rembert_t5x.tools.multihost_launch "
         "--coordinator_address=HOST:PORT --process_count=N "
         "--process_index=I [--local_device_count=D] [--heartbeat_timeout=S] "
         "-- MODULE [ARGS...]")


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_string("coordinator_address", None, "HOST:PORT of process 0 "
                      "(it listens there).", flag_values=fv, required=True)
  flags.DEFINE_integer("process_count", None, "Number of processes.",
                       flag_values=fv, required=True, lower_bound=1)
  flags.DEFINE_integer("process_index", None, "This process's index, "
                       "0 .. process_count - 1.", flag_values=fv,
                       required=True, lower_bound=0)
  flags.DEFINE_integer("local_device_count", None, "Simulated CPU devices "
                       "of this process (CPU only; sets XLA's "
                       "--xla_force_host_platform_device_count and gloo "
                       "collectives).", flag_values=fv, lower_bound=1)
  flags.DEFINE_integer("heartbeat_timeout", 100, "Seconds after which the "
                       "cluster gives up on a process that stopped "
                       "answering (JAX's default: 100).", flag_values=fv,
                       lower_bound=1)
  flags.DEFINE_integer("initialization_timeout", 300, "Seconds to wait for "
                       "every process to join.", flag_values=fv,
                       lower_bound=1)


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
  """(launcher arguments, [module, module arguments...]) split at `--`."""
  argv = list(argv)
  if "--" not in argv:
    raise errors.UserError(f"no module to run: put it after `--` ({USAGE})")
  at = argv.index("--")
  command = argv[at + 1:]
  if not command or command[0].startswith("-"):
    raise errors.UserError(f"no module after `--` ({USAGE})")
  return argv[:at], command


def _set_local_devices(count: int) -> None:
  """CPU devices of this process. XLA reads XLA_FLAGS when JAX makes its
  first backend (the first `jax.devices()`), not at `import jax`: set here,
  before `jax.distributed.initialize`, it is in time."""
  kept = [f for f in os.environ.get("XLA_FLAGS", "").split()
          if not f.startswith("--xla_force_host_platform_device_count")]
  os.environ["XLA_FLAGS"] = " ".join(
      kept + [f"--xla_force_host_platform_device_count={count}"])
  jax.config.update("jax_platforms", "cpu")


def initialise(fv: flags.FlagValues) -> None:
  """Joins the cluster the flags describe."""
  if fv.process_index >= fv.process_count:
    raise errors.UserError(
        f"--process_index={fv.process_index}: must be below "
        f"--process_count={fv.process_count}")
  if fv.local_device_count is not None:
    _set_local_devices(fv.local_device_count)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(
      coordinator_address=fv.coordinator_address,
      num_processes=fv.process_count, process_id=fv.process_index,
      initialization_timeout=fv.initialization_timeout,
      heartbeat_timeout_seconds=fv.heartbeat_timeout)


def _run_module(command: list[str]) -> int:
  """Runs `command[0]` as `python -m` would; its exit status."""
  sys.argv = list(command)
  try:
    runpy.run_module(command[0], run_name="__main__", alter_sys=True)
  except SystemExit as e:
    if e.code is None or isinstance(e.code, int):
      return e.code or 0
    print(e.code, file=sys.stderr)
    return 1
  return 0


def main(argv: Optional[Sequence[str]] = None) -> None:
  argv = sys.argv[1:] if argv is None else argv
  try:
    own, command = split_command(argv)
  except errors.UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  cli.run_main(initialise, own, _define_flags, doc=__doc__)
  try:
    code = _run_module(command)
  except errors.UserError as e:
    print(f"error: {e}", file=sys.stderr)
    code = 2
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
    code = 1
  sys.stdout.flush()
  sys.stderr.flush()
  if code:
    # No shutdown barrier: the other processes may be waiting in a
    # collective for this one, and would keep this one waiting in turn.
    os._exit(code)  # pylint: disable=protected-access
  jax.distributed.shutdown()
  sys.exit(0)


if __name__ == "__main__":
  main()
