"""Old module paths of the flat layout, kept working after issue 14's move.

`rembert_t5x/<old>.py` is a two-line shim calling `alias`: importing the old
name gives the new module object itself (so monkeypatching either name
patches both), and `python -m rembert_t5x.<old>` runs the new module as
`__main__`. Gin is the exception: it registers configurables under the
defining module's path, so a binding written with an old full path
(`rembert_t5x.train.train.x = 1`) no longer matches; `configs.parse_gin`
turns gin's "No configurable matching" into an error naming the new path
(`new_path`).
"""

import importlib
import runpy
import sys
from typing import Optional

# Old module name (under rembert_t5x.) -> the subpackage that now holds it.
MOVED = {
    "analysis": "experiments",
    "checkpoint_conversion": "convert",
    "checkpoint_io": "convert",
    "cli": "runner",
    "demo": "experiments",
    "eval": "runner",
    "io_utils": "runner",
    "paper_reference": "experiments",
    "preprocessors": "data",
    "qa": "data",
    "sweep": "experiments",
    "synthetic": "data",
    "synthetic_baselines": "experiments",
    "t5x_export": "convert",
    "text_sources": "data",
    "train": "runner",
    "train_lib": "runner",
    "uncertainty": "experiments",
    "vocabulary": "data",
    "xtreme_local": "data",
    "xtreme_preprocessors": "data",
    "xtreme_readers": "data",
    "xtreme_road": "experiments",
}


def alias(old_name: str, new_name: str) -> None:
  """Makes the shim module `old_name` an alias of `new_name`.

  Args:
    old_name: the shim's `__name__`: the old dotted path, or "__main__"
      under `python -m rembert_t5x.<old>`.
    new_name: the new dotted path.
  """
  if old_name == "__main__":
    # `python -m` of the old path: run the new module as the program.
    runpy.run_module(new_name, run_name="__main__", alter_sys=True)
  else:
    sys.modules[old_name] = importlib.import_module(new_name)


def new_path(name: str) -> Optional[str]:
  """`name` (a dotted gin or module path) rewritten to the new layout.

  Returns None when `name` does not start with an old module path, e.g.
  `new_path("rembert_t5x.train.train")` is "rembert_t5x.runner.train.train".
  """
  parts = name.split(".")
  if len(parts) >= 2 and parts[0] == "rembert_t5x" and parts[1] in MOVED:
    return ".".join(["rembert_t5x", MOVED[parts[1]]] + parts[1:])
  return None
