"""Seed aggregation and the significance test (and the experiments' table
of a comparison, `report.comparison_table`)."""


import numpy as np
import pytest

from rembert_t5x.experiments import report
from rembert_t5x.scoring import seed_statistics


# ---- aggregation over seeds ----------------------------------------------

def _run(pretrain_seed, finetune_seed, scores, se=1.0):
  return {"pretrain_seed": pretrain_seed, "finetune_seed": finetune_seed,
          "languages": {l: {"f1": v, "f1_se": se} for l, v in scores.items()}}


def test_summarize_known_numbers():
  runs = [_run(0, 0, {"en": 90, "xa": 40, "xb": 50}, se=2.0),
          _run(0, 1, {"en": 92, "xa": 50, "xb": 60}, se=2.0),
          _run(0, 2, {"en": 94, "xa": 60, "xb": 70}, se=4.0)]
  s = seed_statistics.summarize(runs, "f1", train_language="en")
  assert s["languages"]["en"] == [92.0, 2.0]
  assert s["languages"]["xa"] == [50.0, 10.0]
  z = s["zero_shot"]
  # Zero-shot averages per run: 45, 55, 65 (the training language is left out).
  assert z["values"] == [45.0, 55.0, 65.0]
  assert (z["mean"], z["std"], z["n"]) == (55.0, 10.0, 3)
  assert z["unit"] == "fine-tuning seed"
  assert z["eval_se"] == pytest.approx((2 + 2 + 4) / 3)


def test_summarize_uses_pretraining_seeds_as_units_when_there_are_several():
  runs = [_run(0, 0, {"en": 0, "xa": 40}), _run(0, 1, {"en": 0, "xa": 50}),
          _run(1, 0, {"en": 0, "xa": 60}), _run(1, 1, {"en": 0, "xa": 80})]
  z = seed_statistics.summarize(runs, "f1", "en")["zero_shot"]
  assert z["unit"] == "pre-training seed"
  assert z["values"] == [45.0, 70.0] and z["n"] == 2


# ---- significance ----------------------------------------------------------

def test_welch_detects_clearly_different_samples():
  test = seed_statistics.welch_test([50.0, 51.0, 52.5], [70.0, 71.5, 72.0])
  assert test["difference"] == pytest.approx(20.0)
  assert test["p"] < 0.001
  assert 0 < test["low"] < 20 < test["high"]


def test_welch_finds_nothing_in_identical_or_overlapping_samples():
  same = seed_statistics.welch_test([50.0, 55.0, 60.0], [50.0, 55.0, 60.0])
  assert same["difference"] == 0 and same["p"] == pytest.approx(1.0)
  assert same["low"] < 0 < same["high"]
  noisy = seed_statistics.welch_test([50.0, 58.0, 62.0], [52.0, 61.0, 66.0])
  assert noisy["p"] > 0.05
  constant = seed_statistics.welch_test([50.0, 50.0], [50.0, 50.0])
  assert constant["p"] == 1.0
  one = seed_statistics.welch_test([50.0], [60.0])
  assert one["p"] is None and one["difference"] == 10.0


def test_detectable_difference_known_numbers():
  # n = 3 a side, s = 1: SE = sqrt(2/3), Welch df = 4;
  # (t[0.975, 4] + t[0.8, 4]) * SE = (2.7764 + 0.9410) * 0.8165.
  mde = seed_statistics.detectable_difference([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])
  assert mde == pytest.approx(3.0353, abs=1e-3)
  # Three comparisons: Holm's first threshold alpha / 3 asks for more.
  assert seed_statistics.detectable_difference(
      [1.0, 2.0, 3.0], [2.0, 3.0, 4.0], tests=3) > mde + 0.5
  assert seed_statistics.detectable_difference([1.0], [2.0, 3.0]) is None
  assert seed_statistics.detectable_difference([1.0, 1.0], [2.0, 2.0]) == 0.0


def test_detectable_difference_is_detected_at_the_stated_power():
  # Normal seeds with the stated spread and a true difference equal to the
  # detectable difference (computed from the true spreads): Welch's test
  # rejects in about 80% of repetitions (the t approximation of the
  # noncentral t; at 0.5 the power quantile would be missing).
  rng = np.random.default_rng(0)
  n, sigma_a, sigma_b = 5, 2.0, 3.0
  unit = np.arange(n) - (n - 1) / 2
  unit /= unit.std(ddof=1)  # sample std exactly 1
  delta = seed_statistics.detectable_difference(unit * sigma_a,
                                                unit * sigma_b)
  a = rng.normal(0.0, sigma_a, (4000, n))
  b = rng.normal(delta, sigma_b, (4000, n))
  from scipy import stats  # pylint: disable=g-import-not-at-top
  rejected = stats.ttest_ind(b, a, axis=1, equal_var=False).pvalue < 0.05
  assert 0.72 < rejected.mean() < 0.88


def test_holm_adjustment():
  assert seed_statistics.holm([0.01, 0.04, 0.03]) == pytest.approx(
      [0.03, 0.06, 0.06])
  assert seed_statistics.holm([0.5, None]) == [0.5, None]


def _summaries(values_by_family):
  return {f: {v: {"zero_shot": {"values": vals, "mean": float(np.mean(vals)),
                                "std": float(np.std(vals, ddof=1)),
                                "n": len(vals), "unit": "fine-tuning seed",
                                "eval_se": 0.8}}
              for v, vals in by_variant.items()}
          for f, by_variant in values_by_family.items()}


def test_compare_verdicts_and_table():
  summaries = _summaries({
      "pair": {"coupled": [50.0, 51.0, 52.0], "decoupled": [70.0, 71.0, 72.5]},
      "tag": {"coupled": [30.0, 36.0, 33.0], "decoupled": [31.0, 35.0, 34.0]},
      "qa": {"coupled": [25.0, 26.0, 25.5], "decoupled": [15.0, 15.5, 16.0]}})
  comparisons = seed_statistics.compare(summaries, "coupled", "decoupled")
  assert comparisons["pair"]["verdict"] == "decoupled higher"
  assert comparisons["tag"]["verdict"] == seed_statistics.NO_DIFFERENCE
  assert comparisons["qa"]["verdict"] == "coupled higher"
  for c in comparisons.values():
    assert c["p_holm"] >= c["p"]
  table = report.comparison_table(
      summaries, comparisons, {"pair": "accuracy", "tag": "f1", "qa": "f1"},
      "coupled", "decoupled", chance={"pair": 50.0})
  lines = table.splitlines()
  assert lines[0].startswith("| task (metric) | coupled | decoupled | eval SE")
  assert len(lines) == 2 + 3
  assert ("| pair (accuracy) | 51.0 ± 1.0 (n=3) | 71.2 ± 1.3 (n=3) | 0.8 | "
          "50.0 | +20.2 [") in lines[2]
  assert lines[2].endswith("| decoupled higher |")
  # tag: spreads of ~3 and ~2 points over 3 seeds; a true difference below
  # the detectable one would often be missed.
  tag = comparisons["tag"]
  assert tag["detectable"] == pytest.approx(seed_statistics.detectable_difference(
      [30.0, 36.0, 33.0], [31.0, 35.0, 34.0], tests=3))
  assert f"| ±{tag['detectable']:.1f} | no significant difference |" in lines[3]
  assert "no significant difference" in lines[3]
  assert "fine-tuning seeds of one pre-trained model" in (
      seed_statistics.unit_description(summaries))
