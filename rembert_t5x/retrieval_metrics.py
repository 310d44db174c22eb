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

All pure numpy; scores in percent.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

# Retrieval `targets[0]`: which side of a parallel corpus a sentence is on.
SIDE_SOURCE = 0   # the non-English sentence
SIDE_ENGLISH = 1


def _normalise_rows(x: np.ndarray) -> np.ndarray:
  x = np.asarray(x, dtype=np.float64)
  if x.ndim != 2:
    raise ValueError(f"embeddings must be [num_sentences, dim], got shape "
                     f"{x.shape}.")
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  return x / np.maximum(norms, 1e-12)


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


def margin_candidates(source: np.ndarray, target: np.ndarray,
                      k: int = 4) -> List[Tuple[int, int, float]]:
  """Bitext mining candidates by ratio margin, as XTREME's BUCC scripts.

  The score of a pair is cos(x, y) divided by the mean of the average cosine
  of x's k nearest targets and y's k nearest sources (Artetxe & Schwenk
  2019). Each source proposes its best-scoring target among its k nearest,
  each target its best source among its k nearest; proposals are then taken
  greedily by descending score so that every sentence is used at most once
  (XTREME's "max" retrieval), and only those scoring above 0 are kept (its
  default mining threshold; a used sentence stays used either way).

  Args:
    source: [num_source, dim] embeddings.
    target: [num_target, dim] embeddings.
    k: neighbourhood size (4 in XTREME).

  Returns:
    [(source_index, target_index, score)], best first.
  """
  similarity = cosine_similarity(source, target)
  k_fwd = min(k, similarity.shape[1])
  k_bwd = min(k, similarity.shape[0])
  fwd_mean = -np.mean(np.sort(-similarity, axis=1)[:, :k_fwd], axis=1)
  bwd_mean = -np.mean(np.sort(-similarity, axis=0)[:k_bwd, :], axis=0)
  margin = similarity / ((fwd_mean[:, None] + bwd_mean[None, :]) / 2.0)
  fwd_nn = np.argsort(-similarity, axis=1)[:, :k_fwd]
  bwd_nn = np.argsort(-similarity, axis=0)[:k_bwd, :]
  proposals = []
  for i in range(similarity.shape[0]):
    j = fwd_nn[i][np.argmax(margin[i, fwd_nn[i]])]
    proposals.append((margin[i, j], i, int(j)))
  for j in range(similarity.shape[1]):
    i = bwd_nn[:, j][np.argmax(margin[bwd_nn[:, j], j])]
    proposals.append((margin[i, j], int(i), j))
  proposals.sort(key=lambda p: -p[0])
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
