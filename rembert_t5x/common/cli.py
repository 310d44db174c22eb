"""One command-line style for every entry point: absl flags + gin, as T5X.

  python -m rembert_t5x.runner.train --gin_file=F [--gin_file=G] \
      [--gin_search_paths=.] --gin.MODEL_DIR="'/tmp/m'" --gin.TRAIN_STEPS=30

Every entry point (the local runner, the experiments, the converters, the
tools) has one shape: `main(argv=None)` is the command; `_define_flags(fv)`
adds its absl flags to the `flags.FlagValues` it is given (the gin entry
points use `define_gin_flags`); `_main(fv)` runs the parsed flags, through
`run_main` (or `run_command` for `prog COMMAND --flag...` tools). Each call parses into a
fresh FlagValues, so the modules stay importable and callable in-process
(tests) without global flag clashes. The gin entry points use T5X's flags:
`--gin_file` (repeatable), `--gin_bindings` (repeatable) and
`--gin_search_paths` (comma-separated), and `--gin.KEY=VALUE`, T5X's short
form of `--gin_bindings='KEY = VALUE'` (`gin_utils.rewrite_gin_args`).

Not `absl.app.run`: it parses the global FLAGS and ends a flag error with a
usage text and exit code 1; here every user error (an unknown or missing flag,
a gin typo, an unknown task, an unwritable MODEL_DIR, a checkpoint of another
architecture) ends with one `error: ...` line on stderr and exit code 2, with
no traceback, and `--help` prints the flags and exits 0. Either way the
process ends: a failed run's tf.data pipelines are freed before the
interpreter finalizes (`shutdown.end_pipelines_at_exit`).
"""

import contextlib
import re
import sys
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, TypeVar

from absl import flags

from rembert_t5x.common import errors
from rembert_t5x.common import shutdown

Define = Callable[[flags.FlagValues], None]
T = TypeVar("T")

_HELP = ("--help", "-h", "--helpshort", "--helpfull", "-?")


def define_gin_flags(fv: flags.FlagValues) -> None:
  """T5X's gin flags (names and meanings of `t5x/train.py`'s)."""
  flags.DEFINE_multi_string(
      "gin_file", None, "Gin file; repeat for several, later ones override "
      "earlier ones. Relative to a --gin_search_paths entry.", flag_values=fv,
      required=True)
  flags.DEFINE_multi_string(
      "gin_bindings", [], "One gin binding 'KEY = VALUE'; repeatable. "
      "--gin.KEY=VALUE is the same.", flag_values=fv)
  flags.DEFINE_list(
      "gin_search_paths", [], "Comma-separated directories searched for "
      "--gin_file and `include`s (the working directory and the one holding "
      "gin_configs/ always are).", flag_values=fv)


def _rewrite_gin_args(argv: Sequence[str]) -> list[str]:
  """`--gin.KEY=VALUE` (or `--gin.KEY VALUE`) -> `--gin_bindings=KEY = VALUE`."""
  out = []
  args = list(argv)
  i = 0
  while i < len(args):
    arg = args[i]
    if arg.startswith("--gin."):
      if "=" in arg:
        key, value = arg[len("--gin."):].split("=", 1)
      elif i + 1 < len(args):
        key, value = arg[len("--gin."):], args[i + 1]
        i += 1
      else:
        raise errors.UserError(f"{arg}: expected --gin.KEY=VALUE")
      arg = f"--gin_bindings={key} = {value}"
    out.append(arg)
    i += 1
  return out


def _usage(doc: Optional[str], fv: flags.FlagValues) -> str:
  # absl groups flags under the defining module's path: one flat list reads
  # better for one command.
  lines = [l for l in fv.get_help(include_special_flags=False).splitlines()
           if l.startswith(" ")]
  return f"{(doc or '').strip()}\n\nflags:\n" + ("\n".join(lines) or "  none")


def parse_flags(argv: Sequence[str], define: Define = define_gin_flags, *,
                doc: Optional[str] = None) -> flags.FlagValues:
  """Parses `argv` (without the program name) into fresh absl flags.

  `--help` prints `doc` and the flags and exits 0.

  Args:
    argv: the command-line arguments after the program name.
    define: adds the command's flags to the FlagValues it is given.
    doc: the command's help text (its module docstring).

  Returns:
    The parsed FlagValues (`fv.name` is a flag's value).

  Raises:
    UserError: an unknown flag, a missing required flag, a bad flag value,
      or a positional argument, as one line.
  """
  fv = flags.FlagValues()
  define(fv)
  argv = [str(a) for a in argv]
  if any(a in _HELP for a in argv):
    print(_usage(doc, fv))
    sys.exit(0)
  try:
    rest = fv(["prog", *_rewrite_gin_args(argv)])
  except flags.UnrecognizedFlagError as e:
    raise errors.UserError(f"unknown flag {e.flagvalue or '--' + e.flagname}"
                    f"{_suggestion(str(e))} (see --help)") from e
  except flags.IllegalFlagValueError as e:
    # absl's required-flag validator: "flag --x=None: Flag --x must have a
    # value other than None."
    missing = re.search(r"Flag --(\w+) must have a value other than None",
                        str(e))
    if missing:
      raise errors.UserError(f"no --{missing.group(1)} given (see --help)") from e
    raise errors.UserError(errors.first_line(e)) from e
  except flags.Error as e:
    raise errors.UserError(errors.first_line(e)) from e
  if rest[1:]:
    raise errors.UserError(f"unexpected arguments: {' '.join(rest[1:])} (flags are "
                    "--name=value; see --help)")
  return fv


def _suggestion(message: str) -> str:
  hint = message.partition(". Did you mean: ")[2].rstrip(" ?")
  return f" (did you mean --{hint}?)" if hint else ""


def parse_gin_args(argv: Sequence[str]) -> flags.FlagValues:
  """The gin flags of the local runner's entry points (`define_gin_flags`)."""
  return parse_flags(argv, define_gin_flags)


@contextlib.contextmanager
def user_errors(*also: type[BaseException]) -> Iterator[None]:
  """The one handler of every entry point: a user error exits 2, one line.

  Catches `errors.UserError` (which `configs.GinConfigError` is) and the
  exception types in `also` (e.g. a script whose library raises ValueError
  for bad input), prints `error: <first line>` on stderr and exits 2.

  Args:
    *also: further exception types that mean bad input for this command.
  """
  try:
    yield
  except (errors.UserError, *also) as e:
    # gin appends "In call to configurable ..." lines; the first line is ours.
    print(f"error: {errors.first_line(e)}", file=sys.stderr)
    sys.exit(2)


def run_main(main: Callable[[flags.FlagValues], T],
             argv: Optional[Sequence[str]] = None,
             define: Define = define_gin_flags, *, doc: Optional[str] = None,
             also: Sequence[type[BaseException]] = ()) -> T:
  """Parses `argv` (default `sys.argv[1:]`) and runs `main(flags)`.

  Both under `user_errors(*also)`: a user error exits 2 with one line.
  """
  argv = sys.argv[1:] if argv is None else argv
  shutdown.end_pipelines_at_exit()
  with user_errors(*also):
    return main(parse_flags(argv, define, doc=doc))


def run_command(commands: Mapping[str, tuple[str, Define,
                                             Callable[[flags.FlagValues], T]]],
                argv: Optional[Sequence[str]] = None, *,
                doc: Optional[str] = None,
                also: Sequence[type[BaseException]] = ()) -> T:
  """`prog COMMAND --flag...`: each command has its own flags and main.

  Args:
    commands: {name: (one-line help, define, main)}.
    argv: the arguments after the program name (default `sys.argv[1:]`).
    doc: the tool's help text.
    also: further exception types that mean bad input.

  Returns:
    What the command's main returns.
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  shutdown.end_pipelines_at_exit()
  listing = "\n".join(f"  {name}: {text}"
                      for name, (text, _, _) in commands.items())
  if argv and argv[0] in _HELP:
    print(f"{(doc or '').strip()}\n\ncommands (COMMAND --help lists its "
          f"flags):\n{listing}")
    sys.exit(0)
  with user_errors(*also):
    if not argv:
      raise errors.UserError(f"no command given: expected one of {', '.join(commands)}")
    if argv[0] not in commands:
      raise errors.UserError(f"unknown command {argv[0]!r}: expected one of "
                      f"{', '.join(commands)}")
    text, define, main = commands[argv[0]]
    return main(parse_flags(argv[1:], define, doc=f"{argv[0]}: {text}"))


def check_at_least_one(settings: Any, names: Sequence[str]) -> None:
  """UserError naming the first flag in `names` whose value is below 1."""
  for name in names:
    if getattr(settings, name) < 1:
      raise errors.UserError(
          f"--{name} must be at least 1, got {getattr(settings, name)}")
