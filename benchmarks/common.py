"""Shared pieces of the benchmarks: configs, batches, FLOP counts, timing.

Benchmarks are scripts, not tests: they time things. `tests/benchmarks_test.py`
only runs them on a tiny config to check their output.
"""

import argparse
import math
import os
import pathlib
import statistics
import sys
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from rembert_t5x import configs
from rembert_t5x.data import pieces
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import train_lib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = "gin_configs/models/paper/table3_ein128_eout768.gin"
SELECT_RATE = 0.15  # preprocessors.mask_tokens' default
# Packed rows hold several segments, each rounding its own 15% (and taking at
# least one): a few more than ceil(0.15 * T) can be selected in one row.
PREDICTION_MARGIN = 2


# glibc's malloc asked to back its large blocks with transparent huge pages.
# XLA:CPU allocates a step's temporaries afresh every step; with 4 KiB pages
# our step took ~440,000 page faults per step here, and with this setting
# it runs ~8% faster. PyTorch's step, in the same process, got slower and
# erratic with it, so it is opt-in (`--hugepage_malloc`) and never the
# default of a comparison. See RESULTS.md, v5 and v6.
HUGEPAGE_MALLOC = "glibc.malloc.hugetlb=1"
HUGEPAGE_MALLOC_FLAG = "--hugepage_malloc"


def reexec_with_hugepage_malloc() -> None:
  """With `--hugepage_malloc`: re-runs this script with that glibc tunable.

  Called from a benchmark's `__main__` block only (never under pytest): glibc
  reads its tunables once, at process start, so the script starts itself
  again with `GLIBC_TUNABLES` += glibc.malloc.hugetlb=1 (Linux only; a no-op
  when glibc already has a hugetlb setting). Everything the run measures
  then runs under it.
  """
  current = os.environ.get("GLIBC_TUNABLES", "")
  if (sys.platform != "linux" or HUGEPAGE_MALLOC_FLAG not in sys.argv
      or "glibc.malloc.hugetlb" in current):
    return
  env = dict(os.environ,
             GLIBC_TUNABLES=":".join(t for t in (current, HUGEPAGE_MALLOC) if t))
  os.execve(sys.executable, [sys.executable] + sys.argv, env)


def argument_parser(doc: str) -> argparse.ArgumentParser:
  """A benchmark's parser: its docstring's first line, `--config`, and
  `--hugepage_malloc` (acted on by `reexec_with_hugepage_malloc`)."""
  p = argparse.ArgumentParser(description=doc.splitlines()[0])
  p.add_argument(HUGEPAGE_MALLOC_FLAG, action="store_true",
                 help="run under GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "
                      "(re-starts the script; Linux)")
  p.add_argument("--config", default=DEFAULT_CONFIG)
  return p


def malloc_setting() -> str:
  """What the result JSON records about glibc's tunables."""
  return os.environ.get("GLIBC_TUNABLES", "") or "(default)"


def load_config(path: str) -> network.RemBertConfig:
  p = pathlib.Path(path)
  if not p.is_absolute() and not p.exists():
    p = REPO_ROOT / path
  return configs.config_from_gin(str(p))


def max_predictions(seq_len: int) -> int:
  """Gathered MLM-head positions per row: ceil(0.15 * T) + margin."""
  return math.ceil(SELECT_RATE * seq_len) + PREDICTION_MARGIN


def num_selected(num_candidates: int) -> int:
  """How many tokens `mask_tokens` selects among n non-special ones."""
  return min(max(int(math.floor(num_candidates * SELECT_RATE + 0.5)), 1),
             num_candidates)


def synthetic_mlm_batch(batch: int, seq_len: int, vocab_size: int,
                        seed: int = 0) -> dict[str, np.ndarray]:
  """One full-length `[CLS] … [SEP]` row per example, masked like the pipeline.

  Exactly `num_selected(seq_len - 2)` non-special positions per row carry
  weight 1 (80% [MASK], 10% random, 10% kept), as `preprocessors.mask_tokens`
  selects them. There is no vocabulary file: the special ids are those of
  our trained vocabularies (`pieces.TRAINED_LAYOUT`, 0-4).
  """
  rng = np.random.default_rng(seed)
  special = pieces.TRAINED_LAYOUT
  first_ordinary = max(special.as_tuple()) + 1
  n = seq_len - 2
  targets = rng.integers(first_ordinary, vocab_size,
                         size=(batch, seq_len), dtype=np.int32)
  targets[:, 0] = special.cls
  targets[:, -1] = special.sep
  weights = np.zeros((batch, seq_len), np.float32)
  inputs = targets.copy()
  k = num_selected(n)
  for row in range(batch):
    picked = 1 + rng.choice(n, size=k, replace=False)
    weights[row, picked] = 1.0
    action = rng.random(k)
    inputs[row, picked[action < 0.8]] = special.mask
    rand = picked[(action >= 0.8) & (action < 0.9)]
    inputs[row, rand] = rng.integers(first_ordinary, vocab_size,
                                     size=rand.size)
  return {
      "input_tokens": inputs,
      "token_types": np.zeros_like(inputs),
      "segment_ids": np.ones_like(inputs),
      "positions": np.broadcast_to(np.arange(seq_len, dtype=np.int32),
                                   inputs.shape).copy(),
      "targets": targets,
      "weights": weights,
  }


class OursStep:
  """Our jitted training step (train_lib's optimizer, sharding, donation)."""

  def __init__(self, cfg: network.RemBertConfig, batch: int, seq_len: int,
               max_predictions_per_seq: Optional[int], seed: int = 0):
    self.model = models.RemBertMLMModel(
        network.RemBertForMaskedLM(cfg),
        max_predictions_per_seq=max_predictions_per_seq)
    tx, schedule = train_lib.make_optimizer(
        1e-4, total_steps=10_000, warmup_steps=100)
    self.mesh = train_lib.make_mesh((1, 1), devices=jax.devices()[:1])
    rules = train_lib.default_rules()
    shapes = {k: (batch, seq_len) for k in
              ("input_tokens", "token_types", "segment_ids", "positions")}
    self.state, shardings = train_lib.init_train_state(
        self.model, tx, jax.random.PRNGKey(seed), shapes, self.mesh, rules)
    self.step_fn = train_lib.jit_train_step(
        train_lib.make_train_step(self.model, tx, schedule),
        shardings, self.mesh, rules)
    self.rng = jax.random.PRNGKey(seed + 1)
    self.metrics = None

  def put(self, batch):
    return jax.device_put(batch, train_lib.batch_sharding(self.mesh))

  def __call__(self, batch) -> None:
    self.state, self.metrics = self.step_fn(self.state, batch, self.rng)
    jax.block_until_ready(self.state)

  def last_metrics(self) -> dict[str, float]:
    return {k: float(v) for k, v in jax.device_get(self.metrics).items()}


def xla_matmul(n: int = 4096) -> Callable[[], None]:
  """A closure running one jitted n x n x n float32 matmul (2 n^3 FLOPs).

  Timed among the training steps (round robin), so the peak it gives was
  measured under the same load as the steps it is compared with.
  """
  rng = np.random.default_rng(0)
  a = jnp.asarray(rng.standard_normal((n, n), np.float32))
  b = jnp.asarray(rng.standard_normal((n, n), np.float32))
  f = jax.jit(jnp.matmul)
  return lambda: f(a, b).block_until_ready()


def time_interleaved(fns: dict[str, Callable[[], None]], warmup: dict[str, int],
                     steps: dict[str, int], block: int = 1,
                     rewarm: int = 0) -> dict[str, list[float]]:
  """Warms each up, then times them in turns, in one process.

  Turns spread the noise of a shared machine over every contender instead
  of letting it land on whichever ran during a busy spell. A turn runs
  `rewarm` untimed calls and then up to `block` timed ones: with PyTorch and
  XLA in one process, a step run right after the other framework's step
  pays for memory the other one just freed and this one must fault in and
  zero again (measured: ~3 s of kernel time per step of ours, RESULTS.md
  v6), which a training run, one framework per process, never sees.
  """
  for name, fn in fns.items():
    for _ in range(warmup[name]):
      fn()
  times = {name: [] for name in fns}
  while any(len(times[n]) < steps[n] for n in fns):
    for name, fn in fns.items():
      todo = min(block, steps[name] - len(times[name]))
      if todo <= 0:
        continue
      for _ in range(rewarm):
        fn()
      for _ in range(todo):
        tick = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - tick)
  return times


def median(xs) -> float:
  return float(statistics.median(xs))
