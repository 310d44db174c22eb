r"""Pod plan: per-device memory, compile time and FLOPs of the real train step.

  python benchmarks/scale_plan.py --json --out plan.json  # rembert.gin
  python benchmarks/scale_plan.py --layouts 8x8,32x2 --policies none,full
  python benchmarks/scale_plan.py --config gin_configs/models/tiny.gin \
      --layouts 2x2 --batch 16 --seq_len 32 --finetune_batch 8 \
      --finetune_seq_len 32 --rows_per_shard 4
  python benchmarks/scale_plan.py --layouts 8x2 --finetune_policies '' \
      --flops_model_axes '' --processes 2   # also across 2 processes x 8

No TPU is needed. The script simulates a pod slice with CPU devices
(`--xla_force_host_platform_device_count`, set below before jax starts) and,
for every `data x model` layout, ahead-of-time lowers and compiles the real
training step of the local runner (`train_lib.make_train_step`: forward,
backward, clipping, AdamW update, donated state; the same optimizer and
logical axis rules as the T5X run files) on `jax.ShapeDtypeStruct`s, so no
parameter or batch is ever allocated. Per device it reports

* parameter and optimizer-state bytes (from the shardings of every leaf),
* what XLA's buffer assignment needs (`compiled.memory_analysis()`:
  arguments, outputs, temporaries; peak = arguments + outputs - aliased
  (donated) + temporaries),
* which parameters stay replicated on the model axis, and why,
* compile time, and the compiled FLOPs (`compiled.cost_analysis()`)
  against our own matmul FLOP count (`flop_model.train_step_flops`),

for pre-training (paper Table 14: batch 2048 x 512, AdamW; the MLM head at
80 positions per row, as `pretrain_mlm.gin`) and a fine-tuning step (SQuAD
QA at Table 15's batch 128, 384 tokens), under each remat policy. Each
layout gets the whole global batch: a data shard computes `--rows_per_shard`
rows at a time (what one device is assumed to hold; every device of a shard
sees its rows) and accumulates gradients over the rest, as T5X's
microbatching does. From the FLOP count and an assumed utilisation it plans
the step time and the days of the paper's 1.76M steps on TPU v3-64 and
v4-64; every assumption is printed.

The memory figures are those of XLA:CPU's compiler for the partitioned
program, not of XLA:TPU (whose fusion, layouts and rematerialisation
differ): treat them as a plan, not as a measurement on TPU.

`--processes N` (with `--layouts`) asks whether a multi-host program needs
the same memory per device: after the one-process compiles, each layout is
compiled again by N processes of one JAX cluster on this machine, started
through `rembert_t5x.tools.multihost_launch` with data*model/N simulated
devices each, the mesh spanning all of them
(`benchmarks/scale_plan_hosts.py`).
Those rows carry `processes` N in the table, and a second table puts each
beside the one-process compile of the same layout (memory_analysis is per
device in both; the JSON's `across_processes` has every figure). The FLOPs
compiles run in one process only. Run under the launcher, the script keeps
the launcher's device count (see the `__main__` block below).
"""

import os
import sys

# XLA:CPU's LLVM code generation, cut to its cheapest setting: nothing is
# ever run, and the HLO passes, buffer assignment and cost analysis that the
# plan reads come before code generation (tiny.gin: memory and FLOP figures
# identical with and without these flags, compile CPU time halved; rembert.gin
# at 4x2, full remat: the same 12.04 GiB peak).
CHEAP_CODEGEN_FLAGS = ("--xla_backend_optimization_level=0",
                       "--xla_llvm_disable_expensive_passes=true")

if __name__ == "__main__":
  # Before jax starts its backend: XLA parses XLA_FLAGS once, when the
  # first backend is made (the first `jax.devices()`), not at `import jax`
  # nor in `jax.distributed.initialize`. Run as a script: enough simulated
  # devices for the largest layout. Run as one process of a cluster
  # (`--processes`: multihost_launch joined it, then ran this module as
  # __main__): the launcher set this process's device count and a layout
  # spans all processes, so the count is left alone. Either way the
  # cheap-codegen flags are added, and apply (checked: a flag added here
  # under the launcher still reaches XLA).
  _in_cluster = ("jax" in sys.modules
                 and sys.modules["jax"].distributed.is_initialized())
  _flags = os.environ.get("XLA_FLAGS", "").split()
  if not _in_cluster:
    _flags = [f for f in _flags
              if not f.startswith("--xla_force_host_platform_device_count")]
    _flags.append("--xla_force_host_platform_device_count=64")
  os.environ["XLA_FLAGS"] = " ".join(
      _flags + [f for f in CHEAP_CODEGEN_FLAGS if f not in _flags])
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses  # pylint: disable=g-import-not-at-top,wrong-import-position
import functools
import json
import math
import pathlib
import time
from typing import Any, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import flax.linen as nn  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import flops as flop_model
from benchmarks import scale_plan_hosts
from rembert_t5x import configs
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import partitioning
from rembert_t5x.runner import train_lib

P = jax.sharding.PartitionSpec
GIB = 2**30
DEFAULT_CONFIG = "gin_configs/models/paper/rembert.gin"

# Pre-training (paper Table 14), as gin_configs/runs/pretrain_mlm.gin sets it.
_RUN = configs.run_file_macros("pretrain_mlm.gin")
PRETRAIN = dict(batch=_RUN["BATCH_SIZE"],
                seq_len=_RUN["TASK_FEATURE_LENGTHS"]["input_tokens"],
                max_predictions=80, learning_rate=_RUN["LEARNING_RATE"],
                train_steps=_RUN["TRAIN_STEPS"],
                warmup_steps=_RUN["WARMUP_STEPS"])
# Fine-tuning: SQuAD-trained QA at RemBERT's batch (Table 15) and
# finetune_xquad.gin's 384 tokens, the longest fine-tuning rows we run.
FINETUNE = dict(batch=128, seq_len=384, learning_rate=9e-6, train_steps=8311,
                warmup_steps=831)


@dataclasses.dataclass(frozen=True)
class Tpu:
  """One TPU generation, as a plan needs it (public spec sheets)."""

  name: str
  peak_bf16_per_chip: float  # FLOP/s
  devices_per_chip: int  # JAX devices: v3 shows each core, v4 each chip
  hbm_per_device: float  # bytes
  pod_devices: int  # devices in the "-64" slice (64 TensorCores)


# v3: 123 TFLOP/s bf16 per chip, 2 TensorCores of 16 GiB HBM each; v3-64 =
# 32 chips = 64 JAX devices. v4: 275 TFLOP/s bf16 per chip, 32 GiB HBM, one
# JAX device per chip (megacore); v4-64 = 32 chips = 32 devices.
TPUS = (Tpu("v3-64", 123e12, 2, 16 * GIB, 64),
        Tpu("v4-64", 275e12, 1, 32 * GIB, 32))


@dataclasses.dataclass(frozen=True)
class Entry:
  """One compile: a step kind on a data x model mesh under a remat policy."""

  kind: str  # "pretrain" or "finetune"
  data: int
  model: int
  param_dims: int  # T5X's PARAMETER_PARTITIONING_DIMS
  policy: str  # network.REMAT_POLICIES


# The default plan, chosen to finish in about 30 minutes on a shared 2-core
# machine (one full-size compile: ~30 s of CPU, ~1.6 GB RSS; see
# docs/PERFORMANCE.md). With 1-D parameter partitioning a device's memory
# depends on the model axis and the rows per data shard, not on the number of
# data shards, so every device count is compiled at model 2 and the larger
# model axes once each; the three remat policies are compared at 8 devices
# (where the FLOPs compiles also run), 2-D partitioning at 64.
DEFAULT_GRID = (
    [Entry("pretrain", 4, 2, 1, p) for p in
     ("none", "dots_with_no_batch_dims_saveable", "full")]
    + [Entry("pretrain", d, 2, 1, "full") for d in (8, 16, 32)]
    + [Entry("pretrain", 4, 8, 1, "full"), Entry("pretrain", 8, 8, 1, "full"),
       Entry("pretrain", 4, 16, 1, "full"),
       Entry("pretrain", 32, 2, 2, "full"), Entry("pretrain", 8, 8, 2, "full")]
    + [Entry("finetune", 4, 2, 1, p) for p in ("none", "full")]
    + [Entry("finetune", 32, 2, 1, "none")])
# Model axes on which the FLOPs compiles run (two small compiles per kind and
# policy); elsewhere the remat overhead is taken from these.
DEFAULT_FLOPS_MODEL_AXES = (2,)

def _ints(s: str) -> list[int]:
  return [int(x) for x in s.split(",") if x.strip()]


def _layouts(s: str) -> list[tuple[int, int]]:
  """"4x2,8x8" -> [(4, 2), (8, 8)] (data x model)."""
  out = []
  for item in (x.strip() for x in s.split(",") if x.strip()):
    try:
      data, model = (int(v) for v in item.lower().split("x"))
    except ValueError:
      raise SystemExit(
          f"--layouts: {item!r} is not DATAxMODEL (e.g. 4x2)") from None
    out.append((data, model))
  return out


def grid(layouts: list[tuple[int, int]], policies: list[str],
         param_dims: list[int], finetune_policies: list[str]) -> list[Entry]:
  """Every layout x param dims x policy (pre-training), and fine-tuning
  under `finetune_policies`."""
  out = []
  for dims in param_dims:
    for data, model in layouts:
      out += [Entry("pretrain", data, model, dims, p) for p in policies]
      out += [Entry("finetune", data, model, dims, p)
              for p in finetune_policies]
  return out


def override_rules(rules: list, overrides: str) -> list:
  """`rules` with some logical axes remapped: "vocab=,mlp=model".

  An empty mesh axis leaves that logical axis unpartitioned (what a run
  whose rules forget an axis does: flax replicates it).
  """
  out = list(rules)
  for item in (x.strip() for x in overrides.split(",") if x.strip()):
    name, sep, axis = item.partition("=")
    if not sep or axis not in ("", "data", "model"):
      raise SystemExit(f"--rules: {item!r} must be NAME=, NAME=data or "
                       "NAME=model")
    out = [(n, a) for n, a in out if n != name] + [(name, axis or None)]
  return out


def accumulation(batch: int, data: int, rows_per_shard: int
                 ) -> tuple[int, int]:
  """(micro-batch rows per data shard, accumulation steps) for a layout.

  Every device of a data shard sees the shard's rows (the standard rules
  split activations over "data" only, and their mlp/heads dims over
  "model"), so what one device holds is set by the rows per shard: at most
  `rows_per_shard` at a time, the rest of the global batch accumulated.
  """
  if batch % data:
    raise ValueError(f"batch {batch} is not divisible by the data axis {data}")
  per_shard = batch // data
  rows = min(rows_per_shard, per_shard)
  if per_shard % rows:
    raise ValueError(f"{per_shard} rows per data shard are not divisible by "
                     f"--rows_per_shard {rows}")
  return rows, per_shard // rows


def _bytes_per_device(tree, shardings) -> int:
  """Bytes one device holds of `tree` (ShapeDtypeStructs) under `shardings`."""
  total = 0
  for x, s in zip(jax.tree_util.tree_leaves(tree),
                  jax.tree_util.tree_leaves(shardings)):
    total += math.prod(s.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize
  return total


def replicated_params(abstract_params, params_axes, shardings, mesh, rules
                      ) -> list[dict[str, Any]]:
  """Parameters with no dimension split over "model" (model axis >= 2).

  `reason` says why: "indivisible" when a logical axis maps to "model" but
  the mesh axis does not divide that dimension (the runner then replicates
  it), "no model axis" when no logical axis of it maps to "model" (by the
  rules: LayerNorms, biases over embed, position tables, ...).
  """
  if mesh.shape["model"] < 2:
    return []
  logical = train_lib.logical_specs(params_axes)
  wanted = nn.logical_to_mesh_sharding(logical, mesh, rules)
  flat = jax.tree_util.tree_flatten_with_path(abstract_params)[0]
  out = []
  for (path, x), s, w in zip(flat, jax.tree_util.tree_leaves(shardings),
                             jax.tree_util.tree_leaves(wanted)):
    if "model" in jax.tree_util.tree_leaves(tuple(s.spec)):
      continue
    name = "/".join(str(getattr(k, "key", k)) for k in path)
    want = "model" in jax.tree_util.tree_leaves(tuple(w.spec))
    out.append({"name": name, "shape": list(x.shape),
                "bytes": math.prod(x.shape) * np.dtype(x.dtype).itemsize,
                "reason": "indivisible" if want else "no model axis"})
  return sorted(out, key=lambda r: -r["bytes"])


def _batch_specs(kind: str, rows: int, seq_len: int, sharding) -> dict:
  tokens = lambda dtype=jnp.int32: jax.ShapeDtypeStruct(  # pylint: disable=g-long-lambda
      (rows, seq_len), dtype, sharding=sharding)
  batch = {k: tokens() for k in ("input_tokens", "token_types",
                                 "segment_ids", "positions")}
  if kind == "pretrain":
    batch.update(targets=tokens(), weights=tokens(jnp.float32))
  else:
    row = jax.ShapeDtypeStruct((rows,), jnp.int32, sharding=sharding)
    batch.update(start_positions=row, end_positions=row)
  return batch


def _model(kind: str, cfg: network.RemBertConfig, max_predictions: int):
  if kind == "pretrain":
    return models.RemBertMLMModel(network.RemBertForMaskedLM(cfg),
                                  max_predictions_per_seq=max_predictions)
  return models.RemBertQAModel(network.RemBertForQuestionAnswering(cfg))


def compile_step(entry: Entry, cfg: network.RemBertConfig, batch: int,
                 seq_len: int, rows_per_shard: int, settings: dict,
                 rules: list, compile_it: bool = True) -> dict[str, Any]:
  """AOT-lowers and compiles one train step; returns its per-device figures.

  Everything is a `jax.ShapeDtypeStruct` with its sharding: no parameter,
  optimizer moment or batch is allocated. Without `compile_it` only the
  shardings are worked out (bytes per device, replicated parameters).
  """
  kind, data, model = entry.kind, entry.data, entry.model
  mesh = train_lib.make_mesh((data, model),
                             devices=jax.devices()[:data * model])
  rows, accum = accumulation(batch, data, rows_per_shard)
  net = _model(kind, cfg, settings.get("max_predictions"))
  tx, schedule = train_lib.make_optimizer(
      settings["learning_rate"], settings["train_steps"],
      settings["warmup_steps"])
  abstract = jax.eval_shape(
      lambda r: net.get_initial_variables(r, {"input_tokens": (1, seq_len)}),
      jax.random.PRNGKey(0))
  p_shard = train_lib.param_shardings(abstract["params_axes"], mesh, rules,
                                      shapes=abstract["params"])
  params = jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      abstract["params"], p_shard)
  # The moments sharded like the params, as `train_lib.init_train_state`.
  o_shard = train_lib.opt_state_shardings(tx, params, p_shard, mesh)
  opt = jax.tree_util.tree_map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      jax.eval_shape(tx.init, params), o_shard)
  reps = replicated_params(abstract["params"], abstract["params_axes"],
                           p_shard, mesh, rules)
  vocab_rows = {cfg.vocab_size, cfg.padded_vocab_size}
  if kind == "pretrain":
    ours = flop_model.train_step_flops(cfg, batch, seq_len,
                                   settings["max_predictions"])
  else:  # the encoder (no MLM head, no pre-training-only layers)
    ours = flop_model.train_step_flops(
        dataclasses.replace(cfg, num_pretraining_only_layers=0), batch,
        seq_len, head_positions=0)
  out = {
      "kind": kind, "devices": data * model, "data": data, "model": model,
      # Processes the program spans, and the layout's devices in this one.
      "processes": jax.process_count(),
      "local_devices": sum(d.process_index == jax.process_index()
                           for d in mesh.devices.flat),
      "param_dims": entry.param_dims,
      "remat_policy": cfg.remat_policy, "scan_layers": cfg.scan_layers,
      "dtype": str(jnp.dtype(cfg.dtype)),
      "global_batch": batch, "seq_len": seq_len,
      "rows_per_data_shard": rows, "accum_steps": accum,
      "param_bytes": _bytes_per_device(params, p_shard),
      "opt_bytes": _bytes_per_device(opt, o_shard),
      "model_flops": ours / (data * model),
      # Largest first; the vocabulary matrices are what the check is about.
      "replicated": reps[:6],
      "replicated_bytes": sum(r["bytes"] for r in reps),
      "replicated_count": len(reps),
      "vocab_replicated": [r["name"] for r in reps
                           if vocab_rows & set(r["shape"])],
  }
  if not compile_it:
    return out
  replicated = jax.sharding.NamedSharding(mesh, P())
  state = train_lib.TrainState(
      step=jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated),
      params=params, opt_state=opt)
  state_shardings = jax.tree_util.tree_map(lambda x: x.sharding, state)
  data_sharding = train_lib.batch_sharding(mesh)
  # The whole global batch: the step splits it into `accum` micro-batches.
  batch_specs = _batch_specs(kind, batch, seq_len, data_sharding)
  step = train_lib.make_train_step(net, tx, schedule, grad_accum_steps=accum)
  jitted = jax.jit(step, in_shardings=(state_shardings, data_sharding, None),
                   out_shardings=(state_shardings, None), donate_argnums=(0,))
  rng = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)
  tick = time.perf_counter()
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    lowered = jitted.lower(state, batch_specs, rng)
  lower_s = time.perf_counter() - tick
  tick = time.perf_counter()
  compiled = lowered.compile()
  compile_s = time.perf_counter() - tick
  mem = compiled.memory_analysis()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  out.update(
      argument_bytes=mem.argument_size_in_bytes,
      output_bytes=mem.output_size_in_bytes,
      alias_bytes=mem.alias_size_in_bytes,
      temp_bytes=mem.temp_size_in_bytes,
      # Donated state is aliased into the outputs: counted once.
      peak_bytes=(mem.argument_size_in_bytes + mem.output_size_in_bytes
                  - mem.alias_size_in_bytes + mem.temp_size_in_bytes),
      lower_s=lower_s, compile_s=compile_s,
      # Loop bodies (the layer scan, the accumulation) counted once: see
      # `layer_flops` for the step's real FLOPs.
      cost_analysis_flops=float(cost.get("flops", float("nan"))),
      compiled_flops=None)
  return out


@functools.lru_cache(maxsize=None)
def layer_flops(kind: str, cfg: network.RemBertConfig, model: int, rows: int,
                seq_len: int, settings: tuple) -> float:
  """Compiled per-device FLOPs of one micro-batch of `rows` rows, no loops.

  XLA's cost analysis counts a loop body once, whatever its trip count
  (checked on tiny.gin: a scanned 4-layer step reports 100 MFLOP, the
  unscanned one 235), so the scanned step and the accumulation loop
  under-report. The FLOPs are linear in the number of layers: we compile
  the unscanned step without accumulation at 1 and 2 layers (small
  programs), take the difference as one layer and extrapolate to the
  config's depth. One data shard (a `1 x model` mesh) suffices: a device's
  FLOPs do not depend on how many shards there are. The optimizer update
  (~10 FLOPs per parameter, under 0.1% of a step) is then counted once
  per micro-batch instead of once per step.
  """
  depth = (cfg.num_pretraining_layers if kind == "pretrain"
           else cfg.num_layers)
  figures = []
  for layers in (1, 2):
    small = dataclasses.replace(cfg, num_layers=layers,
                                num_pretraining_only_layers=0,
                                scan_layers=False)
    r = compile_step(Entry(kind, 1, model, 1, cfg.remat_policy), small, rows,
                     seq_len, rows, dict(settings),
                     partitioning.logical_axis_rules())
    figures.append(r["cost_analysis_flops"])
  one, two = figures
  return one + (depth - 1) * (two - one)


def remat_overhead(r: dict, results: list[dict]) -> float:
  """Compiled FLOPs of `r`'s policy over those without remat (same kind),
  at the same model axis if measured there, else at any; 1 if unmeasured."""
  def measured(policy):
    same = [x for x in results if x["kind"] == r["kind"]
            and x["remat_policy"] == policy and x.get("compiled_flops")]
    same.sort(key=lambda x: x["model"] != r["model"])
    return same[0] if same else None
  this, base = measured(r["remat_policy"]), measured("none")
  if not this or not base or this["model"] != base["model"]:
    return 1.0
  return this["compiled_flops"] / base["compiled_flops"]


def plan(results: list[dict], mfu: float, train_steps: int) -> list[dict]:
  """Planned pre-training step time and days on each TPU slice.

  For each compiled pre-training layout with as many devices as the slice
  has, the step time is the model FLOPs of a step over the slice's bf16
  peak at the assumed MFU (`mfu`, for a step without remat), times the
  remat policy's compiled-FLOPs overhead (`remat_overhead`).
  """
  rows = []
  pre = [r for r in results if r["kind"] == "pretrain" and "peak_bytes" in r]
  for tpu in TPUS:
    chips = tpu.pod_devices // tpu.devices_per_chip
    for r in (r for r in pre if r["devices"] == tpu.pod_devices):
      overhead = remat_overhead(r, results)
      step_flops = r["model_flops"] * r["devices"]
      step_s = step_flops / (chips * tpu.peak_bf16_per_chip * mfu) * overhead
      rows.append({
          "tpu": tpu.name, "chips": chips, "data": r["data"],
          "model": r["model"], "param_dims": r["param_dims"],
          "remat_policy": r["remat_policy"],
          "peak_gib": r["peak_bytes"] / GIB,
          "fits": r["peak_bytes"] <= tpu.hbm_per_device,
          "remat_overhead": overhead, "step_s": step_s,
          "days": step_s * train_steps / 86400,
      })
  return rows


def _short(policy: str) -> str:
  return {"dots_with_no_batch_dims_saveable": "dots_no_bat"}.get(policy,
                                                                 policy)


def _fmt_replicated(r: dict) -> str:
  if r["model"] < 2:
    return "all (model=1)"
  text = f"{r['replicated_count']} ({r['replicated_bytes'] / 2**20:.0f} MiB)"
  if r["vocab_replicated"]:
    text += "; VOCAB: " + ", ".join(r["vocab_replicated"])
  return text


def print_report(report: dict) -> None:
  """The human-readable tables (stdout)."""
  a = report["assumptions"]
  print(f"config {report['config']}: {report['params']:,} params; "
        f"{a['dtype']} activations, float32 params and AdamW moments; "
        f"scan_layers={a['scan_layers']}")
  print(f"simulated: {report['simulated_devices']} XLA:CPU devices; "
        f"memory = XLA:CPU buffer assignment of the partitioned step "
        f"(per device)")
  gib = lambda b: f"{b / GIB:6.2f}G" if b is not None else "      -"
  print(f"{'kind':8} {'layout':>7} {'p':>1} {'remat':>11} {'procs':>5} "
        f"{'rows x acc':>10} "
        f"{'param+opt':>9} {'args':>7} {'temp':>7} {'peak':>7} "
        f"{'v3 16G':>6} {'v4 32G':>6} {'compile':>7} {'FLOPs/dev':>9} "
        f"{'vs ours':>7}  replicated on model axis")
  for r in report["results"]:
    compiled = "peak_bytes" in r
    fl = r.get("compiled_flops")
    print(f"{r['kind']:8} {r['data']:>3}x{r['model']:<3} {r['param_dims']} "
          f"{_short(r['remat_policy']):>11} {r.get('processes', 1):>5} "
          f"{r['rows_per_data_shard']:>5}x{r['accum_steps']:<4} "
          f"{gib(r['param_bytes'] + r['opt_bytes']):>9} "
          f"{gib(r.get('argument_bytes'))} {gib(r.get('temp_bytes'))} "
          f"{gib(r.get('peak_bytes'))} "
          f"{r.get('fits_v3', '-'):>6} {r.get('fits_v4', '-'):>6} "
          + (f"{r['compile_s']:6.1f}s " if compiled else f"{'-':>7} ")
          + (f"{fl / 1e12:8.2f}T {fl / r['model_flops']:6.2f}x  " if fl
             else f"{'-':>9} {'-':>7}  ")
          + _fmt_replicated(r))
  scale_plan_hosts.print_table(report.get("across_processes", []))
  print("assumptions:")
  for k, v in a.items():
    print(f"  {k}: {v}")
  if report["plan"]:
    print(f"{'tpu':6} {'layout':>7} {'p':>1} {'remat':>11} {'peak':>7} "
          f"{'fits':>4} {'remat x':>7} {'step':>7} {'days':>6}")
  for p in report["plan"]:
    print(f"{p['tpu']:6} {p['data']:>3}x{p['model']:<3} {p['param_dims']} "
          f"{_short(p['remat_policy']):>11} {p['peak_gib']:6.2f}G "
          f"{'yes' if p['fits'] else 'no':>4} {p['remat_overhead']:6.2f}x "
          f"{p['step_s']:6.2f}s {p['days']:6.1f}")
  for k, v in report["summary"].items():
    print(f"{k}: {v}")
  for name, c in report["checks"].items():
    print(f"check {name}: {'PASS' if c['pass'] else 'FAIL'} ({c['what']})")
  print(f"wall {report['wall_s']:.0f} s")


def summarize(results: list[dict], plan_rows: list[dict]) -> dict[str, Any]:
  """Which layouts fit, the fastest fitting plan per TPU."""
  out: dict[str, Any] = {}
  for tpu in TPUS:
    out[f"fits_{tpu.hbm_per_device // GIB}gib"] = [
        f"{r['kind']} {r['data']}x{r['model']} {r['param_dims']}-D "
        f"{r['remat_policy']}" for r in results
        if r.get("peak_bytes", math.inf) <= tpu.hbm_per_device]
  for tpu in TPUS:
    fitting = [p for p in plan_rows if p["tpu"] == tpu.name and p["fits"]]
    best = min(fitting, key=lambda p: (p["step_s"], p["model"]), default=None)
    out[f"best_{tpu.name}"] = (
        f"{best['data']}x{best['model']} {best['param_dims']}-D "
        f"remat={best['remat_policy']}: "
        f"{best['step_s']:.2f} s/step, {best['days']:.1f} days"
        if best else "nothing compiled on this many devices fits")
  return out


def checks(results: list[dict], batch: int, vocab: int) -> dict[str, Any]:
  """The issue's done-when checks, each with what it tested."""
  v3 = TPUS[0].hbm_per_device
  fits = [r for r in results if r["kind"] == "pretrain"
          and r["global_batch"] == batch
          and r.get("peak_bytes", math.inf) <= v3]
  bad = sorted({f"{r['kind']} {r['data']}x{r['model']}: {name}"
                for r in results if r["model"] >= 2
                for name in r["vocab_replicated"]})
  return {
      "fits_v3_core": {
          "pass": bool(fits),
          "what": f"a pre-training layout at batch {batch} whose compiled "
                  f"peak fits {v3 / GIB:.0f} GiB: " + (", ".join(
                      f"{r['data']}x{r['model']} {r['remat_policy']}"
                      for r in fits) or "none")},
      "vocab_not_replicated": {
          "pass": not bad,
          "what": f"no {vocab:,}-row vocabulary parameter (embedding, "
                  "decoder, decoder bias) replicated on a model axis >= 2" + (": " + "; ".join(bad) if bad else "")},
  }


def run(config: str, entries: list[Entry], scan: bool = True,
        dtype: str = "bfloat16", batch: int = PRETRAIN["batch"],
        seq_len: int = PRETRAIN["seq_len"],
        finetune_batch: int = FINETUNE["batch"],
        finetune_seq_len: int = FINETUNE["seq_len"],
        rows_per_shard: int = 8, rule_overrides: str = "",
        flops_model_axes: tuple[int, ...] = DEFAULT_FLOPS_MODEL_AXES,
        mfu: float = 0.45, compile_it: bool = True, out: str = "",
        log=print) -> dict[str, Any]:
  """Compiles every entry and returns the report dict (also written to
  `out` after each compile, so a run cut short keeps what it measured)."""
  start = time.perf_counter()
  wanted = max(e.data * e.model for e in entries)
  if wanted > jax.device_count():
    raise SystemExit(
        f"{wanted} devices wanted, {jax.device_count()} simulated: run as a "
        "script (it sets --xla_force_host_platform_device_count=64)")
  base = common.load_config(config)
  # As the T5X run files have it: vocabulary padded to a multiple of 128.
  base = dataclasses.replace(
      base, scan_layers=scan, dtype=dtype,
      vocab_pad_multiple=partitioning.T5X_VOCAB_PAD_MULTIPLE)
  pre_settings = dict(PRETRAIN, max_predictions=min(
      PRETRAIN["max_predictions"], seq_len))
  shapes = {"pretrain": (batch, seq_len, pre_settings),
            "finetune": (finetune_batch, finetune_seq_len, FINETUNE)}
  abstract = jax.eval_shape(
      lambda rng: network.RemBertForMaskedLM(base).init(
          rng, jnp.ones((1, 8), jnp.int32)), jax.random.PRNGKey(0))
  params = sum(math.prod(x.shape) for x in
               jax.tree_util.tree_leaves(abstract["params"]))
  assumptions = {
      "dtype": dtype, "scan_layers": scan,
      "vocab": f"{base.vocab_size:,} rows padded to {base.padded_vocab_size:,}"
               f" (VOCAB_PAD_MULTIPLE = {base.vocab_pad_multiple})",
      "rules": "T5X standard + RemBERT's (partitioning.logical_axis_rules)"
               + (f", overridden: {rule_overrides}" if rule_overrides else ""),
      "pretrain_step": f"batch {batch} x {seq_len} tokens, MLM head at "
                       f"{pre_settings['max_predictions']} positions/row, "
                       "AdamW + clipping (pretrain_mlm.gin)",
      "finetune_step": f"SQuAD QA, batch {finetune_batch} x "
                       f"{finetune_seq_len} (Table 15 batch)",
      "rows_per_shard": f"a data shard (its `model` devices) computes "
                        f"{rows_per_shard} rows at a time and accumulates "
                        "gradients over the rest of the global batch",
      "mfu": f"{mfu} model-FLOPs utilisation without remat (measured on one "
             "H200 GPU, assumed for the TPU); remat "
             "multiplies the step time by its compiled-FLOPs ratio",
      "tpus": "; ".join(
          f"{t.name}: {t.pod_devices // t.devices_per_chip} chips x "
          f"{t.peak_bf16_per_chip / 1e12:.0f} TFLOP/s bf16, "
          f"{t.hbm_per_device / GIB:.0f} GiB HBM per JAX device "
          f"({t.devices_per_chip} device(s)/chip)" for t in TPUS)
               + " (cloud.google.com/tpu/docs/v3, /v4)",
      "train_steps": PRETRAIN["train_steps"],
      "memory": "XLA:CPU's buffer assignment (compiled.memory_analysis()) of "
                "the SPMD-partitioned step, per device; not XLA:TPU's",
  }
  results: list[dict] = []

  def report() -> dict[str, Any]:
    plan_rows = plan(results, mfu, PRETRAIN["train_steps"])
    return {
        "config": config, "params": params,
        "simulated_devices": jax.device_count(), "jax": jax.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "assumptions": assumptions, "results": results, "plan": plan_rows,
        "summary": summarize(results, plan_rows),
        "checks": checks(results, batch, base.vocab_size),
        "wall_s": time.perf_counter() - start,
    }

  for e in entries:
    rules = override_rules(partitioning.logical_axis_rules(
        parameter_partitioning_dims=e.param_dims), rule_overrides)
    cfg = dataclasses.replace(base, remat_policy=e.policy)
    b, t, settings = shapes[e.kind]
    log(f"{'compiling' if compile_it else 'sharding'} {e.kind} "
        f"{e.data}x{e.model} {e.param_dims}-D remat={e.policy} ...")
    r = compile_step(e, cfg, b, t, rows_per_shard, settings, rules,
                     compile_it=compile_it)
    if compile_it:
      r["fits_v3"], r["fits_v4"] = (
          "yes" if r["peak_bytes"] <= tpu.hbm_per_device else "no"
          for tpu in TPUS)
      # The FLOPs compiles use a 1 x model mesh of the first devices: one
      # process's, so only one-process runs measure them.
      if e.model in flops_model_axes and jax.process_count() == 1:
        tick = time.perf_counter()
        r["compiled_flops"] = r["accum_steps"] * layer_flops(
            e.kind, cfg, e.model, r["rows_per_data_shard"], t,
            tuple(sorted(settings.items())))
        r["flops_compile_s"] = time.perf_counter() - tick
      log(f"  peak {r['peak_bytes'] / GIB:.2f} GiB/device, compile "
          f"{r['compile_s']:.1f} s")
    results.append(r)
    if out:
      pathlib.Path(out).write_text(json.dumps(report(), indent=1) + "\n")
  return report()


def _worker_args(a, layouts: list[tuple[int, int]]) -> list[str]:
  """scale_plan's arguments for one process of a `--processes` cluster:
  `a`'s step, rules and policies, `layouts`, no FLOPs compiles."""
  return [
      "--config", a.config,
      "--layouts", ",".join(f"{d}x{m}" for d, m in layouts),
      "--policies", a.policies, "--finetune_policies", a.finetune_policies,
      "--param_dims", ",".join(map(str, a.param_dims)), "--rules", a.rules,
      "--dtype", a.dtype, "--batch", str(a.batch),
      "--seq_len", str(a.seq_len),
      "--finetune_batch", str(a.finetune_batch),
      "--finetune_seq_len", str(a.finetune_seq_len),
      "--rows_per_shard", str(a.rows_per_shard), "--mfu", str(a.mfu),
      "--flops_model_axes", ""] + (["--no_scan"] if a.no_scan else [])


def _parse(argv: Optional[list[str]]):
  """The command line's namespace."""
  p = common.argument_parser(__doc__)
  p.set_defaults(config=DEFAULT_CONFIG)
  p.add_argument("--layouts", type=_layouts, default=None,
                 help="DATAxMODEL,... (default: the plan's DEFAULT_GRID)")
  p.add_argument("--policies", default="full",
                 help="with --layouts: remat policies of the pre-training "
                      "step (network.REMAT_POLICIES names)")
  p.add_argument("--finetune_policies", default="none",
                 help="with --layouts: policies of the fine-tuning step "
                      "('' for none)")
  p.add_argument("--param_dims", type=_ints, default=[1],
                 help="with --layouts: T5X PARAMETER_PARTITIONING_DIMS "
                      "(1: model axis only; 2: also H, E_in, E_out over data)")
  p.add_argument("--rules", default="",
                 help="remap logical axes, e.g. 'vocab=' (unpartitioned) or "
                      "'embed=data'")
  p.add_argument("--flops_model_axes", type=_ints,
                 default=list(DEFAULT_FLOPS_MODEL_AXES),
                 help="model axes on which 1- and 2-layer compiles measure "
                      "the step's FLOPs ('' for none)")
  p.add_argument("--no_compile", action="store_true",
                 help="shardings only: bytes and replicated parameters")
  p.add_argument("--no_scan", action="store_true",
                 help="unscanned layers (slower to compile)")
  p.add_argument("--dtype", default="bfloat16", help="activation dtype")
  p.add_argument("--batch", type=int, default=PRETRAIN["batch"])
  p.add_argument("--seq_len", type=int, default=PRETRAIN["seq_len"])
  p.add_argument("--finetune_batch", type=int, default=FINETUNE["batch"])
  p.add_argument("--finetune_seq_len", type=int, default=FINETUNE["seq_len"])
  p.add_argument("--rows_per_shard", type=int, default=8,
                 help="micro-batch rows per data shard (what a device holds)")
  # Measured on one H200 (docs/PERFORMANCE.md v9: 0.42 at 16 x 512, 0.46-0.48
  # at 32 x 512); not measured on a TPU.
  p.add_argument("--mfu", type=float, default=0.45)
  p.add_argument("--processes", type=int, default=0,
                 help="with --layouts: also compile each layout across this "
                      "many processes of one JAX cluster (data*model/N "
                      "devices each, started through "
                      "rembert_t5x.tools.multihost_launch) and print their "
                      "per-device memory beside the one-process figures")
  p.add_argument("--processes_timeout", type=float, default=3600,
                 help="seconds a --processes cluster may take")
  p.add_argument("--out", default="", help="also write the JSON report here")
  p.add_argument("--json", action="store_true", help="also print a JSON line")
  return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
  a = _parse(argv)
  split = lambda s: [x for x in s.split(",") if x]
  policies, finetune_policies = split(a.policies), split(a.finetune_policies)
  unknown = [x for x in policies + finetune_policies
             if x not in network.REMAT_POLICIES]
  if unknown:
    raise SystemExit(f"--policies: unknown {unknown}; expected some of "
                     f"{sorted(network.REMAT_POLICIES)}")
  entries = (grid(a.layouts, policies, a.param_dims, finetune_policies)
             if a.layouts else list(DEFAULT_GRID))
  if not entries:
    raise SystemExit("--layouts/--policies select nothing to compile")
  if a.processes:
    if a.processes < 1 or not a.layouts or a.no_compile:
      raise SystemExit("--processes: a count >= 1, with --layouts, without "
                       "--no_compile")
    if jax.distributed.is_initialized():
      raise SystemExit("--processes: already one process of a cluster")
    scale_plan_hosts.device_groups(a.layouts, a.processes)  # checks first
  log = lambda s: print(s, file=sys.stderr, flush=True)
  report = run(a.config, entries, scan=not a.no_scan, dtype=a.dtype,
               batch=a.batch, seq_len=a.seq_len,
               finetune_batch=a.finetune_batch,
               finetune_seq_len=a.finetune_seq_len,
               rows_per_shard=a.rows_per_shard, rule_overrides=a.rules,
               flops_model_axes=tuple(a.flops_model_axes),
               mfu=a.mfu, compile_it=not a.no_compile, out=a.out, log=log)
  if a.processes:
    tick = time.perf_counter()
    rows, report["across_processes"] = scale_plan_hosts.compare(
        report["results"],
        scale_plan_hosts.compile_across(
            a.processes, a.layouts, functools.partial(_worker_args, a),
            a.processes_timeout, log))
    report["results"] += rows
    report["wall_s"] += time.perf_counter() - tick
    if a.out:
      pathlib.Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
  print_report(report)
  if a.json:
    print(json.dumps(report))
  return report


if __name__ == "__main__":
  main()
