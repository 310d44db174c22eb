"""Packed fine-tuning batches: the same examples, fewer rows, on the host.

A fine-tuning batch comes from the task heads' feature converters one
example per row: `[N, L]` token features whose real tokens are a prefix of
the row (`segment_ids` 1 there, 0 on padding), plus per-example features of
shape `[N]` (a pair's `label`, a QA window's `start_positions` and
`end_positions`). Real sentences fill 14-27% of a 128-token row, so most
of the step computes padding. `pack` puts the same N examples into R <= N
rows, first-fit by decreasing length, each example contiguous:

  token features  copied to the example's place in its row; `segment_ids`
                  become 1..k (the k-th example of the row), `positions`
                  restart at 0 for each example (they are the example's own;
                  a batch without them gets 0..m-1 for an example of m
                  tokens, what the network assumes for an unpacked row).
  per-example     `[R, S]`, one slot per example of the row (S =
  features        `max_segments`); positions into the example
                  (`start_positions`, `end_positions`) are shifted by its
                  offset in the row.
  slot_offsets    `[R, S]` int32: where each example starts in its row (its
                  [CLS], which the pair head pools).
  slot_weights    `[R, S]` float32: 1 for an example, 0 for an empty slot.

Attention is block-diagonal over `segment_ids` (`layers.make_attention_mask`)
and positions restart, so an example's hidden states are those it has alone
in a padded row; with the heads reading per slot (`models`), its loss and
gradient are too. A packed step therefore consumes exactly the examples of
the unpacked step and, without dropout, computes the same loss and
gradient up to float rounding (tests/finetune_packing_test.py). Dropout
draws other masks for another layout, as for another seed.

Every example must have a token: one of zero tokens would sit at its row's
end with its [CLS] slot past the row, and its loss would be NaN where the
unpacked loss is finite; `check_examples` refuses it, and `pack` too.

Row counts vary per step; `pack_step` rounds them up to a multiple of a
bucket (an eighth of the micro batch, and of the mesh's data axis), so a
run compiles at most about eight step programs.
"""

import math
from typing import Mapping, Optional

import numpy as np

from rembert_t5x.common import errors
from rembert_t5x.common import packed_features

# Per-example features that index into the example's tokens.
_POSITION_FEATURES = packed_features.POSITION_FEATURES
# Features the packed layout adds (the converters' packed layout too).
SLOT_OFFSETS = packed_features.SLOT_OFFSETS
SLOT_WEIGHTS = packed_features.SLOT_WEIGHTS
# Slots per row where examples carry per-example features. A 128-token
# row holds 3-4 sentence pairs of real text; 8 leaves room for short ones
# at the cost of `[R, 8]` small arrays.
DEFAULT_MAX_SEGMENTS = 8


def example_lengths(batch: Mapping[str, np.ndarray]) -> np.ndarray:
  """`[N]` real tokens of each row of an unpacked batch."""
  return np.sum(batch["segment_ids"] > 0, axis=-1)


def _empty_example_error(lengths: np.ndarray, where: str) -> Optional[str]:
  """The message for the first example without tokens, or None."""
  empty = np.flatnonzero(lengths == 0)
  if not empty.size:
    return None
  return (f"{where}: example {int(empty[0])} (0-based row of the unpacked "
          "batch) has no tokens (segment_ids all 0); packing cannot place "
          "an empty example: its [CLS] slot would lie past its row "
          f"({empty.size} empty of {lengths.size})")


def check_examples(batch: Mapping[str, np.ndarray], where: str) -> None:
  """Refuses an unpacked batch that holds an example of zero tokens.

  Args:
    batch: the unpacked batch, one example per row.
    where: what the message starts with, e.g. "task t, batch of step 3".

  Raises:
    errors.UserError: naming `where` and the first empty example's index.
  """
  message = _empty_example_error(example_lengths(batch), where)
  if message:
    raise errors.UserError(message)


def has_slot_features(batch: Mapping[str, np.ndarray]) -> bool:
  """Whether the batch has per-example features (pair, QA; not tagging)."""
  rows = batch["input_tokens"].shape[0]
  return any(v.shape in ((rows,), (rows, 1)) for v in batch.values())


def assign_rows(lengths: np.ndarray, length: int,
                max_segments: int) -> list[list[int]]:
  """First fit by decreasing length: the example indices of each row.

  Deterministic (ties keep the input order); every example fits, as each
  is at most `length` long.
  """
  order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
  rows: list[list[int]] = []
  free: list[int] = []
  for i in order:
    need = int(lengths[i])
    for r, room in enumerate(free):
      if room >= need and len(rows[r]) < max_segments:
        rows[r].append(i)
        free[r] -= need
        break
    else:
      rows.append([i])
      free.append(length - need)
  return rows


def pack(batch: Mapping[str, np.ndarray], max_segments: int,
         num_rows: Optional[int] = None) -> dict[str, np.ndarray]:
  """Packs an unpacked batch (see the module docstring).

  Args:
    batch: `[N, L]` token features and `[N]` (or `[N, 1]`) per-example
      features of N examples, one per row, real tokens first.
    max_segments: S, the most examples in one row. Tagging batches (no
      per-example features) may pass L: only the row length bounds them.
    num_rows: pad the packed rows to this many (empty rows: segment_ids 0,
      zero weights); default as many as needed.

  Returns:
    The packed batch: token features `[R, L]` (`positions` among them,
    made if the batch has none); per-example features,
    `slot_offsets` and `slot_weights` `[R, S]` (none of these for a batch
    without per-example features).

  Raises:
    ValueError: `num_rows` is fewer rows than the examples need, or an
      example has no tokens (`check_examples` says so as a UserError).
  """
  tokens = batch["input_tokens"]
  n, length = tokens.shape
  lengths = example_lengths(batch)
  empty = _empty_example_error(lengths, "pack")
  if empty:
    raise ValueError(empty)
  rows = assign_rows(lengths, length, max_segments)
  num_rows = len(rows) if num_rows is None else num_rows
  if num_rows < len(rows):
    raise ValueError(f"{n} examples need {len(rows)} packed rows, more than "
                     f"{num_rows}")
  token_keys = [k for k, v in batch.items() if v.shape == (n, length)]
  slot_keys = [k for k, v in batch.items()
               if k not in token_keys and v.shape in ((n,), (n, 1))]
  other = set(batch) - set(token_keys) - set(slot_keys)
  if other:
    raise ValueError(f"features {sorted(other)} are neither per token nor "
                     "per example: cannot pack them")
  out = {k: np.zeros((num_rows, length), batch[k].dtype) for k in token_keys}
  if "positions" not in out:  # made: each example's own 0..m-1
    out["positions"] = np.zeros((num_rows, length), np.int32)
  if slot_keys:
    for k in slot_keys:
      out[k] = np.zeros((num_rows, max_segments), batch[k].dtype)
    out[SLOT_OFFSETS] = np.zeros((num_rows, max_segments), np.int32)
    out[SLOT_WEIGHTS] = np.zeros((num_rows, max_segments), np.float32)
  for r, members in enumerate(rows):
    offset = 0
    for s, i in enumerate(members):
      end = offset + int(lengths[i])
      for k in token_keys:
        out[k][r, offset:end] = batch[k][i, :end - offset]
      if "positions" not in token_keys:
        out["positions"][r, offset:end] = np.arange(end - offset)
      out["segment_ids"][r, offset:end] = s + 1
      if slot_keys:
        for k in slot_keys:
          value = batch[k].reshape(n)[i]
          out[k][r, s] = value + offset if k in _POSITION_FEATURES else value
        out[SLOT_OFFSETS][r, s] = offset
        out[SLOT_WEIGHTS][r, s] = 1.0
      offset = end
  return out


def row_bucket(needed: int, micro_batch: int, multiple: int = 1) -> int:
  """`needed` rounded up to a multiple of max(micro_batch / 8, multiple)
  (rounded up to `multiple`): at most about eight row counts per run."""
  step = max(1, math.ceil(micro_batch / 8))
  step = math.ceil(step / multiple) * multiple
  return min(math.ceil(needed / step) * step,
             math.ceil(micro_batch / multiple) * multiple)


def pack_step(batch: Mapping[str, np.ndarray], grad_accum_steps: int,
              max_segments: int = DEFAULT_MAX_SEGMENTS,
              multiple: int = 1) -> dict[str, np.ndarray]:
  """Packs one optimizer step's batch, micro batch by micro batch.

  Each of the `grad_accum_steps` micro batches (consecutive N/k examples,
  as `train_lib` splits them unpacked) is packed on its own and padded to
  one common row count, a bucket (`row_bucket`), so the step's micro
  batches keep one shape and the rows stay divisible by the data axis.

  Args:
    batch: the step's unpacked batch of N examples.
    grad_accum_steps: k, the micro batches per step.
    max_segments: S for batches with per-example features (pair, QA);
      tagging batches are bounded by the row length only.
    multiple: the row count of a micro batch is a multiple of this (the
      mesh's data axis).

  Returns:
    The packed batch, `k * R` rows: micro batch j is rows j*R .. (j+1)*R-1.
  """
  n, length = batch["input_tokens"].shape
  micro = n // grad_accum_steps
  segments = max_segments if has_slot_features(batch) else length
  parts = [{k: v[j * micro:(j + 1) * micro] for k, v in batch.items()}
           for j in range(grad_accum_steps)]
  needed = max(len(assign_rows(example_lengths(p), length, segments))
               for p in parts)
  rows = row_bucket(needed, micro, multiple)
  packed = [pack(p, segments, rows) for p in parts]
  return {k: np.concatenate([p[k] for p in packed]) for k in packed[0]}
