"""The input iterator's position beside each orbax checkpoint of the runner.

`MODEL_DIR/input_iterator/<step>/` holds the `tf.train.Checkpoint` of the
training input iterator (`inputs.InputIterator`) after `step` batches, for
every step that `MODEL_DIR/checkpoints/` holds: a resume restores it and
reads on from there, where `skip` would read every consumed batch again (the
T5X way: its `SaveCheckpointConfig.save_dataset` writes the same state into
each checkpoint directory). A sibling directory, not a file inside orbax's
step directory, so that orbax's directories stay orbax's alone.

Each state is written under a temporary name and renamed (a crash mid-write
leaves no directory a resume would read), before orbax saves the step: a
committed step then has its state unless the process died between the two
saves or someone deleted it; for such a step `train.train` falls back to the
deterministic skip, with a warning. States of steps orbax does not hold
(deleted by `keep_checkpoints`, or of a save killed before its commit) are
deleted after every save. A state a machine crash left unreadable (tf.data
does not fsync) falls back the same way.

tf.data checks only the pipeline's structure: a state restores into a
pipeline changed in a constant (another batch size, seed or task of the same
shape) and continues from its position, as under T5X; the runner's resume
assumes an unchanged run file. One host: the runner reads the whole batch on
one process.
"""

import json
import os
import pathlib
import shutil
from typing import Callable, Iterable, Optional

from absl import logging
import tensorflow as tf

from rembert_t5x.common import errors
from rembert_t5x.data import inputs

DIRECTORY = "input_iterator"
_PREFIX = "state"  # tf.train.Checkpoint files: state.index, state.data-*
_PIPELINE = "pipeline.json"


def _root(model_dir: pathlib.Path) -> pathlib.Path:
  return pathlib.Path(model_dir) / DIRECTORY


def state_dir(model_dir: pathlib.Path, step: int) -> pathlib.Path:
  return _root(model_dir) / str(step)


def save(iterator: inputs.InputIterator, model_dir: pathlib.Path,
         step: int) -> bool:
  """Writes the iterator's state of `step`.

  Returns False if the pipeline cannot be saved (a Python generator or
  `tf.numpy_function` in it: the XTREME readers, QA windows); resumes of
  such a run skip instead. Logged at INFO (`train.train` stops trying after
  the first failure): every fine-tuning run on the XTREME readers would
  otherwise warn, and skipping its few epochs of data is cheap.

  Raises:
    errors.UserError: the state cannot be written (full disk, permissions).
  """
  final = state_dir(model_dir, step)
  temporary = final.with_name(f"{step}.tmp-{os.getpid()}")
  shutil.rmtree(temporary, ignore_errors=True)
  try:
    temporary.mkdir(parents=True)
    iterator.save(str(temporary / _PREFIX))
    # The pipeline to restore it into (`InputIterator`): one that skipped
    # as many batches when it was built, if this run resumed by skipping.
    (temporary / _PIPELINE).write_text(
        json.dumps({"skip_batches": iterator.skip_batches}))
  except tf.errors.FailedPreconditionError as e:
    shutil.rmtree(temporary, ignore_errors=True)
    logging.info(
        "the input pipeline cannot be checkpointed (%s); resumes of this run "
        "will skip the consumed batches instead (train."
        "checkpoint_input_iterator=False avoids the attempt)",
        str(e).strip().splitlines()[-1])
    return False
  except (OSError, tf.errors.OpError) as e:
    shutil.rmtree(temporary, ignore_errors=True)
    raise errors.UserError(f"input iterator state {final}: cannot write it: "
                           f"{errors.first_line(e)}") from e
  # A state left by a save whose orbax step never committed.
  shutil.rmtree(final, ignore_errors=True)
  os.replace(temporary, final)
  return True


def restore(make_dataset: Callable[..., inputs.InputIterator],
            model_dir: pathlib.Path,
            step: int) -> Optional[inputs.InputIterator]:
  """A new iterator (`make_dataset(skip_batches=...)`) restored to `step`;
  None, with a warning, if there is no readable state of that step (the
  caller skips)."""
  path = state_dir(model_dir, step)
  fallback = (f"; skipping the {step} consumed batches instead (reads them "
              "again, same batches)")
  if not (path / f"{_PREFIX}.index").exists():
    logging.warning("no input iterator state of step %d in %s%s", step,
                    _root(model_dir), fallback)
    return None
  try:
    pipeline = json.loads((path / _PIPELINE).read_text())
    iterator = make_dataset(skip_batches=int(pipeline["skip_batches"]))
    iterator.restore(str(path / _PREFIX))
  except Exception as e:  # pylint: disable=broad-except
    # Any failure means the same thing, and skipping is always correct:
    # a truncated state raises IndexError from TF's checkpoint reader, a
    # damaged one OpError, ValueError or AssertionError.
    logging.warning("input iterator state %s cannot be restored (%s)%s",
                    path, str(e).strip().splitlines()[0], fallback)
    return None
  logging.info("Restored the input iterator of step %d from %s", step, path)
  return iterator


def prune(model_dir: pathlib.Path, keep: Iterable[int]) -> None:
  """Deletes every state (and temporary) but those of the steps in `keep`."""
  root = _root(model_dir)
  if not root.is_dir():
    return
  names = {str(s) for s in keep}
  for entry in root.iterdir():
    if entry.name not in names:
      shutil.rmtree(entry, ignore_errors=True)
