r"""One encoder layer with each attention implementation: einsum vs jax's.

  python benchmarks/attention.py --config=gin_configs/models/tiny.gin
  python benchmarks/attention.py            # base size (H 768, 12 heads)

Times, round robin in one process, the jitted forward and forward + backward
of one `EncoderLayer` (attention, MLP, LayerNorms) per
`RemBertConfig.attention_implementation`: "einsum" (ours) and "xla"
(`jax.nn.dot_product_attention`), plus "cudnn" on a GPU (bfloat16, the only
dtypes cuDNN's fused attention takes; `--dtype` sets the others' dtype).
Prints one JSON line with median seconds per call and the largest output
difference from "einsum".
"""

import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
from rembert_t5x import layers  # pylint: disable=g-import-not-at-top
from rembert_t5x import network  # pylint: disable=g-import-not-at-top


def _layer_fns(cfg: network.RemBertConfig, batch: int, seq_len: int):
  """Jitted forward and forward+backward of one layer, and their inputs."""
  layer = network.EncoderLayer(cfg)
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((batch, seq_len, cfg.emb_dim)),
                  cfg.compute_dtype)
  segment_ids = np.ones((batch, seq_len), np.int32)
  segment_ids[:, seq_len - seq_len // 8:] = 0  # some padding
  mask = layers.make_attention_mask(jnp.asarray(segment_ids))
  params = layer.init(jax.random.PRNGKey(0), x, mask, False)
  forward = jax.jit(lambda p: layer.apply(p, x, mask, False))
  loss = lambda p: jnp.sum(
      layer.apply(p, x, mask, False).astype(jnp.float32) ** 2)
  backward = jax.jit(jax.grad(loss))
  return params, forward, backward


def run(config=common.DEFAULT_CONFIG, batch=8, seq_len=128, steps=5,
        dtype="float32") -> dict:
  base = dataclasses.replace(common.load_config(config), dtype=dtype)
  implementations = ["einsum", "xla"]
  if jax.default_backend() == "gpu":
    implementations.append("cudnn")
  fns, outputs = {}, {}
  for impl in implementations:
    cfg = dataclasses.replace(
        base, attention_implementation=impl,
        dtype="bfloat16" if impl == "cudnn" else base.dtype)
    params, forward, backward = _layer_fns(cfg, batch, seq_len)
    if impl == "cudnn":  # same weights as the others
      params = fns["einsum_forward"].params
    outputs[impl] = np.asarray(forward(params), np.float32)
    fns[f"{impl}_forward"] = _Timed(forward, params)
    fns[f"{impl}_forward_backward"] = _Timed(backward, params)
  times = common.time_interleaved(fns, {n: 1 for n in fns},
                                  {n: steps for n in fns})
  return {
      "config": config, "batch": batch, "seq_len": seq_len, "dtype": dtype,
      "backend": jax.default_backend(),
      "device": jax.devices()[0].device_kind,
      "median_s": {n: round(common.median(t), 5) for n, t in times.items()},
      "max_abs_diff_from_einsum": {
          impl: float(np.max(np.abs(out - outputs["einsum"])))
          for impl, out in outputs.items() if impl != "einsum"},
  }


class _Timed:
  """A jitted function of the params, blocked on: what one turn times."""

  def __init__(self, fn, params):
    self.fn, self.params = fn, params

  def __call__(self):
    jax.block_until_ready(self.fn(self.params))


def main(argv=None):
  p = common.argument_parser(__doc__)
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=5)
  p.add_argument("--dtype", default="float32")
  a = p.parse_args(argv)
  print(json.dumps(run(a.config, a.batch, a.seq_len, a.steps, a.dtype)))


if __name__ == "__main__":
  common.reexec_with_hugepage_malloc()
  main()
