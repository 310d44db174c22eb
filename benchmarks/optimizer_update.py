r"""The AdamW update alone, per parameter layout: where its time goes.

  python benchmarks/optimizer_update.py --config gin_configs/models/paper/rembert.gin
  python benchmarks/optimizer_update.py --config gin_configs/models/tiny.gin --json

The update reads parameters, gradients and both moments and writes
parameters and moments: 28 bytes per float32 parameter, a memory-bound
pass. This times it, compiled alone with the state donated as in the train
step, on the MLM model's parameter shapes in several layouts, in one
process, taking turns:

- `optax_adamw`: `optax.adamw` on the unscanned tree (one array per
  parameter of every layer; what `accelerator_step.py --profile` reports);
- `ours`: `optimizer.adamw` (global-norm clipping + AdamW with BERT's decay
  mask), the update both training paths run, on the same tree;
- `ours_scanned`: the same on the scanned layout (`scan_layers=True`: each
  layer parameter stacked over the layers, ~30 arrays instead of ~525);
- `optax_flatten`: `optax.flatten(optax.adamw)`: moments kept as one vector,
  gradients and parameters concatenated every step;
- `one_array`: `optax.adamw` on a single array of as many elements: one
  fused kernel, the layout's best case;
- `copy`: `x * 1` over that array (8 bytes per element), for the machine's
  memory bandwidth; the floor printed is 28 bytes per parameter at it.

Prints a table (or JSON lines): kernels launched, median ms (min-max) and
GB/s of the 28-byte traffic.
"""

import argparse
import dataclasses
import json
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top
import optax  # pylint: disable=g-import-not-at-top

from benchmarks import step_profile  # pylint: disable=g-import-not-at-top
from rembert_t5x import configs  # pylint: disable=g-import-not-at-top
from rembert_t5x import network  # pylint: disable=g-import-not-at-top
from rembert_t5x import optimizer  # pylint: disable=g-import-not-at-top

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYOUTS = ("optax_adamw", "ours", "ours_scanned", "optax_flatten",
           "one_array", "copy")
BYTES_PER_PARAM = 28  # read p, g, m, v; write p, m, v (float32)


def param_shapes(cfg: network.RemBertConfig):
  """The MLM model's parameter shapes (nothing allocated)."""
  module = network.RemBertForMaskedLM(cfg)
  tokens = jnp.zeros((1, 8), jnp.int32)
  return jax.eval_shape(
      lambda: module.init(jax.random.PRNGKey(0), tokens, tokens,
                          tokens)["params"])


def _filled(shapes, value: float):
  return jax.jit(lambda: jax.tree_util.tree_map(
      lambda s: jnp.full(s.shape, value, s.dtype), shapes))()


@dataclasses.dataclass
class Timed:
  layout: str
  arrays: int
  params: int
  kernels: int
  times_s: list

  @property
  def median_s(self) -> float:
    return statistics.median(self.times_s)


def _time_update(tx, params, grads, warmup: int, steps: int):
  """Compiles tx's update (state donated) and times `steps` calls."""
  def update(p, s, g):
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s

  state = tx.init(params)
  compiled = jax.jit(update, donate_argnums=(0, 1)).lower(
      params, state, grads).compile()
  kernels = sum(step_profile.kernel_counts(
      step_profile.hlo_ops(compiled.as_text())).values())
  times = []
  for i in range(warmup + steps):
    start = time.perf_counter()
    params, state = compiled(params, state, grads)
    jax.block_until_ready(params)
    if i >= warmup:
      times.append(time.perf_counter() - start)
  return kernels, times


def run_layout(layout: str, cfg: network.RemBertConfig, warmup: int,
               steps: int) -> Timed:
  lr = 1e-4
  plain = optax.adamw(lr, b1=optimizer.B1, b2=optimizer.B2,
                      eps=optimizer.EPS, weight_decay=optimizer.WEIGHT_DECAY)
  scanned = dataclasses.replace(cfg, scan_layers=True)
  shapes = param_shapes(scanned if layout == "ours_scanned" else cfg)
  count = sum(int(np.prod(s.shape)) for s in jax.tree_util.tree_leaves(shapes))
  arrays = len(jax.tree_util.tree_leaves(shapes))
  if layout in ("one_array", "copy"):
    shapes = {"w": jax.ShapeDtypeStruct((count,), jnp.float32)}
    arrays = 1
  params = _filled(shapes, 0.02)
  grads = _filled(shapes, 1e-3)
  if layout == "copy":
    scale = jax.jit(lambda x: x * 1.0001)
    kernels = 1
    times = []
    x = params["w"]
    for i in range(warmup + steps):
      start = time.perf_counter()
      x = jax.block_until_ready(scale(x))
      if i >= warmup:
        times.append(time.perf_counter() - start)
    return Timed(layout, arrays, count, kernels, times)
  tx = {"optax_adamw": plain, "one_array": plain,
        "optax_flatten": optax.flatten(plain),
        "ours": optimizer.adamw(lr),
        "ours_scanned": optimizer.adamw(lr)}[layout]
  kernels, times = _time_update(tx, params, grads, warmup, steps)
  return Timed(layout, arrays, count, kernels, times)


def table(rows, device: str) -> str:
  copy = next((r for r in rows if r.layout == "copy"), None)
  lines = [f"AdamW update alone on {device}",
           "| layout | arrays | parameters | kernels | ms median (min-max) "
           "| GB/s of 28 B/param |", "|---|---|---|---|---|---|"]
  for r in rows:
    nbytes = (8 if r.layout == "copy" else BYTES_PER_PARAM) * r.params
    lines.append(
        f"| {r.layout} | {r.arrays} | {r.params:,} | {r.kernels} | "
        f"{r.median_s * 1e3:.2f} ({min(r.times_s) * 1e3:.2f}-"
        f"{max(r.times_s) * 1e3:.2f}) | {nbytes / r.median_s / 1e9:,.0f} |")
  if copy:
    bandwidth = 8 * copy.params / copy.median_s
    floor = BYTES_PER_PARAM * copy.params / bandwidth
    lines.append(f"memory floor at the copy's {bandwidth / 1e9:,.0f} GB/s: "
                 f"{floor * 1e3:.2f} ms for {copy.params:,} parameters")
  return "\n".join(lines)


def main(argv=None) -> None:
  p = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--config", default="gin_configs/models/paper/rembert.gin")
  p.add_argument("--layouts", default=",".join(LAYOUTS))
  p.add_argument("--warmup", type=int, default=2)
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--json", action="store_true")
  a = p.parse_args(argv)
  layouts = a.layouts.split(",")
  unknown = set(layouts) - set(LAYOUTS)
  if unknown:
    p.error(f"--layouts: unknown {sorted(unknown)}; choose from {LAYOUTS}")
  path = pathlib.Path(a.config)
  if not path.exists():
    path = REPO_ROOT / a.config
  cfg = configs.config_from_gin(str(path))
  device = jax.devices()[0].device_kind
  rows = []
  for layout in layouts:
    r = run_layout(layout, cfg, a.warmup, a.steps)
    rows.append(r)
    if a.json:
      print(json.dumps(dict(dataclasses.asdict(r), median_s=r.median_s,
                            device=device, config=a.config)), flush=True)
  if not a.json:
    print(table(rows, device))


if __name__ == "__main__":
  main()
