"""Evaluation-set standard errors (bootstrap over units) beside the official metrics."""

import math

import numpy as np
import pytest

from rembert_t5x.scoring import metrics
from rembert_t5x.scoring import standard_errors

def test_bootstrap_se_of_a_proportion_matches_the_binomial_formula():
  # 400 examples, 60% correct: SE = sqrt(p (1 - p) / n) = 2.449 points.
  correct = np.array([[1.0]] * 240 + [[0.0]] * 160)
  se = standard_errors.bootstrap_standard_error(correct, standard_errors.percent_mean,
                                            num_samples=2000)
  assert se == pytest.approx(100 * math.sqrt(0.6 * 0.4 / 400), rel=0.06)
  # More examples, smaller error; a constant score has none.
  bigger = standard_errors.bootstrap_standard_error(
      np.tile(correct, (4, 1)), standard_errors.percent_mean, num_samples=2000)
  assert bigger == pytest.approx(se / 2, rel=0.1)
  assert standard_errors.bootstrap_standard_error(
      np.ones((50, 1)), standard_errors.percent_mean) == 0.0


def test_metrics_with_se_keep_the_official_values():
  targets = [0, 1, 1, 0, 1, 1, 0, 0, 1, 1]
  predictions = [0, 1, 0, 0, 1, 1, 1, 0, 1, 0]
  scores = standard_errors.accuracy_with_se(targets, predictions)
  assert scores["accuracy"] == metrics.accuracy_metric(
      targets, predictions)["accuracy"] == 70.0
  assert 0 < scores["accuracy_se"] < 30

  gold = [["B-PER", "I-PER", "O"], ["O", "B-LOC"], ["B-ORG", "O", "B-PER"],
          ["O", "O"]]
  pred = [["B-PER", "I-PER", "O"], ["O", "B-ORG"], ["B-ORG", "O", "O"],
          ["B-LOC", "O"]]
  scores = standard_errors.entity_f1_with_se(gold, pred)
  assert scores["f1"] == pytest.approx(
      100 * metrics.entity_f1(gold, pred))
  # The per-sentence counts rebuild the corpus F1 exactly.
  sums = np.array(metrics.entity_counts(gold, pred)).sum(axis=0)
  assert standard_errors.percent_f1(sums, len(gold)) == pytest.approx(scores["f1"])
  assert scores["f1_se"] > 0

  # QA: two windows of question "a" (the better one wins), one of "b".
  targets = [{"example_id": "a", "answers": ["Alma Kato"]},
             {"example_id": "a", "answers": ["Alma Kato"]},
             {"example_id": "b", "answers": ["Lima"]}]
  predictions = [{"example_id": "a", "score": 1.0, "text": "Kato"},
                 {"example_id": "a", "score": 3.0, "text": "Alma Kato"},
                 {"example_id": "b", "score": None, "text": ""}]
  scores = standard_errors.squad_with_se(targets, predictions)
  official = metrics.squad_metric(targets, predictions)
  for name in ("exact_match", "f1", "xtreme"):
    assert scores[name] == official[name]
    assert scores[f"{name}_se"] > 0
  assert scores["f1"] == 50.0
