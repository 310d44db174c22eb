"""T5X-style command lines for the local runner.

  python -m rembert_t5x.runner.train --gin_file=F [--gin_file=G] \
      [--gin_search_paths=.] --gin.MODEL_DIR="'/tmp/m'" --gin.TRAIN_STEPS=30

`--gin.KEY=VALUE` is the gin binding `KEY = VALUE` (T5X's short form).
User errors (a gin typo, an unknown task, an unwritable MODEL_DIR, a
checkpoint of another architecture) end with one `error: ...` line on stderr
and exit code 2, with no traceback.
"""

import contextlib
import dataclasses
import sys
from typing import Callable, Iterator, Sequence

from rembert_t5x import errors

# Re-exported: callers wrote `cli.UserError` before errors.py existed.
UserError = errors.UserError


@dataclasses.dataclass
class GinArgs:
  gin_files: list[str]
  bindings: list[str]
  search_paths: list[str]
  rest: list[str]


def parse_gin_args(argv: Sequence[str]) -> GinArgs:
  """Splits argv into gin files, `--gin.K=V` bindings and search paths."""
  out = GinArgs([], [], [], [])
  args = list(argv)
  i = 0
  while i < len(args):
    arg = args[i]
    value = None
    if "=" in arg:
      key, value = arg.split("=", 1)
    else:
      key = arg
      if key.startswith("--gin") and i + 1 < len(args):
        i += 1
        value = args[i]
    if key == "--gin_file":
      out.gin_files.append(value)
    elif key == "--gin_search_paths":
      out.search_paths.extend(p for p in value.split(",") if p)
    elif key == "--gin_bindings":
      out.bindings.append(value)
    elif key.startswith("--gin."):
      out.bindings.append(f"{key[len('--gin.'):]} = {value}")
    else:
      out.rest.append(arg)
    i += 1
  if out.rest:
    raise UserError(f"unknown arguments: {' '.join(out.rest)} (expected "
                    "--gin_file=..., --gin_search_paths=..., --gin.KEY=VALUE)")
  if not out.gin_files:
    raise UserError("no --gin_file given")
  return out


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


def run_main(main: Callable[[GinArgs], None], argv=None) -> None:
  """Runs `main` on parsed gin arguments under `user_errors`."""
  argv = sys.argv[1:] if argv is None else argv
  with user_errors():
    main(parse_gin_args(argv))
