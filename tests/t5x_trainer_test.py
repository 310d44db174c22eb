"""The T5X side of the optimizer and of the loss normalisation, with real t5x.

Skipped without t5x (it is not on PyPI: pip install -e '.[t5x]'). The
t5x-free halves of these checks are in optimizer_test.py (decay mask, the
optimizer the gin files bind) and models_test.py (microbatch sums simulated
as T5X's trainer does them).
"""

import dataclasses
import importlib.util

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rembert_t5x import models
from rembert_t5x import optimizer
from tests import test_utils
from tests import tolerances

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("t5x") is None,
    reason="t5x is not installed (pip install -e '.[t5x]'); its t5x-free "
    "counterparts are optimizer_test.py and models_test.py")

# No dropout anywhere: T5X always passes a dropout rng, and the comparisons
# below need every microbatch to compute what the full batch computes.
CFG = dataclasses.replace(test_utils.TINY_CONFIG, classifier_dropout_rate=0.0)
# A learning rate that shows the decay in one step (optimizer_test.py's), and
# the weight decay the run files leave at the optimizer's default.
LR, WD = 0.5, 0.01


def _train_state(model, optimizer_def, batch_size):
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  from t5x import utils  # pylint: disable=g-import-not-at-top
  partitioner = t5x_export.make_partitioner()
  initializer = utils.TrainStateInitializer(
      optimizer_def=optimizer_def, init_fn=model.get_initial_variables,
      input_shapes={"input_tokens": (batch_size,
                                      test_utils.TINY_BATCH_SHAPE[1])},
      partitioner=partitioner)
  state = initializer.from_scratch(jax.random.PRNGKey(0))
  return state, initializer.train_state_axes, partitioner


@pytest.mark.parametrize("run", ["pretrain_mlm", "finetune_panx"])
def test_gin_built_optimizer_decays_only_kernels(run, monkeypatch, clean_gin):
  """The optimizer_def the run files give the model, on T5X's train state."""
  from t5x import optimizers  # pylint: disable=g-import-not-at-top
  from t5x import train_state as train_state_lib  # pylint: disable=g-import-not-at-top
  gin = test_utils.parse_t5x_gin(
      monkeypatch, "train",
      ["gin_configs/models/tiny.gin", f"gin_configs/runs/{run}.gin",
       "gin_configs/runs/t5x_cpu_tiny.gin"],
      [f"LEARNING_RATE = {LR}", "WARMUP_STEPS = 0"])
  model = test_utils.build_gin_model(gin)
  assert isinstance(model.optimizer_def, optimizers.OptaxWrapper)
  variables = model.get_initial_variables(
      jax.random.PRNGKey(0), {"input_tokens": (1, 8)})
  params = jax.tree_util.tree_map(lambda x: x + 1.0, variables["params"])
  state = train_state_lib.FlaxOptimTrainState.create(
      model.optimizer_def, flax.core.freeze(
          {"params": params, "params_axes": variables["params_axes"]}))
  # T5X derives the optimizer state's partitioning from the params' axes
  # (the masked decay adds an optax.MaskedState to that state).
  assert state.as_logical_axes() is not None
  zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params)
  new = state.apply_gradient(zeros, learning_rate=None)
  assert isinstance(new.params, flax.core.FrozenDict)
  test_utils.check_only_kernels_decayed(params, new.params, LR, WD)


def test_gin_trainer_takes_t5x_trainer_bindings(monkeypatch, clean_gin):
  from rembert_t5x import t5x_trainer  # pylint: disable=g-import-not-at-top
  gin = test_utils.parse_t5x_gin(
      monkeypatch, "train",
      ["gin_configs/models/tiny.gin", "gin_configs/runs/finetune_panx.gin"],
      # TRAIN_STEPS is derived from the task's size when not bound (PAN-X's
      # TFDS data is not here).
      ["trainer.Trainer.num_microbatches = 4", "TRAIN_STEPS = 938"])
  make = gin.query_parameter("train_script.train.trainer_cls")
  assert make.configurable.wrapped is t5x_trainer.make_trainer
  settings = gin.get_bindings("t5x.trainer.Trainer")
  assert settings["num_microbatches"] == 4
  # The schedule T5X reports is the optimizer's: 10% warm-up, then decay.
  steps, lr = 938, 8e-6
  want = optimizer.learning_rate_schedule(lr, steps, steps // 10)
  for step in (0, 50, 93, 500, 938):
    assert float(settings["learning_rate_fn"](step)) == pytest.approx(
        float(want(step)), rel=1e-6, abs=1e-15)


@pytest.mark.parametrize("kind", ["mlm", "pair", "tagging", "qa"])
def test_t5x_accumulate_grads_microbatched_gives_full_batch_gradient(kind):
  """T5X's own accumulation over 3 microbatches == one full batch."""
  from t5x import optimizers  # pylint: disable=g-import-not-at-top
  from t5x import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  model = test_utils.tiny_model(kind)
  model.module = models.make_module(kind, CFG, num_classes=7)
  batch = jax.tree_util.tree_map(jnp.asarray, test_utils.six_row_batch(kind))
  state, _, _ = _train_state(model, optimizers.sgd(1.0), 6)
  rng = jax.random.PRNGKey(3)
  full, full_metrics, _ = trainer_lib.accumulate_grads_microbatched(
      model, state, batch, rng, num_microbatches=None)
  micro, micro_metrics, _ = trainer_lib.accumulate_grads_microbatched(
      model, state, models.with_full_batch_loss_weight(model, batch), rng,
      num_microbatches=3)
  # The same sums split three ways.
  tolerances.assert_same_sums(micro, full, micro_metrics["loss"].compute(),
                              full_metrics["loss"].compute(), kind, batch, CFG)


def test_full_batch_loss_trainer_step_equals_the_full_batch_step():
  """The partitioned train step of our Trainer, 3 microbatches vs none.

  Plain SGD at learning rate 1, so the new params are params - gradient;
  T5X's own Trainer with 3 microbatches gets another gradient (the tagging
  rows' weights are uneven), ours gets the full batch's.
  """
  from t5x import optimizers  # pylint: disable=g-import-not-at-top
  from t5x import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  from rembert_t5x import t5x_trainer  # pylint: disable=g-import-not-at-top
  model = models.RemBertTaggingModel(
      models.make_module("tagging", CFG, num_classes=7))
  # 24 rows: microbatches of 8 rows divide over the 8 simulated devices
  # (conftest.py) on the partitioner's data axis.
  batch = jax.tree_util.tree_map(
      lambda x: jnp.asarray(np.concatenate([x] * 4)),
      test_utils.six_row_batch("tagging"))
  state, axes, partitioner = _train_state(model, optimizers.sgd(1.0), 24)
  params = jax.device_get(state.params)

  def step(cls, num_microbatches):
    trainer = cls(model=model, train_state=state, partitioner=partitioner,
                  eval_names=[], summary_dir=None, train_state_axes=axes,
                  rng=jax.random.PRNGKey(0), learning_rate_fn=lambda _: 1.0,
                  num_microbatches=num_microbatches)
    # The step donates its input state: give it a copy.
    fresh = jax.tree_util.tree_map(jnp.copy, state)
    new_state, _ = trainer._partitioned_train_step(fresh, batch)  # pylint: disable=protected-access
    return jax.device_get(new_state.params)

  full = step(t5x_trainer.FullBatchLossTrainer, None)
  ours = step(t5x_trainer.FullBatchLossTrainer, 3)
  theirs = step(trainer_lib.Trainer, 3)
  # SGD at 1: compare the updates (-gradients) with the tiny model's float32
  # gradient bound; T5X's per-microbatch means move them by > 50% (below).
  rows, length = batch["input_tokens"].shape
  delta = lambda p: jax.tree_util.tree_map(lambda a, b: a - b, p, params)
  tolerances.assert_trees_close_normwise(
      delta(ours), delta(full),
      tolerances.tiny_gradient_rtol(CFG, length, ("classes", 7),
                                    rows * length), rows * length)
  moved = lambda p: np.concatenate([np.ravel(a - b) for a, b in zip(
      jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(params))])
  assert np.linalg.norm(moved(theirs)) > 1.5 * np.linalg.norm(moved(full))
