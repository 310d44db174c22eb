"""T5X's Trainer with losses normalised over the whole batch.

T5X's `Trainer.num_microbatches = k` splits each batch into k microbatches
and sums their gradients (t5x/trainer.py, `accumulate_grads_microbatched`).
Our losses are weighted means, and a mean over one microbatch cannot know
the other microbatches' weights: summed, such means give k times the
gradient of the full batch (so clipping at 1.0 acts like clipping at 1/k),
and for tagging, whose loss weights differ between microbatches, not even a
multiple of it.

This trainer adds, inside its jitted train step and before T5X splits the
batch, the feature `models.FULL_BATCH_LOSS_WEIGHT` (the whole global
batch's total loss weight, on every row); each microbatch's loss is then its
share of the full batch's mean, and T5X's sum of their gradients is exactly
the full batch's gradient. `gin_configs/runs/train_base.gin` selects it with
`train_script.train.trainer_cls = @t5x_trainer.make_trainer`.

T5X's other options stay where T5X users look for them: `make_trainer`
takes every binding of T5X's own `trainer.Trainer` (`num_microbatches`,
`learning_rate_fn`, `weight_metrics_computer`), so
`--gin.trainer.Trainer.num_microbatches=4` works as with T5X's Trainer.

This module imports t5x (only the T5X run files load it); the rest of the
package does not need t5x.
"""

from typing import Any

import gin
from t5x import trainer as trainer_lib

from rembert_t5x import models


class FullBatchLossTrainer(trainer_lib.Trainer):
  """`t5x.trainer.Trainer` whose batches carry their total loss weight."""

  @trainer_lib.cached_property
  def _partitioned_train_step(self):
    # The parent's step with one line added in front: the weight is summed
    # over the global batch here, inside the partitioned function, so it is
    # also right when several hosts each feed a part of the batch.
    def train_step(train_state, batch):
      batch = models.with_full_batch_loss_weight(self._model, batch)
      return trainer_lib.train_with_lr(
          train_state,
          batch,
          learning_rate=self._learning_rate_fn(train_state.step),
          dropout_rng=self._get_step_rng(train_state.step),
          model=self._model,
          num_microbatches=self._num_microbatches,
          weight_metrics_computer=self._weight_metrics_computer,
          data_partition_spec=self._partitioner.data_partition_spec)

    return self._partitioner.partition(
        train_step,
        in_axis_resources=(self._train_state_axes,
                           self._partitioner.data_partition_spec),
        out_axis_resources=(self._train_state_axes, None),
        donate_argnums=(0,))


def make_trainer(**kwargs: Any) -> FullBatchLossTrainer:
  """A `FullBatchLossTrainer` configured by T5X's `trainer.Trainer` bindings.

  T5X's train.py calls `trainer_cls(model=..., train_state=...,
  partitioner=..., train_state_axes=..., eval_names=..., summary_dir=...,
  rng=...)`; the remaining arguments come from gin's bindings of
  `t5x.trainer.Trainer` (a subclass does not inherit them), and explicit
  keyword arguments win over those.
  """
  settings = gin.get_bindings(trainer_lib.Trainer)
  return FullBatchLossTrainer(**{**settings, **kwargs})
