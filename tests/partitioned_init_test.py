"""T5X-style partitioned init: every parameter layout must divide exactly.

`t5x.train` evaluates the train state's shapes (`jax.eval_shape` of the init),
maps each parameter's logical axes to mesh axes with its rules, and builds the
state under pjit with those specs as out shardings: a dimension its mesh axes
do not divide is an `IndivisibleError`, never a replicated fallback (only our
local runner falls back, `train_lib.param_shardings`). These tests do the same
without allocating anything: RemBERT (`rembert.gin`, with the T5X run files'
vocabulary padding) lowered under every data x model layout of the 8
simulated CPU devices, with our restatement of T5X's rules and, where T5X is
installed, with T5X's own partitioner and `TrainStateInitializer`; and the
divisibility arithmetic of every paper config at model parallelism 1-16.
"""

import dataclasses
import functools

import flax
import jax
import optax
import pytest

from rembert_t5x import configs
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import partitioning
from rembert_t5x import t5x_partitioning
from tests import test_utils

LAYOUTS_8 = [(8, 1), (4, 2), (2, 4), (1, 8)]  # (data, model)
SIZES = [1, 2, 4, 8, 16]
PAPER = sorted(
    (test_utils.REPO_ROOT / "gin_configs" / "models" / "paper").glob("*.gin"))
INPUT_SHAPES = {"input_tokens": (8, 16)}


def _pad(config):
  return dataclasses.replace(
      config, vocab_pad_multiple=partitioning.T5X_VOCAB_PAD_MULTIPLE)


@functools.lru_cache(maxsize=None)
def _config(gin_file) -> network.RemBertConfig:
  return configs.config_from_gin(str(gin_file))


def _model(config):
  return models.RemBertMLMModel(network.RemBertForMaskedLM(config))


def _abstract(config):
  """What T5X's TrainStateInitializer evaluates: the init's shapes."""
  variables = jax.eval_shape(
      lambda rng: _model(config).get_initial_variables(rng, INPUT_SHAPES),
      jax.random.PRNGKey(0))
  shapes = flax.traverse_util.flatten_dict(
      flax.core.unfreeze(variables["params"]), sep="/")
  return shapes, variables["params_axes"]


@functools.lru_cache(maxsize=None)
def _rembert():
  return _abstract(_pad(_config(PAPER[[p.name for p in PAPER].index(
      "rembert.gin")])))


@functools.lru_cache(maxsize=None)
def _init_fn(config):
  """Init of params + Adam moments; one function per config, so its trace is
  reused across layouts."""
  model = _model(config)
  tx = optax.adamw(1e-4)

  def init(rng):
    params = model.get_initial_variables(rng, INPUT_SHAPES)["params"]
    return params, tx.init(params)

  return init, jax.eval_shape(init, jax.random.PRNGKey(0))


def _lower_init(config, mesh, specs):
  """Lowers `_init_fn(config)` with `specs` as the params' out shardings."""
  init, abstract = _init_fn(config)
  shardings = jax.tree_util.tree_map(
      lambda spec: jax.sharding.NamedSharding(mesh, spec),
      flax.traverse_util.unflatten_dict(specs, sep="/"),
      is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  # Adam's moments mirror the params (T5X derives their axes the same way);
  # its step count is replicated.
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  opt = jax.tree_util.tree_map(lambda _: replicated, abstract[1])
  opt = (opt[0]._replace(mu=shardings, nu=shardings),) + tuple(opt[1:])
  with jax.set_mesh(mesh):
    return jax.jit(init, out_shardings=(shardings, opt)).lower(
        jax.random.PRNGKey(0))


def _mesh(data, model):
  assert jax.device_count() == 8, "tests/conftest.py simulates 8 CPU devices"
  mesh = t5x_partitioning.explicit_mesh(model)
  assert dict(mesh.shape) == {"data": data, "model": model}
  return mesh


@pytest.mark.parametrize("data,model", LAYOUTS_8)
def test_rembert_partitioned_init_lowers_under_t5x_standard_rules(data, model):
  shapes, params_axes = _rembert()
  rules = partitioning.logical_axis_rules()  # T5X's 1-D rules + ours
  specs = partitioning.mesh_partition_specs(params_axes, rules)
  assert partitioning.indivisible_dimensions(
      shapes, specs, {"data": data, "model": model}) == []
  # The 250,368-row vocabulary and the joined 1152-wide attention axis are
  # what model parallelism splits.
  word = "encoder/embeddings/word_embeddings/embedding"
  assert shapes[word].shape == (250368, 256)
  assert tuple(specs[word]) == ("model", None)
  assert tuple(specs["encoder/layers_0/attention/query/kernel"]) == (
      None, "model")
  # Raises IndivisibleError if any out sharding does not divide.
  _lower_init(_pad(_config(PAPER[[p.name for p in PAPER].index(
      "rembert.gin")])), _mesh(data, model), specs)


def test_lowering_catches_an_indivisible_layout():
  """The check is real: an unpadded 97-token vocabulary over 8 model shards
  fails at lowering exactly as T5X's partitioned init fails."""
  config = test_utils.TINY_CONFIG
  shapes, params_axes = _abstract(config)
  specs = partitioning.mesh_partition_specs(
      params_axes, partitioning.logical_axis_rules())
  problems = partitioning.indivisible_dimensions(
      shapes, specs, {"data": 1, "model": 8})
  assert any(p.startswith("encoder/embeddings/word_embeddings/embedding")
             for p in problems), problems
  with pytest.raises(ValueError, match="divisible|evenly divide"):
    _lower_init(config, _mesh(1, 8), specs)
  padded_shapes, padded_axes = _abstract(_pad(config))
  assert partitioning.indivisible_dimensions(
      padded_shapes, partitioning.mesh_partition_specs(
          padded_axes, partitioning.logical_axis_rules()),
      {"data": 1, "model": 8}) == []


@pytest.mark.parametrize("gin_file", PAPER, ids=lambda p: p.stem)
def test_every_paper_config_divides_at_model_1_to_16(gin_file):
  """Arithmetic over every (data, model) in {1..16}^2, 1-D and 2-D rules.

  Layers share their shapes, so one kept (and one pre-training-only) layer
  stands for all of them.
  """
  config = _config(gin_file)
  small = _pad(dataclasses.replace(
      config, num_layers=1,
      num_pretraining_only_layers=min(1, config.num_pretraining_only_layers)))
  shapes, params_axes = _abstract(small)
  for dims in (1, 2):
    specs = partitioning.mesh_partition_specs(
        params_axes, partitioning.logical_axis_rules(
            parameter_partitioning_dims=dims))
    for data in SIZES:
      for model in SIZES:
        problems = partitioning.indivisible_dimensions(
            shapes, specs, {"data": data, "model": model})
        assert problems == [], (gin_file.name, dims, data, model, problems)
  if config.padded_vocab_size % 16 or small.vocab_size % 16:
    # Without padding the vocabulary would not divide 16 model shards.
    unpadded_shapes, unpadded_axes = _abstract(dataclasses.replace(
        small, vocab_pad_multiple=1))
    assert partitioning.indivisible_dimensions(
        unpadded_shapes, partitioning.mesh_partition_specs(
            unpadded_axes, partitioning.logical_axis_rules()),
        {"data": 1, "model": 16})


def test_memory_per_device_of_rembert():
  """Params + Adam (3 float32 copies) per device, the table in docs/T5X.md."""
  shapes, params_axes = _rembert()
  gib = lambda dims, data, model: round(partitioning.bytes_per_device(
      shapes, partitioning.mesh_partition_specs(
          params_axes, partitioning.logical_axis_rules(
              parameter_partitioning_dims=dims)),
      {"data": data, "model": model}, copies=3) / 2**30, 2)
  assert gib(1, 1, 4) == 2.80
  assert gib(1, 1, 8) == 1.41
  assert gib(1, 1, 16) == 0.72
  assert gib(2, 8, 2) == 0.70
  # Without RemBERT's 2-D rules E_in / E_out would stay unsplit.
  t5x_only = (partitioning.standard_logical_axis_rules(
      parameter_partitioning_dims=2)
              + partitioning.rembert_additional_axis_rules(1))
  assert round(partitioning.bytes_per_device(
      shapes, partitioning.mesh_partition_specs(params_axes, t5x_only),
      {"data": 8, "model": 2}, copies=3) / 2**30, 2) == 3.05


# --- With the real T5X --------------------------------------------------------


def _t5x():
  return pytest.importorskip(
      "t5x.utils", reason="T5X is not installed (not on PyPI; see README): "
      "the partitioned init was checked with our restated rules only")


@pytest.mark.parametrize("act,param", [(1, 1), (1, 2), (2, 1), (2, 2)])
def test_restated_rules_equal_t5x(act, param):
  _t5x()
  from t5x import partitioning as t5x_partitioning_lib  # pylint: disable=g-import-not-at-top
  extra = partitioning.rembert_additional_axis_rules(param)
  assert (t5x_partitioning_lib.standard_logical_axis_rules(
      act, param, additional_rules=extra)
          == partitioning.standard_logical_axis_rules(act, param) + extra)


@pytest.mark.parametrize("data,model", LAYOUTS_8)
def test_rembert_partitioned_init_lowers_with_t5x(data, model):
  """T5X's TrainStateInitializer + PjitPartitioner, as `t5x.train` runs it
  (the pre-training optimizer, T5X's standard rules + ours), lowered."""
  utils = _t5x()
  from t5x import partitioning as t5x_partitioning_lib  # pylint: disable=g-import-not-at-top
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  config = _pad(_config(PAPER[[p.name for p in PAPER].index("rembert.gin")]))
  partitioner = t5x_partitioning.explicit_mesh_partitioner(
      model_parallelism=model,
      logical_axis_rules=t5x_partitioning_lib.standard_logical_axis_rules(
          additional_rules=partitioning.rembert_additional_axis_rules()))
  _mesh(data, model)
  model_obj = _model(config)
  initializer = utils.TrainStateInitializer(
      optimizer_def=t5x_export.make_optimizer("adamw"),
      init_fn=model_obj.get_initial_variables, input_shapes=INPUT_SHAPES,
      partitioner=partitioner)
  specs = flax.traverse_util.flatten_dict(
      flax.core.unfreeze(initializer.train_state_axes.params), sep="/")
  assert tuple(specs["encoder/embeddings/word_embeddings/embedding"]) == (
      "model", None)
  partitioned = partitioner.partition(
      initializer._initialize_train_state,  # pylint: disable=protected-access
      in_axis_resources=None,
      out_axis_resources=initializer.train_state_axes)
  partitioned.lower(jax.random.PRNGKey(0))  # IndivisibleError if not
  assert dict(partitioner.mesh.shape) == {"data": data, "model": model}
