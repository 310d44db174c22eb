"""The markdown tables and figures the experiments write.

Figures use matplotlib's object API (`matplotlib.figure.Figure`), which
needs no backend and keeps no global state: importing this module selects
nothing and costs ~0.4 s of CPU.
"""

import contextlib
import pathlib
from typing import Any, Iterable, List, Optional, Sequence, Tuple

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
