r"""MLM train step on one accelerator: float32 vs bfloat16, attention paths.

  python benchmarks/accelerator_step.py --config gin_configs/models/paper/rembert.gin \
      --batch 16 --seq_len 512 --json
  # the same step against Hugging Face's RemBertForMaskedLM (PyTorch):
  python benchmarks/accelerator_step.py --config ... --batch 16 --seq_len 512 --hf
  # where the time goes: trace, top ops, fixed vs per-token time:
  python benchmarks/accelerator_step.py --config ... --batch 16 --seq_len 512 \
      --profile /tmp/rembert_profile

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
    fraction (MFU) of the dense matmul peak in the variant's dtype, measured
    in the same process: the best of `PEAK_TRIALS` timings of `PEAK_REPS`
    products of random n x n matrices (n = 8192 on an accelerator, 1024 on
    CPU). One timing of a smaller product varies by a quarter between runs
    on one GPU (clocks ramp up, power limits); the best of several of a
    large one is what the card can do. XLA's own count (`cost_analysis()`)
    is kept in the JSON, but on GPU it misses the cuBLAS/cuDNN custom
    calls, so it is no measure;
  * peak device memory of the variant (each variant runs in its own process,
    so `memory_stats()["peak_bytes_in_use"]` is the variant's own).
A variant that cannot run (cuDNN attention on a CPU) gets a row saying why:
the first line of its exception.

`--hf` and `--profile DIR` run one variant (`--variant`, default
bfloat16:auto) in this process instead. `--hf` times it and then Hugging
Face's step on the same batch (`benchmarks/hf_peer.py`) and prints both
sides and our tokens/s over theirs. `--profile` times the step at two batch
sizes (`--fit_batches`) and fits step = fixed + per_token x tokens, traces
`--profile_steps` steps with `jax.profiler` into DIR (TensorBoard's/xprof's
profile plugin opens it), and prints the compiled step's kernel launches by
category, the optimizer update's own kernels and time, and the ops with the
most traced time (`benchmarks/step_profile.py`).

It imports only the network (jax, flax, optax, gin; torch and transformers
for `--hf`), so it runs on a bare accelerator machine; on CPU it also runs
(slowly: use a tiny config), which is what the tests do.
"""

import argparse
import dataclasses
import json
import os
import pathlib
import re
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
from benchmarks import step_profile
from rembert_t5x import configs
from rembert_t5x import network
from rembert_t5x import optimizer

# (activation dtype, attention implementation); the first is the reference.
VARIANTS = (("float32", "einsum"), ("bfloat16", "einsum"),
            ("bfloat16", "xla"), ("bfloat16", "cudnn"))
MASK_RATE = 0.15
PEAK_TRIALS = 5   # timings of the matmul peak; the best one counts
PEAK_REPS = 10    # products per timing
TABLE_HEADER = ("dtype", "attention", "first loss", "Δ vs f32",
                "step s (min-max)", "model TFLOP/s", "matmul TFLOP/s", "MFU",
                "peak GiB", "compile s")
HF_HEADER = ("side", "precision", "attention", "first loss",
             "step s (min-max)", "tokens/s", "model TFLOP/s", "MFU",
             "peak GiB")
# Lines of a Python/JAX traceback that are not the error itself.
_NOT_THE_ERROR = ("For simplicity, JAX has removed", "Set JAX_TRACEBACK",
                  "The stack trace below", "The above exception",
                  "During handling of the above", "Traceback (most recent",
                  "-----", "File \"", "^")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b.*: ")


def _parse_override(text: str):
  key, _, value = text.partition("=")
  if value in ("True", "False"):  # as gin and Python write booleans
    return key, value == "True"
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


def _optimizer():
  """AdamW with paper Table 14's settings (`optimizer.py`), without the
  runner's schedule, weight-decay mask and clipping."""
  return optax.adamw(1e-4, b1=optimizer.B1, b2=optimizer.B2,
                     eps=optimizer.EPS, weight_decay=optimizer.WEIGHT_DECAY)


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


def _optimizer_update(tx):
  """The step's AdamW update alone (given gradients)."""
  def update(params, opt_state, grads):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
  return update


def _time(fn, warmup: int, steps: int) -> list[float]:
  """`fn()` returns a jax value; seconds of each timed call, after warm-up."""
  for _ in range(warmup):
    out = fn()
  if warmup:
    jax.block_until_ready(out)
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return times


class StepRun:
  """One config's train step on one batch: initialised and compiled."""

  def __init__(self, cfg: network.RemBertConfig, batch: int, seq_len: int):
    self.cfg = cfg
    self.module = network.RemBertForMaskedLM(cfg)
    self.batch = _batch(cfg, batch, seq_len)
    b = self.batch
    params = jax.jit(lambda r: self.module.init(
        r, b["input_tokens"][:1], b["token_types"][:1],
        b["segment_ids"][:1])["params"])(jax.random.PRNGKey(0))
    self.tx = _optimizer()
    opt_state = self.tx.init(params)
    step = jax.jit(_train_step(self.module, self.tx), donate_argnums=(0, 1))
    start = time.perf_counter()
    self.compiled = step.lower(params, opt_state, b).compile()
    self.compile_s = time.perf_counter() - start
    self.state = (params, opt_state)

  def __call__(self):
    """One step (donates and replaces the state); returns the loss."""
    params, opt_state, loss = self.compiled(*self.state, self.batch)
    self.state = (params, opt_state)
    return loss


def default_peak_size() -> int:
  return 1024 if jax.default_backend() == "cpu" else 8192


def matmul_peak(dtype: str, n: int, trials: int = PEAK_TRIALS,
                reps: int = PEAK_REPS) -> dict:
  """Dense n x n x n matmul TFLOP/s in `dtype`: the best of `trials` timings.

  Random operands (zeros or ones let a GPU draw less power and clock
  higher); each timing runs `reps` products back to back.
  """
  rng = np.random.default_rng(0)
  a = jnp.asarray(rng.standard_normal((n, n), np.float32), dtype)
  b = jnp.asarray(rng.standard_normal((n, n), np.float32), dtype)
  f = jax.jit(jnp.matmul)
  f(a, b).block_until_ready()
  tflops = []
  for _ in range(trials):
    start = time.perf_counter()
    for _ in range(reps):
      out = f(a, b)
    out.block_until_ready()
    tflops.append(2 * n ** 3 * reps / (time.perf_counter() - start) / 1e12)
  return {"tflops": max(tflops), "trials": tflops, "n": n, "reps": reps,
          "dtype": dtype}


def _peak_size(args) -> int:
  return args.peak_matmul_size or default_peak_size()


def _config(args, dtype: str, attention: str) -> network.RemBertConfig:
  cfg = configs.config_from_gin(args.config)
  overrides = dict(_parse_override(o) for o in args.override)
  return dataclasses.replace(cfg, dtype=dtype,
                             attention_implementation=attention, **overrides)


def run_variant(args, dtype: str, attention: str) -> dict:
  """One variant in this process: first-step loss, timing, FLOPs, memory."""
  cfg = _config(args, dtype, attention)
  run = StepRun(cfg, args.batch, args.seq_len)
  cost = run.compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  flops = float((cost or {}).get("flops", float("nan")))
  first_loss = float(run())
  times = _time(run, args.warmup, args.steps)
  step_s = statistics.median(times)
  stats = jax.devices()[0].memory_stats() or {}
  model_flops = flop_model.train_step_flops(
      cfg, args.batch, args.seq_len, _num_predictions(args.seq_len))
  peak = matmul_peak("bfloat16" if dtype == "bfloat16" else "float32",
                     _peak_size(args))
  return {
      "dtype": dtype, "attention": attention,
      "overrides": dict(_parse_override(o) for o in args.override),
      "first_loss": first_loss, "step_s": step_s,
      "step_s_min": min(times), "step_s_max": max(times),
      "compile_s": run.compile_s, "xla_flops": flops,
      "model_flops": model_flops,
      "tflops": model_flops / step_s / 1e12,
      "mfu": model_flops / step_s / 1e12 / peak["tflops"],
      "peak_bytes": stats.get("peak_bytes_in_use"),
      "matmul_peak_tflops": peak["tflops"], "matmul_peak": peak,
      "device": jax.devices()[0].device_kind,
      "backend": jax.default_backend(),
  }


def error_message(text: str) -> str:
  """The error in an exception's text or a traceback: one line.

  The last `SomeError: message` line if there is one (a traceback ends
  with the exception, but JAX appends a note on filtered frames after it),
  else the first line that is not traceback furniture.
  """
  lines = [l.strip() for l in text.splitlines() if l.strip()]
  lines = [l for l in lines if not l.startswith(_NOT_THE_ERROR)]
  for line in reversed(lines):
    if _EXCEPTION_LINE.match(line):
      return line[:300]
  return (lines[0] if lines else "(no message)")[:300]


def _failure(exc: BaseException) -> str:
  return error_message(f"{type(exc).__name__}: {exc}")


def _child(args, dtype, attention) -> dict:
  cmd = [sys.executable, __file__, "--_variant", f"{dtype},{attention}",
         "--config", args.config, "--batch", str(args.batch),
         "--seq_len", str(args.seq_len), "--steps", str(args.steps),
         "--warmup", str(args.warmup),
         "--peak_matmul_size", str(_peak_size(args))]
  for o in args.override:
    cmd += ["--override", o]
  proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
  try:
    return json.loads(proc.stdout.strip().splitlines()[-1])
  except (IndexError, json.JSONDecodeError):  # it died before its JSON line
    reason = error_message(proc.stderr) if proc.stderr.strip() else (
        f"exit status {proc.returncode}, no message (killed?)")
    return {"dtype": dtype, "attention": attention, "error": reason}


def _fmt(x: float) -> str:
  """Three significant digits: TFLOP/s on a CPU are small."""
  return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def _gib(nbytes) -> str:
  return "" if nbytes is None else f"{nbytes / 2**30:.2f}"


def _markdown(header, rows) -> list[str]:
  """A table; every row has as many cells as the header."""
  lines = ["| " + " | ".join(header) + " |",
           "|" + "---|" * len(header)]
  for cells in rows:
    assert len(cells) == len(header), (cells, header)
    lines.append("| " + " | ".join(cells) + " |")
  return lines


def _not_run(first_cells, error: str, width: int) -> list[str]:
  cells = list(first_cells) + [f"not run: {error}"]
  return cells + ["—"] * (width - len(cells))


def table(rows: list[dict]) -> str:
  ref = rows[0].get("first_loss")
  cells = []
  for r in rows:
    if "error" in r:
      cells.append(_not_run((r["dtype"], r["attention"]), r["error"],
                            len(TABLE_HEADER)))
      continue
    diff = "" if ref is None else f"{r['first_loss'] - ref:+.2e}"
    cells.append([
        r["dtype"], r["attention"], f"{r['first_loss']:.5f}", diff,
        f"{r['step_s']:.4f} ({r['step_s_min']:.4f}-{r['step_s_max']:.4f})",
        _fmt(r["tflops"]), _fmt(r["matmul_peak_tflops"]), f"{r['mfu']:.1%}",
        _gib(r["peak_bytes"]), f"{r['compile_s']:.1f}"])
  return "\n".join(_markdown(TABLE_HEADER, cells))


def peak_lines(rows: list[dict]) -> str:
  """How each row's matmul peak was measured, and its spread."""
  out = []
  for r in rows:
    p = r.get("matmul_peak")
    if p:
      out.append(
          f"matmul peak ({r['dtype']}:{r['attention']} process): "
          f"{p['dtype']} {p['n']}^3, best of {len(p['trials'])} x "
          f"{p['reps']}: {_fmt(p['tflops'])} TFLOP/s (trials "
          f"{_fmt(min(p['trials']))}-{_fmt(max(p['trials']))})")
  return "\n".join(out)


def compare_hf(args) -> dict:
  """Our variant, then Hugging Face's step, in this process."""
  # Deferred: torch and transformers are needed by --hf only.
  from benchmarks import hf_peer  # pylint: disable=g-import-not-at-top
  dtype, attention = args.variant.split(":")
  cfg = _config(args, dtype, attention)
  try:
    ours = run_variant(args, dtype, attention)
  except Exception as e:  # pylint: disable=broad-except
    ours = {"error": _failure(e)}
  try:
    hf = hf_peer.run(cfg, _batch(cfg, args.batch, args.seq_len), dtype,
                     args.warmup, args.steps,
                     on_gpu=jax.default_backend() == "gpu")
  except Exception as e:  # pylint: disable=broad-except
    hf = {"error": _failure(e)}
  peak = ours.get("matmul_peak") or matmul_peak(dtype, _peak_size(args))
  tokens = args.batch * args.seq_len
  flops = {  # HF's head runs at every position, ours at the masked ones
      "ours": flop_model.train_step_flops(cfg, args.batch, args.seq_len,
                                          _num_predictions(args.seq_len)),
      "hf": flop_model.train_step_flops(cfg, args.batch, args.seq_len,
                                        args.seq_len)}
  for side, r in (("ours", ours), ("hf", hf)):
    if "error" not in r:
      r["tokens_per_s"] = tokens / r["step_s"]
      r["model_flops"] = flops[side]
      r["tflops"] = flops[side] / r["step_s"] / 1e12
      r["mfu"] = r["tflops"] / peak["tflops"]
  ratio = (ours["tokens_per_s"] / hf["tokens_per_s"]
           if "error" not in ours and "error" not in hf else None)
  return {"config": args.config, "batch": args.batch,
          "seq_len": args.seq_len, "variant": args.variant,
          "warmup": args.warmup, "steps": args.steps,
          "device": jax.devices()[0].device_kind, "matmul_peak": peak,
          "ours": ours, "hf": hf, "ratio": ratio}


def hf_table(result: dict) -> str:
  dtype, attention = result["variant"].split(":")
  sides = (("ours (JAX)", dtype, attention, result["ours"]),
           ("HF (PyTorch)", None, None, result["hf"]))
  cells = []
  for name, precision, attn, r in sides:
    precision = r.get("precision", precision) or ""
    attn = r.get("attention", attn) or ""
    if "error" in r:
      cells.append(_not_run((name, precision, attn), r["error"],
                            len(HF_HEADER)))
      continue
    cells.append([
        name, precision, attn, f"{r['first_loss']:.5f}",
        f"{r['step_s']:.4f} ({r['step_s_min']:.4f}-{r['step_s_max']:.4f})",
        f"{r['tokens_per_s']:.0f}", _fmt(r["tflops"]), f"{r['mfu']:.1%}",
        _gib(r["peak_bytes"])])
  lines = _markdown(HF_HEADER, cells)
  p = result["matmul_peak"]
  lines.append(f"MFU against the {p['dtype']} {p['n']}^3 matmul peak "
               f"{_fmt(p['tflops'])} TFLOP/s; model FLOPs count HF's MLM "
               "head at every position, ours at the masked ones.")
  ratio = result["ratio"]
  lines.append("ours / HF tokens/s: "
               + ("n/a" if ratio is None else f"{ratio:.2f}x"))
  return "\n".join(lines)


def _fit_batches(args) -> list[int]:
  if args.fit_batches:
    sizes = [int(b) for b in args.fit_batches.split(",")]
  else:
    sizes = [max(1, args.batch // 2), args.batch]
    if sizes[0] == sizes[1]:
      sizes[1] = 2 * args.batch
  # The traced batch (`--batch`) last, so its state is the one kept.
  return sorted(set(sizes) - {args.batch}) + [args.batch]


def profile(args) -> dict:
  """Fixed vs per-token time, kernel counts, a trace and its top ops."""
  dtype, attention = args.variant.split(":")
  cfg = _config(args, dtype, attention)
  fit_rows, run = [], None
  for size in _fit_batches(args):
    del run  # one state on the device at a time
    run = StepRun(cfg, size, args.seq_len)
    run()  # the first step (allocations, autotuning) stays untimed
    times = _time(run, args.warmup, args.steps)
    fit_rows.append({"batch": size, "tokens": size * args.seq_len,
                     "step_s": statistics.median(times),
                     "compile_s": run.compile_s})
  fixed_s, per_token_s = step_profile.linear_fit(
      [r["tokens"] for r in fit_rows], [r["step_s"] for r in fit_rows])
  step_s = fit_rows[-1]["step_s"]

  hlo = run.compiled.as_text()
  ops = step_profile.hlo_ops(hlo)
  kernels = step_profile.kernel_counts(ops)
  param_leaves = step_profile.leaves(run.state[0])
  update = jax.jit(_optimizer_update(run.tx), donate_argnums=(0, 1))
  grads = jax.tree_util.tree_map(jnp.ones_like, run.state[0])
  update = update.lower(*run.state, grads).compile()
  opt_kernels = step_profile.kernel_counts(
      step_profile.hlo_ops(update.as_text()))

  def optimizer_step():
    run.state = update(*run.state, grads)
    return run.state
  opt_s = statistics.median(_time(optimizer_step, args.warmup, args.steps))

  with jax.profiler.trace(args.profile):
    for i in range(args.profile_steps):
      with jax.profiler.StepTraceAnnotation("train", step_num=i):
        jax.block_until_ready(run())
  xplane = step_profile.latest_xplane(args.profile)
  op_times = step_profile.trace_op_times(xplane, ops,
                                         step_profile.module_name(hlo))
  top = sorted(op_times.items(), key=lambda kv: -kv[1][1])
  return {
      "config": args.config, "variant": args.variant,
      "batch": args.batch, "seq_len": args.seq_len,
      "device": jax.devices()[0].device_kind,
      "fit": {"fixed_s": fixed_s, "per_token_s": per_token_s,
              "rows": fit_rows},
      "step_s": step_s,
      "kernels": dict(kernels), "kernels_total": sum(kernels.values()),
      "param_leaves": param_leaves,
      "optimizer": {"kernels": sum(opt_kernels.values()), "step_s": opt_s,
                    "by_category": dict(opt_kernels)},
      "trace_dir": str(args.profile), "xplane": str(xplane),
      "profile_steps": args.profile_steps,
      "traced_ms_per_step": sum(ns for _, ns in op_times.values())
                            / args.profile_steps / 1e6,
      "top_ops": [[label, category, ns / args.profile_steps / 1e6]
                  for label, (category, ns) in top[:args.top_ops]],
      "_op_times": op_times,
  }


def profile_report(p: dict) -> str:
  fit = p["fit"]
  opt = p["optimizer"]
  lines = [
      f"profile of {p['variant']} on {p['device']}, {p['config']}, "
      f"batch {p['batch']} x {p['seq_len']}",
      "", "fixed vs per-token time (median step at each batch size):",
      step_profile.fit_table(fit["rows"], fit["fixed_s"], fit["per_token_s"]),
      "", f"compiled step: {p['kernels_total']} kernel launches per step "
      "(a while loop's body counted once): "
      + step_profile.counts_line(p["kernels"]),
      f"optimizer update alone: {opt['kernels']} kernels for "
      f"{p['param_leaves']} parameter arrays, {opt['step_s'] * 1e3:.3f} ms "
      f"({opt['step_s'] / p['step_s']:.0%} of the step at batch "
      f"{p['batch']})",
      "", f"trace of {p['profile_steps']} steps: {p['xplane']}",
      step_profile.top_ops_table(p["_op_times"], p["profile_steps"],
                                 p["step_s"], top=len(p["top_ops"]))]
  return "\n".join(lines)


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--config", default="gin_configs/models/tiny.gin")
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--warmup", type=int, default=3)
  p.add_argument("--override", action="append", default=[],
                 help="RemBertConfig field=value (JSON value, True/False, or string)")
  p.add_argument("--variants", default=",".join(
      f"{d}:{a}" for d, a in VARIANTS),
                 help="comma-separated dtype:attention list; first = reference")
  p.add_argument("--peak_matmul_size", type=int, default=None,
                 help="n of the n x n matmul that measures the peak for MFU "
                      "(default 8192 on an accelerator, 1024 on CPU)")
  p.add_argument("--variant", default="bfloat16:auto",
                 help="dtype:attention that --hf and --profile run")
  p.add_argument("--hf", action="store_true",
                 help="also time Hugging Face's RemBertForMaskedLM (torch) "
                      "on the same device, batch and steps, in this process")
  p.add_argument("--profile", metavar="DIR",
                 help="trace the step into DIR and print where time goes")
  p.add_argument("--profile_steps", type=int, default=3)
  p.add_argument("--fit_batches", default="",
                 help="comma-separated batch sizes for the fixed/per-token "
                      "fit (default: batch/2 and batch)")
  p.add_argument("--top_ops", type=int, default=15)
  p.add_argument("--json", action="store_true")
  p.add_argument("--_variant", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  os.chdir(REPO_ROOT)  # gin include paths are relative to the repository
  if args._variant:  # pylint: disable=protected-access
    dtype, attention = args._variant.split(",")  # pylint: disable=protected-access
    try:
      row = run_variant(args, dtype, attention)
    except Exception as e:  # pylint: disable=broad-except
      row = {"dtype": dtype, "attention": attention, "error": _failure(e)}
    print(json.dumps(row))
    return
  print(f"config {args.config}, batch {args.batch} x {args.seq_len}, "
        f"overrides {args.override or 'none'}", flush=True)
  if args.hf or args.profile:
    if args.hf:
      # Both frameworks share the device: JAX must not take 75% of it first.
      os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    out = {}
    if args.profile:
      out["profile"] = profile(args)
      print(profile_report(out["profile"]), flush=True)
      out["profile"].pop("_op_times")
    if args.hf:
      out["hf"] = compare_hf(args)
      print(hf_table(out["hf"]), flush=True)
    if args.json:
      print(json.dumps(out))
    return
  variants = [tuple(v.split(":")) for v in args.variants.split(",")]
  rows = []
  for d, a in variants:  # one process each: its own peak memory
    rows.append(_child(args, d, a))
    print(table(rows).splitlines()[-1], flush=True)
  print(table(rows))
  print(peak_lines(rows))
  if args.json:
    print(json.dumps({"config": args.config, "batch": args.batch,
                      "seq_len": args.seq_len, "rows": rows}))


if __name__ == "__main__":
  main()
