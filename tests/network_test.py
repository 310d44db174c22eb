"""Structure, axes and config validation of the network."""

import dataclasses
import json
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rembert_t5x import network
from rembert_t5x import partitioning
from rembert_t5x.common import errors
from tests import test_utils
from tests import tolerances

GOLDEN = test_utils.REPO_ROOT / "tests" / "testdata" / "tiny_params_golden.json"
HEADS = {
    "masked_lm": lambda c: network.RemBertForMaskedLM(c),
    "sequence_classification":
        lambda c: network.RemBertForSequenceClassification(c, num_classes=3),
    "token_classification":
        lambda c: network.RemBertForTokenClassification(c, num_classes=5),
    "question_answering": lambda c: network.RemBertForQuestionAnswering(c),
}


def _init(module, length=8):
  tokens = jnp.ones((2, length), jnp.int32)
  return jax.jit(module.init)(jax.random.PRNGKey(0), tokens)


def _describe(variables):
  """{path: {"shape", "dtype", "axes"}} for every parameter."""
  params = flax.traverse_util.flatten_dict(variables["params"], sep="/")
  axes = flax.traverse_util.flatten_dict(variables["params_axes"], sep="/")
  out = {}
  for path, value in sorted(params.items()):
    meta = axes.get(path + "_axes")
    out[path] = {
        "shape": list(value.shape),
        "dtype": str(value.dtype),
        "axes": list(meta.names) if meta is not None else None,
    }
  return out


@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("config", [
    test_utils.TINY_CONFIG, test_utils.TINY_COUPLED_CONFIG,
    # Scanned layers carry a leading "layers" axis (T5X's name) as well.
    dataclasses.replace(test_utils.TINY_CONFIG, scan_layers=True,
                        remat_policy="full", num_pretraining_only_layers=1)],
    ids=["decoupled", "coupled", "scanned"])
def test_every_parameter_has_axes_with_rules(head, config):
  described = _describe(_init(HEADS[head](config)))
  missing = [p for p, d in described.items() if d["axes"] is None]
  assert not missing, f"parameters without logical axes: {missing}"
  for path, d in described.items():
    assert len(d["axes"]) == len(d["shape"]), path
  names = {a for d in described.values() for a in d["axes"]}
  assert partitioning.axis_names_without_rule(names) == []


def test_axis_rules_flag_unknown_names():
  assert partitioning.axis_names_without_rule(["embed", "embd"]) == ["embd"]


def test_params_golden():
  """Pins every parameter's name, shape, dtype and axes for the tiny config.

  Regenerate after an intended change with
  `REGENERATE_GOLDENS=1 python -m pytest tests/network_test.py`.
  """
  describe = lambda module: {
      path: f"{d['shape']} {d['dtype']} {d['axes']}"
      for path, d in _describe(_init(module)).items()}
  actual = {head: describe(make(test_utils.TINY_CONFIG))
            for head, make in sorted(HEADS.items())}
  # The padded layout: 97 vocabulary rows stored as 128.
  actual["masked_lm_vocab_pad_multiple_128"] = describe(
      network.RemBertForMaskedLM(dataclasses.replace(
          test_utils.TINY_CONFIG, vocab_pad_multiple=128)))
  if os.environ.get("REGENERATE_GOLDENS"):
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
  expected = json.loads(GOLDEN.read_text())
  assert actual == expected


def test_decoupled_widths_and_projection():
  params = _init(network.RemBertForMaskedLM(test_utils.TINY_CONFIG))["params"]
  c = test_utils.TINY_CONFIG
  emb = params["encoder"]["embeddings"]
  assert emb["word_embeddings"]["embedding"].shape == (c.vocab_size, c.input_embed_dim)
  assert params["encoder"]["embedding_projection"]["kernel"].shape == (c.input_embed_dim, c.emb_dim)
  assert params["mlm_head"]["dense"]["kernel"].shape == (c.emb_dim, c.output_embed_dim)
  assert params["mlm_head"]["decoder"]["kernel"].shape == (c.output_embed_dim, c.vocab_size)


def test_initializer_range_scales_every_kernel_and_table():
  # Every kernel and embedding table is drawn with the config's standard
  # deviation (truncated at 2 std: the sample std is ~0.88 of it); biases
  # start at zero and LayerNorm scales at one whatever the range.
  def stds(initializer_range):
    config = dataclasses.replace(test_utils.TINY_CONFIG,
                                 initializer_range=initializer_range)
    params = flax.traverse_util.flatten_dict(_init(
        network.RemBertForQuestionAnswering(config))["params"], sep="/")
    return {k: float(np.std(v)) for k, v in params.items()}
  small, large = stds(0.02), stds(0.1)
  weights = [k for k in small if k.endswith(("kernel", "embedding"))]
  assert len(weights) > 10 and any("word_embeddings" in k for k in weights)
  for k in weights:
    if "token_type" in k:  # 2 x 16 values: too few for a tight estimate
      continue
    assert 0.7 * 0.02 < small[k] < 1.0 * 0.02, k
    assert large[k] == pytest.approx(5 * small[k], rel=0.3), k
  assert all(large[k] == small[k] for k in small if k not in weights)


def test_coupled_mode_has_no_projection_and_no_decoder_matrix():
  params = _init(network.RemBertForMaskedLM(test_utils.TINY_COUPLED_CONFIG))["params"]
  assert "embedding_projection" not in params["encoder"]
  assert set(params["mlm_head"]) == {"dense", "layer_norm", "decoder_bias"}


def test_pretraining_only_layers_exist_only_in_pretraining():
  c = dataclasses.replace(test_utils.TINY_CONFIG, num_pretraining_only_layers=3)
  mlm = _init(network.RemBertForMaskedLM(c))["params"]["encoder"]
  cls = _init(network.RemBertForSequenceClassification(c, 2))["params"]["encoder"]
  assert sorted(k for k in mlm if k.startswith("layers_")) == [f"layers_{i}" for i in range(5)]
  assert sorted(k for k in cls if k.startswith("layers_")) == ["layers_0", "layers_1"]


def test_packed_segments_do_not_attend_to_each_other():
  """A packed row gives the same outputs as its segments run separately."""
  c = test_utils.TINY_CONFIG
  model = network.RemBertEncoder(c)
  variables = _init(model, length=10)
  rng = np.random.default_rng(0)
  a, b = rng.integers(5, c.vocab_size, 6), rng.integers(5, c.vocab_size, 4)
  packed = jax.jit(model.apply)(
      variables, jnp.asarray(np.concatenate([a, b])[None]),
      segment_ids=jnp.asarray([[1] * 6 + [2] * 4]),
      positions=jnp.asarray([list(range(6)) + list(range(4))]))
  alone_a = jax.jit(model.apply)(variables, jnp.asarray(a[None]))
  alone_b = jax.jit(model.apply)(variables, jnp.asarray(b[None]))
  # The float32 forward bound of the encoder at length 10, relative to the
  # outputs' scale (~3): 3e-4; segments attending to each other move them by
  # ~9e-3.
  atol = tolerances.float32_chain_rtol(tolerances.tiny_network_reductions(
      c, 10, (None,))) * float(np.abs(alone_a).max())
  np.testing.assert_allclose(packed[0, :6], alone_a[0], atol=atol)
  np.testing.assert_allclose(packed[0, 6:], alone_b[0], atol=atol)


def test_padding_does_not_change_real_positions():
  c = test_utils.TINY_CONFIG
  model = network.RemBertEncoder(c)
  variables = _init(model)
  tokens = jnp.asarray([[7, 8, 9, 10, 0, 0, 0, 0]])
  short = jax.jit(model.apply)(variables, tokens[:, :4])
  padded = jax.jit(model.apply)(variables, tokens)
  atol = tolerances.float32_chain_rtol(tolerances.tiny_network_reductions(
      c, 8, (None,))) * float(np.abs(short).max())  # as above
  np.testing.assert_allclose(padded[0, :4], short[0], atol=atol)


def test_bfloat16_activations():
  c = dataclasses.replace(test_utils.TINY_CONFIG, dtype="bfloat16")
  model = network.RemBertForMaskedLM(c)
  variables = _init(model)
  assert all(x.dtype == jnp.float32 for x in jax.tree_util.tree_leaves(variables["params"]))
  logits = jax.jit(model.apply)(variables, jnp.ones((2, 8), jnp.int32))
  assert logits.dtype == jnp.bfloat16
  assert bool(jnp.all(jnp.isfinite(logits.astype(jnp.float32))))


def test_dropout_only_when_enabled():
  c = dataclasses.replace(test_utils.TINY_CONFIG, dropout_rate=0.5)
  model = network.RemBertForMaskedLM(c)
  variables = _init(model)
  tokens = jnp.ones((2, 8), jnp.int32)
  det1 = model.apply(variables, tokens)
  det2 = model.apply(variables, tokens)
  np.testing.assert_array_equal(det1, det2)
  drop = model.apply(variables, tokens, enable_dropout=True,
                     rngs={"dropout": jax.random.PRNGKey(1)})
  assert not np.allclose(drop, det1)


@pytest.mark.parametrize("changes,message", [
    (dict(num_heads=3), r"num_heads \* head_dim = 3 \* 8 = 24 must equal emb_dim \(H\) = 32"),
    (dict(tie_embeddings=True), r"tie_embeddings=True \(coupled mode\) needs input_embed_dim == output_embed_dim, got 16 and 24"),
    (dict(vocab_size=0), r"RemBertConfig.vocab_size must be a positive integer"),
    (dict(dropout_rate=1.5), r"RemBertConfig.dropout_rate must be in \[0, 1\)"),
    (dict(dtype="float33"), r"RemBertConfig.dtype: unknown dtype"),
    (dict(num_layers=object()), r"RemBertConfig.num_layers is required but was not set"),
    (dict(vocab_pad_multiple=0), r"RemBertConfig.vocab_pad_multiple must be a positive integer"),
    (dict(initializer_range=0.0), r"RemBertConfig.initializer_range must be a positive number, got 0.0"),
    (dict(initializer_range=True), r"RemBertConfig.initializer_range must be a positive number, got True"),
    (dict(attention_implementation="flash"), r"RemBertConfig.attention_implementation must be one of \('auto', 'einsum', 'xla', 'cudnn'\), got 'flash'"),
])
def test_config_errors_name_the_field(changes, message):
  with pytest.raises(ValueError, match=message):
    dataclasses.replace(test_utils.TINY_CONFIG, **changes)


# --- Sentence retrieval: an intermediate layer, pooled ----------------------

DEEP = dataclasses.replace(test_utils.TINY_CONFIG, num_layers=6)


def test_xtreme_retrieval_layer():
  # XTREME: layer 8 of 12 (mBERT, XLM-R base), 14 of 24 (XLM-R large).
  assert [network.xtreme_retrieval_layer(n) for n in (12, 24, 32, 6, 2)] == [
      8, 14, 18, 5, 2]


def test_retrieval_reads_only_the_layers_it_runs():
  variables = _init(network.RemBertForRetrieval(DEEP, layer=3))
  described = _describe(variables)
  assert all(d["axes"] is not None for d in described.values())
  layers = sorted(k for k in variables["params"]["encoder"]
                  if k.startswith("layers_"))
  assert layers == ["layers_0", "layers_1", "layers_2"]
  assert set(variables["params"]) == {"encoder"}  # no head


def test_retrieval_pools_the_hidden_states_of_its_layer():
  full = network.RemBertEncoder(DEEP)
  tokens = jnp.array([[2, 11, 12, 13, 3, 0, 0], [2, 21, 3, 0, 0, 0, 0]])
  variables = jax.jit(full.init)(jax.random.PRNGKey(0), tokens)
  shallow = network.RemBertEncoder(dataclasses.replace(DEEP, num_layers=3))
  # The same first layers:
  hidden3 = np.asarray(jax.jit(shallow.apply)(variables, tokens))
  real = np.asarray(tokens != 0, np.float32)[..., None]
  # The encoder's float32 forward bound at length 11 (the mean's terms
  # included), relative to the hidden states' scale (normwise).
  atol = tolerances.float32_chain_rtol(tolerances.tiny_network_reductions(
      DEEP, 11, (None,), loss_positions=11)) * float(np.abs(hidden3).max())
  expected = (hidden3 * real).sum(1) / real.sum(1)
  # The full encoder's parameters (layers 3-5 unused) restore into it.
  mean = jax.jit(network.RemBertForRetrieval(DEEP, layer=3).apply)(
      {"params": {"encoder": variables["params"]}}, tokens)
  np.testing.assert_allclose(mean, expected, rtol=0, atol=atol)
  cls = jax.jit(network.RemBertForRetrieval(DEEP, layer=3,
                                            pooling="cls").apply)(
      {"params": {"encoder": variables["params"]}}, tokens)
  np.testing.assert_allclose(cls, hidden3[:, 0], rtol=0, atol=atol)
  # Padding does not change an embedding.
  padded = jnp.pad(tokens, ((0, 0), (0, 4)))
  again = jax.jit(network.RemBertForRetrieval(DEEP, layer=3).apply)(
      {"params": {"encoder": variables["params"]}}, padded)
  np.testing.assert_allclose(again, mean, rtol=0, atol=atol)
  # The default layer is XTREME's L/2 + 2 = 5 of 6.
  default = jax.jit(network.RemBertForRetrieval(DEEP).apply)(
      {"params": {"encoder": variables["params"]}}, tokens)
  hidden5 = np.asarray(jax.jit(network.RemBertEncoder(
      dataclasses.replace(DEEP, num_layers=5)).apply)(variables, tokens))
  np.testing.assert_allclose(default, (hidden5 * real).sum(1) / real.sum(1),
                             rtol=0, atol=atol)


@pytest.mark.parametrize("module,message", [
    (network.RemBertForRetrieval(DEEP, layer=7),
     r"RemBertForRetrieval.layer must be an integer in \[1, 6\].*got 7"),
    (network.RemBertForRetrieval(DEEP, layer=0),
     r"RemBertForRetrieval.layer must be an integer in \[1, 6\].*got 0"),
    (network.RemBertForRetrieval(DEEP, pooling="max"),
     r"RemBertForRetrieval.pooling must be 'mean' or 'cls', got 'max'"),
    (network.RemBertEncoder(DEEP, stop_after_layer=9),
     r"RemBertEncoder.stop_after_layer must be an integer in \[1, 6\]"),
])
def test_retrieval_errors_name_the_field(module, message):
  with pytest.raises(ValueError, match=message):
    _init(module)


def test_sequences_longer_than_the_position_table_are_refused_when_traced():
  model = network.RemBertEncoder(test_utils.TINY_CONFIG)
  variables = _init(model)
  table = test_utils.TINY_CONFIG.max_position_embeddings
  assert model.apply(variables, jnp.ones((1, table), jnp.int32)).shape == (
      1, table, test_utils.TINY_CONFIG.emb_dim)
  too_long = jnp.ones((1, table + 1), jnp.int32)
  for run in (model.apply, jax.jit(model.apply)):
    with pytest.raises(errors.UserError,
                       match=f"sequences of {table + 1} tokens are longer "
                       f"than the model's position table \\({table} rows"):
      run(variables, too_long)
