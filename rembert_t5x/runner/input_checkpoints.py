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
pipeline changed in a constant (a seed or a task of the same shape) and
continues from its position, as under T5X; the runner's resume assumes an
unchanged run file. A change of the batch's shape (batch size, sequence
lengths, tf.data packing) would restore and then fail at the first batch, so
each state records those settings (`pipeline.json`) and `check_settings`
refuses a resume that changes them, before the run writes anything. One
host: the runner reads the whole batch on one process.
"""

import json
import os
import pathlib
import shutil
from typing import Any, Callable, Iterable, Mapping, Optional

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


# The settings that fix a batch's shape, as `pipeline.json` records them:
# {key: the setting's name in messages}.
SHAPE_SETTINGS = {
    "batch_size": "train.batch_size (BATCH_SIZE)",
    "task_feature_lengths": "train.task_feature_lengths (TASK_FEATURE_LENGTHS)",
    "pack": "train.pack (tf.data packing)",
}


def save(iterator: inputs.InputIterator, model_dir: pathlib.Path,
         step: int, settings: Optional[Mapping[str, Any]] = None) -> bool:
  """Writes the iterator's state of `step`, with `settings` (the pipeline's
  `SHAPE_SETTINGS`, JSON values) beside it for `check_settings`.

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
    (temporary / _PIPELINE).write_text(json.dumps(
        {"skip_batches": iterator.skip_batches, **dict(settings or {})}))
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


def check_settings(model_dir: pathlib.Path, steps: Iterable[int],
                   settings: Mapping[str, Any]) -> None:
  """Refuses to resume MODEL_DIR with other batch-shape settings.

  Compares `settings` with those that the newest iterator state of the
  committed `steps` was saved with (states saved without them, and states
  of steps orbax never committed, are not compared).

  Raises:
    errors.UserError: naming the first setting that differs, its saved and
      its new value, and MODEL_DIR.
  """
  for step in sorted(steps, reverse=True):
    try:
      saved = json.loads((state_dir(model_dir, step) / _PIPELINE).read_text())
    except (OSError, ValueError):
      continue
    if not isinstance(saved, dict) or not set(SHAPE_SETTINGS) & set(saved):
      continue
    for key, name in SHAPE_SETTINGS.items():
      new = json.loads(json.dumps(settings[key]))  # as it would be saved
      if key in saved and saved[key] != new:
        raise errors.UserError(
            f"MODEL_DIR {model_dir} was trained with {name} = {saved[key]!r}, "
            f"this run sets {new!r}: a resume cannot change the batch's "
            f"shape (its saved input pipeline is of the old one); set it back "
            f"to {saved[key]!r}, or use a new MODEL_DIR")
    return
