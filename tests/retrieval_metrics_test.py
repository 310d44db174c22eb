"""Tests for rembert_t5x.retrieval_metrics (Tatoeba and BUCC scoring)."""

import numpy as np
import pytest

from rembert_t5x.data import xtreme_readers
from rembert_t5x import retrieval_metrics as rm


def test_nearest_neighbour_accuracy():
  rng = np.random.RandomState(0)
  x = rng.normal(size=(50, 16))
  assert rm.nearest_neighbour_accuracy(x, 3.0 * x) == 1.0  # scale-invariant
  assert rm.nearest_neighbour_accuracy(x, x[::-1]) <= 0.04
  targets = [(s, i) for i in range(50) for s in (0, 1)]
  predictions = [x[i] for i in range(50) for _ in (0, 1)]
  assert rm.tatoeba_metric(targets, predictions) == {"accuracy": 100.0}
  with pytest.raises(ValueError, match="same .* set of pair"):
    rm.tatoeba_metric(targets[:-1], predictions[:-1])


def test_tatoeba_queries_are_english():
  # Unit vectors at these angles (degrees): each source sentence's nearest
  # English sentence is its translation, but English 1 (40) is nearer to
  # source 0 (15) than to its own source 1 (80). XTREME's English queries
  # score 1 of 2; queries from the other side would score 2 of 2.
  def at(*degrees):
    radians = np.deg2rad(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)

  source, english = at(15, 80), at(0, 40)
  assert rm.nearest_neighbour_accuracy(source, english) == 1.0
  targets = [(0, 0), (0, 1), (1, 0), (1, 1)]
  predictions = [source[0], source[1], english[0], english[1]]
  assert rm.tatoeba_metric(targets, predictions) == {"accuracy": 50.0}


def test_bucc_mining_finds_planted_pairs_among_distractors():
  rng = np.random.RandomState(1)
  dim, n_pairs = 32, 10
  shared = rng.normal(size=(n_pairs, dim))
  source = np.concatenate([shared + 0.05 * rng.normal(size=shared.shape),
                           rng.normal(size=(15, dim))])
  target = np.concatenate([rng.normal(size=(20, dim)),
                           shared + 0.05 * rng.normal(size=shared.shape)])
  candidates = rm.margin_candidates(source, target, k=4)
  # One-to-one: no sentence is used twice.
  assert len({i for i, _, _ in candidates}) == len(candidates)
  assert len({j for _, j, _ in candidates}) == len(candidates)
  gold = [(i, 20 + i) for i in range(n_pairs)]
  scores = rm.bucc_f1(candidates, gold)
  assert scores["f1"] == 100.0 and scores["precision"] == 100.0
  # The top candidates by margin are exactly the planted pairs.
  assert sorted((i, j) for i, j, _ in candidates[:n_pairs]) == gold


def test_margin_candidates_keep_only_positive_scores():
  # Found by search: greedy 'max' retrieval takes (1, 2) and then (0, 0),
  # whose ratio margin is negative (a small positive cosine over a negative
  # mean neighbour cosine), so XTREME's mining (threshold 0) does not write
  # it out.
  source = np.array([[0.5, -0.4], [0.0, 1.7], [-0.1, 1.0]])
  target = np.array([[-0.9, -1.2], [0.2, 0.6], [0.2, 1.6]])
  candidates = rm.margin_candidates(source, target, k=2)
  assert [(i, j) for i, j, _ in candidates] == [(1, 2)]
  similarity = rm.cosine_similarity(source, target)
  neighbours = np.mean(np.sort(similarity[0])[-2:])
  assert similarity[0, 0] > 0 > neighbours


def test_bucc_f1_threshold_choice_by_hand():
  candidates = [("a", "x", 3.0), ("b", "y", 2.0), ("c", "z", 1.0)]
  gold = [("a", "x"), ("c", "z"), ("d", "w")]
  # Cutting after 1 pair: P=1, R=1/3, F1=.5; after 3: P=R=2/3, F1=2/3.
  scores = rm.bucc_f1(candidates, gold)
  assert scores["f1"] == pytest.approx(200 / 3)
  assert scores["threshold"] == pytest.approx(0.5)
  fixed = rm.bucc_f1(candidates, gold, threshold=2.5)
  assert fixed["precision"] == 100.0
  assert fixed["recall"] == pytest.approx(100 / 3)


def _write_bucc(directory, source_rows, english_rows, gold):
  paths = {}
  for name, rows in (("source", source_rows), ("english", english_rows)):
    paths[name] = directory / f"{name}.txt"
    paths[name].write_text("".join(f"{i}\t{s}\n" for i, s in rows),
                           encoding="utf-8")
  paths["gold"] = directory / "gold.txt"
  paths["gold"].write_text("".join(f"{s}\t{e}\n" for s, e in gold),
                           encoding="utf-8")
  return xtreme_readers.BuccMetric(str(paths["source"]), str(paths["english"]),
                       str(paths["gold"]))


def test_bucc_metric_unifies_duplicates_like_xtreme(tmp_path):
  rng = np.random.RandomState(3)
  vectors = rng.normal(size=(6, 16))
  # Source rows 0 and 3 are the same sentence under two ids: XTREME keeps
  # one copy for mining and drops the sentence from its id map, so its pair
  # can never be extracted.
  source_rows = [("de-0", "Hallo"), ("de-1", "Katze"), ("de-2", "Hund"),
                 ("de-3", "Hallo")]
  english_rows = [("en-0", "Hello"), ("en-1", "Cat"), ("en-2", "Dog"),
                  ("en-3", "Bird")]
  gold = [("de-0", "en-0"), ("de-1", "en-1"), ("de-2", "en-2")]
  metric = _write_bucc(tmp_path, source_rows, english_rows, gold)
  source = [vectors[0], vectors[1], vectors[2], vectors[0]]
  english = [vectors[0], vectors[1], vectors[2], vectors[5]]
  targets = [(0, i) for i in range(4)] + [(1, i) for i in range(4)]
  scores = metric(targets, source + english)
  assert scores["precision"] == 100.0
  assert scores["recall"] == pytest.approx(200 / 3)
  with pytest.raises(ValueError, match="one embedding per sentence"):
    metric(targets[1:], (source + english)[1:])
