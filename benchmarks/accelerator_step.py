r"""MLM train step on one accelerator: float32 vs bfloat16, attention paths.

  python benchmarks/accelerator_step.py --config gin_configs/models/paper/rembert.gin \
      --batch 16 --seq_len 512 --json

For each variant (activation dtype x attention implementation, plus any
`--override field=value` on `RemBertConfig`, e.g. a remat policy) this runs
the same pre-training step on the same weights and batch: encoder, MLM head
gathered at the masked positions, cross entropy, gradients and an AdamW
update (parameters stay float32). It prints one table row per variant:

  * loss of the first step and its difference to the float32/einsum
    reference (the same weights and batch, so the difference is rounding);
  * median step time over `--steps` timed steps after `--warmup` steps;
  * model TFLOP/s from our matmul FLOP count (`benchmarks/flops.py`: the
    FLOPs the network really computes, forward + backward), and that as a
    fraction (MFU) of a 4096^3 matmul in the variant's dtype measured in the
    same process; XLA's own count (`cost_analysis()`) is kept in the JSON,
    but on GPU it misses the cuBLAS/cuDNN custom calls, so it is no measure;
  * peak device memory of the variant (each variant runs in its own process,
    so `memory_stats()["peak_bytes_in_use"]` is the variant's own).

It imports only the network (jax, flax, optax, gin), so it runs on a bare
accelerator machine; on CPU it also runs (slowly: use a tiny config), which
is what `tests/benchmarks_test.py` does.
"""

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks import flops as flop_model
from rembert_t5x import configs
from rembert_t5x import network

# (activation dtype, attention implementation); the first is the reference.
VARIANTS = (("float32", "einsum"), ("bfloat16", "einsum"),
            ("bfloat16", "xla"), ("bfloat16", "cudnn"))
MASK_RATE = 0.15


def _parse_override(text: str):
  key, _, value = text.partition("=")
  try:
    value = json.loads(value)
  except json.JSONDecodeError:
    pass  # a bare string such as dots_saveable
  return key, value


def _num_predictions(seq_len: int) -> int:
  return max(1, int(round(MASK_RATE * seq_len)))


def _batch(cfg, batch: int, seq_len: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  num_predictions = _num_predictions(seq_len)
  tokens = rng.integers(5, cfg.vocab_size, (batch, seq_len), dtype=np.int32)
  positions = np.sort(np.stack([
      rng.choice(np.arange(1, seq_len), num_predictions, replace=False)
      for _ in range(batch)]), axis=1).astype(np.int32)
  targets = np.take_along_axis(tokens, positions, axis=1)
  return {"input_tokens": jnp.asarray(tokens),
          "token_types": jnp.zeros_like(tokens),
          "segment_ids": jnp.ones_like(tokens),
          "masked_positions": jnp.asarray(positions),
          "targets": jnp.asarray(targets)}


def _train_step(module, tx):
  def loss_fn(params, batch):
    logits = module.apply(
        {"params": params}, batch["input_tokens"], batch["token_types"],
        batch["segment_ids"], masked_positions=batch["masked_positions"])
    logits = logits.astype(jnp.float32)
    logz = jax.nn.logsumexp(logits, axis=-1)
    target = jnp.take_along_axis(logits, batch["targets"][..., None],
                                 axis=-1)[..., 0]
    return jnp.mean(logz - target)

  def step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss
  return step


def _matmul_tflops(dtype: str, n: int = 4096, reps: int = 10) -> float:
  a = jnp.ones((n, n), dtype)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  start = time.perf_counter()
  for _ in range(reps):
    out = f(a)
  out.block_until_ready()
  return 2 * n ** 3 * reps / (time.perf_counter() - start) / 1e12


def run_variant(args, dtype: str, attention: str) -> dict:
  """One variant in this process: first-step loss, timing, FLOPs, memory."""
  cfg = configs.config_from_gin(args.config)
  overrides = dict(_parse_override(o) for o in args.override)
  cfg = dataclasses.replace(cfg, dtype=dtype,
                            attention_implementation=attention, **overrides)
  module = network.RemBertForMaskedLM(cfg)
  batch = _batch(cfg, args.batch, args.seq_len)
  params = jax.jit(lambda r: module.init(
      r, batch["input_tokens"][:1], batch["token_types"][:1],
      batch["segment_ids"][:1])["params"])(jax.random.PRNGKey(0))
  tx = optax.adamw(1e-4, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01)
  opt_state = tx.init(params)
  step = jax.jit(_train_step(module, tx), donate_argnums=(0, 1))
  start = time.perf_counter()
  compiled = step.lower(params, opt_state, batch).compile()
  compile_s = time.perf_counter() - start
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  flops = float((cost or {}).get("flops", float("nan")))
  params, opt_state, loss = compiled(params, opt_state, batch)
  first_loss = float(loss)
  for _ in range(args.warmup):
    params, opt_state, loss = compiled(params, opt_state, batch)
  loss.block_until_ready()
  times = []
  for _ in range(args.steps):
    start = time.perf_counter()
    params, opt_state, loss = compiled(params, opt_state, batch)
    loss.block_until_ready()
    times.append(time.perf_counter() - start)
  step_s = statistics.median(times)
  stats = jax.devices()[0].memory_stats() or {}
  model_flops = flop_model.train_step_flops(
      cfg, args.batch, args.seq_len, _num_predictions(args.seq_len))
  peak = _matmul_tflops("bfloat16" if dtype == "bfloat16" else "float32",
                        n=args.peak_matmul_size)
  return {
      "dtype": dtype, "attention": attention, "overrides": overrides,
      "first_loss": first_loss, "step_s": step_s,
      "step_s_min": min(times), "step_s_max": max(times),
      "compile_s": compile_s, "xla_flops": flops,
      "model_flops": model_flops,
      "tflops": model_flops / step_s / 1e12,
      "mfu": model_flops / step_s / 1e12 / peak,
      "peak_bytes": stats.get("peak_bytes_in_use"),
      "matmul_peak_tflops": peak,
      "device": jax.devices()[0].device_kind,
      "backend": jax.default_backend(),
  }


def _child(args, dtype, attention) -> dict:
  cmd = [sys.executable, __file__, "--_variant", f"{dtype},{attention}",
         "--config", args.config, "--batch", str(args.batch),
         "--seq_len", str(args.seq_len), "--steps", str(args.steps),
         "--warmup", str(args.warmup),
         "--peak_matmul_size", str(args.peak_matmul_size)]
  for o in args.override:
    cmd += ["--override", o]
  proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
  if proc.returncode:
    last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"dtype": dtype, "attention": attention, "error": last[:300]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
  ref = rows[0].get("first_loss")
  lines = ["| dtype | attention | first loss | Δ vs f32 | step s (min-max) "
           "| model TFLOP/s | matmul TFLOP/s | MFU | peak GiB | compile s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    if "error" in r:
      lines.append(f"| {r['dtype']} | {r['attention']} | not run: "
                   f"{r['error']} |||||||")
      continue
    peak = r["peak_bytes"]
    lines.append(
        f"| {r['dtype']} | {r['attention']} | {r['first_loss']:.5f} | "
        f"{r['first_loss'] - ref:+.2e} | {r['step_s']:.4f} "
        f"({r['step_s_min']:.4f}-{r['step_s_max']:.4f}) | {r['tflops']:.1f} | "
        f"{r['matmul_peak_tflops']:.0f} | "
        f"{'' if peak is None else f'{peak / 2**30:.2f}'} | "
        f"{r['compile_s']:.1f} |")
  return "\n".join(lines)


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--config", default="gin_configs/models/tiny.gin")
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--warmup", type=int, default=3)
  p.add_argument("--override", action="append", default=[],
                 help="RemBertConfig field=value (JSON value or string)")
  p.add_argument("--variants", default=",".join(
      f"{d}:{a}" for d, a in VARIANTS),
                 help="comma-separated dtype:attention list; first = reference")
  p.add_argument("--peak_matmul_size", type=int, default=4096,
                 help="n of the n x n matmul that measures the peak for MFU")
  p.add_argument("--json", action="store_true")
  p.add_argument("--_variant", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  os.chdir(REPO_ROOT)  # gin include paths are relative to the repository
  if args._variant:  # pylint: disable=protected-access
    dtype, attention = args._variant.split(",")  # pylint: disable=protected-access
    print(json.dumps(run_variant(args, dtype, attention)))
    return
  variants = [tuple(v.split(":")) for v in args.variants.split(",")]
  print(f"config {args.config}, batch {args.batch} x {args.seq_len}, "
        f"overrides {args.override or 'none'}", flush=True)
  rows = []
  for d, a in variants:  # one process each: its own peak memory
    rows.append(_child(args, d, a))
    print(table(rows).splitlines()[-1], flush=True)
  print(table(rows))
  if args.json:
    print(json.dumps({"config": args.config, "batch": args.batch,
                      "seq_len": args.seq_len, "rows": rows}))


if __name__ == "__main__":
  main()
