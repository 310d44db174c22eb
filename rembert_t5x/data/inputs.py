"""From a registered SeqIO task to the model's batches, with one-line errors.

What the local runner, evaluation, the analyses and T5X inference share:
importing the task module, looking a task up, checking its vocabulary
against the model, and the deterministic batched pipeline through the
model's feature converter (`make_dataset`, an `InputIterator` whose position
can be saved and restored, or skipped to). Data errors become
`errors.UserError` naming the task and the step.
"""

import pathlib
import re
from typing import Optional

import numpy as np
import seqio
import tensorflow as tf

from rembert_t5x.common import errors
from rembert_t5x.data import vocabulary as vocab_lib


def get_task_or_mixture(name: str):
  try:
    return seqio.get_mixture_or_task(name)
  except ValueError as e:
    known = sorted(seqio.MixtureRegistry.names()) + sorted(
        seqio.TaskRegistry.names())
    close = [n for n in known if name.split("_")[0] in n][:8]
    raise errors.UserError(
        f"unknown task or mixture {name!r} (is its module imported? e.g. "
        f"MIXTURE_OR_TASK_MODULE = 'rembert_tasks'); registered: "
        f"{close or known[:8]} ...") from e


def check_tfds_prepared(name: str) -> None:
  """Refuses tasks whose TFDS dataset is not prepared, before any download.

  seqio reads TFDS datasets through `tfds.builder`, which on a machine
  without the prepared files tries to download them (or the builder's
  code) and fails deep inside TFDS when offline.

  Raises:
    errors.UserError: naming the task, the TFDS dataset and its data
      directory, and the local-folder alternative.
  """
  task = get_task_or_mixture(name)
  for sub in getattr(task, "tasks", None) or [task]:
    source = sub.source
    if not isinstance(source, seqio.TfdsDataSource):
      continue
    loader = source.tfds_dataset
    try:
      prepared = loader.builder.is_prepared()
    except Exception:  # pylint: disable=broad-except
      # tfds fetches a builder it does not have locally (offline: an import
      # or network error of its own); either way the data is not here.
      prepared = False
    if not prepared:
      raise errors.UserError(
          f"task {sub.name}: TFDS dataset {loader.name} is not prepared in "
          f"{loader.data_dir or '~/tensorflow_datasets'} (prepare it with "
          f"`tfds build`, or set TFDS_DATA_DIR); XTREME's download folder "
          "works instead: set $REMBERT_XTREME_DIR and use the "
          "rembert_local_* tasks (e.g. MIXTURE_OR_TASK_NAME = "
          "'rembert_local_tatoeba_zeroshot')")


class InputIterator:
  """Numpy batches from a tf.data pipeline whose position can be saved.

  `save` writes the iterator's state with `tf.train.Checkpoint`, as T5X's
  `SaveCheckpointConfig.save_dataset` does: the file readers' offsets, the
  shuffle buffers' contents, the mixture sampler's RNG state, the prefetched
  batches. An iterator of the same pipeline that `restore`s it yields what
  the saved one would have yielded next, without reading the consumed
  batches again. The same pipeline: tf.data restores a state only into the
  dataset graph that saved it, so one built with `skip_batches=k` restores
  only into one built with `skip_batches=k` (its `skip_batches`).
  """

  def __init__(self, dataset: tf.data.Dataset, skip_batches: int = 0):
    self.skip_batches = skip_batches
    self._iterator = iter(dataset)
    self._checkpoint = tf.train.Checkpoint(iterator=self._iterator)

  def __iter__(self) -> "InputIterator":
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    if self._iterator is None:
      raise StopIteration  # closed
    return tf.nest.map_structure(lambda t: t.numpy(), next(self._iterator))

  def close(self) -> None:
    """Stops the pipeline now: drops the tf.data iterator, whose threads and
    prefetch buffers otherwise live until the garbage collector reaches it
    (a failed run's iterator sits in its traceback's reference cycle; freed
    by a later collection, its destructor waited 15-55 s for the pipeline's
    threads in the test suite, measured with py-spy)."""
    self._iterator = None
    self._checkpoint = None

  @property
  def closed(self) -> bool:
    return self._iterator is None

  def save(self, prefix: str) -> None:
    """Writes the state to files `prefix.*`.

    Raises:
      tf.errors.FailedPreconditionError: the pipeline holds state tf.data
        cannot save (a Python generator, `tf.numpy_function`).
    """
    self._checkpoint.write(prefix)

  def restore(self, prefix: str) -> None:
    """Reads a state `save` wrote for the same pipeline.

    Raises:
      tf.errors.OpError or AssertionError: missing, unreadable, or of
        another pipeline.
    """
    self._checkpoint.read(prefix).assert_consumed()


def make_dataset(model, task_name: str, task_feature_lengths, batch_size: int,
                 split: str, seed: int, pack: bool, skip_batches: int = 0,
                 shuffle: bool = True,
                 num_epochs: Optional[int] = None) -> InputIterator:
  """A deterministic, batched numpy iterator over the task's model features.

  The same arguments give the same batches in the same order (seeded
  shuffling, masking and mixture sampling; tf.data keeps element order),
  so `skip_batches=k` yields exactly what an uninterrupted pipeline yields
  after its first k batches (by reading those k batches again; restoring a
  saved `InputIterator` does not).
  """
  task = get_task_or_mixture(task_name)
  converter = model.FEATURE_CONVERTER_CLS(pack=pack)
  try:
    ds = task.get_dataset(
        sequence_length=dict(task_feature_lengths), split=split,
        shuffle=shuffle, seed=seed, num_epochs=num_epochs,
        use_cached=False, shard_info=None)
    ds = converter(ds, dict(task_feature_lengths))
  except (ValueError, KeyError, OSError, tf.errors.OpError) as e:
    raise errors.UserError(f"task {task_name}, split {split}: "
                        f"{data_error_line(e)}") from e
  ds = ds.batch(batch_size, drop_remainder=True)
  if skip_batches:
    ds = ds.skip(skip_batches)
  options = tf.data.Options()
  options.deterministic = True  # never trade element order for speed
  ds = ds.with_options(options)
  return InputIterator(ds.prefetch(2), skip_batches)


def data_error_line(e: BaseException) -> str:
  """The first line of a data error, without tf.data's wrapping.

  A Python error raised on tf.data's threads (a reader's ValueError in a
  `tf.numpy_function` or generator) reaches the caller as an OpError whose
  first line reads `{{function_node ...}} Error in user-defined function
  passed to FlatMapDataset:3 transformation with iterator: Iterator::...:
  ValueError: <message>`; only the message names the file and the example.
  """
  line = errors.first_line(e)
  if isinstance(e, tf.errors.OpError):
    line = re.sub(r"^\{\{[^}]*\}\}\s*", "", line)
    python_error = re.search(r"\b[A-Z]\w*Error: (.+)", line)
    if python_error:
      line = python_error.group(1)
  return line


def next_batch(data, task_name: str, step: int):
  """The next batch; data errors become one-line `UserError`s."""
  try:
    return next(data)
  except StopIteration as e:
    raise errors.UserError(f"task {task_name} ran out of data at step "
                        f"{step + 1}") from e
  except (ValueError, tf.errors.OpError) as e:
    raise errors.UserError(f"task {task_name}, reading the batch of step "
                        f"{step + 1}: {data_error_line(e)}") from e


def check_task_vocabulary(model, task_name: str) -> None:
  """A task vocabulary larger than the model's embedding is an error.

  Ids beyond the embedding table do not fail in JAX (gathers clamp), they
  silently read the wrong rows; refuse before training starts.
  """
  vocab_size = model.config.vocab_size
  task = get_task_or_mixture(task_name)
  subtasks = getattr(task, "tasks", None) or [task]
  for sub in subtasks:
    feature = sub.output_features.get("input_tokens")
    if feature is None:
      continue
    try:
      size = feature.vocabulary.vocab_size
    except (ValueError, OSError) as e:
      raise errors.UserError(f"task {sub.name}: cannot load its vocabulary: "
                          f"{errors.first_line(e)}") from e
    if size > vocab_size:
      raise errors.UserError(
          f"task {sub.name}: its vocabulary has {size} ids but the model's "
          f"VOCAB_SIZE is {vocab_size}; set VOCAB_SIZE >= {size}")


def save_task_vocabulary(model_dir: pathlib.Path, task_name: str) -> None:
  """Copies the task's SentencePiece model into MODEL_DIR (sentencepiece.model).

  Runs started from this MODEL_DIR (fine-tuning, evaluation, a resume) then
  use the vocabulary its checkpoints were made with, unless
  $REMBERT_SPM_PATH names another (`vocabulary.use_checkpoint_vocabulary`).
  """
  task = get_task_or_mixture(task_name)
  files = set()
  for sub in getattr(task, "tasks", None) or [task]:
    feature = sub.output_features.get("input_tokens")
    path = getattr(feature and feature.vocabulary, "sentencepiece_model_file",
                   None)
    if path:
      files.add(path)
  if len(files) == 1:  # a mixture of several vocabularies has no one file
    try:
      vocab_lib.save_vocabulary(files.pop(), str(model_dir))
    except ValueError as e:
      raise errors.UserError(f"MODEL_DIR {model_dir}: {e}") from e


def check_batch(model, batch, task_name: str, step: int) -> None:
  """Host-side range checks of ids and labels (clamped silently otherwise)."""
  where = f"task {task_name}, batch of step {step + 1}"
  vocab_size = model.config.vocab_size
  tokens = batch["input_tokens"]
  if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
    raise errors.UserError(
        f"{where}: field 'input_tokens' has id {int(tokens.max())} outside "
        f"the model's vocabulary [0, {vocab_size})")
  num_classes = getattr(model.module, "num_classes", None)
  if "label" in batch and num_classes:
    label = batch["label"]
    if label.min() < 0 or label.max() >= num_classes:
      raise errors.UserError(
          f"{where}: field 'label' has value {int(label.max())} outside "
          f"[0, {num_classes}) (the model has {num_classes} classes)")
  if "targets" in batch and "weights" in batch:
    bound = num_classes or vocab_size
    what = "tags" if num_classes else "vocabulary ids"
    used = batch["targets"][batch["weights"] != 0]
    if used.size and (used.min() < 0 or used.max() >= bound):
      raise errors.UserError(
          f"{where}: field 'targets' has value {int(used.max())} outside "
          f"[0, {bound}) ({bound} {what})")
  for key in ("start_positions", "end_positions"):
    if key in batch:
      pos = batch[key]
      if pos.min() < 0 or pos.max() >= tokens.shape[-1]:
        raise errors.UserError(
            f"{where}: field '{key}' has value {int(pos.max())} outside "
            f"the sequence [0, {tokens.shape[-1]})")
