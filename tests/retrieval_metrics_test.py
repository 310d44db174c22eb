"""Tests for rembert_t5x.scoring.retrieval_metrics (Tatoeba and BUCC scoring)."""

import jax
import numpy as np
import pytest

from rembert_t5x.scoring import retrieval_metrics as rm
from rembert_tasks import retrieval as retrieval_tasks

# The private pieces under test.
_dense = rm._margin_candidates_dense  # pylint: disable=protected-access
_greedy_matching = rm._greedy_matching  # pylint: disable=protected-access
_search_block = rm._search_block  # pylint: disable=protected-access


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


@pytest.mark.parametrize("block_size", [None, 4])
def test_bucc_mining_finds_planted_pairs_among_distractors(block_size):
  rng = np.random.RandomState(1)
  dim, n_pairs = 32, 10
  shared = rng.normal(size=(n_pairs, dim))
  source = np.concatenate([shared + 0.05 * rng.normal(size=shared.shape),
                           rng.normal(size=(15, dim))])
  target = np.concatenate([rng.normal(size=(20, dim)),
                           shared + 0.05 * rng.normal(size=shared.shape)])
  candidates = rm.margin_candidates(source, target, k=4,
                                    block_size=block_size)
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
  return retrieval_tasks.BuccMetric(str(paths["source"]), str(paths["english"]),
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


def _tied_vectors(rng, num, dim=6):
  """[num, dim] rows with four entries of +-1 and the rest 0 (norm 2).

  Every cosine between two such rows is a multiple of 1/4 and comes out
  exactly, in float32 or float64 and in any summation order: equal
  similarities are equal to the bit, so the tie rule decides.
  """
  rows = np.zeros((num, dim))
  columns = np.argsort(rng.random((num, dim)), axis=1)[:, :4]
  np.put_along_axis(rows, columns, rng.choice([-1.0, 1.0], (num, 4)), axis=1)
  return rows


def test_blocked_mining_breaks_ties_as_the_dense_reference():
  rng = np.random.RandomState(5)
  source, target = _tied_vectors(rng, 37), _tied_vectors(rng, 29)
  source[20:25] = source[3]   # duplicate rows on both sides
  target[[7, 19, 28]] = target[2]
  similarity = rm.cosine_similarity(source, target)
  # Ties everywhere: at a source's 4th nearest target, and among the scores.
  fourth = np.sort(similarity, axis=1)[:, -4:-3]
  assert np.mean(np.sum(similarity == fourth, axis=1) > 1) > 0.5
  for k, block_size in ((1, 37), (4, 5), (4, 8), (6, 3)):
    expected = _dense(source, target, k)
    assert np.isfinite([score for _, _, score in expected]).all()
    assert len({score for _, _, score in expected}) < len(expected)
    assert rm.margin_candidates(source, target, k, block_size) == expected, (
        k, block_size)


@pytest.mark.parametrize("num_source,num_target,k,block_size", [
    (40, 60, 4, 7),    # the last block is short (5 rows)
    (60, 40, 4, 60),   # one block
    (30, 50, 4, 3),    # k larger than a block
    (20, 3, 4, 6),     # k larger than the number of targets
    (3, 20, 4, 2),     # ... and than the number of sources
])
def test_blocked_mining_equals_the_dense_reference(num_source, num_target, k,
                                                   block_size):
  rng = np.random.RandomState(num_source + num_target)
  source = rng.normal(size=(num_source, 16))
  target = rng.normal(size=(num_target, 16))
  target[1] = 2.0 * target[0]  # a duplicate up to scale
  blocked = rm.margin_candidates(source, target, k, block_size)
  expected = _dense(source, target, k)
  assert [(i, j) for i, j, _ in blocked] == [(i, j) for i, j, _ in expected]
  # The search runs in float32, the reference in float64: how far apart the
  # scores may be follows from the computation, not from one machine.
  got = np.array([s for _, _, s in blocked])
  want = np.array([s for _, _, s in expected])
  cosine = rm.cosine_similarity(source, target)
  pairs = tuple(np.array([(i, j) for i, j, _ in expected]).T)
  assert np.all(np.abs(got - want) <= _margin_error_bound(
      cosine[pairs], want, dim=source.shape[1])), (got, want)


def _margin_error_bound(cosine, score, dim):
  """How far a float32 ratio-margin score may be from the float64 one.

  Each float32 cosine of two unit vectors is off by at most about
  (dim + 8) * u (u = 2**-24: the dot product's dim roundings, with the
  inputs' cast and normalisation; unit vectors bound the sum of |terms| by
  1), on any processor and in any summation order. A score is
  s = cos / m with m the mean of 2k such cosines, so
  |ds| <= (|d cos| + |s| |dm|) / |m| <= delta * (1 + |s|) / |m|, where
  m = cos / s. Where k exceeds a side's size the means average cosines
  near zero, |m| is small and the bound grows with it, which a fixed rtol
  does not (it failed at 1.08e-5 on another CPU). Doubled for the
  float64 divisions and the mean's own roundings.
  """
  delta = (dim + 8) * 2.0 ** -24
  margin_mean = cosine / score
  return 2 * delta * (1 + np.abs(score)) / np.abs(margin_mean)


def _greedy_by_loop(source_ids, target_ids):
  used_source, used_target, taken = set(), set(), []
  for i, j in zip(source_ids, target_ids):
    taken.append(i not in used_source and j not in used_target)
    if taken[-1]:
      used_source.add(i)
      used_target.add(j)
  return taken


def test_greedy_matching_equals_the_loop():
  rng = np.random.RandomState(7)
  # Random proposals: vectorised rounds do most of the work.
  sources, targets = rng.randint(0, 300, 1000), rng.randint(0, 200, 1000)
  assert _greedy_matching(sources, targets).tolist() == _greedy_by_loop(
      sources, targets)
  # A chain, each proposal sharing a sentence with the one before: a round
  # takes one proposal of it, so the loop takes over.
  chain_sources = np.arange(400) // 2
  chain_targets = (np.arange(400) + 1) // 2
  sources = np.concatenate([chain_sources, 200 + rng.randint(0, 50, 200)])
  targets = np.concatenate([chain_targets, 300 + rng.randint(0, 50, 200)])
  order = rng.permutation(600)
  for s, t in ((sources, targets), (sources[order], targets[order])):
    assert _greedy_matching(s, t).tolist() == _greedy_by_loop(s, t)


def test_mining_plan_bounds_the_block():
  plan = rm.mining_plan(400_000, 400_000, 1152)
  assert plan.block_bytes <= rm.DEFAULT_BLOCK_BYTES
  assert plan.block_size * plan.num_blocks >= 400_000
  assert f"blocks of {plan.block_size} source rows" in plan.describe()
  assert rm.mining_plan(10, 3, 8, k=4, block_size=64).block_size == 10
  assert rm.mining_plan(10, 3, 8, k=4).k_forward == 3
  with pytest.raises(ValueError, match="block_size"):
    rm.mining_plan(10, 3, 8, block_size=0)
  with pytest.raises(ValueError, match="k must be"):
    rm.mining_plan(10, 3, 8, k=0)


def test_block_memory_is_what_the_plan_says():
  plan = rm.mining_plan(64, 2000, 32, k=4, block_size=64)
  shape = jax.ShapeDtypeStruct
  compiled = _search_block.lower(
      shape((64, 32), np.float32), 64, 0, shape((2000, 32), np.float32),
      shape((2000, 4), np.float32), shape((2000, 4), np.int32),
      k_forward=4, k_backward=4).compile()
  temporaries = compiled.memory_analysis().temp_size_in_bytes
  assert plan.block_bytes <= temporaries <= plan.block_bytes + 4096


def test_margin_candidates_compiles_one_block_shape():
  rng = np.random.RandomState(9)
  target = rng.normal(size=(11, 8))
  before = _search_block._cache_size()  # pylint: disable=protected-access
  for num_source in (9, 13, 16):  # short last blocks of 1, 5 and 8 rows
    rm.margin_candidates(rng.normal(size=(num_source, 8)), target,
                         block_size=8)
  after = _search_block._cache_size()  # pylint: disable=protected-access
  assert after == before + 1
  assert rm.margin_candidates(np.zeros((0, 8)), target) == []
  with pytest.raises(ValueError, match="one dim"):
    rm.margin_candidates(rng.normal(size=(3, 7)), target)
