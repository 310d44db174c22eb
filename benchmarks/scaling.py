r"""Scaling curves of our training step: tokens/s vs sequence length and layers.

  python benchmarks/scaling.py --json --out benchmarks/scaling.png
  python benchmarks/scaling.py --seq_lens 128,256,512 --batches 8,4,2 \
      --layers 2,4,8,12 --steps 2 --warmup 1

Each point is the full jitted training step from `common.OursStep`
(forward, backward, AdamW update, donated state, MLM head gathered at
`ceil(0.15 T) + 2` positions per row) on a synthetic masked batch.
Two sweeps on one config:

* sequence length: `--seq_lens` with `--batches` (same length; keep
  batch * T roughly constant so every point does similar work per token),
  at the config's number of layers;
* layers: `--layers` at `--layers_seq_len` / `--layers_batch` (default: the
  first sequence length and batch), the config otherwise unchanged.

A point present in both sweeps is measured once. Points run one after the
other (one model in memory at a time); inside each point the step and an
XLA float32 `peak_n`^3 matmul are timed round robin, so each point's MFU
uses a peak measured under that point's load. GFLOP/s come from the exact
matmul FLOP count (`flop_model.train_step_flops`); `attn_share` is the part of
those FLOPs in the attention score and context matmuls (4·T·H per token per
layer, x3 for the step), the term that grows with T².
"""

import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses
import gc
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import flops as flop_model


def _ints(s: str) -> list[int]:
  return [int(x) for x in s.split(",") if x.strip()]


def attention_flops(cfg, batch: int, seq_len: int) -> int:
  """Step FLOPs (x3 forward) of the attention score and context matmuls."""
  return 3 * batch * seq_len * cfg.num_pretraining_layers * (
      2 * 2 * seq_len * cfg.emb_dim)


def measure_point(cfg, batch: int, seq_len: int, steps: int, warmup: int,
                  peak_n: int) -> dict:
  """Times one (config, batch, T) point: step and peak matmul, round robin."""
  k = common.max_predictions(seq_len)
  data = common.synthetic_mlm_batch(batch, seq_len, cfg.vocab_size)
  ours = common.OursStep(cfg, batch, seq_len, max_predictions_per_seq=k)
  dev_batch = ours.put(data)
  tick = time.perf_counter()
  ours(dev_batch)  # compilation + first step
  compile_s = time.perf_counter() - tick
  times = common.time_interleaved(
      {"step": lambda: ours(dev_batch), "peak": common.xla_matmul(peak_n)},
      {"step": warmup, "peak": 1}, {"step": steps, "peak": steps})
  metrics = ours.last_metrics()
  if metrics["mlm/dropped_predictions"] != 0:
    raise RuntimeError(f"max_predictions_per_seq={k} dropped predictions")
  step_s = common.median(times["step"])
  peak = 2 * peak_n ** 3 / common.median(times["peak"])
  flops = flop_model.train_step_flops(cfg, batch, seq_len, k)
  del ours, dev_batch
  gc.collect()
  return {
      "num_layers": cfg.num_pretraining_layers, "batch": batch,
      "seq_len": seq_len, "tokens_per_step": batch * seq_len,
      "max_predictions_per_seq": k,
      "step_s": step_s, "tokens_per_s": batch * seq_len / step_s,
      "step_flops": flops, "gflop_per_s": flops / step_s / 1e9,
      "attn_share": attention_flops(cfg, batch, seq_len) / flops,
      "peak_gflop_per_s": peak / 1e9, "mfu": flops / step_s / peak,
      "compile_s": compile_s, "loss": metrics["loss"],
      "step_times_s": [round(x, 4) for x in times["step"]],
  }


def run(config: str = common.DEFAULT_CONFIG, seq_lens=(128, 256, 512),
        batches=(8, 4, 2), layers=(2, 4, 8, 12), layers_seq_len=None,
        layers_batch=None, steps: int = 2, warmup: int = 1,
        peak_n: int = 2048, log=None) -> dict:
  """Runs both sweeps; returns the result dict (the JSON line)."""
  seq_lens, batches, layers = list(seq_lens), list(batches), list(layers)
  if len(seq_lens) != len(batches):
    raise ValueError(f"--seq_lens {seq_lens} and --batches {batches} must "
                     "have the same length")
  base = common.load_config(config)
  base_layers = base.num_pretraining_layers
  layers_seq_len = layers_seq_len or seq_lens[0]
  layers_batch = layers_batch or batches[0]
  if max(seq_lens + [layers_seq_len]) > base.max_position_embeddings:
    raise ValueError(f"sequence length above max_position_embeddings="
                     f"{base.max_position_embeddings}")

  # (num_layers, batch, seq_len) -> sweeps it belongs to, in run order.
  plan: dict[tuple[int, int, int], list[str]] = {}
  for t, b in zip(seq_lens, batches):
    plan.setdefault((base_layers, b, t), []).append("seq_len")
  for n in layers:
    plan.setdefault((n, layers_batch, layers_seq_len), []).append("layers")

  started = time.time()
  points = []
  for (n, b, t), sweeps in plan.items():
    cfg = dataclasses.replace(base, num_layers=n, num_pretraining_only_layers=0)
    p = measure_point(cfg, b, t, steps, warmup, peak_n)
    p["sweeps"] = sweeps
    points.append(p)
    if log:
      log(f"  layers {n:3d}  batch {b:3d}  T {t:4d}: "
          f"{p['step_s']:.3f} s/step, {p['tokens_per_s']:.1f} tokens/s "
          f"(compile {p['compile_s']:.1f} s)")
  return {
      "config": config, "base_num_layers": base_layers,
      "layers_seq_len": layers_seq_len, "layers_batch": layers_batch,
      "steps": steps, "warmup": warmup, "peak_matmul_n": peak_n,
      "wall_s": time.time() - started,
      "jax_devices": [str(d) for d in __import__("jax").devices()],
      "glibc_tunables": common.malloc_setting(),
      "points": points,
  }


def sweep(r: dict, name: str) -> list[dict]:
  key = "seq_len" if name == "seq_len" else "num_layers"
  return sorted((p for p in r["points"] if name in p["sweeps"]),
                key=lambda p: p[key])


def print_table(r: dict) -> None:
  print(f"config {r['config']}  ({r['steps']} timed steps after "
        f"{r['warmup']} warm-up; medians; peak = {r['peak_matmul_n']}^3 "
        "fp32 matmul, same point)")
  head = (f"{'sweep':8s} {'layers':>6s} {'batch':>5s} {'T':>5s} "
          f"{'step s':>8s} {'tokens/s':>9s} {'GFLOP/step':>10s} "
          f"{'GFLOP/s':>8s} {'attn %':>6s} {'peak GF/s':>9s} {'MFU':>5s}")
  print(head)
  for name in ("seq_len", "layers"):
    for p in sweep(r, name):
      print(f"{name:8s} {p['num_layers']:6d} {p['batch']:5d} "
            f"{p['seq_len']:5d} {p['step_s']:8.3f} {p['tokens_per_s']:9.1f} "
            f"{p['step_flops'] / 1e9:10.1f} {p['gflop_per_s']:8.1f} "
            f"{100 * p['attn_share']:6.1f} {p['peak_gflop_per_s']:9.1f} "
            f"{p['mfu']:5.2f}")
  print(f"wall {r['wall_s']:.0f} s")


def plot(r: dict, out: str) -> None:
  """Two panels (vs T, vs layers): tokens/s left axis, GFLOP/s right axis."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  panels = [
      ("seq_len", "seq_len", "sequence length T",
       f"{r['base_num_layers']} layers, batch x T ~ const"),
      ("layers", "num_layers", "layers",
       f"T = {r['layers_seq_len']}, batch {r['layers_batch']}"),
  ]
  for ax, (name, key, xlabel, note) in zip(axes, panels):
    pts = sweep(r, name)
    xs = [p[key] for p in pts]
    ax.plot(xs, [p["tokens_per_s"] for p in pts], "o-", color="tab:blue",
            label="tokens/s")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("tokens/s", color="tab:blue")
    ax.set_xticks(xs)
    if name == "seq_len":
      ax.set_xscale("log", base=2)
      ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.plot(xs, [p["gflop_per_s"] for p in pts], "s--", color="tab:red",
             label="achieved GFLOP/s")
    ax2.plot(xs, [p["peak_gflop_per_s"] for p in pts], ":", color="tab:gray",
             label="matmul peak GFLOP/s (same point)")
    ax2.set_ylabel("GFLOP/s", color="tab:red")
    ax2.set_ylim(bottom=0)
    for p, x in zip(pts, xs):
      ax.annotate(f"attn {100 * p['attn_share']:.0f}%",
                  (x, p["tokens_per_s"]), textcoords="offset points",
                  xytext=(0, -14), ha="center", fontsize=7)
    ax.set_title(f"vs {xlabel} ({note})", fontsize=9)
    if name == "seq_len":
      lines = ax.get_lines()[:1] + ax2.get_lines()
      ax.legend(lines, [l.get_label() for l in lines], fontsize=7,
                loc="lower left")
  fig.suptitle(f"Training step scaling: {pathlib.Path(r['config']).name}",
               fontsize=10)
  fig.tight_layout()
  fig.savefig(out, dpi=110)
  plt.close(fig)


def main(argv=None):
  p = common.argument_parser(__doc__)
  p.add_argument("--seq_lens", type=_ints, default=[128, 256, 512])
  p.add_argument("--batches", type=_ints, default=[8, 4, 2],
                 help="one per --seq_lens entry")
  p.add_argument("--layers", type=_ints, default=[2, 4, 8, 12])
  p.add_argument("--layers_seq_len", type=int, default=None,
                 help="T of the layers sweep (default: first --seq_lens)")
  p.add_argument("--layers_batch", type=int, default=None,
                 help="batch of the layers sweep (default: first --batches)")
  p.add_argument("--steps", type=int, default=2, help="timed steps per point")
  p.add_argument("--warmup", type=int, default=1,
                 help="untimed steps per point after the compiling one")
  p.add_argument("--peak_n", type=int, default=2048)
  p.add_argument("--out", default="benchmarks/scaling.png",
                 help="PNG plot path ('' to skip)")
  p.add_argument("--json", action="store_true", help="also print a JSON line")
  a = p.parse_args(argv)
  log = lambda s: print(s, file=sys.stderr, flush=True)
  r = run(a.config, a.seq_lens, a.batches, a.layers, a.layers_seq_len,
          a.layers_batch, a.steps, a.warmup, a.peak_n, log=log)
  if a.out:
    plot(r, a.out)
    r["plot"] = a.out
  print_table(r)
  if a.json:
    print(json.dumps(r))


if __name__ == "__main__":
  common.reexec_with_hugepage_malloc()
  main()
