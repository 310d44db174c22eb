r"""Pod plan: per-device memory, compile time and FLOPs of the real train step.

  python benchmarks/scale_plan.py --json            # rembert.gin, 8-64 devices
  python benchmarks/scale_plan.py --config gin_configs/models/tiny.gin \
      --devices 4,8 --model_axes 1,2 --batch 16 --seq_len 32

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
  against our own matmul FLOP count (`common.train_step_flops`),

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
"""

import os
import sys

if __name__ == "__main__":
  # Before jax is imported: enough simulated devices for the largest layout.
  _flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
            if not f.startswith("--xla_force_host_platform_device_count")]
  os.environ["XLA_FLAGS"] = " ".join(
      _flags + ["--xla_force_host_platform_device_count=64"])
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
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import partitioning
from rembert_t5x import train_lib

P = jax.sharding.PartitionSpec
GIB = 2**30
DEFAULT_CONFIG = "gin_configs/models/paper/rembert.gin"

# Pre-training (paper Table 14 / gin_configs/runs/pretrain_mlm.gin).
PRETRAIN = dict(batch=2048, seq_len=512, max_predictions=80,
                learning_rate=2e-4, train_steps=1_760_000, warmup_steps=15_000)
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


def _ints(s: str) -> list[int]:
  return [int(x) for x in s.split(",") if x.strip()]


def layouts(devices: list[int], model_axes: list[int]) -> list[tuple[int, int]]:
  """(data, model) for every device count and model axis that divides it."""
  return [(n // m, m) for n in devices for m in model_axes
          if m <= n and n % m == 0]


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


def compile_step(kind: str, cfg: network.RemBertConfig, data: int, model: int,
                 batch: int, seq_len: int, rows_per_shard: int,
                 settings: dict, param_dims: int = 1,
                 flops: bool = True) -> dict[str, Any]:
  """AOT-compiles one train step on a (data, model) mesh; returns its figures.

  With `flops`, the step's real compiled FLOPs come from `layer_flops`
  (two more, small compiles); otherwise `compiled_flops` is what the cost
  analysis says, loop bodies counted once.
  """
  mesh = train_lib.make_mesh((data, model),
                             devices=jax.devices()[:data * model])
  # The T5X run files' rules (PARAMETER_PARTITIONING_DIMS = 1 or 2).
  rules = partitioning.logical_axis_rules(
      parameter_partitioning_dims=param_dims)
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
  if kind == "pretrain":
    flops = common.train_step_flops(cfg, batch, seq_len,
                                    settings["max_predictions"])
  else:  # the encoder (no MLM head, no pre-training-only layers)
    flops = common.train_step_flops(
        dataclasses.replace(cfg, num_pretraining_only_layers=0), batch,
        seq_len, head_positions=0)
  peak = (mem.argument_size_in_bytes + mem.output_size_in_bytes
          - mem.alias_size_in_bytes + mem.temp_size_in_bytes)
  reps = replicated_params(abstract["params"], abstract["params_axes"],
                           p_shard, mesh, rules)
  compiled_flops = float(cost.get("flops", float("nan")))
  if flops:
    compiled_flops = accum * layer_flops(kind, cfg, model, rows, seq_len,
                                         tuple(sorted(settings.items())),
                                         param_dims)
  return {
      "kind": kind, "devices": data * model, "data": data, "model": model,
      "param_dims": param_dims,
      "remat_policy": cfg.remat_policy, "scan_layers": cfg.scan_layers,
      "dtype": str(jnp.dtype(cfg.dtype)),
      "global_batch": batch, "seq_len": seq_len,
      "rows_per_data_shard": rows, "accum_steps": accum,
      "param_bytes": _bytes_per_device(params, p_shard),
      "opt_bytes": _bytes_per_device(opt, o_shard),
      "argument_bytes": mem.argument_size_in_bytes,
      "output_bytes": mem.output_size_in_bytes,
      "alias_bytes": mem.alias_size_in_bytes,
      "temp_bytes": mem.temp_size_in_bytes,
      "peak_bytes": peak,
      "lower_s": lower_s, "compile_s": compile_s,
      "compiled_flops": compiled_flops,
      "model_flops": flops / (data * model),
      "replicated": [r for r in reps if r["reason"] == "indivisible"]
                    + [r for r in reps if r["reason"] != "indivisible"][:3],
      "replicated_bytes": sum(r["bytes"] for r in reps),
      "replicated_count": len(reps),
  }


@functools.lru_cache(maxsize=None)
def layer_flops(kind: str, cfg: network.RemBertConfig, model: int, rows: int,
                seq_len: int, settings: tuple, param_dims: int) -> float:
  """Compiled per-device FLOPs of one micro-batch, without loops.

  XLA's cost analysis counts a loop body once, whatever its trip count, so
  the scanned step (and the accumulation loop) under-reports. The FLOPs are
  linear in the number of layers: we compile the unscanned step without
  accumulation at 1 and 2 layers (cheap), take the difference as one layer
  and extrapolate to the config's depth. One data shard (a `1 x model`
  mesh) suffices: a device's FLOPs do not depend on how many shards there
  are. The optimizer update (~10 FLOPs per parameter, under 0.1% of a
  step) is then counted once per micro-batch instead of once per step.
  """
  depth = (cfg.num_pretraining_layers if kind == "pretrain"
           else cfg.num_layers)
  figures = []
  for layers in (1, 2):
    small = dataclasses.replace(cfg, num_layers=layers,
                                num_pretraining_only_layers=0,
                                scan_layers=False)
    r = compile_step(kind, small, 1, model, rows, seq_len, rows,
                     dict(settings), param_dims, flops=False)
    figures.append(r["compiled_flops"])
  one, two = figures
  return one + (depth - 1) * (two - one)


def plan(results: list[dict], mfu: float, train_steps: int,
         policy_none: str = "none") -> list[dict]:
  """Planned pre-training step time and days on each TPU slice.

  For each pre-training result on as many devices as the slice has, the
  step time is the model FLOPs of a step over the slice's bf16 peak at the
  assumed MFU (`mfu`, for a step without remat), times the remat overhead:
  the compiled FLOPs of this policy over those of the same layout without
  remat (1 when that one was not compiled).
  """
  rows = []
  pre = [r for r in results if r["kind"] == "pretrain"]
  for tpu in TPUS:
    chips = tpu.pod_devices // tpu.devices_per_chip
    for r in (r for r in pre if r["devices"] == tpu.pod_devices):
      base = next((b for b in pre if b["devices"] == r["devices"]
                   and b["model"] == r["model"]
                   and b["param_dims"] == r["param_dims"]
                   and b["remat_policy"] == policy_none), None)
      overhead = (r["compiled_flops"] / base["compiled_flops"]
                  if base and base["compiled_flops"] > 0 else 1.0)
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


def _fmt_replicated(r: dict) -> str:
  bad = [x for x in r["replicated"] if x["reason"] == "indivisible"]
  if r["model"] < 2:
    return "all (model=1)"
  text = f"{r['replicated_count']} ({r['replicated_bytes'] / 2**20:.0f} MiB)"
  if bad:
    names = ", ".join(f"{x['name']}{tuple(x['shape'])}" for x in bad[:2])
    text += f"; indivisible: {len(bad)} e.g. {names}"
  return text


def print_report(report: dict) -> None:
  a = report["assumptions"]
  print(f"config {report['config']}: {report['params']:,} params; "
        f"{a['dtype']} activations, float32 params and AdamW moments; "
        f"scan_layers={a['scan_layers']}")
  print(f"simulated: {report['simulated_devices']} XLA:CPU devices; "
        f"memory = XLA:CPU buffer assignment of the partitioned step "
        f"(per device)")
  head = (f"{'kind':8} {'layout':>7} {'p':>1} {'remat':>11} {'rows x acc':>10} "
          f"{'param+opt':>9} {'args':>7} {'temp':>7} {'peak':>7} "
          f"{'v3 16G':>6} {'v4 32G':>6} {'compile':>7} {'FLOPs/dev':>9} "
          f"{'vs ours':>7}  replicated on model axis")
  print(head)
  for r in report["results"]:
    gib = lambda b: f"{b / GIB:6.2f}G"  # pylint: disable=cell-var-from-loop
    policy = {"dots_with_no_batch_dims_saveable": "dots_no_bat"}.get(
        r["remat_policy"], r["remat_policy"])
    print(f"{r['kind']:8} {r['data']:>3}x{r['model']:<3} {r['param_dims']} "
          f"{policy:>11} "
          f"{r['rows_per_data_shard']:>5}x{r['accum_steps']:<4} "
          f"{gib(r['param_bytes'] + r['opt_bytes']):>9} "
          f"{gib(r['argument_bytes'])} {gib(r['temp_bytes'])} "
          f"{gib(r['peak_bytes'])} "
          f"{'yes' if r['peak_bytes'] <= 16 * GIB else 'no':>6} "
          f"{'yes' if r['peak_bytes'] <= 32 * GIB else 'no':>6} "
          f"{r['compile_s']:6.1f}s {r['compiled_flops'] / 1e12:8.2f}T "
          f"{r['compiled_flops'] / r['model_flops']:6.2f}x  "
          f"{_fmt_replicated(r)}")
  print("assumptions:")
  for k, v in a.items():
    print(f"  {k}: {v}")
  print(f"{'tpu':6} {'layout':>7} {'p':>1} {'remat':>12} {'peak':>7} "
        f"{'fits':>4} {'remat x':>7} {'step':>7} {'days':>6}")
  for p in report["plan"]:
    print(f"{p['tpu']:6} {p['data']:>3}x{p['model']:<3} {p['param_dims']} "
          f"{p['remat_policy'][:12]:>12} {p['peak_gib']:6.2f}G "
          f"{'yes' if p['fits'] else 'no':>4} {p['remat_overhead']:6.2f}x "
          f"{p['step_s']:6.2f}s {p['days']:6.1f}")
  for k, v in report["summary"].items():
    print(f"{k}: {v}")
  print(f"wall {report['wall_s']:.0f} s")


def summarize(results: list[dict], plan_rows: list[dict]) -> dict[str, Any]:
  """Which layouts fit, the fastest fitting plan per TPU, replication."""
  out: dict[str, Any] = {}
  for name, limit in (("fits_16gib", 16 * GIB), ("fits_32gib", 32 * GIB)):
    out[name] = sorted({f"{r['kind']} {r['data']}x{r['model']} "
                        f"{r['param_dims']}-D {r['remat_policy']}"
                        for r in results
                        if r["peak_bytes"] <= limit})
  for tpu in TPUS:
    fitting = [p for p in plan_rows if p["tpu"] == tpu.name and p["fits"]]
    best = min(fitting, key=lambda p: (p["step_s"], p["model"]), default=None)
    out[f"best_{tpu.name}"] = (
        f"{best['data']}x{best['model']} {best['param_dims']}-D "
        f"remat={best['remat_policy']}: "
        f"{best['step_s']:.2f} s/step, {best['days']:.1f} days"
        if best else "nothing fits")
  out["vocab_replicated_on_model_axis"] = sorted({
      f"{r['data']}x{r['model']}: {x['name']}" for r in results
      for x in r["replicated"] if r["model"] >= 2 and x["reason"] ==
      "indivisible" and max(x["shape"]) >= 250_000})
  return out


def run(config: str, devices: list[int], model_axes: list[int],
        policies: list[str], param_dims: tuple[int, ...] = (1,),
        scan: bool = True, dtype: str = "bfloat16",
        batch: int = PRETRAIN["batch"], seq_len: int = PRETRAIN["seq_len"],
        finetune_batch: int = FINETUNE["batch"],
        finetune_seq_len: int = FINETUNE["seq_len"],
        rows_per_shard: int = 8, finetune: bool = True,
        finetune_policies: Optional[list[str]] = None,
        mfu: float = 0.4, flops: bool = True, log=print) -> dict[str, Any]:
  """Compiles every (layout, policy) and returns the report dict."""
  start = time.perf_counter()
  if max(devices) > jax.device_count():
    raise SystemExit(
        f"{max(devices)} devices wanted, {jax.device_count()} simulated: run "
        "as a script (it sets --xla_force_host_platform_device_count=64)")
  base = common.load_config(config)
  # As the T5X run files have it: vocabulary padded to a multiple of 128.
  base = dataclasses.replace(
      base, scan_layers=scan, dtype=dtype,
      vocab_pad_multiple=partitioning.T5X_VOCAB_PAD_MULTIPLE)
  pre_settings = dict(PRETRAIN, max_predictions=min(
      PRETRAIN["max_predictions"], seq_len))
  results = []
  grid = [(d, layout, policy) for d in param_dims
          for layout in layouts(devices, model_axes) for policy in policies]
  for dims, (data, model), policy in grid:
    cfg = dataclasses.replace(base, remat_policy=policy)
    jobs = [("pretrain", batch, seq_len, pre_settings)]
    if finetune and policy in (finetune_policies or policies):
      jobs.append(("finetune", finetune_batch, finetune_seq_len, FINETUNE))
    for kind, b, t, settings in jobs:
      log(f"compiling {kind} {data}x{model} {dims}-D remat={policy} ...")
      r = compile_step(kind, cfg, data, model, b, t, rows_per_shard,
                       settings, dims, flops=flops)
      log(f"  peak {r['peak_bytes'] / GIB:.2f} GiB/device, compile "
          f"{r['compile_s']:.1f} s")
      results.append(r)
  abstract = jax.eval_shape(
      lambda rng: network.RemBertForMaskedLM(base).init(
          rng, jnp.ones((1, 8), jnp.int32)), jax.random.PRNGKey(0))
  params = sum(math.prod(x.shape) for x in
               jax.tree_util.tree_leaves(abstract["params"]))
  plan_rows = plan(results, mfu, PRETRAIN["train_steps"])
  assumptions = {
      "dtype": dtype, "scan_layers": scan,
      "pretrain_step": f"batch {batch} x {seq_len} tokens, MLM head at "
                       f"{pre_settings['max_predictions']} positions/row, "
                       "AdamW + clipping (pretrain_mlm.gin)",
      "finetune_step": (f"SQuAD QA, batch {finetune_batch} x "
                        f"{finetune_seq_len} (Table 15 batch)"
                        if finetune else "not compiled"),
      "rows_per_shard": f"a data shard (its `model` devices) computes "
                        f"{rows_per_shard} rows at a time and accumulates "
                        "gradients over the rest of the global batch",
      "mfu": f"{mfu} model-FLOPs utilisation without remat (assumed); remat "
             "multiplies the step time by its compiled-FLOPs ratio",
      "tpus": "; ".join(
          f"{t.name}: {t.pod_devices // t.devices_per_chip} chips x "
          f"{t.peak_bf16_per_chip / 1e12:.0f} TFLOP/s bf16, "
          f"{t.hbm_per_device / GIB:.0f} GiB HBM per JAX device "
          f"({t.devices_per_chip} device(s)/chip)" for t in TPUS)
               + " (cloud.google.com/tpu/docs/v3, /v4)",
      "train_steps": PRETRAIN["train_steps"],
  }
  return {
      "config": config, "params": params,
      "simulated_devices": jax.device_count(), "jax": jax.__version__,
      "assumptions": assumptions, "results": results, "plan": plan_rows,
      "summary": summarize(results, plan_rows),
      "wall_s": time.perf_counter() - start,
  }


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
  p = common.argument_parser(__doc__)
  p.set_defaults(config=DEFAULT_CONFIG)
  p.add_argument("--devices", type=_ints, default=[8, 16, 32, 64])
  p.add_argument("--model_axes", type=_ints, default=[1, 2, 4, 8, 16])
  p.add_argument("--policies", default="none,dots_with_no_batch_dims_saveable,full",
                 help="comma-separated network.REMAT_POLICIES names")
  p.add_argument("--finetune_policies", default="",
                 help="policies to compile the fine-tuning step with "
                      "(default: --policies)")
  p.add_argument("--param_dims", type=_ints, default=[1, 2],
                 help="T5X parameter partitioning dims (1: model axis only; "
                      "2: also H, E_in, E_out over data)")
  p.add_argument("--no_scan", action="store_true",
                 help="unscanned layers (slower to compile)")
  p.add_argument("--dtype", default="bfloat16", help="activation dtype")
  p.add_argument("--batch", type=int, default=PRETRAIN["batch"])
  p.add_argument("--seq_len", type=int, default=PRETRAIN["seq_len"])
  p.add_argument("--finetune_batch", type=int, default=FINETUNE["batch"])
  p.add_argument("--finetune_seq_len", type=int, default=FINETUNE["seq_len"])
  p.add_argument("--no_finetune", action="store_true")
  p.add_argument("--rows_per_shard", type=int, default=8,
                 help="micro-batch rows per data shard (what a device holds)")
  p.add_argument("--mfu", type=float, default=0.4)
  p.add_argument("--no_flops", action="store_true",
                 help="skip the 1- and 2-layer compiles that give FLOPs")
  p.add_argument("--out", default="", help="also write the JSON report here")
  p.add_argument("--json", action="store_true", help="also print a JSON line")
  a = p.parse_args(argv)
  policies = [x for x in a.policies.split(",") if x]
  finetune_policies = [x for x in a.finetune_policies.split(",") if x]
  unknown = [x for x in policies + finetune_policies
             if x not in network.REMAT_POLICIES]
  if unknown:
    raise SystemExit(f"--policies: unknown {unknown}; expected some of "
                     f"{sorted(network.REMAT_POLICIES)}")
  log = lambda s: print(s, file=sys.stderr, flush=True)
  report = run(a.config, a.devices, a.model_axes, policies,
               param_dims=tuple(a.param_dims), scan=not a.no_scan, dtype=a.dtype, batch=a.batch,
               seq_len=a.seq_len, finetune_batch=a.finetune_batch,
               finetune_seq_len=a.finetune_seq_len,
               rows_per_shard=a.rows_per_shard,
               finetune=not a.no_finetune,
               finetune_policies=finetune_policies, mfu=a.mfu, flops=not a.no_flops,
               log=log)
  print_report(report)
  if a.out:
    pathlib.Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
  if a.json:
    print(json.dumps(report))
  return report


if __name__ == "__main__":
  main()
