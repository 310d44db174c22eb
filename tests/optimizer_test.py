"""Tests for rembert_t5x.optimizer: one AdamW for the local runner and T5X.

The decay mask is checked on the real parameter trees of every head, as
dicts and as FrozenDicts (T5X's), and through the optimizers themselves: with
a zero gradient Adam's step is 0, so what changes a parameter is the weight
decay alone. The T5X object built by parsing the gin files with the real
t5x is checked in tests/t5x_trainer_test.py.
"""

import re

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rembert_t5x import models
from rembert_t5x import optimizer
from rembert_t5x.runner import train_lib
from tests import test_utils

REPO = test_utils.REPO_ROOT
LR, WD = 0.5, 0.01


def _params(kind, config=test_utils.TINY_CONFIG):
  module = models.make_module(kind, config, num_classes=3)
  variables = jax.jit(module.init)(jax.random.PRNGKey(0),
                                   jnp.ones((1, 8), jnp.int32))
  # Non-zero everywhere (LayerNorm biases and dense biases start at 0),
  # so that decay would show on every leaf.
  return jax.tree_util.tree_map(lambda x: x + 1.0, variables["params"])


PARAM_TREES = [("mlm", test_utils.TINY_CONFIG),
               ("mlm", test_utils.TINY_COUPLED_CONFIG),
               ("pair", test_utils.TINY_CONFIG),
               ("tagging", test_utils.TINY_CONFIG),
               ("qa", test_utils.TINY_CONFIG)]
TREE_IDS = ["mlm", "mlm_coupled", "pair", "tagging", "qa"]


@pytest.mark.parametrize("kind,config", PARAM_TREES, ids=TREE_IDS)
@pytest.mark.parametrize("frozen", [False, True], ids=["dict", "frozen"])
def test_decay_mask_excludes_biases_and_layer_norms(kind, config, frozen):
  params = _params(kind, config)
  if frozen:
    params = flax.core.freeze(params)
  mask = optimizer.decay_mask(params)
  # Same container types, so optax.masked can map over both together.
  assert (jax.tree_util.tree_structure(mask)
          == jax.tree_util.tree_structure(params))
  names = test_utils.param_names(mask)
  excluded = {n for n, decayed in names.items() if not decayed}
  assert excluded == {n for n in names if test_utils.bert_excluded(n)}
  # Every LayerNorm scale and bias, and every bias, are among them; every
  # kernel and embedding table is decayed.
  assert any(n.endswith("layer_norm/scale") for n in excluded)
  for n, decayed in names.items():
    leaf = n.rsplit("/", 1)[-1]
    assert decayed == (leaf in ("kernel", "embedding")), n
  if config.tie_embeddings and kind == "mlm":
    assert "mlm_head/decoder_bias" in excluded


def _zero_grad_step(tx, params):
  """Params after one update with a zero gradient: only decay moves them."""
  def step(params):  # one program (eagerly, ~150: one per op and leaf)
    grads = jax.tree_util.tree_map(jnp.zeros_like, params)
    updates, _ = tx.update(grads, tx.init(params), params)
    return optax.apply_updates(params, updates)
  return jax.jit(step)(params)


@pytest.mark.parametrize("kind,config", PARAM_TREES[:3], ids=TREE_IDS[:3])
def test_local_runner_optimizer_decays_only_kernels(kind, config):
  params = _params(kind, config)
  tx, _ = train_lib.make_optimizer(LR, total_steps=10, warmup_steps=0,
                                   weight_decay=WD)
  test_utils.check_only_kernels_decayed(params, _zero_grad_step(tx, params),
                                        LR, WD)


def _gin_block(text, configurable):
  """`name = value` lines bound to `configurable` in a gin file's text."""
  pairs = dict(re.findall(rf"^{re.escape(configurable)}\.(\w+) = (.+)$",
                          text, re.M))
  block = re.search(rf"^{re.escape(configurable)}:\n((?:  .+\n)+)", text,
                    re.M)
  if block:
    pairs.update(re.findall(r"^  (\w+) = (.+)$", block.group(1), re.M))
  return pairs


def test_gin_binds_this_optimizer_for_every_t5x_training_run():
  """What train_base.gin binds, built without t5x, on frozen params."""
  runs = REPO / "gin_configs" / "runs"
  base = (runs / "train_base.gin").read_text()
  assert "OPTIMIZER = @optimizers.OptaxWrapper()" in base
  assert ("optimizers.OptaxWrapper.optax_optimizer = "
          "@rembert_optimizer.adamw()") in base
  assert "rembert_optimizer.adamw.learning_rate = \\\n    " \
         "@rembert_optimizer.learning_rate_schedule()" in base
  # Nothing overrides the Table 14 defaults of optimizer.adamw.
  assert set(_gin_block(base, "rembert_optimizer.adamw")) == {"learning_rate"}
  schedule_args = _gin_block(base, "rembert_optimizer.learning_rate_schedule")
  assert schedule_args == {"learning_rate": "%LEARNING_RATE",
                           "total_steps": "%TRAIN_STEPS",
                           "warmup_steps": "%WARMUP_STEPS"}
  # Every T5X training run includes it and gives its model that optimizer.
  for name in ["pretrain_mlm.gin", "finetune_base.gin"]:
    assert "include 'gin_configs/runs/train_base.gin'" in (
        runs / name).read_text()
  for path in runs.glob("*.gin"):
    text = path.read_text()
    bound = re.findall(r"^ +optimizer_def = (.+)$", text, re.M)
    assert set(bound) <= {"%OPTIMIZER"}, path
    if path.name == "pretrain_mlm.gin" or path.name.startswith("finetune_"):
      # A run file that only renames another (finetune_mlqa.gin includes
      # finetune_xquad.gin) gets the model, and its optimizer, from there.
      assert bound or path.name == "finetune_base.gin" or re.search(
          r"^include 'gin_configs/runs/finetune_\w+\.gin'", text, re.M), path
    assert "optax." not in text and "create_learning_rate_scheduler" not in text
  tx = optimizer.adamw(optimizer.learning_rate_schedule(
      LR, total_steps=10, warmup_steps=0))
  params = flax.core.freeze(_params("mlm"))
  after = _zero_grad_step(tx, params)
  assert isinstance(after, flax.core.FrozenDict)
  test_utils.check_only_kernels_decayed(params, after, LR, WD)


@pytest.mark.parametrize("scale", [0.01, 100.0])  # below and above the norm
def test_clip_by_global_norm_matches_optax(scale):
  rng = np.random.default_rng(0)
  grads = {"a": jnp.asarray(rng.standard_normal((4, 3)) * scale, jnp.float32),
           "b": {"bias": jnp.asarray(rng.standard_normal(5) * scale,
                                     jnp.float32)}}
  ours = optimizer.clip_by_global_norm(1.0)
  ref = optax.clip_by_global_norm(1.0)
  got, state = ours.update(grads, ours.init(grads))
  want, ref_state = ref.update(grads, ref.init(grads))
  assert type(state) is type(ref_state)
  for a, b in zip(jax.tree_util.tree_leaves(got),
                  jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  norm = float(optax.tree.norm(got))
  assert norm == pytest.approx(min(float(optax.tree.norm(grads)), 1.0),
                               rel=1e-5)


def _t5x_linear_decay(step, base, warmup, total):
  """T5X's 'linear_decay' factor with decay_factor = 1 / (total - warmup)."""
  decay_factor = 1.0 / (total - warmup)
  return max(0.0, base * min(step / warmup, 1 + decay_factor * (warmup - step)))


@pytest.mark.parametrize("warmup,total", [(15000, 1760000), (93, 938), (1, 4)])
def test_schedule_is_t5x_linear_decay_with_derived_factor(warmup, total):
  schedule = optimizer.learning_rate_schedule(2e-4, total, warmup)
  for step in sorted({0, warmup // 2, warmup, warmup + 1, (warmup + total) // 2,
                      total - 1, total, total + 7}):
    assert float(schedule(step)) == pytest.approx(
        _t5x_linear_decay(step, 2e-4, warmup, total), rel=1e-5,
        abs=1e-6 * 2e-4)  # float32 rounding near the end of long schedules


@pytest.mark.parametrize("lr,total,warmup", [
    (1e-3, 10, 0), (5e-4, 300, 30), (2e-4, 4, 1), (3e-3, 6, 6), (1e-4, 5, 9)])
def test_schedule_settings_may_be_traced(lr, total, warmup):
  """The local runner passes the schedule's settings into its jitted step:
  traced, they give optax's linear warm-up joined to its linear decay.

  Each value is a few float32 operations (a division, a subtraction, a
  product and a sum) in either form: within 4 u of the learning rate.
  """
  w = max(0, min(warmup, total))
  reference = optax.join_schedules(
      [optax.linear_schedule(0.0, lr, max(w, 1)),
       optax.linear_schedule(lr, 0.0, max(total - w, 1))], [w])
  steps = jnp.arange(total + 3)
  traced = jax.jit(lambda s, *settings: jax.vmap(
      optimizer.learning_rate_schedule(*settings))(s))(
          steps, jnp.float32(lr), jnp.int32(total), jnp.int32(warmup))
  np.testing.assert_allclose(traced, jax.vmap(reference)(steps), rtol=0,
                             atol=4 * 2.0 ** -24 * lr)
