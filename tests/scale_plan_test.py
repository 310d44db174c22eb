"""benchmarks/scale_plan.py on tiny.gin: the pod plan's figures and checks.

The full-size plan (rembert.gin on 8-64 simulated devices) is a benchmark
(docs/PERFORMANCE.md); here the same code runs on the tiny model: once as
the script in a subprocess (its own XLA_FLAGS, a real AOT compile), and
in-process without compiling for the replicated-vocabulary check; and once
with `--processes 2` (a 2 x 2 layout compiled by 2 processes of one JAX
cluster beside the one-process compile).
"""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import scale_plan
from benchmarks import scale_plan_hosts
from tests import test_utils

TINY = "gin_configs/models/tiny.gin"
SMALL_STEP = ["--config", TINY, "--batch", "8", "--seq_len", "16",
              "--finetune_batch", "4", "--finetune_seq_len", "16",
              "--rows_per_shard", "2"]


@pytest.mark.slow  # three AOT compiles in a subprocess: ~70 s on the shared 2 cores
def test_script_compiles_the_tiny_step_and_reports_per_device_figures():
  out = subprocess.run(
      [sys.executable, "benchmarks/scale_plan.py", *SMALL_STEP,
       "--layouts", "1x2", "--policies", "full", "--finetune_policies", "",
       "--flops_model_axes", "2", "--json"],
      cwd=test_utils.REPO_ROOT, capture_output=True, text=True, timeout=600,
      check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  report = json.loads(out.stdout.strip().splitlines()[-1])
  assert "--xla_force_host_platform_device_count=64" in report["xla_flags"]
  assert report["simulated_devices"] == 64
  (r,) = report["results"]
  assert (r["kind"], r["data"], r["model"], r["remat_policy"]) == (
      "pretrain", 1, 2, "full")
  assert r["scan_layers"] and r["dtype"] == "bfloat16"
  # 8 rows on one data shard, 2 at a time: 4 accumulated micro-batches.
  assert (r["rows_per_data_shard"], r["accum_steps"]) == (2, 4)
  # Each device holds half of every model-split matrix, and AdamW's two
  # moments are sharded like the params (+ a few replicated counters).
  full = 4 * report["params"]
  assert full / 2 < r["param_bytes"] < full
  assert 2 * r["param_bytes"] <= r["opt_bytes"] < 2 * r["param_bytes"] + 64
  # The donated state is an argument, an output and aliased between them.
  state = r["param_bytes"] + r["opt_bytes"]
  assert r["argument_bytes"] >= state and r["alias_bytes"] >= state
  assert r["temp_bytes"] > 0 and r["compile_s"] > 0
  assert r["peak_bytes"] == (r["argument_bytes"] + r["output_bytes"]
                             - r["alias_bytes"] + r["temp_bytes"])
  # The compiled FLOPs (layers extrapolated, accumulation multiplied) are
  # our matmul count plus element-wise work and the remat recomputation.
  assert 1.0 < r["compiled_flops"] / r["model_flops"] < 2.0
  assert r["cost_analysis_flops"] < r["compiled_flops"]  # loops counted once
  # The fit verdicts follow the compiled peak.
  assert (r["fits_v3"], r["fits_v4"]) == ("yes", "yes")
  assert report["summary"]["fits_16gib"] == ["pretrain 1x2 1-D full"]
  assert report["checks"]["fits_v3_core"]["pass"]
  assert report["checks"]["vocab_not_replicated"]["pass"]
  assert r["vocab_replicated"] == []
  assert "check vocab_not_replicated: PASS" in out.stdout
  # Nothing compiled on a v3-64 / v4-64's device count: no plan rows.
  assert report["plan"] == []


# Two processes x 2 devices of one JAX cluster (multihost_launch, gloo), and
# the parent's own one-process compile: three tiny compiles and three jax +
# seqio imports (~30 s each here), two of them at once: 2-2.5 min on the shared
# 2 cores, too long for the suite's budget. It runs with the other
# several-process checks: MULTIHOST_CASES=all (scripts/t5x_multihost_smoke.sh).
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MULTIHOST_CASES") != "all",
                    reason="2-2.5 min: set MULTIHOST_CASES=all (the "
                    "multi-host smoke script does)")
def test_layout_compiled_across_processes_needs_the_same_memory_per_device():
  out = subprocess.run(
      [sys.executable, "benchmarks/scale_plan.py", *SMALL_STEP,
       "--layouts", "2x2", "--policies", "full", "--finetune_policies", "",
       "--flops_model_axes", "", "--processes", "2",
       "--processes_timeout", "600", "--json"],
      cwd=test_utils.REPO_ROOT, capture_output=True, text=True, timeout=900,
      check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  report = json.loads(out.stdout.strip().splitlines()[-1])
  one, multi = report["results"]
  assert (one["processes"], one["local_devices"]) == (1, 4)
  assert (multi["processes"], multi["local_devices"]) == (2, 2)
  (row,) = report["across_processes"]
  assert (row["kind"], row["data"], row["model"], row["remat_policy"]) == (
      "pretrain", 2, 2, "full")
  # Each process joined the cluster with the launcher's 2 devices (the
  # script kept them instead of its own 64), and kept the cheap codegen.
  assert row["global_devices"] == 4
  flags = row["xla_flags"].split()
  assert "--xla_force_host_platform_device_count=2" in flags
  assert set(scale_plan.CHEAP_CODEGEN_FLAGS) <= set(flags)
  assert row["processes_agree"]  # process 1 compiled the same figures
  # memory_analysis() is per device, not summed over a process's devices:
  # the arguments are one device's shard of the state (+ its batch rows).
  state = multi["param_bytes"] + multi["opt_bytes"]
  assert state <= multi["argument_bytes"] < 2 * state
  # Equal to the byte: the SPMD partitioner emits the same per-device module
  # for the same mesh shape and shardings, whichever process owns a device;
  # where a collective's peers live is the runtime's business (gloo between
  # processes, in-process rendezvous within one), not buffer assignment's.
  for key in scale_plan_hosts.MEMORY_KEYS:
    assert multi[key] == one[key] == row["multi"][key] == row["one"][key], key
  assert row["peak_diff_bytes"] == 0
  assert "per-device memory, one process vs across processes" in out.stdout


def test_processes_need_layouts_that_split_evenly():
  with pytest.raises(SystemExit, match="layout 3x1 has 3 devices, not a "
                     "multiple of the process count"):
    scale_plan_hosts.device_groups([(2, 2), (3, 1)], 2)
  assert scale_plan_hosts.device_groups([(8, 2), (4, 4), (4, 2)], 2) == {
      16: [(8, 2), (4, 4)], 8: [(4, 2)]}
  with pytest.raises(SystemExit, match="--processes: a count >= 1, with "
                     "--layouts"):
    scale_plan.main([*SMALL_STEP, "--processes", "2"])


def test_worker_arguments_repeat_the_step():
  """A --processes worker parses to the parent's step, for its layouts."""
  parser_args = [*SMALL_STEP, "--layouts", "2x2,4x1", "--policies",
                 "none,full", "--rules", "vocab=", "--no_scan",
                 "--param_dims", "1,2", "--processes", "2"]
  # pylint: disable=protected-access
  parent = scale_plan._parse(parser_args)
  worker = scale_plan._parse(scale_plan._worker_args(parent, [(2, 2)]))
  for name in ("config", "policies", "finetune_policies", "param_dims",
               "rules", "no_scan", "dtype", "batch", "seq_len",
               "finetune_batch", "finetune_seq_len", "rows_per_shard", "mfu"):
    assert getattr(worker, name) == getattr(parent, name), name
  assert worker.layouts == [(2, 2)] and worker.flops_model_axes == []
  assert not worker.processes


def test_replicated_check_catches_an_unpartitioned_vocabulary():
  report = scale_plan.main([*SMALL_STEP, "--layouts", "1x2,2x1",
                            "--rules", "vocab=", "--no_compile"])
  check = report["checks"]["vocab_not_replicated"]
  assert not check["pass"]
  by_layout = {(r["kind"], r["data"], r["model"]): r
               for r in report["results"]}
  # Word embeddings [vocab, E_in] and the MLM decoder's vocab-sized
  # parameters are whole on each of the two model shards ...
  names = by_layout["pretrain", 1, 2]["vocab_replicated"]
  assert "encoder/embeddings/word_embeddings/embedding" in names
  assert {"mlm_head/decoder/kernel", "mlm_head/decoder/bias"} <= set(names)
  assert "1x2: encoder/embeddings/word_embeddings/embedding" in check["what"]
  # ... and a model axis of 1 replicates everything by design: not flagged.
  assert "2x1" not in check["what"]
  # With the run files' rules the same layout splits them.
  ok = scale_plan.main([*SMALL_STEP, "--layouts", "1x2", "--no_compile"])
  assert ok["checks"]["vocab_not_replicated"]["pass"]
  assert (ok["results"][0]["param_bytes"]
          < by_layout["pretrain", 1, 2]["param_bytes"])


@pytest.mark.parametrize("flag, value, message", [
    ("--layouts", "4by2", "--layouts: '4by2' is not DATAxMODEL"),
    ("--rules", "vocab=pipeline", "--rules: 'vocab=pipeline' must be"),
    ("--policies", "sometimes", "--policies: unknown ['sometimes']"),
])
def test_bad_flags_are_one_clear_error(flag, value, message):
  args = [*SMALL_STEP, "--no_compile", flag, value]
  if flag != "--layouts":
    args += ["--layouts", "1x2"]
  with pytest.raises(SystemExit, match=message.replace("[", r"\[")):
    scale_plan.main(args)


def test_default_grid_covers_8_to_64_devices_and_both_kinds():
  devices = {e.data * e.model for e in scale_plan.DEFAULT_GRID}
  assert devices == {8, 16, 32, 64}
  assert {e.kind for e in scale_plan.DEFAULT_GRID} == {"pretrain", "finetune"}
  assert {e.policy for e in scale_plan.DEFAULT_GRID} == {
      "none", "dots_with_no_batch_dims_saveable", "full"}
  # Every model axis divides the padded 250,368-row vocabulary and 18 heads
  # x 64 = 1152 (the joined q/k/v width), so nothing falls back to
  # replication on these layouts.
  for e in scale_plan.DEFAULT_GRID:
    assert 250_368 % e.model == 0 and 1152 % e.model == 0, e
