"""Imports point down the layers of docs/DESIGN.md, and sit at the top of files.

Parses every module of `rembert_t5x/` and `tasks/` (imported as
`rembert_tasks`) without importing it. A module may import its own layer or
a lower one; inside one layer the imports form no cycle. An import inside a
function is allowed only for a heavy dependency (or a project module that
pulls one in at import time), deferred so a command starts fast, with a
comment saying why.
"""

import ast
import pathlib
import re
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

from tests import test_utils

# Lowest first. A module belongs to the first layer with a prefix of its name.
LAYERS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("common", ("rembert_t5x.common",)),
    ("core", ("rembert_t5x.network", "rembert_t5x.layers",
              "rembert_t5x.layer_stacking", "rembert_t5x.partitioning",
              "rembert_t5x.configs", "rembert_t5x.gin_path",
              "rembert_t5x.optimizer", "rembert_t5x.protocol")),
    ("scoring", ("rembert_t5x.scoring",)),
    ("data", ("rembert_t5x.data",)),
    ("tasks", ("rembert_tasks",)),
    ("models", ("rembert_t5x.feature_converters", "rembert_t5x.models",
                "rembert_t5x.t5x_partitioning", "rembert_t5x.t5x_trainer",
                "rembert_t5x.t5x_datasets", "rembert_t5x.t5x_infer")),
    ("runner", ("rembert_t5x.runner",)),
    ("convert", ("rembert_t5x.convert",)),
    ("experiments", ("rembert_t5x.experiments",)),
    ("tools", ("rembert_t5x.tools",)),
)

# Third-party packages slow enough to import (seconds) that a command defers
# them until it needs them; t5x is optional (not on PyPI).
HEAVY = ("tensorflow", "tensorflow_text", "tensorflow_datasets", "seqio",
         "torch", "transformers", "t5x", "matplotlib")

_PYLINT = re.compile(r"#\s*pylint:.*$")


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(test_utils.REPO_ROOT).with_suffix("").parts)
  if parts[0] == "tasks":
    parts[0] = "rembert_tasks"
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def _modules() -> Dict[str, pathlib.Path]:
  return {_module_name(p): p
          for folder in ("rembert_t5x", "tasks")
          for p in sorted((test_utils.REPO_ROOT / folder).rglob("*.py"))}


MODULES = _modules()


def _layer(name: str) -> Optional[int]:
  if name == "rembert_t5x":
    return 0
  for rank, (_, prefixes) in enumerate(LAYERS):
    if any(name == p or name.startswith(p + ".") for p in prefixes):
      return rank
  return None


class _Import:

  def __init__(self, node: ast.stmt, target: str, deferred: bool):
    self.line = node.lineno
    self.target = target
    self.deferred = deferred


def _imports(path: pathlib.Path) -> Iterator[_Import]:
  """Every import of `path`; `deferred` when inside a function or class."""
  tree = ast.parse(path.read_text())
  top_level = set()
  for node in tree.body:  # module level, including `if`/`try` blocks
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef)):
      top_level.update(id(n) for n in ast.walk(node))
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level:
      targets = [f"{node.module}.{a.name}"
                 if f"{node.module}.{a.name}" in MODULES else node.module
                 for a in node.names]
    else:
      continue
    for target in targets:
      yield _Import(node, target, id(node) not in top_level)


def _project(target: str) -> Optional[str]:
  """The project module `target` names (a module or a name in one)."""
  while target and target not in MODULES:
    target = target.rpartition(".")[0]
  return target or None


def _heavy_modules() -> set:
  """Project modules that import a HEAVY package at import time."""
  edges = {name: [] for name in MODULES}
  heavy = set()
  for name, path in MODULES.items():
    for imp in _imports(path):
      if imp.deferred:
        continue
      if imp.target.split(".")[0] in HEAVY:
        heavy.add(name)
      elif _project(imp.target):
        edges[name].append(_project(imp.target))
  changed = True
  while changed:
    changed = False
    for name, targets in edges.items():
      if name not in heavy and any(t in heavy for t in targets):
        heavy.add(name)
        changed = True
  return heavy


def test_every_module_has_a_layer():
  assert [n for n in MODULES if _layer(n) is None] == []


def test_imports_point_down():
  upward = []
  for name, path in MODULES.items():
    for imp in _imports(path):
      target = _project(imp.target)
      if target and _layer(target) > _layer(name):
        upward.append(
            f"{path.relative_to(test_utils.REPO_ROOT)}:{imp.line}: "
            f"{name} ({LAYERS[_layer(name)][0]}) imports {target} "
            f"({LAYERS[_layer(target)][0]})")
  assert upward == []


def _cycle(graph: Dict[str, List[str]]) -> Optional[List[str]]:
  state: Dict[str, int] = {}  # 1 on the stack, 2 done
  stack: List[str] = []

  def visit(node: str) -> Optional[List[str]]:
    state[node] = 1
    stack.append(node)
    for nxt in graph.get(node, ()):
      if state.get(nxt) == 1:
        return stack[stack.index(nxt):] + [nxt]
      if nxt not in state:
        found = visit(nxt)
        if found:
          return found
    stack.pop()
    state[node] = 2
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return None


def test_no_import_cycles():
  graph = {name: sorted({_project(i.target) for i in _imports(path)
                         if _project(i.target) not in (None, name)})
           for name, path in MODULES.items()}
  # A package's __init__ importing its own modules is not a cycle.
  for name in graph:
    graph[name] = [t for t in graph[name] if not name.startswith(t + ".")]
  assert _cycle(graph) is None


def _has_reason(lines: List[str], line: int) -> bool:
  """A comment on the import, or up to three lines above its run of imports."""
  first = line - 1
  while first > 0 and lines[first - 1].strip().startswith(("import ",
                                                           "from ")):
    first -= 1
  return any("#" in _PYLINT.sub("", l)
             for l in lines[max(0, first - 3):line])


def test_deferred_imports_are_heavy_and_say_why():
  heavy = _heavy_modules()
  wrong = []
  for name, path in MODULES.items():
    lines = path.read_text().splitlines()
    for imp in _imports(path):
      if not imp.deferred:
        continue
      target = _project(imp.target)
      # `python -m` runs a module as __main__; its main imports the module
      # itself under its package name so gin configurables have one name.
      is_heavy = (imp.target.split(".")[0] in HEAVY or target == name
                  or target in heavy)
      reason = _has_reason(lines, imp.line)
      if not is_heavy:
        wrong.append(f"{path.relative_to(test_utils.REPO_ROOT)}:{imp.line}: "
                     f"{imp.target} is not heavy: import it at the top")
      elif not reason:
        wrong.append(f"{path.relative_to(test_utils.REPO_ROOT)}:{imp.line}: "
                     f"deferred {imp.target} needs a comment saying why")
  assert wrong == []


@pytest.mark.parametrize("text,expected", [
    ("import a\ndef f():\n  import seqio\n", ["seqio"]),
    ("try:\n  import torch\nexcept ImportError:\n  pass\n", []),
])
def test_deferred_detection(tmp_path, text, expected):
  path = tmp_path / "m.py"
  path.write_text(text)
  assert [i.target for i in _imports(path) if i.deferred] == expected
