r"""Where our training step's time goes: forward, backward, optimizer update.

  python benchmarks/step_breakdown.py --batch=8 --seq_len=128

Times, round robin in one process, jitted functions on the same params and
batch: the loss (forward), the loss and gradients (forward + backward), and
the full step (plus clipping and AdamW, with donation). Differences give the
backward and optimizer shares.
"""

import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import flops as flop_model


def run(config=common.DEFAULT_CONFIG, batch=8, seq_len=128, steps=4,
        gather=True) -> dict:
  cfg = common.load_config(config)
  k = common.max_predictions(seq_len) if gather else None
  step = common.OursStep(cfg, batch, seq_len, k)
  data = step.put(common.synthetic_mlm_batch(batch, seq_len, cfg.vocab_size))
  model = step.model
  params = jax.tree_util.tree_map(lambda x: x.copy(), step.state.params)
  fwd = jax.jit(lambda p, b: model.loss_fn(p, b)[0])
  grad = jax.jit(jax.grad(lambda p, b: model.loss_fn(p, b)[0]))
  fns = {
      "forward": lambda: jax.block_until_ready(fwd(params, data)),
      "forward_backward": lambda: jax.block_until_ready(grad(params, data)),
      "full_step": lambda: step(data),
  }
  times = common.time_interleaved(fns, {n: 1 for n in fns},
                                  {n: steps for n in fns})
  med = {n: common.median(t) for n, t in times.items()}
  flops = flop_model.forward_matmul_flops(cfg, batch, seq_len, k or seq_len)
  return {
      "config": config, "batch": batch, "seq_len": seq_len,
      "max_predictions_per_seq": k,
      "forward_s": med["forward"],
      "backward_s": med["forward_backward"] - med["forward"],
      "update_s": med["full_step"] - med["forward_backward"],
      "full_step_s": med["full_step"],
      "forward_gflop_per_s": flops / med["forward"] / 1e9,
      "forward_backward_gflop_per_s": 3 * flops / med["forward_backward"] / 1e9,
      "glibc_tunables": common.malloc_setting(),
      "num_params": sum(x.size for x in jax.tree_util.tree_leaves(params)),
      "times_s": {n: [round(x, 3) for x in t] for n, t in times.items()},
  }


def main(argv=None):
  p = common.argument_parser(__doc__)
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=4)
  p.add_argument("--no_gather", action="store_true")
  a = p.parse_args(argv)
  print(json.dumps(run(a.config, a.batch, a.seq_len, a.steps,
                       not a.no_gather)))


if __name__ == "__main__":
  common.reexec_with_hugepage_malloc()
  main()
