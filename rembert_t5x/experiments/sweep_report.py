"""The sweep's tables: per-family and per-language scores over seeds.

Pure functions over the grid points' results records (`sweep.run_point`
writes them): `aggregate` takes the mean and spread over seeds of the
learning rate selected on English dev, `markdown` and `plot` render the
table beside the paper's numbers, `write_outputs` writes
DIR/sweep.{json,md,png}.
"""

import dataclasses
import json
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from rembert_t5x import protocol
from rembert_t5x.common import io_utils
from rembert_t5x.experiments import paper_reference
from rembert_t5x.experiments import report
from rembert_t5x.scoring.seed_statistics import mean_std


def format_lr(lr: float) -> str:
  """A short, stable spelling: 3e-05 -> '3e-05', 0.0005 -> '5e-04'."""
  return f"{lr:.0e}" if float(f"{lr:.0e}") == lr else repr(lr)


def family_scores(record: Mapping[str, Any]) -> Dict[str, Dict[str, float]]:
  """{family: {language: score}} of one grid point's results record.

  Rows come from full task names (`rembert_mlqa_en` and `rembert_squad_en`
  are different families), so no language of one family overwrites another.
  """
  out = {}
  for family, ev in record["evaluations"].items():
    out[family] = {protocol.task_language(t): protocol.task_score(m)
                   for t, m in ev["tasks"].items()}
  return out


def aggregate(records: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
  """The results table from per-grid-point results.

  Args:
    records: one per (grid, learning rate, seed), as `run_point` writes:
      {"task", "learning_rate", "seed", "train_language",
       "selection": {"task", "step", "scores": {step: score}},
       "evaluations": {family: {"mixture", "split",
                                "tasks": {task name: {metric: value}}}}}.

  Returns:
    {"grids": {grid: {"best_learning_rate", "train_language",
       "selection_task", "learning_rates": {lr: {"dev": [mean, std],
       "seeds": n, "selected_steps": [...]}}}},
     "families": {family: {"grid", "split", "train_language",
       "languages": {lang: [mean, std]}, "avg": [mean, std],
       "zero_shot_avg": [mean, std] or None}},
     "average": mean over families of "avg"}.
    The best learning rate of a grid maximises the English-dev score of the
    selected checkpoint, averaged over seeds (ties: the smaller rate).
    Family numbers are those of the best rate, mean ± std over its seeds;
    "avg" is the mean over the family's languages (training language
    included, as XTREME reports), "zero_shot_avg" leaves it out.
  """
  by_grid: Dict[str, Dict[float, List[Mapping[str, Any]]]] = {}
  for r in records:
    by_grid.setdefault(r["task"], {}).setdefault(
        float(r["learning_rate"]), []).append(r)
  out: Dict[str, Any] = {"grids": {}, "families": {}}
  for grid, by_lr in sorted(by_grid.items()):
    first = next(iter(by_lr.values()))[0]
    summary = {}
    for lr, runs in sorted(by_lr.items()):
      dev = [r["selection"]["scores"][str(r["selection"]["step"])]
             for r in runs]
      summary[lr] = {"dev": mean_std(dev), "seeds": len(runs),
                     "selected_steps": [r["selection"]["step"] for r in runs]}
    best = max(sorted(summary), key=lambda lr: summary[lr]["dev"][0])
    out["grids"][grid] = {
        "best_learning_rate": best,
        "train_language": first["train_language"],
        "selection_task": first["selection"]["task"],
        "learning_rates": {format_lr(lr): v for lr, v in summary.items()}}
    runs = by_lr[best]
    per_seed = [family_scores(r) for r in runs]
    train_lang = first["train_language"]
    for family, ev in first["evaluations"].items():
      scores = [s[family] for s in per_seed]
      langs = sorted(set().union(*scores))
      if not langs:
        raise ValueError(f"grid {grid}: family {family} has no results")
      zero_shot = [l for l in langs if l != train_lang]
      out["families"][family] = {
          "grid": grid, "split": ev["split"], "train_language": train_lang,
          "languages": {l: mean_std([s[l] for s in scores if l in s])
                        for l in langs},
          "avg": mean_std([np.mean(list(s.values())) for s in scores]),
          "seed_avgs": {str(r["seed"]): float(np.mean(list(s.values())))
                        for r, s in zip(runs, scores)},
          "zero_shot_avg": mean_std([np.mean([s[l] for l in zero_shot])
                                     for s in scores]) if zero_shot else None}
  averages = [f["avg"][0] for f in out["families"].values()]
  out["average"] = float(np.mean(averages)) if averages else None
  # The spread of the overall average: per seed, the mean over families
  # (seeds every family has; grids share their seeds).
  seeds = (set.intersection(*(set(f["seed_avgs"])
                              for f in out["families"].values()))
           if out["families"] else set())
  out["average_std"] = mean_std(
      [np.mean([f["seed_avgs"][s] for f in out["families"].values()])
       for s in sorted(seeds)])[1] if seeds else None
  return out


def markdown(table: Mapping[str, Any], title: str,
             paper: Optional[paper_reference.PaperResults] = None) -> str:
  """sweep.md: the Table-16-style summary, one row per family, then per grid
  its LR grid and per family its language table.

  Args:
    table: `aggregate` output.
    title: heading.
    paper: optional reference numbers per family (and "average"), shown in
      the Table-16-style table and a "paper" column (`--paper_results`;
      `--experiment=table15` defaults to the paper's own,
      `paper_reference.PAPER_RESULTS`).
  """
  families, grids = table["families"], table["grids"]
  paper = paper_reference.as_results(paper)
  paper_col = paper is not None
  lines = [f"# {title}", "",
           "Scores: accuracy / F1 / XTREME QA (EM + F1) / 2, mean ± std over "
           "seeds, at the learning rate and checkpoint with the best English "
           "dev score; a family's score is the mean over its languages.", ""]
  lines += paper_reference.table16_lines(table, paper)
  if paper_col:
    lines += ["", f"Paper: {paper.source or 'reference numbers'}"
              + (f" Measured on: {paper.split}." if paper.split else "")
              + " QA cells: (EM + F1) / 2 (EM / F1)."]
  lines += ["", *report.table(
      ["family", "split", "grid", "best lr", "avg (all langs)",
       "zero-shot avg", *(["paper"] if paper_col else [])])]

  def ref(key):
    if not paper_col:
      return ""
    return f" {paper.scores[key]:.1f} |" if key in paper.scores else " |"

  for name, f in families.items():
    lr = format_lr(grids[f["grid"]]["best_learning_rate"])
    lines.append(report.row([name, f["split"], f["grid"], lr,
                             report.pm(f["avg"]),
                             report.pm(f["zero_shot_avg"])]) + ref(name))
  if table.get("average") is not None:
    lines.append(f"| **average over families** | | | | "
                 f"{table['average']:.1f} | |{ref('average')}")
  # Which languages each avg covers: those scored on the family's split. An
  # XTREME family's languages without a score are named (UD-POS dev: kk,
  # th, tl and yo have no dev set; --languages leaves others out).
  # Deferred: TensorFlow and seqio, +5-7 s CPU (sweep alone: 3 s; measured).
  from rembert_t5x.experiments import xtreme_local  # pylint: disable=g-import-not-at-top
  covered = []
  for name, f in families.items():
    try:
      missing = [l for l in xtreme_local.family_languages(name)
                 if l not in f["languages"]]
    except KeyError:  # not an XTREME family (the demo's)
      missing = []
    covered.append(f"{name} {len(f['languages'])}" + (
        f" (not scored on {f['split']}: {', '.join(missing)})"
        if missing else ""))
  lines += ["", "Languages in each avg (listed per family below): "
            + "; ".join(covered) + "."]
  for name, g in grids.items():
    lines += ["", f"## {name}: learning rates (selected on "
              f"{g['selection_task']}, validation)", "", *report.table(
                  ("learning rate", "English dev", "seeds", "selected steps"),
                  ([lr + (" **(best)**" if float(lr) == g["best_learning_rate"]
                          else ""), report.pm(v["dev"]), v["seeds"],
                    ", ".join(map(str, v["selected_steps"]))]
                   for lr, v in g["learning_rates"].items()))]
  for name, f in families.items():
    lines += ["", f"## {name} ({f['split']}, trained on "
              f"{f['train_language']})", "", *report.table(
                  ("language", "score"),
                  ([lang + (" (train)" if lang == f["train_language"] else ""),
                    report.pm(v)] for lang, v in f["languages"].items())),
              report.row(["**avg**", report.pm(f["avg"])])]
  return "\n".join(lines) + "\n"


def plot(table: Mapping[str, Any], path: pathlib.Path, title: str) -> None:
  """One panel per family: per-language score, error bars = std."""
  families = table["families"]
  with report.figure(path, max(len(families), 1),
                     (max(4, 3.5 * len(families)), 3.5)) as (fig, axes):
    for ax, (name, f) in zip(axes, families.items()):
      langs = list(f["languages"])
      means = [f["languages"][l][0] for l in langs]
      stds = [f["languages"][l][1] for l in langs]
      colors = ["tab:orange" if l == f["train_language"] else "tab:blue"
                for l in langs]
      ax.bar(range(len(langs)), means, yerr=stds, color=colors, capsize=3)
      ax.axhline(f["avg"][0], color="k", linestyle="--", linewidth=1)
      ax.set_xticks(range(len(langs)))
      ax.set_xticklabels(langs, rotation=90 if len(langs) > 12 else 0)
      lr = format_lr(table["grids"][f["grid"]]["best_learning_rate"])
      ax.set_title(f"{name} {f['split']} (lr {lr}, avg {f['avg'][0]:.1f})",
                   fontsize=9)
    fig.suptitle(title, fontsize=10)


def write_outputs(workdir: str, records: Sequence[Mapping[str, Any]],
                  title: str, paper: Optional[paper_reference.PaperResults] = None
                  ) -> Dict[str, Any]:
  """Aggregates and writes sweep.json, sweep.md and sweep.png."""
  out = pathlib.Path(workdir)
  table = aggregate(records)
  reference = None if paper is None else dataclasses.asdict(paper)
  io_utils.atomic_write_text(out / "sweep.json", json.dumps(
      {"title": title, **table, "paper": reference, "runs": list(records)},
      indent=1) + "\n")
  io_utils.atomic_write_text(out / "sweep.md", markdown(table, title, paper))
  plot(table, out / "sweep.png", title)
  return table
