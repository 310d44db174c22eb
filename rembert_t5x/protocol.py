r"""The paper's fine-tuning protocol as code: epochs -> steps, and checkpoint
selection on the English dev set.

  # Fine-tuning steps of 3 epochs at batch 128 (what finetune_<task>.gin
  # computes as TRAIN_STEPS):
  python -m rembert_t5x.protocol steps --task=rembert_xnli_train_en \
      --batch_size=128 [--epochs=3] [--module=rembert_tasks]
  # The best checkpoint on the English dev set, from the per-checkpoint
  # metrics SeqIO's JSON logger wrote (T5X train's inference eval, or
  # `t5x.eval` with RestoreCheckpointConfig.mode='all'); prints its path:
  python -m rembert_t5x.protocol select --metrics_dir=MODEL_DIR/inference_eval \
      --task=rembert_xnli_en --checkpoint_dir=MODEL_DIR

Steps are never typed in: `train_steps` counts the training split (a TFDS
source's split info, i.e. `num_input_examples`; other sources, such as the
local XTREME files, are read and counted) and returns ceil(n / batch) per
epoch times the epochs, the number of optimizer steps of XTREME's PyTorch
scripts (`len(train_dataloader) * num_train_epochs`). QA counts questions,
not the windows the model sees (XTREME's run_squad counts windows: about 1%
more for SQuAD at 384 / 128).

Selection (paper §4 and XTREME: "select on the English dev set"): the
checkpoint with the highest English-dev score (`task_score`; QA scores
(EM + F1) / 2); ties go to the earlier checkpoint.
"""

import functools
import json
import math
import os
import sys
from typing import Mapping, Optional

from absl import flags
import gin

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import task_modules

# Paper §4 / Table 15: every task is fine-tuned for 3 epochs.
EPOCHS = 3


def task_score(metrics: Mapping[str, float]) -> float:
  """One number per (task, language): XTREME's (EM + F1) / 2 for QA."""
  if "exact_match" in metrics and "f1" in metrics:
    return (metrics["exact_match"] + metrics["f1"]) / 2
  for name in ("f1", "accuracy"):
    if name in metrics:
      return float(metrics[name])
  raise ValueError(f"no score among metrics {sorted(metrics)}")


def task_language(task_name: str) -> str:
  """The language code a task name ends with (`rembert_xnli_de` -> `de`)."""
  return task_name.rsplit("_", 1)[-1]


def task_family(task_name: str) -> str:
  """The task name without its language (`rembert_xnli_de` -> `rembert_xnli`)."""
  return task_name.rsplit("_", 1)[0]


@functools.lru_cache(maxsize=None)
def num_examples(task_name: str, split: str = "train") -> int:
  """Examples in `split` of a registered task's source (cached per process).

  Raises:
    errors.UserError: unknown task, a mixture (an "epoch" of a rate-sampled
      mixture is not defined), a missing split, or a source whose size can
      be neither read nor counted (e.g. a TFDS dataset not prepared yet).
  """
  # Deferred: seqio imports TensorFlow (seconds), which `protocol --help`
  # does not need.
  import seqio  # pylint: disable=g-import-not-at-top
  if task_name in seqio.MixtureRegistry.names():
    raise errors.UserError(f"{task_name!r} is a mixture: epochs are counted on "
                        "one training task")
  try:
    task = seqio.get_mixture_or_task(task_name)
  except ValueError as e:
    raise errors.UserError(f"unknown task {task_name!r} (is its module "
                        "imported?)") from e
  if split not in task.splits:
    raise errors.UserError(f"task {task_name!r} has no {split!r} split "
                        f"(splits: {list(task.splits)})")
  try:
    n = task.source.num_input_examples(split)
    if n is None:
      # Sources without metadata (local files): read and count.
      n = int(task.source.get_dataset(split=split, shuffle=False)
              .reduce(0, lambda count, _: count + 1))
  except errors.UserError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise errors.UserError(
        f"cannot count the {split!r} examples of {task_name!r}: "
        f"{str(e).splitlines()[0] if str(e) else type(e).__name__} (is the "
        "dataset prepared / are its files there?)") from e
  if not n:
    raise errors.UserError(f"task {task_name!r}: split {split!r} is empty")
  return int(n)


@gin.configurable
def train_steps(mixture_or_task_name: str = gin.REQUIRED,
                batch_size: int = gin.REQUIRED, epochs: float = EPOCHS,
                split: str = "train", module: Optional[str] = None,
                pack: bool = False,
                task_feature_lengths: Optional[Mapping[str, int]] = None
                ) -> int:
  """Optimizer steps of `epochs` passes over the task at `batch_size`.

  ceil(examples / batch_size) steps per epoch (the last batch of an epoch
  is a partial one in XTREME's data loaders), times `epochs`, rounded up.
  `module` is imported first (T5X's MIXTURE_OR_TASK_MODULE), since gin
  evaluates this before T5X imports the task module.

  With `pack` (T5X's `DatasetConfig.pack = True`, where `batch_size` counts
  packed rows) an epoch is ceil(rows / batch_size) steps, the rows counted
  by packing the split's token lengths at `task_feature_lengths` as seqio
  does (`packed_rows`): one pass that tokenises the split.
  """
  if batch_size <= 0 or epochs <= 0:
    raise errors.UserError(f"train_steps: batch_size ({batch_size}) and epochs "
                        f"({epochs}) must be positive")
  task_modules.import_task_module(module)
  if pack:
    if not task_feature_lengths:
      raise errors.UserError("train_steps: pack=True needs "
                             "task_feature_lengths (TASK_FEATURE_LENGTHS)")
    count = packed_rows(mixture_or_task_name, split,
                        tuple(sorted(dict(task_feature_lengths).items())))
  else:
    count = num_examples(mixture_or_task_name, split)
  return math.ceil(math.ceil(count / batch_size) * epochs)


def greedy_rows(lengths, length: int, window: Optional[int] = None) -> int:
  """Rows seqio's packer fills from examples of `lengths`, in order.

  seqio (`trim_and_pack_dataset`) takes `length` examples at a time and
  fills one row greedily: an example that does not fit closes the row.
  """
  window = window or length
  rows = 0
  for start in range(0, len(lengths), window):
    used = 0
    for n in lengths[start:start + window]:
      n = min(int(n), length)
      if used and used + n > length:
        rows += 1
        used = 0
      used += n
    rows += 1 if used else 0
  return rows


@functools.lru_cache(maxsize=None)
def packed_rows(task_name: str, split: str,
                task_feature_lengths: tuple[tuple[str, int], ...]) -> int:
  """Packed rows of one pass over `split` of a task (`greedy_rows`).

  The order is the unshuffled one; a shuffled pass packs neighbours of
  other lengths, within a few percent of this count.
  """
  # Deferred: seqio and TensorFlow take seconds to import; only a packed
  # count needs them.
  import seqio  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  lengths = dict(task_feature_lengths)
  num_examples(task_name, split)  # the one-line errors for a bad task/split
  task = seqio.get_mixture_or_task(task_name)
  try:
    ds = task.get_dataset(sequence_length=lengths, split=split,
                          shuffle=False, use_cached=False)
    sizes = [int(n) for n in ds.map(
        lambda ex: tf.size(ex["input_tokens"])).as_numpy_iterator()]
  except (ValueError, tf.errors.OpError) as e:
    raise errors.UserError(f"cannot pack the {split!r} examples of "
                           f"{task_name!r}: {errors.first_line(e)}") from e
  return greedy_rows(sizes, lengths["input_tokens"])


# The fine-tuning warm-up (finetune_base.gin) from the derived step count; the
# decay rate follows from both in optimizer.learning_rate_schedule.
# BERT's warm-up: a tenth of the steps. The one rule of the T5X run files
# (through gin) and the local experiments (`runner.jobs`).
WARMUP_FRACTION = 0.1


@gin.configurable
def warmup_steps(total_steps: int = gin.REQUIRED,
                 fraction: float = WARMUP_FRACTION) -> int:
  """BERT's warm-up: `total_steps * fraction` rounded down.

  The epsilon keeps 70 * 0.1 = 7.000000000000001 and 30 * 0.1 =
  3.0000000000000004 alike on the integer below them, and a product that
  rounding puts just under an integer on that integer.
  """
  return math.floor(total_steps * fraction + 1e-9)


# --------------------------------------------------------------------------
# Checkpoint selection
# --------------------------------------------------------------------------

def best_step(scores: Mapping[int, float]) -> int:
  """The step with the highest score; the earliest among equals."""
  if not scores:
    raise errors.UserError("no checkpoint scores to select from")
  return min(scores, key=lambda step: (-scores[step], step))


def read_metrics_jsonl(metrics_dir: str, task_name: str
                       ) -> dict[int, dict[str, float]]:
  """{step: metrics} from SeqIO JSONLogger's `<task>-metrics.jsonl`.

  The logger appends one line per evaluation; a step evaluated twice keeps
  its last line.
  """
  # Deferred: TensorFlow takes seconds to import; only file reads need it.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(metrics_dir, f"{task_name}-metrics.jsonl")
  if not tf.io.gfile.exists(path):
    raise errors.UserError(f"{path}: no such file (no inference eval of "
                        f"{task_name!r} was logged there)")
  out = {}
  with tf.io.gfile.GFile(path) as f:
    # JSON Lines end at "\n" only; a JSON string may hold U+2028 or U+0085
    # as they are, where str.splitlines() would cut the record.
    for i, line in enumerate(f.read().split("\n"), 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
        step = int(record.pop("step"))
      except (ValueError, KeyError, TypeError) as e:
        raise errors.UserError(f"{path}:{i}: not a JSON metrics line with a "
                            f"'step' ({e})") from e
      out[step] = {k: v for k, v in record.items()
                   if isinstance(v, (int, float))}
  if not out:
    raise errors.UserError(f"{path}: no metrics lines")
  return out


def select_checkpoint(metrics_dir: str, task_name: str,
                      checkpoint_dir: str) -> tuple[str, int, dict]:
  """The T5X checkpoint (`checkpoint_<step>`) best on `task_name`.

  Only steps that have a checkpoint directory are candidates (T5X may log an
  evaluation without a checkpoint, e.g. when the periods differ).

  Returns:
    (checkpoint path, step, {step: score} of the candidates).
  """
  # Deferred: TensorFlow takes seconds to import; only file reads need it.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  metrics = read_metrics_jsonl(metrics_dir, task_name)
  scores = {}
  for step, m in metrics.items():
    if tf.io.gfile.isdir(os.path.join(checkpoint_dir, f"checkpoint_{step}")):
      scores[step] = task_score(m)
  if not scores:
    raise errors.UserError(
        f"none of the evaluated steps {sorted(metrics)} of {task_name!r} has "
        f"a checkpoint_<step> under {checkpoint_dir}")
  step = best_step(scores)
  return os.path.join(checkpoint_dir, f"checkpoint_{step}"), step, scores


def _define_steps(fv: flags.FlagValues) -> None:
  flags.DEFINE_string("task", None, "the training task", flag_values=fv,
                      required=True)
  flags.DEFINE_integer("batch_size", None, "examples per step",
                       flag_values=fv, required=True)
  flags.DEFINE_float("epochs", EPOCHS, "epochs over the training split",
                     flag_values=fv)
  flags.DEFINE_string("split", "train", "the split counted", flag_values=fv)
  flags.DEFINE_string("module", "rembert_tasks",
                      "module that registers the task", flag_values=fv)


def _define_select(fv: flags.FlagValues) -> None:
  flags.DEFINE_string("metrics_dir", None, "where SeqIO's JSON logger wrote "
                      "<task>-metrics.jsonl (MODEL_DIR/inference_eval, or "
                      "EVAL_OUTPUT_DIR)", flag_values=fv, required=True)
  flags.DEFINE_string("task", None, "the English dev task", flag_values=fv,
                      required=True)
  flags.DEFINE_string("checkpoint_dir", None, "the fine-tuning MODEL_DIR",
                      flag_values=fv, required=True)


def _steps(fv: flags.FlagValues) -> None:
  print(train_steps(fv.task, fv.batch_size, fv.epochs, fv.split, fv.module))


def _select(fv: flags.FlagValues) -> None:
  path, step, scores = select_checkpoint(fv.metrics_dir, fv.task,
                                         fv.checkpoint_dir)
  print(f"step {step} selected; English dev scores by step: "
        f"{json.dumps({str(k): round(v, 3) for k, v in sorted(scores.items())})}",
        file=sys.stderr)
  print(path)


def main(argv=None) -> None:
  cli.run_command({
      "steps": ("print the fine-tuning steps", _define_steps, _steps),
      "select": ("print the best checkpoint's path", _define_select, _select),
  }, argv, doc=__doc__)


if __name__ == "__main__":
  main()
