"""Reference numbers shown beside a sweep's: the paper's Table 16.

`PAPER_RESULTS` is RemBERT's row of the paper's Table 16 (XTREME, per task),
shipped as package data with its source; `python -m rembert_t5x.experiments.sweep
--experiment=table15` shows it by default, `--paper_results=FILE` replaces
it. `table16_lines` writes one table in Table 16's layout: our families
(mean ± std over seeds) against the reference, with the averages.
"""

import dataclasses
import json
import pathlib
from typing import Any, List, Mapping, Optional

import numpy as np

from rembert_t5x.common import errors
from rembert_t5x.experiments import report

# RemBERT's XTREME numbers from the paper (Table 16), shipped as package data.
PAPER_RESULTS = pathlib.Path(__file__).parent / "paper_results" / (
    "rembert_xtreme.json")


@dataclasses.dataclass(frozen=True)
class PaperResults:
  """Reference numbers shown beside ours.

  Attributes:
    scores: {family: score} (QA: (EM + F1) / 2) and optionally "average".
    em_f1: {QA family: (EM, F1)} where the source gives both.
    source: where the numbers come from.
    split: what they were measured on.
  """
  scores: Mapping[str, float]
  em_f1: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
  source: str = ""
  split: str = ""


# Paper Table 16's column order (XNLI, POS, NER, PAWS-X, XQuAD, MLQA, TyDi).
TABLE16_ORDER = ("xnli", "udpos", "panx", "pawsx", "xquad", "mlqa", "tydiqa")


def as_results(paper) -> Optional[PaperResults]:
  """`PaperResults` from itself, None, or a plain {family: score} mapping."""
  if paper is None or isinstance(paper, PaperResults):
    return paper
  return PaperResults({str(k): float(v) for k, v in paper.items()})


def table16_lines(table: Mapping[str, Any],
                     paper: Optional[PaperResults] = None) -> List[str]:
  """Lines of one table in the paper's Table 16 layout: a column per family
  (paper order, then any other), an "avg" column; rows "ours" (mean ± std
  over seeds) and, with `paper`, the paper's numbers.

  "avg" is the mean over the families shown, with QA as (EM + F1) / 2 (the
  paper's Avg_task); the paper's avg is taken over the same families, so a
  partial sweep compares like with like.
  """
  families, paper = table["families"], as_results(paper)
  names = ([f for f in TABLE16_ORDER if f in families]
           + [f for f in families if f not in TABLE16_ORDER])
  if not names:
    return []
  seeds = max(len(f["seed_avgs"]) for f in families.values())
  avg = ("" if table.get("average") is None else
         report.pm((table["average"], table.get("average_std") or 0.0)))
  lines = ["| " + report.row([*names, "avg"]),
           "|---" * (len(names) + 2) + "|",
           report.row([f"ours (mean ± std, {seeds} seed{'s' * (seeds > 1)})",
                       *(report.pm(families[f]["avg"]) for f in names), avg])]
  if paper is not None:
    cells = []
    for f in names:
      if f in paper.em_f1:
        em, f1 = paper.em_f1[f]
        cells.append(f"{paper.scores[f]:.1f} ({em:.1f} / {f1:.1f})")
      else:
        cells.append(f"{paper.scores[f]:.1f}" if f in paper.scores else "—")
    known = [paper.scores[f] for f in names if f in paper.scores]
    paper_avg = f"{np.mean(known):.1f}" if len(known) == len(names) else "—"
    lines.append(report.row(["paper", *cells, paper_avg]))
  return lines


def _number(value, where: str) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise errors.UserError(f"{where}: expected a number, got {value!r}")
  return float(value)


def read_paper_results(path: str) -> PaperResults:
  """Reference numbers from a JSON file; errors name the file and field.

  Two forms: flat `{family: score, "average": score}`, or the shipped one
  (`PAPER_RESULTS`): {"source", "split", "families": {family: {"score": x}
  or {"exact_match": em, "f1": f1}}, "average": x}; QA families score
  (EM + F1) / 2, as XTREME averages them.
  """
  try:
    data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
  except (OSError, ValueError) as e:
    raise errors.UserError(f"{path}: cannot read a JSON object ({e})") from e
  if not isinstance(data, dict):
    raise errors.UserError(f"{path}: expected an object of family -> number")
  if "families" not in data:
    return PaperResults({str(k): _number(v, f"{path}: field {k!r}")
                         for k, v in data.items()})
  scores, em_f1 = {}, {}
  families = data["families"]
  if not isinstance(families, dict):
    raise errors.UserError(f"{path}: field 'families' must be an object")
  for family, entry in families.items():
    where = f"{path}: field 'families.{family}'"
    if not isinstance(entry, dict):
      raise errors.UserError(f"{where}: expected an object")
    if "score" in entry:
      scores[family] = _number(entry["score"], f"{where}.score")
    elif "exact_match" in entry and "f1" in entry:
      em = _number(entry["exact_match"], f"{where}.exact_match")
      f1 = _number(entry["f1"], f"{where}.f1")
      em_f1[family] = (em, f1)
      scores[family] = (em + f1) / 2
    else:
      raise errors.UserError(f"{where}: needs 'score', or 'exact_match' and "
                          "'f1'")
  if "average" in data:
    scores["average"] = _number(data["average"], f"{path}: field 'average'")
  return PaperResults(scores, em_f1, str(data.get("source", "")),
                      str(data.get("split", "")))
