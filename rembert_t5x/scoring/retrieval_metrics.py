"""Sentence-retrieval scoring as XTREME does it (Tatoeba, BUCC 2018).

The model (`models.RemBertRetrievalModel`) embeds every sentence; the task's
postprocessor (`xtreme_preprocessors.retrieval_postprocessor`) keys each
embedding by `(side, index)` (side 0 = the non-English sentence, 1 =
English). The seqio metric functions here compare the two sides the way
XTREME's scripts do:

- Tatoeba (`third_party/evaluate_retrieval.py`, task 'tatoeba', with
  `similarity_search` of `third_party/utils_retrieve.py`): cosine nearest
  neighbour. XTREME indexes the non-English sentences and searches them
  with the English ones, so the queries are English; accuracy is the share
  of English sentences whose nearest neighbour is their translation. It is
  one direction only (LASER's own Tatoeba script averages both).
- BUCC (`mine_bitext` and `bucc_eval` of `third_party/utils_retrieve.py`):
  identical sentences are unified, every source sentence proposes its best
  target and every target its best source by ratio margin over k = 4
  neighbours, proposals are taken greedily by score so no sentence is used
  twice ('max' retrieval) and kept if their score is positive; a sentence
  text that occurs under several BUCC ids is dropped; F1 is taken at the
  threshold that maximises it on the gold.

Numpy, and JAX for BUCC's nearest-neighbour search (bounded memory, exact,
any backend); scores in percent.
"""

import dataclasses
import functools
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

# Retrieval `targets[0]`: which side of a parallel corpus a sentence is on.
SIDE_SOURCE = 0   # the non-English sentence
SIDE_ENGLISH = 1

# The floor on an embedding's norm: an all-zero embedding has cosine 0.
_MIN_NORM = 1e-12


def _normalise_rows(x: np.ndarray) -> np.ndarray:
  x = np.asarray(x, dtype=np.float64)
  if x.ndim != 2:
    raise ValueError(f"embeddings must be [num_sentences, dim], got shape "
                     f"{x.shape}.")
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  return x / np.maximum(norms, _MIN_NORM)


def cosine_similarity(queries: np.ndarray, candidates: np.ndarray
                      ) -> np.ndarray:
  """[num_queries, num_candidates] cosine similarities."""
  return _normalise_rows(queries) @ _normalise_rows(candidates).T


def nearest_neighbour_accuracy(queries: np.ndarray,
                               candidates: np.ndarray) -> float:
  """Share of queries i whose cosine nearest candidate is candidate i.

  Ties go to the lowest index.
  """
  if len(queries) != len(candidates) or len(queries) == 0:
    raise ValueError(
        f"need equally many (> 0) queries and candidates, got "
        f"{len(queries)} and {len(candidates)}.")
  nearest = np.argmax(cosine_similarity(queries, candidates), axis=1)
  return float(np.mean(nearest == np.arange(len(queries))))


def _group_by_side(targets, predictions) -> Tuple[Dict[int, np.ndarray],
                                                  Dict[int, np.ndarray]]:
  """{index: embedding} of the source side and of the English side."""
  sides = {SIDE_SOURCE: {}, SIDE_ENGLISH: {}}
  for (side, index), embedding in zip(targets, predictions):
    if side not in sides:
      raise ValueError(f"retrieval target side {side} is not 0 or 1.")
    if index in sides[side]:
      raise ValueError(f"retrieval target {(side, index)} appears twice.")
    sides[side][index] = np.asarray(embedding, dtype=np.float64)
  return sides[SIDE_SOURCE], sides[SIDE_ENGLISH]


def tatoeba_metric(targets: Sequence[Tuple[int, int]],
                   predictions: Sequence[np.ndarray]) -> Dict[str, float]:
  """seqio metric: Tatoeba accuracy (percent), English queries.

  Args:
    targets: per sentence, (side, pair index).
    predictions: per sentence, its embedding.
  """
  source, english = _group_by_side(targets, predictions)
  if sorted(source) != sorted(english) or not source:
    raise ValueError("retrieval needs the same (non-empty) set of pair "
                     "indices on both sides.")
  order = sorted(source)
  return {"accuracy": 100.0 * nearest_neighbour_accuracy(
      np.stack([english[i] for i in order]),
      np.stack([source[i] for i in order]))}


# The blocked search holds one block's similarities to every target twice:
# as computed and masked and transposed for the targets' top-k (XLA's memory
# analysis of `_search_block`). The targets come normalised: scaling the
# similarities by their norms in the block would take a third.
_BLOCK_COPIES = 2
_FLOAT32_BYTES = 4
_INT32_BYTES = 4
# What one block may cost by default, whatever the corpus size.
DEFAULT_BLOCK_BYTES = 256 * 2**20


@dataclasses.dataclass(frozen=True)
class MiningPlan:
  """How `margin_candidates` walks the similarity matrix, and what it holds.

  The source rows are taken `block_size` at a time (the last block padded to
  it, so one program serves every block); each block's similarities to all
  targets exist only while that block is searched.

  Attributes:
    num_source: source sentences.
    num_target: target sentences.
    dim: embedding width.
    k: neighbours of the margin, as asked (each side keeps at most as many
      as the other side has sentences).
    block_size: source rows per block.
  """
  num_source: int
  num_target: int
  dim: int
  k: int
  block_size: int

  @property
  def k_forward(self) -> int:
    """Neighbours kept per source sentence."""
    return min(self.k, self.num_target)

  @property
  def k_backward(self) -> int:
    """Neighbours kept per target sentence."""
    return min(self.k, self.num_source)

  @property
  def num_blocks(self) -> int:
    return -(-self.num_source // self.block_size)

  @property
  def block_bytes(self) -> int:
    """One block's similarities: [block_size, num_target] float32, twice."""
    return (_BLOCK_COPIES * self.block_size * self.num_target
            * _FLOAT32_BYTES)

  @property
  def resident_bytes(self) -> int:
    """What the whole search holds: the normalised float32 targets, their
    running and merged top-k, the sources' top-k."""
    entry = _FLOAT32_BYTES + _INT32_BYTES  # one neighbour: similarity, index
    merged = self.k_backward + min(self.k_backward, self.block_size)
    return (self.num_target * self.dim * _FLOAT32_BYTES
            + self.num_target * (self.k_backward + merged) * entry
            + self.num_blocks * self.block_size * self.k_forward * entry)

  @property
  def peak_bytes(self) -> int:
    """Resident memory plus one block and its source rows."""
    return (self.resident_bytes + self.block_bytes
            + self.block_size * self.dim * _FLOAT32_BYTES)

  def describe(self) -> str:
    return (f"{self.num_source} x {self.num_target} similarities in "
            f"{self.num_blocks} blocks of {self.block_size} source rows: "
            f"{self.block_bytes / 2**20:.0f} MiB per block, about "
            f"{self.peak_bytes / 2**20:.0f} MiB in all")


def mining_plan(num_source: int, num_target: int, dim: int, k: int = 4,
                block_size: Optional[int] = None) -> MiningPlan:
  """The blocks `margin_candidates` would search in, and their memory.

  Args:
    num_source: source sentences (> 0).
    num_target: target sentences (> 0).
    dim: embedding width.
    k: neighbours of the margin (>= 1).
    block_size: source rows per block; None takes as many as fit in
      `DEFAULT_BLOCK_BYTES`. Never more than `num_source`.

  Returns:
    The plan; `plan.peak_bytes` estimates the search's memory.

  Raises:
    ValueError: for a side without sentences, k < 1 or block_size < 1.
  """
  if num_source < 1 or num_target < 1:
    raise ValueError(f"mining needs sentences on both sides, got "
                     f"{num_source} and {num_target}.")
  if k < 1:
    raise ValueError(f"k must be at least 1, got {k}.")
  if block_size is None:
    block_size = max(1, DEFAULT_BLOCK_BYTES // (
        _BLOCK_COPIES * num_target * _FLOAT32_BYTES))
  elif block_size < 1:
    raise ValueError(f"block_size must be at least 1, got {block_size}.")
  return MiningPlan(num_source, num_target, dim, k,
                    min(block_size, num_source))


def _unit_rows(x: jax.Array) -> jax.Array:
  """[n, dim] rows scaled to norm 1 (an all-zero row stays zero)."""
  return x / jnp.maximum(jnp.linalg.norm(x, axis=1, keepdims=True), _MIN_NORM)


@functools.partial(jax.jit, donate_argnums=0)
def _put_unit_rows(unit_rows, rows, start):
  """`unit_rows` with `rows` normalised into it from row `start` on."""
  return jax.lax.dynamic_update_slice(unit_rows, _unit_rows(rows), (start, 0))


def _device_unit_rows(x: np.ndarray, chunk: int) -> jax.Array:
  """[n, dim] float32 unit rows of `x` on the device.

  Moved and normalised `chunk` rows at a time into one buffer, so besides
  `x` only that float32 copy exists in full, whatever `x`'s dtype.
  """
  chunk = min(chunk, len(x))
  unit_rows = jnp.zeros(x.shape, jnp.float32)
  for start in range(0, len(x), chunk):
    start = min(start, len(x) - chunk)  # the last chunk overlaps: one shape
    unit_rows = _put_unit_rows(
        unit_rows, np.asarray(x[start:start + chunk], np.float32), start)
  return unit_rows


@functools.partial(jax.jit, static_argnames=("k_forward", "k_backward"),
                   donate_argnames=("best_sims", "best_rows"))
def _search_block(block, num_valid, offset, target, best_sims, best_rows, *,
                  k_forward, k_backward):
  """One block of source rows against every target.

  Args:
    block: [block_size, dim] float32 source rows; rows from `num_valid` on
      are padding.
    num_valid: how many rows of `block` are sentences.
    offset: the source index of `block`'s first row.
    target: [num_target, dim] float32 target rows of norm 1 (or 0).
    best_sims: [num_target, k_backward] each target's most similar sources
      among the blocks before this one, most similar first.
    best_rows: [num_target, k_backward] their source indices.
    k_forward: neighbours kept per source row.
    k_backward: neighbours kept per target.

  Returns:
    ([block_size, k_forward] similarities and target indices of each row's
    nearest targets, and `best_sims`, `best_rows` with this block merged in).
    Every list is ordered by similarity, then by index: among equal
    similarities the lower index comes first (`lax.top_k` keeps the earlier
    position, and the earlier blocks' sources come first in the merge).
  """
  # Full float32 products on every backend (TPUs and GPUs would otherwise
  # round the operands to bfloat16 or TF32).
  sims = jnp.matmul(_unit_rows(block), target.T,  # [block_size, num_target]
                    precision=jax.lax.Precision.HIGHEST)
  fwd_sims, fwd_rows = jax.lax.top_k(sims, k_forward)
  is_row = jnp.arange(block.shape[0]) < num_valid
  by_target = jnp.where(is_row[:, None], sims, -jnp.inf).T
  new_sims, new_rows = jax.lax.top_k(  # [num_target, min(k, block_size)]
      by_target, min(k_backward, block.shape[0]))
  merged_sims = jnp.concatenate([best_sims, new_sims], axis=1)
  merged_rows = jnp.concatenate([best_rows, new_rows + offset], axis=1)
  best_sims, picked = jax.lax.top_k(merged_sims, k_backward)
  best_rows = jnp.take_along_axis(merged_rows, picked, axis=1)
  return fwd_sims, fwd_rows, best_sims, best_rows


def _nearest_neighbours(source: np.ndarray, target: np.ndarray,
                        plan: MiningPlan) -> Tuple[np.ndarray, ...]:
  """Exact k nearest neighbours by cosine, both ways, block by block.

  Returns:
    (forward similarities, forward indices) [num_source, k_forward] and
    (backward similarities, backward indices) [num_target, k_backward],
    most similar first, the lower index first among equals; similarities
    as float64.
  """
  target = _device_unit_rows(target, plan.block_size)
  best_sims = jnp.full((plan.num_target, plan.k_backward), -jnp.inf,
                       jnp.float32)
  best_rows = jnp.full((plan.num_target, plan.k_backward), -1, jnp.int32)
  forward = []
  for start in range(0, plan.num_source, plan.block_size):
    rows = np.asarray(source[start:start + plan.block_size], np.float32)
    block = np.zeros((plan.block_size, plan.dim), np.float32)
    block[:len(rows)] = rows
    fwd_sims, fwd_rows, best_sims, best_rows = _search_block(
        block, len(rows), start, target, best_sims, best_rows,
        k_forward=plan.k_forward, k_backward=plan.k_backward)
    forward.append((fwd_sims, fwd_rows))
  fwd_sims, fwd_rows = (np.concatenate(parts)[:plan.num_source]
                        for parts in zip(*jax.device_get(forward)))
  best_sims, best_rows = jax.device_get((best_sims, best_rows))
  return (fwd_sims.astype(np.float64), fwd_rows,
          best_sims.astype(np.float64), best_rows)


# A vectorised round of `_greedy_matching` that retires fewer than this
# share of the remaining proposals hands them to a plain loop.
_MIN_ROUND_PROGRESS = 1 / 8


def _greedy_matching(source_ids: np.ndarray, target_ids: np.ndarray
                     ) -> np.ndarray:
  """Which proposals XTREME's greedy 'max' retrieval takes.

  Greedy walks the proposals in order and takes one when neither of its
  sentences was taken before. Here, in rounds: every proposal that comes
  first among the remaining proposals of both its sentences is taken (no
  earlier one can take either sentence), then the remaining proposals of
  the sentences just taken are dropped. The result is the same; a round
  costs one pass over the remaining proposals, and when a round retires few
  of them (a long chain of proposals each sharing a sentence with a better
  one) the rest go through the plain loop, so the work stays linear.

  Args:
    source_ids: [num_proposals] source index of each proposal, best first.
    target_ids: [num_proposals] its target index.

  Returns:
    [num_proposals] bool: taken.
  """
  num = len(source_ids)
  taken = np.zeros(num, bool)
  source_used = np.zeros(np.max(source_ids, initial=-1) + 1, bool)
  target_used = np.zeros(np.max(target_ids, initial=-1) + 1, bool)
  live = np.arange(num)  # remaining proposals, in order
  while live.size:
    sources, targets = source_ids[live], target_ids[live]
    first_of_source = np.full(len(source_used), num)
    np.minimum.at(first_of_source, sources, live)
    first_of_target = np.full(len(target_used), num)
    np.minimum.at(first_of_target, targets, live)
    now = live[(first_of_source[sources] == live)
               & (first_of_target[targets] == live)]
    taken[now] = True
    source_used[source_ids[now]] = True
    target_used[target_ids[now]] = True
    remaining = live[~source_used[sources] & ~target_used[targets]]
    if remaining.size > (1 - _MIN_ROUND_PROGRESS) * live.size:
      for p, i, j in zip(remaining.tolist(), source_ids[remaining].tolist(),
                         target_ids[remaining].tolist()):
        if not (source_used[i] or target_used[j]):
          taken[p] = source_used[i] = target_used[j] = True
      break
    live = remaining
  return taken


def margin_candidates(source: np.ndarray, target: np.ndarray, k: int = 4,
                      block_size: Optional[int] = None
                      ) -> List[Tuple[int, int, float]]:
  """Bitext mining candidates by ratio margin, as XTREME's BUCC scripts.

  The score of a pair is cos(x, y) divided by the mean of the average cosine
  of x's k nearest targets and y's k nearest sources (Artetxe & Schwenk
  2019). Each source proposes its best-scoring target among its k nearest,
  each target its best source among its k nearest; proposals are then taken
  greedily by descending score so that every sentence is used at most once
  (XTREME's "max" retrieval), and only those scoring above 0 are kept (its
  default mining threshold; a used sentence stays used either way).

  The nearest neighbours are exact, found block by block in float32 with
  JAX (as XTREME's exact faiss index searches in float32), so the full
  similarity matrix never exists: memory is `mining_plan(...).peak_bytes`,
  logged at INFO. Ties are broken by index: among equal similarities the
  lower index is nearer, among a sentence's equally scoring neighbours the
  nearest is proposed, and among equal proposals the sources' come first,
  each side in index order. Against `_margin_candidates_dense`, the same
  rules on the float64 matrix, scores agree to float32 rounding (~1e-6
  relative): pairs whose scores are that close may be listed in another
  order, and only such near-ties could be resolved differently.

  Args:
    source: [num_source, dim] embeddings.
    target: [num_target, dim] embeddings.
    k: neighbourhood size (4 in XTREME).
    block_size: source rows per block of the search; None takes a block of
      about `DEFAULT_BLOCK_BYTES`.

  Returns:
    [(source_index, target_index, score)], best first; [] when a side has
    no sentences.

  Raises:
    ValueError: for embeddings that are not [num_sentences, dim] with one
      dim, k < 1 or block_size < 1.
  """
  source, target = np.asarray(source), np.asarray(target)
  if source.ndim != 2 or target.ndim != 2 or source.shape[1] != target.shape[1]:
    raise ValueError(f"embeddings must be [num_sentences, dim] with one dim, "
                     f"got shapes {source.shape} and {target.shape}.")
  if not len(source) or not len(target):
    return []
  plan = mining_plan(len(source), len(target), source.shape[1], k, block_size)
  logging.info("margin_candidates: %s", plan.describe())
  fwd_sims, fwd_rows, bwd_sims, bwd_rows = _nearest_neighbours(
      source, target, plan)
  fwd_mean, bwd_mean = fwd_sims.mean(axis=1), bwd_sims.mean(axis=1)
  # [num_source, k_forward] and [num_target, k_backward] margins; np.argmax
  # proposes the nearest of equally scoring neighbours.
  fwd_margin = fwd_sims / ((fwd_mean[:, None] + bwd_mean[fwd_rows]) / 2.0)
  bwd_margin = bwd_sims / ((fwd_mean[bwd_rows] + bwd_mean[:, None]) / 2.0)
  fwd_best = np.argmax(fwd_margin, axis=1)[:, None]
  bwd_best = np.argmax(bwd_margin, axis=1)[:, None]
  sources = np.concatenate([np.arange(plan.num_source),
                            np.take_along_axis(bwd_rows, bwd_best, 1)[:, 0]])
  targets = np.concatenate([np.take_along_axis(fwd_rows, fwd_best, 1)[:, 0],
                            np.arange(plan.num_target)])
  scores = np.concatenate([np.take_along_axis(fwd_margin, fwd_best, 1)[:, 0],
                           np.take_along_axis(bwd_margin, bwd_best, 1)[:, 0]])
  order = np.argsort(-scores, kind="stable")
  chosen = order[_greedy_matching(sources[order], targets[order])]
  chosen = chosen[scores[chosen] > 0]
  return list(zip(sources[chosen].tolist(), targets[chosen].tolist(),
                  scores[chosen].tolist()))


def _margin_candidates_dense(source: np.ndarray, target: np.ndarray,
                             k: int = 4) -> List[Tuple[int, int, float]]:
  """`margin_candidates` on the full float64 similarity matrix.

  The reference the blocked search is tested and benchmarked against:
  written as the definition reads, with stable sorts for its tie rule.
  Memory is several [num_source, num_target] float64 matrices.
  """
  similarity = cosine_similarity(source, target)
  k_fwd = min(k, similarity.shape[1])
  k_bwd = min(k, similarity.shape[0])
  fwd_nn = np.argsort(-similarity, axis=1, kind="stable")[:, :k_fwd]
  bwd_nn = np.argsort(-similarity, axis=0, kind="stable")[:k_bwd, :]
  fwd_mean = np.mean(np.take_along_axis(similarity, fwd_nn, 1), axis=1)
  bwd_mean = np.mean(np.take_along_axis(similarity, bwd_nn, 0), axis=0)
  margin = similarity / ((fwd_mean[:, None] + bwd_mean[None, :]) / 2.0)
  proposals = []
  for i in range(similarity.shape[0]):
    j = fwd_nn[i][np.argmax(margin[i, fwd_nn[i]])]
    proposals.append((margin[i, j], i, int(j)))
  for j in range(similarity.shape[1]):
    i = bwd_nn[:, j][np.argmax(margin[bwd_nn[:, j], j])]
    proposals.append((margin[i, j], int(i), j))
  proposals.sort(key=lambda p: -p[0])  # stable: sources' proposals first
  used_source, used_target, chosen = set(), set(), []
  for score, i, j in proposals:
    if i not in used_source and j not in used_target:
      used_source.add(i)
      used_target.add(j)
      if score > 0:
        chosen.append((i, j, float(score)))
  return chosen


def bucc_f1(candidates: Sequence[Tuple[Any, Any, float]],
            gold: Sequence[Tuple[Any, Any]],
            threshold: Optional[float] = None) -> Dict[str, float]:
  """Precision / recall / F1 (percent) of mined pairs against gold pairs.

  With `threshold=None` the threshold maximising F1 on this gold is chosen
  (XTREME's `bucc_optimize`: midway between the last kept score and the next
  one; XTREME does this on the BUCC dev gold, then reuses it on test); pairs
  scoring at least the threshold count as extracted.

  Args:
    candidates: (source_id, target_id, score) triples.
    gold: (source_id, target_id) gold pairs.
    threshold: fixed score threshold, or None to optimise it.

  Returns:
    {"precision", "recall", "f1", "threshold"}.
  """
  gold_set = set(gold)
  if not gold_set:
    raise ValueError("bucc_f1 needs at least one gold pair.")
  ranked = sorted(candidates, key=lambda c: -c[2])
  if threshold is None:
    best_f1, threshold, correct = -1.0, float("inf"), 0
    for n, (s, t, score) in enumerate(ranked, start=1):
      correct += int((s, t) in gold_set)
      if correct == 0:
        continue
      f1 = 2.0 * correct / (n + len(gold_set))
      if f1 > best_f1:
        best_f1 = f1
        # Midway to the next score, so the cut is not on a tie boundary.
        following = ranked[n][2] if n < len(ranked) else score - 1.0
        threshold = (score + following) / 2.0
  extracted = [(s, t) for s, t, score in ranked if score >= threshold]
  correct = sum(int(p in gold_set) for p in extracted)
  precision = correct / len(extracted) if extracted else 0.0
  recall = correct / len(gold_set)
  f1 = (2 * precision * recall / (precision + recall)) if correct else 0.0
  return {"precision": 100.0 * precision, "recall": 100.0 * recall,
          "f1": 100.0 * f1, "threshold": float(threshold)}


def unify(rows: Sequence[Tuple[str, str]], embeddings: Dict[int, np.ndarray],
           path: str) -> Tuple[np.ndarray, List[Optional[str]]]:
  """XTREME's sentence unification for one side of a BUCC corpus.

  Args:
    rows: the file's (sentence_id, sentence) rows.
    embeddings: {row index: embedding}, one per row.
    path: the file, for error messages.

  Returns:
    ([num_unique, dim] embeddings of the distinct sentences in order of
    first occurrence, their BUCC id or None for a sentence that occurs under
    several ids, which XTREME's `read_sent2id` drops).
  """
  if sorted(embeddings) != list(range(len(rows))):
    raise ValueError(
        f"BUCC needs one embedding per sentence of {path}: got "
        f"{len(embeddings)} for {len(rows)} sentences.")
  first_row, ids = {}, {}
  for row, (sentence_id, sentence) in enumerate(rows):
    if sentence in first_row:
      ids[sentence] = None
    else:
      first_row[sentence] = row
      ids[sentence] = sentence_id
  order = list(first_row)
  return (np.stack([embeddings[first_row[s]] for s in order]),
          [ids[s] for s in order])


def bucc_metric(targets, predictions,
                rows: Sequence[Sequence[Tuple[str, str]]],
                gold: Any, paths: Sequence[str], k: int = 4,
                threshold: Optional[float] = None) -> Dict[str, float]:
  """BUCC F1 from a task's (side, index) targets and sentence embeddings.

  Args:
    targets: (side, index) per sentence; index is the sentence's row in its
      BUCC file.
    predictions: the sentence embeddings, in the order of `targets`.
    rows: the (sentence_id, sentence) rows of the source and the English
      file, in that order.
    gold: the gold (source_id, english_id) pairs.
    paths: the two files, for error messages.
    k: neighbours of the ratio margin.
    threshold: a fixed margin threshold; None takes the best on the gold.

  Returns:
    {"precision", "recall", "f1", "threshold"} as `bucc_f1` gives them.
  """
  sides = _group_by_side(targets, predictions)
  unified = [unify(side_rows, side, path)
             for side_rows, side, path in zip(rows, sides, paths)]
  (source, source_ids), (english, english_ids) = unified
  named = [(source_ids[i], english_ids[j], score)
           for i, j, score in margin_candidates(source, english, k)
           if source_ids[i] is not None and english_ids[j] is not None]
  return bucc_f1(named, gold, threshold)
