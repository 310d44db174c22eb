"""Every command in README.md's code blocks, checked without running its job.

For each command line: the module, console script or script it names
exists; its flags parse with the tool's own flag definitions (absl or
argparse); and, for the gin entry points, the gin files it names parse with
its `--gin.` bindings (every configurable resolves, every macro is used).
Placeholder values (`N`, `DIR`, `…`) stand in for a value of the flag's type.
"""

import argparse
import configparser
import importlib
import importlib.util
import inspect
import re
import shlex
from typing import Callable, List, Optional

from absl import flags
import pytest

from rembert_t5x import configs
from rembert_t5x.tools import count_params
from rembert_t5x.common import cli
from rembert_t5x.common import errors
from tests import test_utils

README = test_utils.REPO_ROOT / "README.md"
# Gin entry points: their flags are T5X's gin flags.
GIN_MODULES = ("rembert_t5x.runner.train", "rembert_t5x.runner.eval")
_PLACEHOLDER = re.compile(r"^(?:[A-Z]+|<[^>]*>|.*….*|.*\.\.\..*)$")


def _console_scripts() -> dict:
  """{script name: "module:function"} from pyproject.toml."""
  text = (test_utils.REPO_ROOT / "pyproject.toml").read_text()
  section = re.search(r"^\[project\.scripts\]\n(.*?)(?:^\[|\Z)", text,
                      re.S | re.M).group(1)
  parser = configparser.ConfigParser()
  parser.read_string("[s]\n" + section)
  return {k: v.strip('"') for k, v in parser["s"].items()}


def readme_commands(path=README, section: Optional[str] = None) -> List[str]:
  """The command lines of a page's shell code blocks, one per command;
  with `section`, those of the `## <section>…` part only."""
  text = path.read_text()
  if section is not None:
    text = re.search(rf"^## {re.escape(section)}.*?(?=^## |\Z)", text,
                     re.S | re.M).group(0)
  commands = []
  for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
      words = shlex.split(line, comments=True)
      while words:  # `a && b`, `a | b`: two commands
        cut = min([words.index(s) for s in ("&&", "|") if s in words]
                  + [len(words)])
        commands.append(shlex.join(words[:cut]))
        words = words[cut + 1:]
  return commands


class _Parsed(Exception):
  """Raised instead of running a tool once its flags have parsed."""

  def __init__(self, parsed):
    super().__init__("parsed")
    self.parsed = parsed


def _fill_placeholders(argv: List[str], define) -> List[str]:
  """Replaces placeholder values by one of the flag's type."""
  fv = flags.FlagValues()
  define(fv)
  out = []
  for arg in argv:
    name, eq, value = arg.partition("=")
    flag = fv._flags().get(name.lstrip("-")) if eq else None  # pylint: disable=protected-access
    if flag is not None and _PLACEHOLDER.match(value):
      sample = {"int": "1", "float": "1.0"}.get(flag.flag_type())
      value = sample or value
    out.append(f"{name}{eq}{value}")
  return out


def _parse_only(monkeypatch) -> None:
  """Makes `cli.run_main` / `cli.run_command` parse and stop."""

  def run_main(main, argv=None, define=cli.define_gin_flags, *, doc=None,
               also=()):
    del main, also
    argv = _fill_placeholders(list(argv), define)
    raise _Parsed(cli.parse_flags(argv, define, doc=doc))

  def run_command(commands, argv=None, *, doc=None, also=()):
    del doc, also
    assert argv and argv[0] in commands, f"unknown command in {argv}"
    _, define, _ = commands[argv[0]]
    argv = _fill_placeholders(list(argv[1:]), define)
    raise _Parsed(cli.parse_flags(argv, define))

  monkeypatch.setattr(cli, "run_main", run_main)
  monkeypatch.setattr(cli, "run_command", run_command)


def _unbracket(argv: List[str]) -> List[str]:
  """`[--x=1]` (an optional flag) -> `--x=1`; `{a,b}` -> `a`."""
  out = []
  for arg in argv:
    arg = arg.strip("[]")
    arg = re.sub(r"\{([^,}]*),[^}]*\}", r"\1", arg)
    if arg:
      out.append(arg)
  return out


def _check_gin(fv) -> None:
  configs.parse_gin(fv.gin_file, fv.gin_bindings,
                    search_paths=fv.gin_search_paths)


def _run_entry(main: Callable, argv: List[str], monkeypatch,
               gin_entry: bool) -> None:
  _parse_only(monkeypatch)
  with pytest.raises(_Parsed) as parsed:
    main(argv)
  if gin_entry:
    _check_gin(parsed.value.parsed)


def _check_t5x(argv: List[str]) -> None:
  """Without T5X: the gin files exist and every bound macro is in them."""
  fv = cli.parse_flags(argv)
  texts = []
  for name in fv.gin_file:
    path = test_utils.REPO_ROOT / name
    assert path.is_file(), name
    texts.append(path.read_text())
    for include in re.findall(r"^include '(gin_configs/[^']+)'", texts[-1],
                              re.M):
      texts.append((test_utils.REPO_ROOT / include).read_text())
  # Macros T5X's own runs/*.gin define (not in this repository).
  t5x_macros = {"MODEL_DIR", "TRAIN_STEPS", "MIXTURE_OR_TASK_NAME",
                "INITIAL_CHECKPOINT_PATH", "CHECKPOINT_PATH",
                "EVAL_OUTPUT_DIR", "INFER_OUTPUT_DIR", "TASK_FEATURE_LENGTHS",
                "BATCH_SIZE", "USE_CACHED_TASKS", "MIXTURE_OR_TASK_MODULE"}
  for binding in fv.gin_bindings:
    key = binding.partition("=")[0].strip()
    if key.isupper() and key not in t5x_macros:
      assert any(re.search(rf"\b{key}\b", t) for t in texts), (
          f"{key} is in none of {fv.gin_file}")


def _check_benchmark(path: str, argv: List[str], monkeypatch) -> None:
  module = importlib.import_module(
      path.removesuffix(".py").replace("/", "."))
  original = argparse.ArgumentParser.parse_args

  def parse_args(self, args=None, namespace=None):
    raise _Parsed(original(self, args, namespace))

  monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
  with pytest.raises(_Parsed):
    module.main(argv)


def _script_main(path: str) -> Callable:
  """The `main` a script under scripts/ runs (its own or its module's)."""
  spec = importlib.util.spec_from_file_location(
      "readme_script", test_utils.REPO_ROOT / path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if hasattr(module, "main"):
    return module.main
  wrapped = [v for v in vars(module).values()
             if inspect.ismodule(v) and hasattr(v, "main")]
  assert len(wrapped) == 1, f"{path}: no main"
  return wrapped[0].main


COMMANDS = readme_commands()
# docs/T5X.md's pod commands, checked the same way.
POD_COMMANDS = readme_commands(test_utils.REPO_ROOT / "docs" / "T5X.md",
                               "Pods")
# T5X's own flags of t5x.train that are not gin flags (multi-host GPU).
_T5X_PROCESS_FLAGS = ("--multiprocess_gpu", "--coordinator_address",
                      "--process_count", "--process_index")


def test_readme_has_commands():
  assert len(COMMANDS) > 30


def test_the_test_command_is_what_ci_runs():
  ci = (test_utils.REPO_ROOT / ".ci" / "run").read_text()
  tests = [c for c in COMMANDS if c.startswith("python -m pytest")]
  assert len(tests) == 1 and tests[0] in ci


def test_pod_section_has_commands():
  assert len(POD_COMMANDS) >= 3
  assert any(c.startswith("gcloud ") for c in POD_COMMANDS)


@pytest.mark.parametrize("command", POD_COMMANDS)
def test_pod_command(command, monkeypatch):
  words = shlex.split(command)
  if words[0] == "gcloud":
    # The command every worker runs: --command="cd DIR && COMMAND".
    inner = [w.partition("=")[2] for w in words if w.startswith("--command=")]
    assert len(inner) == 1, command
    steps = inner[0].split(" && ")
    assert steps[0].startswith("cd "), inner[0]
    command = steps[-1]
  test_readme_command(command, monkeypatch)


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command(command, monkeypatch):
  words = shlex.split(command)
  while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value prefix
    words.pop(0)
  if words[:3] == ["python", "-m", "rembert_t5x.tools.multihost_launch"]:
    # The launcher's own flags, then the command it runs.
    at = words.index("--")
    _run_entry(importlib.import_module(words[2]).main,
               words[3:at] + ["--", "x"], monkeypatch, False)
    words = ["python", "-m"] + words[at + 1:]
  tool, argv = words[0], _unbracket(words[1:])
  scripts = _console_scripts()
  target: Optional[str] = None
  if tool in ("pip", "cd", "bash"):
    pytest.skip(f"{tool}: not a project tool")
  if tool in scripts:
    target = scripts[tool]
  elif tool == "python" and argv[0] == "-m":
    module, argv = argv[1], argv[2:]
    if module == "pytest":
      pytest.skip("the test command (test_the_test_command_is_what_ci_runs)")
    if module.startswith("t5x."):
      _check_t5x([a for a in argv
                  if not a.startswith(_T5X_PROCESS_FLAGS)])
      return
    target = f"{module}:main"
  elif (tool == "python" and argv[0].endswith(".py")
        and not argv[0].startswith(("benchmarks/", "scripts/"))):
    # Another project's script (XTREME's evaluate.py), not ours to check.
    assert not (test_utils.REPO_ROOT / argv[0]).exists(), argv[0]
    pytest.skip(f"{argv[0]}: not a file of this repository")
  elif tool == "python" and argv[0] == "-c":
    compile(argv[1], "<readme>", "exec")
    return
  elif tool == "python" and argv[0].startswith("benchmarks/"):
    _check_benchmark(argv[0], argv[1:], monkeypatch)
    return
  elif tool == "python" and argv[0].startswith("scripts/"):
    _run_entry(_script_main(argv[0]), argv[1:], monkeypatch, False)
    return
  assert target, f"README command with no known tool: {command}"
  module_name, function = target.split(":")
  module = importlib.import_module(module_name)
  _run_entry(getattr(module, function), argv, monkeypatch,
             module_name in GIN_MODULES)


def test_a_wrong_flag_in_a_command_is_caught(monkeypatch):
  _parse_only(monkeypatch)
  with pytest.raises(errors.UserError, match="unknown flag --gin_fil"):
    count_params.main(["--gin_fil=gin_configs/models/tiny.gin"])
  with pytest.raises(configs.GinConfigError, match="NUM_LAYRS"):
    _check_gin(cli.parse_flags(["--gin_file=gin_configs/models/tiny.gin",
                                "--gin.NUM_LAYRS=2"]))
