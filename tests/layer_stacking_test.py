"""Scanned layers and rematerialisation: same numbers, convertible params.

`RemBertConfig.scan_layers` and `remat_policy` must change memory and
compile time only. Given the same weights (moved between layouts with
`layer_stacking`), every combination gives the loss and gradients of the
plain network, pre-training-only layers included; scanned checkpoints
convert to Hugging Face and initialise fine-tuning in either layout.
"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import common
from rembert_t5x import configs
from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x.convert import checkpoint_io
from rembert_t5x import layer_stacking
from rembert_t5x import models
from rembert_t5x import network
from tests import test_utils
from tests import tolerances

# One pre-training-only layer on top of two kept ones (paper Table 5).
CFG = dataclasses.replace(test_utils.TINY_CONFIG, num_pretraining_only_layers=1)
SCANNED = dataclasses.replace(CFG, scan_layers=True)


def _batch(seq_len=16):
  return {k: jnp.asarray(v) for k, v in
          common.synthetic_mlm_batch(2, seq_len, CFG.vocab_size).items()}


def _params(cfg=CFG, module=None):
  module = module or network.RemBertForMaskedLM(cfg)
  return test_utils.perturbed(jax.jit(module.init)(
      jax.random.PRNGKey(0), jnp.ones((2, 16), jnp.int32))["params"])


def _loss_and_grads(cfg, params, batch):
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(cfg),
                                 max_predictions_per_seq=4)
  fn = lambda p: model.loss_fn(p, batch)[0]
  # XLA's default CPU emitters (conftest turns them off for compile speed):
  # the bit-identity below is a property of that code generation (the
  # older emitters fuse the recomputed ops differently, one float32 ulp).
  return jax.jit(jax.value_and_grad(fn)).lower(params).compile(
      {"xla_cpu_use_fusion_emitters": True})(params)


def _leaves(tree):
  return dict(cc.flatten(jax.tree_util.tree_map(np.asarray, dict(tree))))


@pytest.fixture(scope="module")
def reference():
  """Batch, weights, and the plain network's loss and gradients."""
  batch, params = _batch(), _params()
  return batch, params, _loss_and_grads(CFG, params, batch)


# Scan alone, scan with full remat (the pod setting), scan with a dots
# policy, and remat without scan. Each case compiles its own step with
# XLA's default emitters (seconds); the two dots policies go through the
# same code (`network.REMAT_POLICIES` names jax's policy function), so one
# of them stands for both.
@pytest.mark.parametrize("scan,policy", [
    (True, "none"), (True, "full"), (True, "dots_with_no_batch_dims_saveable"),
    (False, "full")])
def test_same_loss_and_gradients_as_plain_network(reference, scan, policy):
  batch, params, (ref_loss, ref_grads) = reference
  cfg = dataclasses.replace(CFG, scan_layers=scan, remat_policy=policy)
  loss, grads = _loss_and_grads(cfg, layer_stacking.to_layout(params, cfg),
                                batch)
  # The forward pass is the same computation: the loss is bit-identical.
  assert float(loss) == float(ref_loss)
  got, want = _leaves(layer_stacking.unstack_layers(grads)), _leaves(ref_grads)
  assert set(got) == set(want)
  if scan:
    # The scanned backward pass sums the per-layer weight gradients in
    # another order: the tiny model's float32 gradient bound, normwise
    # (measured <= 2e-7 here); a mixed-up layer moves leaves by O(1).
    positions = int(batch["input_tokens"].size)
    length = batch["input_tokens"].shape[1]
    tolerances.assert_trees_close_normwise(
        got, want, tolerances.tiny_gradient_rtol(CFG, length, ("mlm",),
                                                 positions), positions)
    return
  for name in want:  # remat alone recomputes the same ops: bit-identical
    np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_scanned_tree_layout_and_axes():
  variables = network.RemBertForMaskedLM(SCANNED).init(
      jax.random.PRNGKey(0), jnp.ones((2, 8), jnp.int32))
  encoder = variables["params"]["encoder"]
  assert not any(k.startswith("layers_") for k in encoder)
  assert encoder["layers"]["mlp"]["wi"]["kernel"].shape == (2, 32, 64)
  assert encoder["pretraining_only_layers"]["mlp"]["wi"]["kernel"].shape == (
      1, 32, 64)
  axes = variables["params_axes"]["encoder"]["layers"]["attention"]["query"]
  assert axes["kernel_axes"].names == ("layers", "embed", "joined_kv")
  # Fine-tuning keeps the same `layers` stack (a T5X restore by name works).
  cls = network.RemBertForSequenceClassification(SCANNED, 2).init(
      jax.random.PRNGKey(0), jnp.ones((2, 8), jnp.int32))["params"]["encoder"]
  assert "pretraining_only_layers" not in cls
  assert cls["layers"]["mlp"]["wi"]["kernel"].shape == (2, 32, 64)


def test_stack_unstack_round_trip():
  flat = _params()
  stacked = layer_stacking.stack_layers(flat, CFG.num_layers)
  assert layer_stacking.is_scanned(stacked)
  assert not layer_stacking.is_scanned(flat)
  assert stacked["encoder"]["layers"]["mlp"]["wo"]["bias"].shape == (2, 32)
  np.testing.assert_array_equal(
      stacked["encoder"]["pretraining_only_layers"]["mlp"]["wo"]["bias"][0],
      flat["encoder"]["layers_2"]["mlp"]["wo"]["bias"])
  back = layer_stacking.unstack_layers(stacked)
  a, b = _leaves(back), _leaves(flat)
  assert set(a) == set(b)
  for name in a:
    np.testing.assert_array_equal(a[name], b[name])
  # Converting to the layout a tree already has changes nothing.
  assert layer_stacking.unstack_layers(flat)["encoder"].keys() == \
      flat["encoder"].keys()
  with pytest.raises(ValueError, match="cannot stack layers"):
    layer_stacking.stack_layers(flat, 4)


def test_finetuning_init_across_layouts():
  """A pre-trained encoder initialises fine-tuning in the other layout, with
  the pre-training-only layer dropped, and encodes the same."""
  tokens = _batch()["input_tokens"]
  plain, scanned = _params(), layer_stacking.to_layout(_params(), SCANNED)
  outputs = []
  for pretrained, ft_cfg in ((scanned, CFG), (plain, SCANNED)):
    head = network.RemBertForSequenceClassification(ft_cfg, 3)
    fresh = head.init(jax.random.PRNGKey(5), tokens)["params"]
    params = models.finetuning_params_from_pretraining(pretrained, fresh,
                                                       CFG.num_layers)
    assert layer_stacking.is_scanned(params) == ft_cfg.scan_layers
    assert "layers_2" not in params["encoder"]
    assert "pretraining_only_layers" not in params["encoder"]
    outputs.append(network.RemBertEncoder(ft_cfg).apply(
        {"params": params["encoder"]}, tokens))
  # Scanned vs unrolled encoder: its float32 forward bound, normwise.
  atol = tolerances.float32_chain_rtol(tolerances.tiny_network_reductions(
      CFG, tokens.shape[1], (None,))) * float(np.abs(outputs[1]).max())
  np.testing.assert_allclose(outputs[0], outputs[1], rtol=0, atol=atol)


def test_unstacked_source_reads_scanned_checkpoint_per_layer():
  flat, scanned = _leaves(_params()), _leaves(
      layer_stacking.stack_layers(_params(), CFG.num_layers))
  source = layer_stacking.per_layer_source(cc.DictSource(scanned))
  assert isinstance(source, layer_stacking.UnstackedSource)
  assert sorted(source.names()) == sorted(flat)
  for name in flat:
    assert source.shape(name) == flat[name].shape, name
    np.testing.assert_array_equal(source.get(name), flat[name])
  plain = cc.DictSource(flat)
  assert layer_stacking.per_layer_source(plain) is plain


def test_scanned_checkpoint_converts_to_the_same_hf_tensors(tmp_path):
  """t5x-to-hf of a scanned checkpoint writes what the unscanned one gives."""
  params = _params()
  for name, tree, cfg in (("plain", params, CFG), ("scanned", layer_stacking
                          .stack_layers(params, CFG.num_layers), SCANNED)):
    out = tmp_path / name
    checkpoint_io.write_orbax_params(out, iter(_leaves(tree).items()))
    configs.write_checkpoint_config(out, cfg)
    checkpoint_io.t5x_to_hf(str(out), str(tmp_path / f"{name}_hf"))
  safetensors = pytest.importorskip("safetensors.numpy")
  plain = safetensors.load_file(tmp_path / "plain_hf" / "model.safetensors")
  scanned = safetensors.load_file(tmp_path / "scanned_hf" / "model.safetensors")
  assert set(plain) == set(scanned)
  assert "rembert.encoder.layer.2.output.dense.weight" in plain  # the extra one
  for name in plain:
    np.testing.assert_array_equal(plain[name], scanned[name], err_msg=name)
  hf_configs = [json.loads((tmp_path / f"{n}_hf" / "config.json").read_text())
                for n in ("plain", "scanned")]
  assert (hf_configs[0] == hf_configs[1]
          and hf_configs[0]["num_hidden_layers"] == 3)


@pytest.mark.parametrize("changes,message", [
    (dict(remat_policy="dots"), r"RemBertConfig.remat_policy must be one of"),
    (dict(scan_layers="yes"), r"RemBertConfig.scan_layers must be True or"),
])
def test_config_errors_name_the_field(changes, message):
  with pytest.raises(ValueError, match=message):
    dataclasses.replace(CFG, **changes)
