"""Importing the module that registers a run's SeqIO tasks.

T5X's `MIXTURE_OR_TASK_MODULE`: the local runner, the step-count helpers of
the run files (`protocol`) and the T5X adapters all import it through here,
so a module that cannot be imported fails the same way everywhere.
"""

import importlib
from typing import Optional

from rembert_t5x.common import errors


def import_task_module(module: Optional[str]) -> None:
  """Imports `module` (none if empty); one line naming it if that fails."""
  if not module:
    return
  try:
    importlib.import_module(module)
  except ImportError as e:
    raise errors.UserError(f"MIXTURE_OR_TASK_MODULE {module!r} cannot be "
                           f"imported: {errors.first_line(e)}") from e
