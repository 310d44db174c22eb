r"""Training-step throughput: ours (JAX) against Hugging Face (PyTorch CPU).

  python benchmarks/train_step.py --json
  python benchmarks/train_step.py --config=gin_configs/models/paper/table3_ein128_eout768.gin \
      --batch=8 --seq_len=128 --steps=5 --hf_steps=5 --also_no_gather

Both sides run the full training step (forward, backward, optimizer update)
on the same config, batch and sequence length, in one process, after
warm-up, taking turns (the XLA matmul peak too, so every number sees the
same load): each turn is one untimed step and then `--block` timed ones;
medians are reported. Ours: the jitted step from
`train_lib` (AdamW + warm-up/decay + clipping, donated state) with the MLM
head gathered at `ceil(0.15 T) + 2` positions per row. Hugging Face:
`transformers.RemBertForMaskedLM` with `torch.optim.AdamW`, labels only at the
masked positions (HF still runs its head at every position). Also measures
the XLA float32 matmul peak for the MFU (ours_mfu = exact matmul FLOPs of
the step / median step time / peak).
"""

import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import flops as flop_model
from rembert_t5x import optimizer  # pylint: disable=g-import-not-at-top


def hf_step_fn(cfg, batch: dict, seed: int = 0):
  """A closure running one HF training step on `batch`."""
  # Deferred: torch and transformers take seconds to import (hf_peer too).
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from benchmarks import hf_peer  # pylint: disable=g-import-not-at-top
  torch.manual_seed(seed)
  model = transformers.RemBertForMaskedLM(hf_peer.hf_config(cfg))
  model.train()
  opt = hf_peer.adamw(model.parameters(), 1e-4)
  labels = torch.from_numpy(batch["targets"]).long()
  labels[torch.from_numpy(batch["weights"]) == 0] = -100
  inputs = dict(
      input_ids=torch.from_numpy(batch["input_tokens"]).long(),
      token_type_ids=torch.from_numpy(batch["token_types"]).long(),
      attention_mask=torch.from_numpy(batch["segment_ids"] > 0).long(),
      labels=labels)

  def step():
    opt.zero_grad(set_to_none=True)
    loss = model(**inputs).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), optimizer.CLIP_NORM)
    opt.step()

  return step, torch.get_num_threads(), model.__class__.__name__


def run(config: str = common.DEFAULT_CONFIG, batch: int = 8, seq_len: int = 128,
        steps: int = 6, warmup: int = 3, hf_steps: int = 6, hf_warmup: int = 3,
        peak_n: int = 4096, also_no_gather: bool = False,
        skip_hf: bool = False, block: int = 3) -> dict:
  """Runs the comparison; returns the result dict (the JSON line)."""
  cfg = common.load_config(config)
  data = common.synthetic_mlm_batch(batch, seq_len, cfg.vocab_size)
  k = common.max_predictions(seq_len)
  selected = int(data["weights"].sum(-1).max())

  fns, warm, reps = {}, {}, {}
  ours = common.OursStep(cfg, batch, seq_len, max_predictions_per_seq=k)
  ours_batch = ours.put(data)
  fns["ours"], warm["ours"], reps["ours"] = (
      lambda: ours(ours_batch), warmup, steps)
  if also_no_gather:
    full = common.OursStep(cfg, batch, seq_len, max_predictions_per_seq=None)
    full_batch = full.put(data)
    fns["ours_no_gather"] = lambda: full(full_batch)
    warm["ours_no_gather"], reps["ours_no_gather"] = warmup, steps
  fns["peak"], warm["peak"], reps["peak"] = (
      common.xla_matmul(peak_n), 1, max(steps, hf_steps))
  threads = None
  if not skip_hf:
    fns["hf"], threads, _ = hf_step_fn(cfg, data)
    warm["hf"], reps["hf"] = hf_warmup, hf_steps

  times = common.time_interleaved(fns, warm, reps, block=block, rewarm=1)
  metrics = ours.last_metrics()
  if metrics["mlm/dropped_predictions"] != 0:
    raise RuntimeError(f"max_predictions_per_seq={k} dropped predictions")
  peak = 2 * peak_n ** 3 / common.median(times["peak"])

  tokens = batch * seq_len
  ours_s = common.median(times["ours"])
  ours_flops = flop_model.train_step_flops(cfg, batch, seq_len, k)
  result = {
      "config": config, "batch": batch, "seq_len": seq_len,
      "ours_tokens_per_s": tokens / ours_s,
      "hf_tokens_per_s": None, "ratio": None,
      "ours_mfu": ours_flops / ours_s / peak,
      "peak_flops_per_s": peak,
      "ours_step_s": ours_s, "ours_step_flops": ours_flops,
      "ours_flops_per_s": ours_flops / ours_s,
      "max_predictions_per_seq": k, "selected_per_row": selected,
      "ours_loss": metrics["loss"],
      "steps": {name: len(t) for name, t in times.items()},
      "peak_matmul_n": peak_n,
      "jax_devices": [str(d) for d in __import__("jax").devices()],
      "glibc_tunables": common.malloc_setting(),
      "timed_steps_per_turn": block,
  }
  if not skip_hf:
    hf_s = common.median(times["hf"])
    hf_flops = flop_model.train_step_flops(cfg, batch, seq_len, seq_len)
    result.update(
        hf_tokens_per_s=tokens / hf_s, ratio=hf_s / ours_s, hf_step_s=hf_s,
        hf_step_flops=hf_flops, hf_flops_per_s=hf_flops / hf_s,
        hf_mfu_vs_xla_peak=hf_flops / hf_s / peak, torch_threads=threads)
  if also_no_gather:
    ng_s = common.median(times["ours_no_gather"])
    ng_flops = flop_model.train_step_flops(cfg, batch, seq_len, seq_len)
    result.update(
        ours_no_gather_tokens_per_s=tokens / ng_s, ours_no_gather_step_s=ng_s,
        ours_no_gather_mfu=ng_flops / ng_s / peak,
        gather_speedup=ng_s / ours_s)
  result["all_step_times_s"] = {n: [round(x, 4) for x in t]
                                for n, t in times.items()}
  return result


def print_table(r: dict) -> None:
  print(f"GLIBC_TUNABLES: {r['glibc_tunables']}")
  print(f"config {r['config']}  batch {r['batch']}  seq_len {r['seq_len']}  "
        f"(MLM head at {r['max_predictions_per_seq']} positions/row; "
        f"{r['selected_per_row']} selected)")
  print(f"{'':16s} {'step s':>8s} {'tokens/s':>10s} {'GFLOP/step':>11s} "
        f"{'GFLOP/s':>9s} {'MFU':>6s}")
  rows = [("ours", r["ours_step_s"], r["ours_step_flops"])]
  if "ours_no_gather_step_s" in r:
    rows.append(("ours, no gather", r["ours_no_gather_step_s"],
                 r["ours_no_gather_mfu"] * r["peak_flops_per_s"]
                 * r["ours_no_gather_step_s"]))
  if r["hf_tokens_per_s"] is not None:
    rows.append(("hugging face", r["hf_step_s"], r["hf_step_flops"]))
  tokens = r["batch"] * r["seq_len"]
  for name, s, fl in rows:
    print(f"{name:16s} {s:8.3f} {tokens / s:10.1f} {fl / 1e9:11.1f} "
          f"{fl / s / 1e9:9.1f} {fl / s / r['peak_flops_per_s']:6.3f}")
  print(f"XLA fp32 matmul peak ({r['peak_matmul_n']}^3): "
        f"{r['peak_flops_per_s'] / 1e9:.1f} GFLOP/s")
  if r["ratio"] is not None:
    print(f"ratio ours/HF tokens/s: {r['ratio']:.2f}")


def main(argv=None):
  p = common.argument_parser(__doc__)
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=6, help="timed steps, ours")
  p.add_argument("--warmup", type=int, default=3, help="after compilation")
  p.add_argument("--hf_steps", type=int, default=6)
  p.add_argument("--hf_warmup", type=int, default=3)
  p.add_argument("--peak_n", type=int, default=4096)
  p.add_argument("--block", type=int, default=3,
                 help="timed steps per turn (each turn starts with one "
                      "untimed step)")
  p.add_argument("--also_no_gather", action="store_true",
                 help="also time our step with the MLM head at every position")
  p.add_argument("--skip_hf", action="store_true")
  p.add_argument("--json", action="store_true", help="print one JSON line")
  a = p.parse_args(argv)
  r = run(a.config, a.batch, a.seq_len, a.steps, a.warmup, a.hf_steps,
          a.hf_warmup, a.peak_n, a.also_no_gather, a.skip_hf, a.block)
  print_table(r)
  if a.json:
    print(json.dumps(r))


if __name__ == "__main__":
  common.reexec_with_hugepage_malloc()
  main()
