"""Test files follow the naming rule of tests/README.md.

A test file is named after a module (`<module>_test.py`), after a task
module whose name a package module also has (`<name>_tasks_test.py`), or is
a cross-cutting test listed in tests/README.md's table.
"""

import pathlib
import re

from tests import test_utils

TESTS = test_utils.REPO_ROOT / "tests"
SOURCE_DIRS = ("rembert_t5x", "tasks", "benchmarks", "scripts")


def _module_names() -> set:
  """Module names, a package counting by its folder's name."""
  return {p.parent.name if p.stem == "__init__" else p.stem
          for d in SOURCE_DIRS
          for p in (test_utils.REPO_ROOT / d).rglob("*.py")}


def _listed() -> set:
  text = (TESTS / "README.md").read_text("utf-8")
  return set(re.findall(r"^\| `(\w+_test)\.py` \|", text, re.M))


def naming_violations(test_files, modules, task_modules, listed) -> list:
  """The test files that follow no rule, and listed files that are gone."""
  names = {pathlib.Path(f).stem for f in test_files}
  bad = []
  for name in sorted(names):
    base = name[:-len("_test")]
    task = base[:-len("_tasks")] if base.endswith("_tasks") else None
    if base in modules or (task in task_modules and task in modules):
      if name in listed:
        bad.append(f"{name}.py is named after a module: unlist it")
      continue
    if name not in listed:
      bad.append(f"{name}.py names no module and is not in tests/README.md")
  bad += [f"{name}.py is listed in tests/README.md but does not exist"
          for name in sorted(listed - names)]
  return bad


def test_every_test_file_follows_the_rule():
  tasks = {p.stem for p in (test_utils.REPO_ROOT / "tasks").glob("*.py")}
  files = [p.name for p in TESTS.glob("*_test.py")]
  assert not naming_violations(files, _module_names(), tasks, _listed())


def test_the_rule_catches_strays():
  modules, tasks = {"qa", "train_lib"}, {"qa"}
  assert naming_violations(
      ["qa_test.py", "qa_tasks_test.py", "train_lib_test.py"], modules,
      tasks, set()) == []
  assert naming_violations(["stray_test.py", "lib_tasks_test.py"], modules,
                           tasks, {"gone_test"}) == [
      "lib_tasks_test.py names no module and is not in tests/README.md",
      "stray_test.py names no module and is not in tests/README.md",
      "gone_test.py is listed in tests/README.md but does not exist"]
  assert naming_violations(["qa_test.py"], modules, tasks, {"qa_test"}) == [
      "qa_test.py is named after a module: unlist it"]
