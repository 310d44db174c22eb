"""T5X-style command lines for the local runner.

  python -m rembert_t5x.train --gin_file=F [--gin_file=G] \
      [--gin_search_paths=.] --gin.MODEL_DIR="'/tmp/m'" --gin.TRAIN_STEPS=30

`--gin.KEY=VALUE` is the gin binding `KEY = VALUE` (T5X's short form).
User errors (a gin typo, an unknown task, an unwritable MODEL_DIR, a
checkpoint of another architecture) end with one `error: ...` line on stderr
and exit code 2, with no traceback.
"""

import dataclasses
import sys
from typing import Callable, Sequence


class UserError(Exception):
  """An error in the user's input: reported in one line, no traceback."""


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


def run_main(main: Callable[[GinArgs], None], argv=None) -> None:
  """Runs `main`, turning user errors into one line and exit code 2."""
  from rembert_t5x import configs  # pylint: disable=g-import-not-at-top
  argv = sys.argv[1:] if argv is None else argv
  try:
    main(parse_gin_args(argv))
  except (UserError, configs.GinConfigError) as e:
    # gin appends "In call to configurable ..." lines; the first line is ours.
    print(f"error: {str(e).strip().splitlines()[0]}", file=sys.stderr)
    sys.exit(2)
