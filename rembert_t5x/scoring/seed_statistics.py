"""Error bars and significance for comparisons over seeds.

Two sources of noise sit under every number the demo reports: the
evaluation set (a bootstrap standard error over the units the metric counts,
`<metric>_se`, computed by the seqio metrics of
`rembert_t5x.scoring.standard_errors`) and training (the sample standard
deviation over seeds; floating-point differences between machines act like
another seed). Comparisons use Welch's t-test on one number per independent
training run, its zero-shot average, Holm-corrected over the tasks: at the
demo's size the seed spread is at least as large as the evaluation-set
noise and only a test over runs sees it, and the variants' spreads differ,
hence Welch's unequal-variance form (docs/EXPERIMENTS.md, "How to read the
numbers"). The unit is the pre-training seed when a variant has several
(fine-tuning seeds averaged first: the verdict speaks for the
architectures), else the fine-tuning seed (it speaks for the two pre-trained
models only); `unit_description` says which. The markdown table of a
comparison is `rembert_t5x.experiments.report.comparison_table`.
"""

import collections
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats


ALPHA = 0.05
NO_DIFFERENCE = "no significant difference"


# --------------------------------------------------------------------------
# Aggregation over seeds
# --------------------------------------------------------------------------

def mean_std(values: Sequence[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (ddof=1; 0 for a single value)."""
  values = np.asarray(values, dtype=np.float64)
  std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
  return float(values.mean()), std


def zero_shot_average(per_language: Mapping[str, float],
                      train_language: str) -> float:
  """Mean over every language but the training one."""
  values = [v for lang, v in per_language.items() if lang != train_language]
  if not values:
    raise ValueError(f"no zero-shot language besides {train_language!r} "
                     f"among {sorted(per_language)}")
  return float(np.mean(values))


def summarize(runs: Sequence[Mapping[str, Any]], metric: str,
              train_language: str) -> Dict[str, Any]:
  """Mean ± std over seeds of one task family and one variant.

  Args:
    runs: one record per fine-tuning run: {"pretrain_seed", "finetune_seed",
      "languages": {lang: {metric: value, f"{metric}_se": value}}}.
    metric: the family's main metric.
    train_language: excluded from the zero-shot average.

  Returns:
    {"languages": {lang: [mean, std]}, "zero_shot": {"mean", "std", "n",
     "unit", "values", "eval_se"}}. "values" are the zero-shot averages per
    independent unit (pre-training seed when there are several, else
    fine-tuning run; see the module docstring); "eval_se" bounds the
    evaluation-set standard error of one run's zero-shot average: the mean
    of its languages' SEs (the dev sets are parallel translations, so their
    errors may correlate; the mean is the perfectly correlated case, an upper
    bound), averaged over runs.
  """
  if not runs:
    raise ValueError("summarize: no runs")
  langs = sorted(set().union(*(r["languages"] for r in runs)))
  per_language = {
      lang: list(mean_std([r["languages"][lang][metric] for r in runs
                           if lang in r["languages"]])) for lang in langs}
  by_pretrain = collections.defaultdict(list)
  eval_se = []
  for r in runs:
    scores = {l: m[metric] for l, m in r["languages"].items()}
    by_pretrain[r["pretrain_seed"]].append(
        zero_shot_average(scores, train_language))
    ses = [m.get(f"{metric}_se") for l, m in r["languages"].items()
           if l != train_language]
    if ses and None not in ses:
      eval_se.append(float(np.mean(ses)))
  if len(by_pretrain) > 1:
    unit = "pre-training seed"
    values = [float(np.mean(v)) for _, v in sorted(by_pretrain.items())]
  else:
    unit = "fine-tuning seed"
    values = next(iter(by_pretrain.values()))
  mean, std = mean_std(values)
  return {"languages": per_language,
          "zero_shot": {"mean": mean, "std": std, "n": len(values),
                        "unit": unit, "values": values,
                        "eval_se": float(np.mean(eval_se)) if eval_se
                        else None}}


# --------------------------------------------------------------------------
# Significance
# --------------------------------------------------------------------------

def welch_test(a: Sequence[float], b: Sequence[float],
               confidence: float = 0.95) -> Dict[str, Optional[float]]:
  """Welch's t-test of mean(b) - mean(a), with its confidence interval.

  Returns:
    {"difference", "low", "high", "p"}; "p" (two-sided), "low" and "high"
    are None with fewer than 2 values on a side. Two constant samples (no
    spread at all) have p = 1 when equal and p = 0 otherwise, where the
    t statistic is undefined.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  difference = float(b.mean() - a.mean())
  if len(a) < 2 or len(b) < 2:
    return {"difference": difference, "low": None, "high": None, "p": None}
  if a.std() == 0 and b.std() == 0:
    return {"difference": difference, "low": difference, "high": difference,
            "p": 1.0 if difference == 0 else 0.0}
  result = scipy_stats.ttest_ind(b, a, equal_var=False)
  interval = result.confidence_interval(confidence)
  return {"difference": difference, "low": float(interval.low),
          "high": float(interval.high), "p": float(result.pvalue)}


POWER = 0.8


def detectable_difference(a: Sequence[float], b: Sequence[float],
                          alpha: float = ALPHA, power: float = POWER,
                          tests: int = 1) -> Optional[float]:
  """The smallest true difference of means Welch's test of `a` against `b`
  detects with probability `power` (two-sided, at `alpha / tests`: Holm's
  first threshold over `tests` comparisons), given their sample spreads.

  (t[1 - alpha/(2 tests)] + t[power]) x SE, with SE = sqrt(s_a^2/n_a +
  s_b^2/n_b) and t on Welch-Satterthwaite's degrees of freedom; the
  spreads stand in for the true ones, so the figure is itself uncertain
  with few seeds. None with fewer than 2 values on a side; 0.0 when neither
  side varies.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if len(a) < 2 or len(b) < 2:
    return None
  va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
  if va + vb == 0:
    return 0.0
  df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
  quantiles = (scipy_stats.t.ppf(1 - alpha / (2 * tests), df) +
               scipy_stats.t.ppf(power, df))
  return float(quantiles * np.sqrt(va + vb))


def holm(pvalues: Sequence[Optional[float]]) -> List[Optional[float]]:
  """Holm-Bonferroni adjusted p-values (None entries are skipped)."""
  indexed = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
  adjusted: List[Optional[float]] = [None] * len(pvalues)
  running = 0.0
  for rank, (p, i) in enumerate(indexed):
    running = max(running, min(1.0, (len(indexed) - rank) * p))
    adjusted[i] = running
  return adjusted


def welch_holm(samples: Sequence[tuple]) -> List[Dict[str, Optional[float]]]:
  """`welch_test` of each (a, b) of `samples`, each with "p_holm", its
  p-value Holm-adjusted over them all, and "detectable", the
  `detectable_difference` at Holm's first threshold over them all."""
  tests = [welch_test(a, b) for a, b in samples]
  for test, p, (a, b) in zip(tests, holm([t["p"] for t in tests]), samples):
    test["p_holm"] = p
    test["detectable"] = detectable_difference(a, b, tests=len(samples))
  return tests


def compare(summaries: Mapping[str, Mapping[str, Any]], baseline: str,
            candidate: str, alpha: float = ALPHA) -> Dict[str, Dict[str, Any]]:
  """Per family: candidate − baseline on the zero-shot average, tested.

  Args:
    summaries: {family: {variant: `summarize` output}}.
    baseline, candidate: the two variants.
    alpha: family-wise error rate over the families (Holm).

  Returns:
    {family: {"difference", "low", "high", "p", "p_holm", "verdict"}}; the
    verdict names the higher variant only where the Holm-adjusted p is
    below alpha, else `NO_DIFFERENCE` (or "not tested" with one unit).
  """
  tests = welch_holm([(s[baseline]["zero_shot"]["values"],
                        s[candidate]["zero_shot"]["values"])
                       for s in summaries.values()])
  out = {}
  for family, test in zip(summaries, tests):
    if test["p_holm"] is None:
      verdict = "not tested (one run per variant)"
    elif test["p_holm"] < alpha:
      higher = candidate if test["difference"] > 0 else baseline
      verdict = f"{higher} higher"
    else:
      verdict = NO_DIFFERENCE
    out[family] = {**test, "verdict": verdict}
  return out


def unit_description(summaries: Mapping[str, Mapping[str, Any]]) -> str:
  """One sentence: what the ± and the test are over."""
  first = next(iter(next(iter(summaries.values())).values()))["zero_shot"]
  if first["unit"] == "pre-training seed":
    return (f"± is the standard deviation over {first['n']} pre-training "
            "seeds per variant (each averaged over its fine-tuning seeds); "
            "the test compares architectures.")
  return (f"± is the standard deviation over {first['n']} fine-tuning seeds "
          "of one pre-trained model per variant; the test compares these two "
          "pre-trained models, not the architectures (pre-training seeds: "
          "--pretrain_seeds or --full).")
