"""Evaluation-set standard errors: seqio metrics that also report `<metric>_se`.

A score on n evaluation examples is itself an estimate. Its standard error
comes from a bootstrap over evaluation units (examples for pair
classification, sentences for tagging, questions for QA: the units the
metric counts), computed inside the metric functions here, so every score
they report carries `<metric>_se`. The seed-to-seed spread and the tests
between variants are in `rembert_t5x.scoring.seed_statistics`.
"""

from typing import Any, Callable, Dict, Sequence

import numpy as np

from rembert_t5x.scoring import metrics

BOOTSTRAP_SAMPLES = 1000

# --------------------------------------------------------------------------

def bootstrap_standard_error(
    unit_stats: np.ndarray,
    statistic: Callable[[np.ndarray, int], np.ndarray],
    num_samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> float:
  """Standard error of a corpus statistic, by resampling its units.

  Args:
    unit_stats: [n, k] additive statistics of each unit (e.g. one column of
      0/1 correctness, or (tp, predicted, gold) entity counts).
    statistic: maps summed statistics [..., k] and n to the score [...].
    num_samples: bootstrap replicates. The seed is fixed, so a score's SE
      is a function of its predictions alone.
    seed: resampling seed.

  Returns:
    The standard deviation of the statistic over replicates (0 for n < 2).
  """
  unit_stats = np.asarray(unit_stats, dtype=np.float64)
  n = unit_stats.shape[0]
  if n < 2:
    return 0.0
  rng = np.random.default_rng(seed)
  # Counts per unit ([B, n], summing to n) times the unit statistics gives
  # every replicate's sums without materialising resampled copies.
  counts = rng.multinomial(n, np.full(n, 1.0 / n), size=num_samples)
  values = statistic(counts @ unit_stats, n)
  return float(np.std(values, ddof=1))


def percent_mean(sums: np.ndarray, n: int) -> np.ndarray:
  """Mean of column 0 in percent (accuracy, per-question EM or F1)."""
  return 100.0 * sums[..., 0] / n


def percent_f1(sums: np.ndarray, n: int) -> np.ndarray:
  """Micro F1 in percent from summed (tp, predicted, gold); 0 when empty."""
  del n
  tp, predicted, gold = sums[..., 0], sums[..., 1], sums[..., 2]
  denominator = predicted + gold
  safe = np.where(denominator > 0, denominator, 1.0)
  return np.where((tp > 0) & (denominator > 0), 200.0 * tp / safe, 0.0)


def accuracy_with_se(targets: Sequence[Any], predictions: Sequence[Any]
                     ) -> Dict[str, float]:
  """seqio metric: {"accuracy", "accuracy_se"} in percent."""
  scores = metrics.accuracy_metric(targets, predictions)
  correct = np.array([[t == p] for t, p in zip(targets, predictions)],
                     dtype=np.float64)
  scores["accuracy_se"] = bootstrap_standard_error(correct, percent_mean)
  return scores


def entity_f1_with_se(targets: Sequence[Sequence[str]],
                      predictions: Sequence[Sequence[str]]
                      ) -> Dict[str, float]:
  """seqio metric: {"f1", "f1_se"} (entity F1, sentences resampled)."""
  scores = metrics.entity_f1_metric(targets, predictions)
  counts = np.array(metrics.entity_counts(targets, predictions),
                    dtype=np.float64).reshape(-1, 3)
  scores["f1_se"] = bootstrap_standard_error(counts, percent_f1)
  return scores


def squad_with_se(targets, predictions) -> Dict[str, float]:
  """seqio metric over QA windows: SQuAD EM / F1 / XTREME score and the SE
  of each (questions resampled, with all their windows)."""
  scores = metrics.squad_metric(targets, predictions)
  gold, answers = metrics.best_window_answers(targets, predictions)
  per_question = np.array(metrics.qa_question_scores(gold, answers),
                          dtype=np.float64).reshape(-1, 2)
  columns = {"exact_match": per_question[:, :1], "f1": per_question[:, 1:],
             "xtreme": per_question.mean(axis=1, keepdims=True)}
  for name, column in columns.items():
    scores[f"{name}_se"] = bootstrap_standard_error(column, percent_mean)
  return scores
