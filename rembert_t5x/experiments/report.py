"""The markdown tables and figures the experiments write.

Including the comparison table of two variants over seeds
(`comparison_table`, from `rembert_t5x.scoring.seed_statistics`).

Figures use matplotlib's object API (`matplotlib.figure.Figure`), which
needs no backend and keeps no global state: importing this module selects
nothing and costs ~0.4 s of CPU.
"""

import contextlib
import pathlib
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

from matplotlib import figure as mpl_figure


def pm(pair: Optional[Sequence[float]]) -> str:
  """`mean ± std` of a (mean, std) pair, one decimal; "" for None."""
  return "" if pair is None else f"{pair[0]:.1f} ± {pair[1]:.1f}"


def row(cells: Iterable[Any]) -> str:
  """One markdown table row."""
  return "| " + " | ".join(map(str, cells)) + " |"


def table(head: Sequence[Any], rows: Iterable[Iterable[Any]] = ()
          ) -> List[str]:
  """A markdown table's lines: the header, the rule, one line per row."""
  return [row(head), "|" + "---|" * len(head), *map(row, rows)]


@contextlib.contextmanager
def figure(path: pathlib.Path, panels: int = 1,
           figsize: Tuple[float, float] = (5, 3.5), dpi: int = 100):
  """Yields (figure, a row of `panels` axes); at the end of the block the
  figure is laid out and written to `path` (PNG) through a temporary file."""
  fig = mpl_figure.Figure(figsize=figsize)
  yield fig, fig.subplots(1, panels, squeeze=False)[0]
  fig.tight_layout()
  tmp = path.with_name(f".{path.name}.tmp.png")
  fig.savefig(tmp, dpi=dpi)
  tmp.replace(path)


def _signed(x: Optional[float]) -> str:
  return "" if x is None else f"{x:+.1f}"


def _p(x: Optional[float]) -> str:
  if x is None:
    return ""
  return f"{x:.3f}" if x >= 0.001 else "< 0.001"


def comparison_table(summaries: Mapping[str, Mapping[str, Any]],
                     comparisons: Mapping[str, Mapping[str, Any]],
                     metrics_by_family: Mapping[str, str],
                     baseline: str, candidate: str,
                     chance: Optional[Mapping[str, float]] = None) -> str:
  """Markdown: one row per family, zero-shot averages of both variants.

  Columns: mean ± std over units (n), the evaluation-set SE of one run's
  zero-shot average (upper bound, both variants), chance, the difference
  with its 95% Welch interval, the Holm-adjusted p-value, the smallest
  difference the test detects with 80% power (`seed_statistics.
  detectable_difference`) and the verdict.
  """
  lines = table(["task (metric)", baseline, candidate, "eval SE", "chance",
                 f"{candidate} − {baseline} [95% CI]", "p (Welch, Holm)",
                 "detectable (80% power)", "verdict"])
  for family, by_variant in summaries.items():
    base = by_variant[baseline]["zero_shot"]
    cand = by_variant[candidate]["zero_shot"]
    c = comparisons[family]
    ses = [s["eval_se"] for s in (base, cand) if s["eval_se"] is not None]
    se = f"{max(ses):.1f}" if ses else ""
    interval = (f" [{_signed(c['low'])}, {_signed(c['high'])}]"
                if c["low"] is not None else "")
    level = f"{chance[family]:.1f}" if chance and family in chance else ""
    lines.append(row([
        f"{family} ({metrics_by_family[family]})",
        *(f"{pm((s['mean'], s['std']))} (n={s['n']})"
          for s in (base, cand)), se, level,
        _signed(c["difference"]) + interval, _p(c["p_holm"]),
        "" if c.get("detectable") is None else f"±{c['detectable']:.1f}",
        c["verdict"]]))
  return "\n".join(lines)
