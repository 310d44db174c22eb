"""The checkout installs, editable and regular, into a fresh venv with `wheel`.

Issue 15: without a [build-system] table, pip took the legacy
`setup.py develop` road where `wheel` was installed, and that road ignores the
`rembert_tasks -> tasks/` mapping. Here a copy of the checkout (without
symlinks, so a developer's `rembert_tasks -> tasks` link cannot hide a broken
mapping) is installed into a throw-away venv that has its own pip and
setuptools (from ensurepip) and sees `wheel` and this project's dependencies
through a .pth file (a plain directory list: the .pth files of the outer
environment, such as its own editable install of this project, stay
inactive). Installs use --no-deps --no-build-isolation --no-index, so nothing
is downloaded. Both packages are then imported from a directory outside the
checkout, and after the regular install every include of every gin file
resolves under `python -m rembert_t5x.gin_path`.

About 30 s on an idle 2-core machine (mostly pip and importing TensorFlow).
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

from gin import config_parser
import pytest

from tests import test_utils

pytestmark = pytest.mark.packaging

REPO = test_utils.REPO_ROOT
GIN_FILES = sorted(str(p.relative_to(REPO))
                   for p in (REPO / "gin_configs").rglob("*.gin"))

# Run from outside the checkout; prints where each package was imported from.
CHECK_IMPORTS = """
import json
import rembert_t5x
import rembert_tasks
from rembert_t5x import gin_path
print(json.dumps({"rembert_t5x": rembert_t5x.__file__,
                  "rembert_tasks": rembert_tasks.__file__,
                  "gin_root": str(gin_path.search_root())}))
"""
# The same answer without executing `rembert_tasks` (which imports SeqIO and
# TensorFlow, ~8 s of CPU): where the import system finds it, through the
# editable install's finder -- the mapping issue 15 broke. The regular
# install's test imports both packages for real.
LOCATE_PACKAGES = """
import importlib.util
import json
from rembert_t5x import gin_path
where = {name: importlib.util.find_spec(name).origin
         for name in ("rembert_t5x", "rembert_tasks")}
print(json.dumps({**where, "gin_root": str(gin_path.search_root())}))
"""


def _env() -> dict[str, str]:
  # PYTHONPATH would put the checkout (or anything else) ahead of the venv.
  return {k: v for k, v in os.environ.items()
          if k not in ("PYTHONPATH", "PYTHONHOME")}


def _run(args, cwd, timeout=300) -> str:
  result = subprocess.run([str(a) for a in args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=timeout,
                          check=False)
  assert result.returncode == 0, (
      f"{' '.join(map(str, args))} failed:\n{result.stdout[-3000:]}\n"
      f"{result.stderr[-3000:]}")
  return result.stdout


def _copy_checkout(dst: pathlib.Path) -> pathlib.Path:
  """The checkout minus VCS data, build outputs, caches and symlinks."""
  def ignore(directory, names):
    return [n for n in names
            if n.startswith(".") or n in ("__pycache__", "build", "dist")
            or n.endswith(".egg-info")
            or os.path.islink(os.path.join(directory, n))]
  shutil.copytree(REPO, dst, ignore=ignore)
  return dst


class _Venv:
  """A throw-away venv (own pip + setuptools) seeing the outer site dirs.

  `source` is the copy of the checkout to install, `outside` a directory
  outside it to import from.
  """

  def __init__(self, tmp: pathlib.Path):
    root = tmp / "venv"
    _run([sys.executable, "-m", "venv", root], cwd=tmp)
    self.python = root / "bin" / "python"
    self.purelib = pathlib.Path(_run(
        [self.python, "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=root).strip())
    outer = [p for p in sys.path
             if os.path.basename(p) in ("site-packages", "dist-packages")
             and os.path.isdir(p)]
    # Listed after the venv's own site-packages: its pip and setuptools win.
    (self.purelib / "_outer_site_dirs.pth").write_text(
        "".join(p + "\n" for p in outer))
    self.source = _copy_checkout(tmp / "checkout")
    self.outside = tmp / "elsewhere"
    self.outside.mkdir()

  def pip_install(self, *args):
    _run([self.python, "-m", "pip", "install", "--no-deps",
          "--no-build-isolation", "--no-index", "--disable-pip-version-check",
          *args], cwd=self.purelib)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
  env = _Venv(tmp_path_factory.mktemp("packaging"))
  # The condition of issue 15 (the `test` extra installs it).
  _run([env.python, "-c", "import wheel"], cwd=env.outside)
  return env


def _imports(venv, code: str = CHECK_IMPORTS) -> dict[str, pathlib.Path]:
  out = _run([venv.python, "-c", code], cwd=venv.outside)
  return {k: pathlib.Path(v).resolve()
          for k, v in json.loads(out.strip().splitlines()[-1]).items()}


class _NoEvaluation(config_parser.ParserDelegate):
  """Reads gin files without importing or evaluating anything."""

  def configurable_reference(self, scoped_configurable_name, evaluate):
    return scoped_configurable_name

  def macro(self, macro_name):
    return macro_name


def _unresolved_includes(root: pathlib.Path) -> list[str]:
  """Includes of gin files under root/gin_configs not found under root.

  `t5x/...` includes come from T5X's package (t5x.train adds its own
  directory to the search path) and are not ours to ship.
  """
  missing = []
  for path in sorted((root / "gin_configs").rglob("*.gin")):
    with open(path, encoding="utf-8") as f:
      statements = list(config_parser.ConfigParser(f, _NoEvaluation()))
    for s in statements:
      if (isinstance(s, config_parser.IncludeStatement)
          and not s.filename.startswith("t5x/")
          and not (root / s.filename).is_file()):
        missing.append(f"{path.relative_to(root)}: {s.filename}")
  return missing


def test_checkout_gin_files_include_only_what_ships():
  """Every include resolves in the checkout (the same check as installed)."""
  assert GIN_FILES
  assert _unresolved_includes(REPO) == []


def test_editable_install_imports_from_outside_the_checkout(venv):
  venv.pip_install("-e", venv.source)
  where = _imports(venv, LOCATE_PACKAGES)
  source = venv.source.resolve()
  assert where["rembert_t5x"] == source / "rembert_t5x" / "__init__.py"
  assert where["rembert_tasks"] == source / "tasks" / "__init__.py"
  # Editable: the gin files are the checkout's own.
  assert where["gin_root"] == source
  assert _unresolved_includes(where["gin_root"]) == []


def test_regular_install_imports_and_ships_every_gin_file(venv):
  venv.pip_install(venv.source)
  where = _imports(venv)
  purelib = venv.purelib.resolve()
  assert where["rembert_t5x"] == purelib / "rembert_t5x" / "__init__.py"
  assert where["rembert_tasks"] == purelib / "rembert_tasks" / "__init__.py"
  # The documented command, as a shell's $(...) would run it.
  root = pathlib.Path(_run([venv.python, "-m", "rembert_t5x.gin_path"],
                           cwd=venv.outside).strip()).resolve()
  assert root == purelib / "rembert_t5x" == where["gin_root"]
  shipped = sorted(str(p.relative_to(root))
                   for p in (root / "gin_configs").rglob("*.gin"))
  assert shipped == GIN_FILES
  for name in GIN_FILES:
    assert (root / name).read_bytes() == (REPO / name).read_bytes(), name
  assert _unresolved_includes(root) == []
  # Every Python file of the package ships (a subpackage left out of
  # setup.py's packages would be missing here, silently).
  modules = sorted(str(p.relative_to(REPO)) for p in
                   (REPO / "rembert_t5x").rglob("*.py"))
  assert sorted(str(p.relative_to(purelib)) for p in
                (purelib / "rembert_t5x").rglob("*.py")
                if "gin_configs" not in p.parts) == modules
  # The user tools are on PATH and find the shipped gin files from anywhere.
  scripts = re.findall(r"^(rembert-[\w-]+) = ",
                       (REPO / "pyproject.toml").read_text(), re.M)
  assert "rembert-convert" in scripts and "rembert-train" in scripts
  bin_dir = venv.python.parent
  assert [s for s in scripts if not (bin_dir / s).is_file()] == []
  out = _run([bin_dir / "rembert-count-params",
              "--gin_file=gin_configs/models/tiny.gin"], cwd=venv.outside)
  assert json.loads(out.strip().splitlines()[-1])["pretraining_params"] > 0
