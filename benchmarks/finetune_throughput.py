r"""Fine-tuning throughput: packed rows against one example per row, and HF.

  python benchmarks/finetune_throughput.py   # tiny + the 193M ablation config, ~12 min idle
  python benchmarks/finetune_throughput.py --json --heads=pair,tagging
  python benchmarks/finetune_throughput.py --config=gin_configs/models/tiny.gin --quick --json

For the pair, tagging and QA heads, at the paper's fine-tuning batch (32
examples a step; rows of 128 tokens, 384 for QA), examples/s of:
  * the train step (forward, backward, AdamW; `train_lib`'s jitted step)
    with each step's examples packed on the host
    (`finetune_packing.pack_step`, as the local runner does) and with one
    example per row (`unpacked`). QA accumulates 4 micro batches of 8
    (`GRAD_ACCUM`), packed micro batch by micro batch;
  * Hugging Face's `RemBertForSequenceClassification` /
    `RemBertForTokenClassification` / `RemBertForQuestionAnswering` (PyTorch
    CPU, `torch.optim.AdamW`, gradient clipping 1.0 as ours, the same micro
    batches) on the same examples with dynamic padding: each (micro) batch
    padded to its longest example;
  * evaluation, the jitted `predict_batch_with_aux` forward, one example per
    row and length-sorted as `runner.eval` evaluates
    (`predict_batches`): the pool of examples sorted longest first, each
    batch cut to its longest example rounded up to a power of two from 16
    (`predict_batches.bucket_length`).

Example lengths come from real text in ../shared/data, tokenised with an
8,000-piece SentencePiece model trained on it (cached in the temp dir):
tagging examples are single Tatoeba sentences (`[CLS] s [SEP]`), pair
examples two sentences of one Tatoeba language (`[CLS] a [SEP] b [SEP]`),
QA examples XQuAD windows (`qa.make_windows`: question cut to 64 tokens,
stride 128). The token ids are random: speed depends on lengths, not
content. Every side runs the same example draws. After warm-up (one call per
compiled shape), all contenders take turns, one step (or one evaluation
pass) per turn, in one process; medians and the min-max of the timed
turns are reported.
"""

import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses
import json
import pathlib
import platform
import sys
import tempfile
import time
from typing import Callable, Optional, Sequence

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import finetune_lengths  # pylint: disable=g-import-not-at-top
from rembert_t5x.convert import checkpoint_conversion as cc  # pylint: disable=g-import-not-at-top
from rembert_t5x import models  # pylint: disable=g-import-not-at-top
from rembert_t5x import network  # pylint: disable=g-import-not-at-top
from rembert_t5x import optimizer  # pylint: disable=g-import-not-at-top
from rembert_t5x.data import pieces  # pylint: disable=g-import-not-at-top
from rembert_t5x.runner import finetune_packing  # pylint: disable=g-import-not-at-top
from rembert_t5x.runner import predict_batches  # pylint: disable=g-import-not-at-top
from rembert_t5x.runner import train_lib  # pylint: disable=g-import-not-at-top

HEADS = ("pair", "tagging", "qa")
# The paper's fine-tuning rows: 128 tokens for pairs and tagging, 384 for QA.
SEQ_LEN = {"pair": 128, "tagging": 128, "qa": 384}  # qa.MAX_SEQ_LENGTH
BATCH = 32
# Micro batches per step (gradient accumulation, as `train.train`'s
# grad_accum_steps): 32 QA windows of 384 tokens in one micro batch took
# ~24 GB on the ablation config, more than this 23 GiB machine has.
GRAD_ACCUM = {"pair": 1, "tagging": 1, "qa": 4}
# Timed train steps per side and evaluation passes, per head. A QA step of
# the ablation config takes ~40 s per side on 2 cores, so QA gets fewer:
# the default run (tiny + ablation config) takes ~12 minutes idle.
TIMED_STEPS = {"pair": 3, "tagging": 3, "qa": 2}
EVAL_PASSES = {"pair": 2, "tagging": 2, "qa": 1}
# XNLI's labels and PAN-X's tags.
NUM_CLASSES = {"pair": 3, "tagging": 7}
TINY_CONFIG = "gin_configs/models/tiny.gin"
DEFAULT_CONFIGS = (TINY_CONFIG, common.DEFAULT_CONFIG)
# The project issue's targets on the ablation config (reported, not
# asserted): packed / unpacked train examples/s, and packed / HF.
TARGET_RATIO = {"pair": 2.0, "tagging": 3.0, "qa": 0.95}
TARGET_HF_RATIO = {"pair": 1.5, "tagging": 1.5}


# ----------------------------------------------------------------------------
# Batches.
# ----------------------------------------------------------------------------


def unpacked_batch(head: str, lengths: np.ndarray, seq_len: int,
                   vocab_size: int, rng: np.random.Generator
                   ) -> dict[str, np.ndarray]:
  """One example per row, as the feature converters give it.

  Random ids between [CLS] and [SEP]; token type 1 in the second half (the
  second sentence, the QA context). Tagging labels every token but the
  specials; a QA answer is a short span in the second half.

  Returns:
    `[N, seq_len]` input_tokens, token_types, segment_ids, positions (and
    targets, weights for tagging); `[N]` label (pair) or start_positions,
    end_positions (QA).
  """
  special = pieces.TRAINED_LAYOUT
  n = len(lengths)
  index = np.arange(seq_len)[None, :]
  real = index < lengths[:, None]  # [N, seq_len]
  tokens = rng.integers(max(special.as_tuple()) + 1, vocab_size,
                        (n, seq_len)).astype(np.int32)
  tokens[:, 0] = special.cls
  tokens[np.arange(n), lengths - 1] = special.sep
  batch = {
      "input_tokens": np.where(real, tokens, special.pad).astype(np.int32),
      "token_types": (real & (index >= lengths[:, None] // 2)).astype(np.int32),
      "segment_ids": real.astype(np.int32),
      "positions": np.where(real, index, 0).astype(np.int32),
  }
  if head == "tagging":
    batch["targets"] = rng.integers(0, NUM_CLASSES[head],
                                    (n, seq_len)).astype(np.int32)
    labelled = real & (index > 0) & (index < lengths[:, None] - 1)
    batch["weights"] = labelled.astype(np.float32)
  elif head == "pair":
    batch["label"] = rng.integers(0, NUM_CLASSES[head], n).astype(np.int32)
  else:
    start = lengths // 2 + rng.integers(0, np.maximum(lengths // 2 - 1, 1))
    batch["start_positions"] = np.minimum(start, lengths - 2).astype(np.int32)
    batch["end_positions"] = np.minimum(
        batch["start_positions"] + rng.integers(0, 4, n),
        lengths - 2).astype(np.int32)
  return batch


def model_inputs(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  return {k: batch[k] for k in
          ("input_tokens", "token_types", "segment_ids", "positions")}


def micro_batches(batch: dict[str, np.ndarray], num: int) -> list[dict]:
  """`batch` split into `num` consecutive micro batches (as `train_lib`)."""
  size = len(batch["input_tokens"]) // num
  return [{k: v[j * size:(j + 1) * size] for k, v in batch.items()}
          for j in range(num)]


def sorted_eval_batches(batches: Sequence[dict[str, np.ndarray]],
                        batch_size: int) -> list[dict[str, np.ndarray]]:
  """The examples of `batches` longest first, `batch_size` a batch, each cut
  to its bucket: the batches `runner.eval` predicts (`predict_batches`)."""
  pool = {k: np.concatenate([model_inputs(b)[k] for b in batches])
          for k in model_inputs(batches[0])}
  seq_len = pool["input_tokens"].shape[1]
  lengths = finetune_packing.example_lengths(pool)
  order = np.argsort(-lengths, kind="stable")
  out = []
  for start in range(0, len(order), batch_size):
    rows = order[start:start + batch_size]
    width = predict_batches.bucket_length(int(lengths[rows].max()), seq_len)
    out.append({k: v[rows, :width] for k, v in pool.items()})
  return out


# ----------------------------------------------------------------------------
# The contenders.
# ----------------------------------------------------------------------------


def make_model(head: str,
               cfg: network.RemBertConfig) -> models.RemBertBaseModel:
  return models.make_model(head, cfg, NUM_CLASSES.get(head))


class OursHead:
  """Our jitted train step and predict function for one head.

  One train state serves both layouts (each shape compiles its own program);
  the optimizer is `train_lib.make_optimizer`'s AdamW with clipping.
  """

  def __init__(self, head: str, cfg: network.RemBertConfig, seq_len: int,
               grad_accum: int = 1, seed: int = 0):
    self.model = make_model(head, cfg)
    tx, schedule = train_lib.make_optimizer(
        2e-5, total_steps=10_000, warmup_steps=100)
    self.mesh = train_lib.make_mesh((1, 1), devices=jax.devices()[:1])
    rules = train_lib.default_rules()
    shapes = {k: (1, seq_len) for k in
              ("input_tokens", "token_types", "segment_ids", "positions")}
    self.state, shardings = train_lib.init_train_state(
        self.model, tx, jax.random.PRNGKey(seed), shapes, self.mesh, rules)
    self._step = train_lib.jit_train_step(
        train_lib.make_train_step(self.model, tx, schedule, grad_accum),
        shardings, self.mesh, rules)
    # As `runner.eval` evaluates: the jitted forward on device parameters.
    self._predict = jax.jit(self.model.predict_batch_with_aux)
    self._rng = jax.random.PRNGKey(seed + 1)
    self._metrics = None

  def put(self, batch: dict[str, np.ndarray]):
    return jax.device_put(batch, train_lib.batch_sharding(self.mesh))

  def train(self, batch) -> None:
    self.state, self._metrics = self._step(self.state, batch, self._rng)
    jax.block_until_ready(self.state)

  def predict(self, batch) -> None:
    predictions, aux = self._predict(self.state.params, batch)
    jax.device_get(predictions)
    jax.block_until_ready(aux)

  def loss(self) -> float:
    return float(jax.device_get(self._metrics["loss"]))


class HFHead:
  """Hugging Face's model for one head with torch AdamW, dynamic padding.

  With gradient accumulation, the step's examples are split into the same
  micro batches as ours, each padded to its own longest example.
  """

  def __init__(self, head: str, cfg: network.RemBertConfig, seed: int = 0):
    """On a GPU when JAX runs on one (fused AdamW there), in bfloat16
    autocast when `cfg.dtype` is bfloat16 (float32 parameters, as ours)."""
    # Deferred: torch and transformers take seconds to import.
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    from benchmarks import hf_peer  # pylint: disable=g-import-not-at-top
    self._torch = torch
    torch.manual_seed(seed)
    hf_head, cls = {
        "pair": (cc.Head.SEQUENCE_CLASSIFICATION,
                 transformers.RemBertForSequenceClassification),
        "tagging": (cc.Head.TOKEN_CLASSIFICATION,
                    transformers.RemBertForTokenClassification),
        "qa": (cc.Head.QUESTION_ANSWERING,
               transformers.RemBertForQuestionAnswering)}[head]
    self.model = cls(hf_peer.hf_config(cfg, hf_head,
                                       num_labels=NUM_CLASSES.get(head, 2)))
    self.device = hf_peer.torch_device(jax.default_backend() == "gpu")
    self.model.to(self.device).train()
    self.head = head
    self.bf16 = cfg.dtype == "bfloat16"
    self._opt = hf_peer.adamw(self.model.parameters(), 2e-5,
                              fused=self.device.type == "cuda")
    self.attention = self.model.config._attn_implementation  # pylint: disable=protected-access
    self.threads = torch.get_num_threads()

  def put(self, batch: dict[str, np.ndarray], grad_accum: int = 1
          ) -> list[dict]:
    """Torch inputs of each micro batch, padded to its longest example."""
    return [{k: v.to(self.device) for k, v in self._inputs(m).items()}
            for m in micro_batches(batch, grad_accum)]

  def _inputs(self, batch: dict[str, np.ndarray]) -> dict:
    torch = self._torch
    width = int(finetune_packing.example_lengths(batch).max())
    long = lambda k: torch.from_numpy(np.ascontiguousarray(  # pylint: disable=g-long-lambda
        batch[k][:, :width])).long()
    inputs = {"input_ids": long("input_tokens"),
              "token_type_ids": long("token_types"),
              "attention_mask": long("segment_ids")}
    if self.head == "pair":
      inputs["labels"] = torch.from_numpy(batch["label"]).long()
    elif self.head == "tagging":
      labels = np.where(batch["weights"] > 0, batch["targets"], -100)
      inputs["labels"] = torch.from_numpy(labels[:, :width]).long()
    else:
      for k in ("start_positions", "end_positions"):
        inputs[k] = torch.from_numpy(batch[k]).long()
    return inputs

  def train(self, micro: list[dict]) -> None:
    """One step over the micro batches of `put` (gradients summed)."""
    self._opt.zero_grad(set_to_none=True)
    for inputs in micro:
      with self._torch.autocast(self.device.type, dtype=self._torch.bfloat16,
                                enabled=self.bf16):
        loss = self.model(**inputs).loss / len(micro)
      loss.backward()
    self._torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                         optimizer.CLIP_NORM)
    self._opt.step()
    if self.device.type == "cuda":
      self._torch.cuda.synchronize(self.device)


def _shape_key(batch: dict) -> tuple:
  return tuple(sorted((k, tuple(v.shape)) for k, v in batch.items()))


def one_per_shape(batches: Sequence[dict]) -> list[dict]:
  """The first batch of each distinct shape (each compiles a program)."""
  return list({_shape_key(b): b for b in reversed(batches)}.values())


class Turns:
  """One contender: call k runs `fn` on `inputs[k % len(inputs)]`.

  Every contender of a head gets the same draws in the same order, so the
  timed calls of each cover the same examples.
  """

  def __init__(self, fn: Callable[[object], None], inputs: Sequence[object]):
    self._fn = fn
    self._inputs = list(inputs)
    self._calls = 0

  def __call__(self) -> None:
    self._fn(self._inputs[self._calls % len(self._inputs)])
    self._calls += 1


def each(fn: Callable[[object], None]) -> Callable[[Sequence[object]], None]:
  """`fn` over a list of batches: one evaluation pass."""
  def run(batches):
    for b in batches:
      fn(b)
  return run


# ----------------------------------------------------------------------------
# One head of one config.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
  """What one run measures; `quick` shrinks it to a smoke test."""
  batch: int = BATCH
  seq_len: Optional[int] = None  # None: SEQ_LEN[head]
  grad_accum: Optional[int] = None  # None: GRAD_ACCUM[head]
  draws: int = 3       # different example draws (steps) cycled through
  steps: Optional[int] = None  # timed train steps per side; TIMED_STEPS
  eval_passes: Optional[int] = None  # over the draws' examples; EVAL_PASSES
  sentences: int = 3000  # Tatoeba sentences tokenised for the length pool
  questions: int = 300   # XQuAD questions windowed for the QA pool
  max_segments: int = finetune_packing.DEFAULT_MAX_SEGMENTS
  skip_hf: bool = False
  seed: int = 0
  dtype: Optional[str] = None  # activation dtype; None: the config's


QUICK = dict(draws=1, steps=1, eval_passes=1, sentences=400, questions=40)


def _rates(times: Sequence[float], examples: int) -> dict[str, float]:
  rates = [examples / t for t in times]
  return {"median": examples / common.median(times), "min": min(rates),
          "max": max(rates)}


def paired_ratio(times: dict[str, Sequence[float]], faster: str,
                 slower: str) -> Optional[float]:
  """Median over turns of slower's time / faster's time in the same turn.

  The two ran seconds apart, so a change in the machine's load between
  turns (other jobs on a shared machine) cancels out; the ratio of the
  medians may pair a quiet turn of one with a busy turn of the other.
  """
  if faster not in times or slower not in times:
    return None
  return common.median([b / a for a, b in zip(times[faster], times[slower])])


def paired_ratios(times: dict[str, Sequence[float]]) -> dict[str, float]:
  """The `*_paired` fields of a result, from its timed turns."""
  return {"ratio_paired": paired_ratio(times, "packed", "unpacked"),
          "hf_ratio_paired": paired_ratio(times, "packed", "hf"),
          "eval_ratio_paired": paired_ratio(times, "eval_sorted",
                                            "eval_unpacked")}


def head_seq_len(head: str, cfg: network.RemBertConfig, s: Settings) -> int:
  return min(s.seq_len or SEQ_LEN[head], cfg.max_position_embeddings)


def run_head(head: str, config: str, cfg: network.RemBertConfig,
             pool: np.ndarray, s: Settings) -> dict:
  """Measures one head on draws from `pool`; returns its JSON line."""
  seq_len = head_seq_len(head, cfg, s)
  pool = np.minimum(np.asarray(pool), seq_len)
  rng = np.random.default_rng([s.seed, 1])
  draws = [unpacked_batch(head, rng.choice(pool, s.batch), seq_len,
                          cfg.vocab_size, rng) for _ in range(s.draws)]
  accum = s.grad_accum or GRAD_ACCUM[head]
  packed = [finetune_packing.pack_step(b, accum, s.max_segments)
            for b in draws]
  sorted_eval = sorted_eval_batches(draws, s.batch)

  ours = OursHead(head, cfg, seq_len, accum, s.seed)
  inputs = {
      "packed": [ours.put(b) for b in packed],
      "unpacked": [ours.put(b) for b in draws],
      "eval_unpacked": [ours.put(model_inputs(b)) for b in draws],
      "eval_sorted": [ours.put(b) for b in sorted_eval],
  }
  hf = None if s.skip_hf else HFHead(head, cfg, s.seed)
  tick = time.perf_counter()
  # Warm-up: one call per compiled shape (the first compiles it); one HF
  # step (it sets up AdamW's state).
  for b in one_per_shape(inputs["packed"]) + inputs["unpacked"][:1]:
    ours.train(b)
  for b in one_per_shape(inputs["eval_unpacked"] + inputs["eval_sorted"]):
    ours.predict(b)
  fns = {"packed": Turns(ours.train, inputs["packed"]),
         "unpacked": Turns(ours.train, inputs["unpacked"])}
  if hf:
    hf_inputs = [hf.put(b, accum) for b in draws]
    hf.train(hf_inputs[0])
    fns["hf"] = Turns(hf.train, hf_inputs)
  # One evaluation pass a call.
  fns["eval_unpacked"] = Turns(each(ours.predict), [inputs["eval_unpacked"]])
  fns["eval_sorted"] = Turns(each(ours.predict), [inputs["eval_sorted"]])
  warm_s = time.perf_counter() - tick
  steps = {n: (s.eval_passes or EVAL_PASSES[head]) if n.startswith("eval")
           else s.steps or TIMED_STEPS[head] for n in fns}
  load = os.getloadavg()[0]
  times = common.time_interleaved(fns, dict.fromkeys(fns, 0), steps)

  real = int(sum(finetune_packing.example_lengths(b).sum() for b in draws))
  rows = [p["input_tokens"].shape[0] for p in packed]
  micro = [m for b in draws for m in micro_batches(b, accum)]
  lengths = [finetune_packing.example_lengths(m) for m in micro]
  # Rows first fit needs, before `pack_step` rounds them up to a bucket.
  needed = sum(len(finetune_packing.assign_rows(
      n, seq_len, s.max_segments if head != "tagging" else seq_len))
               for n in lengths)
  hf_tokens = sum(len(n) * int(n.max()) for n in lengths)
  pool_size = s.batch * s.draws
  rates = {n: _rates(t, pool_size if n.startswith("eval") else s.batch)
           for n, t in times.items()}
  median = {n: v["median"] for n, v in rates.items()}
  r = {
      "head": head, "config": config, "batch": s.batch, "seq_len": seq_len,
      "grad_accum": accum,
      "packed": median["packed"], "unpacked": median["unpacked"],
      "hf": median.get("hf"),
      "ratio": median["packed"] / median["unpacked"],
      "hf_ratio": median["packed"] / median["hf"] if hf else None,
      **paired_ratios(times),
      "eval_unpacked": median["eval_unpacked"],
      "eval_sorted": median["eval_sorted"],
      "eval_ratio": median["eval_sorted"] / median["eval_unpacked"],
      "rows_packed": float(np.mean(rows)),
      "rows_needed": needed / s.draws,
      "fill": real / (s.batch * s.draws * seq_len),
      "packed_fill": real / (sum(rows) * seq_len),
      "hf_fill": real / hf_tokens,
      "eval_sorted_fill": real / sum(b["input_tokens"].size
                                     for b in sorted_eval),
      "mean_length": real / (s.batch * s.draws),
      "spread": {n: [v["min"], v["max"]] for n, v in rates.items()},
      "step_times_s": {n: [round(x, 4) for x in t] for n, t in times.items()},
      "programs": {"packed": len(one_per_shape(packed)),
                   "eval_sorted": len(one_per_shape(sorted_eval))},
      "warm_up_s": warm_s,
      "length_pool": len(pool), "draws": s.draws, "timed": steps,
      "max_segments": s.max_segments,
      "ours_loss": ours.loss(),
      "target_ratio": TARGET_RATIO[head],
      "target_hf_ratio": TARGET_HF_RATIO.get(head),
      "load_average_before": load, "load_average_after": os.getloadavg()[0],
  }
  if hf:
    r.update(hf_attention=hf.attention, torch_threads=hf.threads,
             hf_device=str(hf.device), hf_bf16_autocast=hf.bf16)
  return r


# ----------------------------------------------------------------------------
# Output.
# ----------------------------------------------------------------------------

TABLE_HEADER = ("config", "head", "T", "fill", "rows packed", "packed ex/s",
                "unpacked ex/s", "packed / unpacked (paired)", "HF ex/s",
                "packed / HF (paired)", "eval unpacked ex/s",
                "eval sorted ex/s", "eval sorted / unpacked (paired)")


def _number(x: Optional[float]) -> str:
  return "–" if x is None else f"{x:.2f}"


def _ratio(r: dict, key: str) -> str:
  return f"**{_number(r[key])}** ({_number(r.get(key + '_paired'))})"


def _cell(r: dict, side: str) -> str:
  if r.get(side) is None:
    return "–"
  low, high = r["spread"][side]
  return f"{r[side]:.2f} ({low:.2f}–{high:.2f})"


def table(results: Sequence[dict]) -> str:
  """A markdown table: median examples/s (min–max of the timed turns);
  ratios of the medians (and the median of the turns' own ratios)."""
  lines = ["| " + " | ".join(TABLE_HEADER) + " |",
           "|" + "---|" * len(TABLE_HEADER)]
  for r in results:
    cells = (pathlib.Path(r["config"]).stem, r["head"], str(r["seq_len"]),
             f"{r['fill']:.0%}",
             f"{r['rows_packed']:.1f} / {r['batch']}",
             _cell(r, "packed"), _cell(r, "unpacked"), _ratio(r, "ratio"),
             _cell(r, "hf"), _ratio(r, "hf_ratio"), _cell(r, "eval_unpacked"),
             _cell(r, "eval_sorted"), _ratio(r, "eval_ratio"))
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def targets(results: Sequence[dict]) -> list[str]:
  """One line per target of the project issue (ablation config only)."""
  out = []
  for r in results:
    if r["config"] == TINY_CONFIG:
      continue
    checks = [("packed / unpacked", r["ratio"], r.get("ratio_paired"),
               r["target_ratio"])]
    if r["target_hf_ratio"] and r["hf_ratio"] is not None:
      checks.append(("packed / HF", r["hf_ratio"], r.get("hf_ratio_paired"),
                     r["target_hf_ratio"]))
    for what, got, paired, want in checks:
      both = [x for x in (got, paired) if x is not None]
      verdict = ("met" if min(both) >= want else
                 "NOT met" if max(both) < want else "borderline")
      out.append(f"{pathlib.Path(r['config']).stem} {r['head']}: {what} "
                 f"{got:.2f}, paired {_number(paired)} (target >= {want}): "
                 f"{verdict}")
  return out


def print_report(results: Sequence[dict]) -> None:
  r = results[0]
  print(f"batch {r['batch']}; jax {r['jax']}, torch {r['torch']} "
        f"({r.get('torch_threads')} threads), transformers "
        f"{r['transformers']}, {r['cpus']} CPUs; median examples/s "
        "(min–max of the timed turns)")
  print(table(results))
  for line in targets(results):
    print(line)


def versions() -> dict[str, str]:
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  return {"jax": jax.__version__, "torch": torch.__version__,
          "transformers": transformers.__version__,
          "python": platform.python_version(),
          "cpus": str(os.cpu_count())}


def run(configs: Sequence[str], heads: Sequence[str], settings: Settings,
        pools: Callable[[str, int], np.ndarray],
        emit: Callable[[dict], None] = lambda r: None,
        lengths_from: str = "") -> list[dict]:
  """Measures every head of every config on draws from `pools(head,
  seq_len)`; `emit` sees each result as it comes."""
  results = []
  for config in configs:
    cfg = common.load_config(config)
    if settings.dtype:
      cfg = dataclasses.replace(cfg, dtype=settings.dtype)
    for head in heads:
      pool = pools(head, head_seq_len(head, cfg, settings))
      r = run_head(head, config, cfg, pool, settings)
      r.update(versions(), lengths_from=lengths_from, dtype=cfg.dtype,
               device=jax.devices()[0].device_kind,
               glibc_tunables=common.malloc_setting())
      emit(r)
      results.append(r)
  return results


def main(argv=None):
  p = common.argument_parser(__doc__)
  p.set_defaults(config=None)
  p.add_argument("--heads", default=",".join(HEADS))
  p.add_argument("--batch", type=int, default=BATCH,
                 help="examples per step (the paper's 32)")
  p.add_argument("--seq_len", type=int, default=None,
                 help="row length (default 128 pair/tagging, 384 QA)")
  p.add_argument("--grad_accum", type=int, default=None,
                 help="micro batches per step (default: 4 for QA, else 1)")
  p.add_argument("--draws", type=int, default=Settings.draws,
                 help="example draws (steps) the sides cycle through")
  p.add_argument("--steps", type=int, default=None,
                 help="timed train steps per side (default: 3, QA 2)")
  p.add_argument("--eval_passes", type=int, default=None,
                 help="timed evaluation passes (default: 2, QA 1)")
  p.add_argument("--max_segments", type=int, default=Settings.max_segments)
  p.add_argument("--skip_hf", action="store_true")
  p.add_argument("--dtype", default=None,
                 help="activation dtype of both sides (bfloat16: HF in "
                      "bfloat16 autocast); default: the config's")
  p.add_argument("--quick", action="store_true",
                 help="one draw, one timed step: a smoke test")
  p.add_argument("--data_dir", default=str(finetune_lengths.SHARED_DATA))
  p.add_argument("--cache_dir", default=str(
      pathlib.Path(tempfile.gettempdir()) / "rembert_finetune_throughput"),
                 help="where the trained SentencePiece model is kept")
  p.add_argument("--tokenizer_vocab", type=int, default=finetune_lengths.TOKENIZER_VOCAB,
                 help="pieces of the SentencePiece model the lengths come "
                      "from")
  p.add_argument("--tokenizer_sentences", type=int,
                 default=finetune_lengths.TOKENIZER_SENTENCES,
                 help="lines it is trained on")
  p.add_argument("--write_lengths", default=None,
                 help="measure nothing: write the heads' length pools "
                      "(from the text) to this JSON file")
  p.add_argument("--lengths_file", default=None,
                 help="draw from the pools in this --write_lengths file "
                      "instead of reading text (no seqio/TensorFlow needed)")
  p.add_argument("--json", action="store_true",
                 help="one JSON object per line, one per head and config")
  p.add_argument("--json_file", default=None,
                 help="also append those lines to this file")
  p.add_argument("--table_from", default=None,
                 help="measure nothing: print the table of the JSON lines "
                      "in this file")
  a = p.parse_args(argv)
  if a.table_from:
    lines = pathlib.Path(a.table_from).read_text(encoding="utf-8")
    print_report([dict(r, **paired_ratios(r["step_times_s"]))
                  for r in map(json.loads, lines.splitlines())])
    return
  settings = Settings(batch=a.batch, seq_len=a.seq_len,
                      grad_accum=a.grad_accum, draws=a.draws,
                      steps=a.steps, eval_passes=a.eval_passes,
                      max_segments=a.max_segments, skip_hf=a.skip_hf,
                      dtype=a.dtype)
  if a.quick:
    settings = dataclasses.replace(settings, **QUICK)
  heads = a.heads.split(",")
  unknown = set(heads) - set(HEADS)
  if unknown:
    p.error(f"--heads: unknown {sorted(unknown)}; choose from {HEADS}")
  for head in heads:
    accum = a.grad_accum or GRAD_ACCUM[head]
    if a.batch % accum:
      p.error(f"--batch {a.batch} is not a multiple of {head}'s {accum} "
              "micro batches (--grad_accum)")

  def emit(r: dict) -> None:
    if a.json:
      print(json.dumps(r), flush=True)
    else:
      print(f"{r['config']} {r['head']}: ratio {r['ratio']:.2f}",
            file=sys.stderr, flush=True)
    if a.json_file:
      with open(a.json_file, "a", encoding="utf-8") as f:
        f.write(json.dumps(r) + "\n")

  configs = [a.config] if a.config else DEFAULT_CONFIGS
  if a.lengths_file:
    pools = finetune_lengths.file_pools(a.lengths_file)
  else:
    pools = finetune_lengths.text_pools(
        pathlib.Path(a.data_dir), pathlib.Path(a.cache_dir),
        settings.sentences, settings.questions, settings.seed,
        a.tokenizer_vocab, a.tokenizer_sentences)
  if a.write_lengths:
    saved = {}
    for config in configs:
      cfg = common.load_config(config)
      for head in heads:
        seq_len = head_seq_len(head, cfg, settings)
        saved.setdefault(head, {})[str(seq_len)] = (
            pools(head, seq_len).tolist())
    pathlib.Path(a.write_lengths).write_text(json.dumps(saved),
                                             encoding="utf-8")
    print(f"wrote {a.write_lengths}: " + ", ".join(
        f"{h} {sorted(v)}" for h, v in saved.items()))
    return
  results = run(configs, heads, settings, pools, emit,
                lengths_from=a.lengths_file or
                f"text, SentencePiece {a.tokenizer_vocab} pieces")
  if not a.json:
    print_report(results)


if __name__ == "__main__":
  common.reexec_with_hugepage_malloc()
  main()
