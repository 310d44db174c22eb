"""The one error type for mistakes in the user's input.

Every entry point reports a `UserError` as one `error: ...` line on stderr
and exit code 2, with no traceback (`common.cli.user_errors`). It lives in
its own module so that library code (I/O helpers, checkpoint readers, the
T5X plugin core) can raise it without depending on the command line.
"""


class UserError(Exception):
  """An error in the user's input: reported in one line, no traceback."""


def first_line(e: BaseException) -> str:
  """The first line of an error's message (gin appends call-site lines)."""
  text = str(e).strip() or type(e).__name__
  return text.splitlines()[0]
