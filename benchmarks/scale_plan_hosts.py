"""`benchmarks/scale_plan.py --processes N`: the same layouts compiled across
N processes, beside the one-process figures.

The pod plan simulates a slice in ONE process (64 CPU devices). A real pod
runs one process per host, each seeing only its own devices; this module
checks whether that changes what XLA needs per device. For each group of
layouts with the same device count it starts N copies of scale_plan as one
JAX cluster on this machine, each through `rembert_t5x.tools.multihost_launch`
(`jax.distributed.initialize`, gloo CPU collectives) with
`--local_device_count = data * model / N`. Every process builds the mesh
over `jax.devices()` -- all processes' devices -- AOT-compiles the same
train steps and writes its report (`--out DIR/process<i>.json`); the parent
waits for all of them (one failure or the timeout stops the rest), takes
process 0's rows, checks the other processes got the same figures, and
puts each beside the one-process compile of the same layout.

`compiled.memory_analysis()` of a multi-process executable describes the
one SPMD-partitioned HLO module that each of the process's devices runs:
per device, as in one process (not summed over a process's devices: the
arguments come out at one device's shard of the state, whatever
`--local_device_count` is).

No jax import at module level: scale_plan imports this before it decides
on XLA_FLAGS.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
LAUNCHER = "rembert_t5x.tools.multihost_launch"
WORKER_MODULE = "benchmarks.scale_plan"
# Figures compared between the one- and the multi-process compile.
MEMORY_KEYS = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes",
               "peak_bytes")
KEY = ("kind", "data", "model", "param_dims", "remat_policy")


def device_groups(layouts: Sequence[tuple[int, int]], processes: int
                  ) -> dict[int, list[tuple[int, int]]]:
  """Layouts by device count (one cluster each); each count must split
  evenly over the processes."""
  groups: dict[int, list[tuple[int, int]]] = {}
  for data, model in layouts:
    devices = data * model
    if devices % processes:
      raise SystemExit(
          f"--processes {processes}: layout {data}x{model} has {devices} "
          "devices, not a multiple of the process count")
    groups.setdefault(devices, []).append((data, model))
  return groups


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env() -> dict[str, str]:
  # The launcher sets each process's device count; the worker's own
  # `__main__` block adds XLA:CPU's cheap-codegen flags (scale_plan.py).
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  env["XLA_FLAGS"] = " ".join(
      f for f in env.get("XLA_FLAGS", "").split()
      if not f.startswith("--xla_force_host_platform_device_count"))
  env["PYTHONPATH"] = os.pathsep.join(
      p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
  return env


def _tail(path: pathlib.Path, chars: int = 3000) -> str:
  text = path.read_text(errors="replace") if path.exists() else ""
  return text[-chars:]


def run_cluster(processes: int, local_devices: int, worker_args: list[str],
                directory: pathlib.Path, timeout_s: float,
                log: Callable[[str], None]) -> list[dict[str, Any]]:
  """Runs scale_plan as `processes` processes of one cluster; their reports.

  Each process logs to DIR/process<i>.log. If one exits non-zero, or any
  still runs after `timeout_s`, the others are killed (a process stuck in a
  collective would otherwise wait for the launcher's heartbeat timeout)
  and SystemExit carries the failed process's log tail.
  """
  port = _free_port()
  procs, logs = [], []
  for index in range(processes):
    log_path = directory / f"process{index}.log"
    logs.append(log_path)
    with open(log_path, "w") as log_file:
      procs.append(subprocess.Popen(
          [sys.executable, "-m", LAUNCHER,
           f"--coordinator_address=127.0.0.1:{port}",
           f"--process_count={processes}", f"--process_index={index}",
           f"--local_device_count={local_devices}", "--", WORKER_MODULE,
           *worker_args, "--out", str(directory / f"process{index}.json")],
          cwd=REPO_ROOT, env=_env(), stdout=log_file,
          stderr=subprocess.STDOUT))
  deadline = time.monotonic() + timeout_s
  failed = None
  while failed is None and any(p.poll() is None for p in procs):
    failed = next((i for i, p in enumerate(procs)
                   if p.returncode not in (None, 0)), None)
    if time.monotonic() > deadline:
      failed = "timeout"
    if failed is None:
      time.sleep(0.5)
  if failed is None:
    failed = next((i for i, p in enumerate(procs) if p.returncode), None)
  if failed is not None:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
    index = 0 if failed == "timeout" else failed
    what = (f"still running after {timeout_s:.0f} s" if failed == "timeout"
            else f"exited with {procs[index].returncode}")
    raise SystemExit(f"--processes {processes}: process {index} {what}; "
                     f"its log ends:\n{_tail(logs[index])}")
  log(f"  {processes} processes done")
  return [json.loads((directory / f"process{i}.json").read_text())
          for i in range(processes)]


def compile_across(processes: int, layouts: Sequence[tuple[int, int]],
                   worker_args: Callable[[list[tuple[int, int]]], list[str]],
                   timeout_s: float, log: Callable[[str], None]
                   ) -> list[list[dict[str, Any]]]:
  """Every layout compiled by `processes` processes; per cluster (one per
  device count) the reports of all its processes."""
  clusters = []
  with tempfile.TemporaryDirectory(prefix="scale_plan_hosts_") as tmp:
    for devices, group in device_groups(layouts, processes).items():
      directory = pathlib.Path(tmp) / f"devices{devices}"
      directory.mkdir()
      log(f"compiling {','.join(f'{d}x{m}' for d, m in group)} across "
          f"{processes} processes x {devices // processes} devices ...")
      clusters.append(run_cluster(processes, devices // processes,
                                  worker_args(group), directory, timeout_s,
                                  log))
  return clusters


def compare(one_process: list[dict], clusters: list[list[dict]]
            ) -> tuple[list[dict], list[dict]]:
  """(process 0's result rows, one comparison row per multi-process compile).

  A comparison row has both compiles' memory figures (`one`, `multi`),
  `peak_diff_bytes` (multi - one) and `processes_agree`: every process of
  the cluster got the same memory figures as process 0.
  """
  ones = {tuple(r[k] for k in KEY): r for r in one_process
          if "peak_bytes" in r}
  rows, table = [], []
  for reports in clusters:
    per_process = [rep["results"] for rep in reports]
    for i, r in enumerate(per_process[0]):
      rows.append(r)
      one = ones.get(tuple(r[k] for k in KEY))
      entry = {k: r[k] for k in KEY}
      entry.update(
          processes=r["processes"], local_devices=r["local_devices"],
          # What process 0 ran with: all processes' devices, and XLA_FLAGS
          # (the launcher's device count, scale_plan's codegen flags).
          global_devices=reports[0]["simulated_devices"],
          xla_flags=reports[0]["xla_flags"],
          processes_agree=all(
              other[i][k] == r[k] for other in per_process[1:]
              for k in MEMORY_KEYS),
          multi={k: r[k] for k in MEMORY_KEYS + ("compile_s",)},
          one={k: one[k] for k in MEMORY_KEYS + ("compile_s",)}
          if one else None,
          peak_diff_bytes=r["peak_bytes"] - one["peak_bytes"]
          if one else None)
      table.append(entry)
  return rows, table


def print_table(table: list[dict]) -> None:
  """Per-device memory, one process vs N, side by side."""
  if not table:
    return
  mib = lambda b: f"{b / 2**20:9.2f}M"
  print("per-device memory, one process vs across processes "
        "(XLA:CPU memory_analysis; M = MiB):")
  print(f"{'kind':8} {'layout':>7} {'p':>1} {'remat':>11} {'procs':>9} "
        f"{'args 1':>10} {'args N':>10} {'temp 1':>10} {'temp N':>10} "
        f"{'peak 1':>10} {'peak N':>10} {'N - 1':>10} {'compile 1/N':>12} "
        f"{'procs agree':>11}")
  for t in table:
    one, multi = t["one"], t["multi"]
    if one is None:
      one = dict.fromkeys(MEMORY_KEYS + ("compile_s",), float("nan"))
    print(f"{t['kind']:8} {t['data']:>3}x{t['model']:<3} {t['param_dims']} "
          f"{t['remat_policy'][:11]:>11} "
          f"{t['processes']:>3}x{t['local_devices']:<3}dev "
          f"{mib(one['argument_bytes'])} {mib(multi['argument_bytes'])} "
          f"{mib(one['temp_bytes'])} {mib(multi['temp_bytes'])} "
          f"{mib(one['peak_bytes'])} {mib(multi['peak_bytes'])} "
          f"{mib(multi['peak_bytes'] - one['peak_bytes'])} "
          f"{one['compile_s']:5.1f}/{multi['compile_s']:<5.1f}s "
          f"{'yes' if t['processes_agree'] else 'NO':>11}")
