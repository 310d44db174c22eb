"""Dataset-config helpers that T5X run files bind (gin_configs/runs/).

T5X's `runs/pretrain.gin` always builds a train-eval dataset from the
'validation' split. mC4 and Wikipedia have one; plain local text
(`register_local_text_mlm`) and the synthetic corpus do not, and T5X then
fails with "No datasets have a 'validation' split". `pretrain_mlm.gin` wraps
the train-eval config in `if_split_exists`, which keeps it when every task
has the split and otherwise turns train-eval off with a log line. No t5x
import: the config is duck-typed (`mixture_or_task_name`, `split`,
`module`).
"""

from typing import Any, Optional

from absl import logging
import seqio

from rembert_t5x.common import task_modules


def if_split_exists(dataset_cfg: Any) -> Optional[Any]:
  """`dataset_cfg` if every task of its task/mixture has its split, else None.

  Args:
    dataset_cfg: a T5X `utils.DatasetConfig` (e.g. the train-eval one).

  Returns:
    `dataset_cfg`, or None (T5X's `train` then skips train-eval) when a task
    lacks `dataset_cfg.split`.

  Raises:
    ValueError: from seqio, for an unknown task or mixture name.
  """
  if dataset_cfg is None:
    return None
  task_modules.import_task_module(getattr(dataset_cfg, "module", None))
  provider = dataset_cfg.mixture_or_task_name
  if isinstance(provider, str):
    provider = seqio.get_mixture_or_task(provider)
  lacking = sorted(task.name for task in seqio.get_subtasks(provider)
                   if dataset_cfg.split not in task.splits)
  if not lacking:
    return dataset_cfg
  logging.warning(
      "Train-eval is off: %s %s no %r split (turn it on for a task that has "
      "one with train.train_eval_dataset_cfg = "
      "@train_eval/utils.DatasetConfig()).",
      ", ".join(lacking[:5]) + (" ..." if len(lacking) > 5 else ""),
      "has" if len(lacking) == 1 else "have", dataset_cfg.split)
  return None
