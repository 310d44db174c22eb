"""Hugging Face's RemBERT MLM training step (PyTorch), the peer of ours.

Used by `benchmarks/accelerator_step.py --hf`: the same config, batch and
number of warm-up/timed steps as our step, on the same device (CUDA when
JAX runs on a GPU, else the CPU). `RemBertForMaskedLM` with random weights,
bfloat16 autocast when our variant computes in bfloat16 (float32 parameters
and optimizer state, as ours), `torch.optim.AdamW` with our hyper-parameters
(fused on CUDA) and no clipping (our benchmark step has none). Labels sit
only at the masked positions, but HF's head still runs at every position.

`hf_config` (our config as HF's, through the converter's one builder) and
`adamw` (torch's AdamW with `optimizer.py`'s settings) also make the peers
of `train_step.py` and `finetune_throughput.py`.

Imports torch and transformers: import this module only when the peer runs.
"""

import statistics
import time
from typing import Optional

import numpy as np
import torch
import transformers

from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x import network
from rembert_t5x import optimizer


def hf_config(cfg: network.RemBertConfig, head: cc.Head = cc.Head.MASKED_LM,
              **overrides) -> transformers.RemBertConfig:
  """Our network config as Hugging Face's (`cc.hf_config`: same sizes, same
  dropout), with no [CLS]/[SEP] ids."""
  # HF's defaults (312, 313: the released vocabulary's [CLS]/[SEP]) lie
  # outside small vocabularies; a training step uses neither.
  return cc.hf_config(cfg, head, bos_token_id=None, eos_token_id=None,
                      **overrides)


def adamw(parameters, learning_rate: float,
          fused: Optional[bool] = None) -> torch.optim.AdamW:
  """torch's AdamW with our settings (`optimizer.adamw`'s defaults, paper
  Table 14); clipping, where a peer clips, is its own step."""
  return torch.optim.AdamW(
      parameters, lr=learning_rate, betas=(optimizer.B1, optimizer.B2),
      eps=optimizer.EPS, weight_decay=optimizer.WEIGHT_DECAY, fused=fused)


def torch_device(on_gpu: bool) -> torch.device:
  if not on_gpu:
    return torch.device("cpu")
  if not torch.cuda.is_available():
    raise RuntimeError("JAX runs on a GPU but this torch has no CUDA "
                       f"(torch {torch.__version__})")
  return torch.device("cuda")


def run(cfg: network.RemBertConfig, batch: dict, dtype: str, warmup: int,
        steps: int, on_gpu: bool, seed: int = 0) -> dict:
  """Times HF's step on `batch` (the arrays of our benchmark's batch).

  Args:
    cfg: our network config.
    batch: `input_tokens`, `token_types`, `segment_ids` `[batch, length]`,
      `masked_positions` and `targets` `[batch, predictions]`.
    dtype: our activation dtype: "bfloat16" autocasts, else float32.
    warmup: untimed steps after the first.
    steps: timed steps.
    on_gpu: run on CUDA (JAX's backend is a GPU).
    seed: torch's seed for the random weights.

  Returns:
    first_loss, step_s (median), step_s_min, step_s_max, peak_bytes (CUDA
    only, else None), device, precision and attention (HF's implementation).

  Raises:
    RuntimeError: `on_gpu` but torch has no CUDA.
  """
  device = torch_device(on_gpu)
  torch.manual_seed(seed)
  model = transformers.RemBertForMaskedLM(hf_config(cfg)).to(device)
  model.train()
  opt = adamw(model.parameters(), 1e-4, fused=device.type == "cuda")
  as_tensor = lambda name: torch.from_numpy(  # pylint: disable=g-long-lambda
      np.array(batch[name])).long().to(device)
  tokens = as_tensor("input_tokens")
  labels = torch.full_like(tokens, -100)
  labels.scatter_(1, as_tensor("masked_positions"), as_tensor("targets"))
  inputs = dict(input_ids=tokens, token_type_ids=as_tensor("token_types"),
                attention_mask=(as_tensor("segment_ids") > 0).long(),
                labels=labels)
  bf16 = dtype == "bfloat16"

  def step() -> torch.Tensor:
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
      loss = model(**inputs).loss
    loss.backward()
    opt.step()
    return loss

  def sync() -> None:
    if device.type == "cuda":
      torch.cuda.synchronize(device)

  if device.type == "cuda":
    torch.cuda.reset_peak_memory_stats(device)
  first_loss = float(step().detach())
  for _ in range(warmup):
    step()
  sync()
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    step()
    sync()
    times.append(time.perf_counter() - start)
  peak: Optional[int] = (torch.cuda.max_memory_allocated(device)
                         if device.type == "cuda" else None)
  return {
      "first_loss": first_loss, "step_s": statistics.median(times),
      "step_s_min": min(times), "step_s_max": max(times),
      "peak_bytes": peak,
      "device": (torch.cuda.get_device_name(device)
                 if device.type == "cuda" else "cpu"),
      "precision": "bfloat16 autocast" if bf16 else "float32",
      "attention": model.config._attn_implementation,  # pylint: disable=protected-access
      "torch": torch.__version__, "transformers": transformers.__version__,
  }
