"""The pure name/shape maps: TF names, configs, heads, vocabulary padding.

HF numerics are covered by `network_hf_parity_test.py`; the end-to-end file
conversions by `convert_checkpoint_test.py`.
"""

import json

import jax
import numpy as np
import pytest

from rembert_t5x import configs
from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x import network
from tests import test_utils


def test_tf_map_matches_the_recorded_full_size_table():
  config = configs.config_from_gin("gin_configs/models/paper/rembert.gin")
  recorded = test_utils.recorded_tf_variables()["encoder"]
  entries = cc.tf_name_map(config)
  ours = {e.hf: cc.external_shape(e) for e in entries}
  assert ours == recorded
  assert len(entries) == 7 + 32 * 16
  # Every parameter of our fine-tuning encoder is covered exactly once.
  init_shapes = jax.eval_shape(
      lambda: network.RemBertEncoder(config).init(
          jax.random.PRNGKey(0), np.zeros((1, 4), np.int32)))["params"]
  flat = cc.flatten(init_shapes)
  assert {f"encoder/{k}" for k in flat} == {e.ours for e in entries}
  for e in entries:
    assert tuple(flat[e.ours[len("encoder/"):]].shape) == e.shape, e.ours


def test_tf_skip_reasons():
  tables = test_utils.recorded_tf_variables()
  for name in tables["encoder"]:
    assert cc.tf_variable_skip_reason(name) is None, name
    assert cc.tf_variable_skip_reason(f"{name}/adam_m") == "optimizer state"
    assert cc.tf_variable_skip_reason(f"{name}/adam_v") == "optimizer state"
  for name in tables["mlm_head"]:
    assert cc.tf_variable_skip_reason(name) == "MLM head (output embedding)"
  for name in tables["pooler"]:
    assert cc.tf_variable_skip_reason(name) == "pooler"
  assert cc.tf_variable_skip_reason("global_step") == "optimizer state"


def test_tf_kernels_are_ours_unchanged():
  """TF1 kernels are [in, out] with heads x head_dim joined, as ours."""
  cfg = test_utils.TINY_CONFIG
  entries = {e.ours: e for e in cc.tf_name_map(cfg)}
  h, joined = cfg.emb_dim, cfg.num_heads * cfg.head_dim
  rng = np.random.default_rng(0)
  tensors = {"q": rng.normal(size=(h, joined)).astype(np.float32),
             "o": rng.normal(size=(joined, h)).astype(np.float32),
             "wi": rng.normal(size=(h, cfg.mlp_dim)).astype(np.float32)}
  pick = lambda path, name: cc.dataclasses.replace(entries[path], hf=name)
  picked = [pick("encoder/layers_0/attention/query/kernel", "q"),
            pick("encoder/layers_0/attention/out/kernel", "o"),
            pick("encoder/layers_0/mlp/wi/kernel", "wi")]
  converted = dict(cc.iter_to_ours(cc.DictSource(tensors), picked,
                                   source_name="t"))
  for e in picked:
    np.testing.assert_array_equal(converted[e.ours], tensors[e.hf])


def test_hf_attention_kernels_transpose_into_heads_major_joined_axis():
  """Our joined axis is HF's output axis: head i is columns i*d:(i+1)*d."""
  cfg = test_utils.TINY_CONFIG
  entries = {e.ours: e for e in cc.hf_name_map(cfg, cc.Head.ENCODER)}
  n, d, h = cfg.num_heads, cfg.head_dim, cfg.emb_dim
  rng = np.random.default_rng(0)
  hf_q = rng.normal(size=(n * d, h)).astype(np.float32)  # nn.Linear [out, in]
  e = cc.dataclasses.replace(entries["encoder/layers_0/attention/query/kernel"],
                             hf="q")
  ours = dict(cc.iter_to_ours(cc.DictSource({"q": hf_q}), [e],
                              source_name="t"))[e.ours]
  x = rng.normal(size=(3, h))
  # HF splits heads as view(..., heads, head_dim) of x @ W^T. In float64:
  # the test is about the layout, and float32 products in two BLAS orders
  # may differ by ~h * u * sum|terms| (~1e-4 here), machine by machine.
  ours64, hf_q64 = np.asarray(ours, np.float64), hf_q.astype(np.float64)
  np.testing.assert_allclose((x @ ours64).reshape(3, n, d),
                             (x @ hf_q64.T).reshape(3, n, d), atol=1e-9)
  back = dict(cc.iter_from_ours(cc.DictSource({e.ours: ours}), [e]))
  np.testing.assert_array_equal(back["q"], hf_q)


def test_hf_config_round_trip_for_every_paper_size():
  for gin_file in sorted((test_utils.REPO_ROOT / "gin_configs/models/paper").glob("*.gin")):
    config = configs.config_from_gin(str(gin_file))
    if config.tie_embeddings or config.input_embed_dim == config.emb_dim:
      with pytest.raises(ValueError):
        cc.hf_config_dict(config, cc.Head.MASKED_LM)
        cc.hf_name_map(config, cc.Head.MASKED_LM)
      continue
    as_hf = cc.hf_config_dict(config, cc.Head.ENCODER)
    back = cc.config_from_hf(json.loads(json.dumps(as_hf)), "x")
    assert cc.config_mismatch(back, config) is None, gin_file
    assert back.layer_norm_epsilon == config.layer_norm_epsilon


def test_hf_config_errors_name_file_and_field():
  good = cc.hf_config_dict(test_utils.TINY_CONFIG, cc.Head.MASKED_LM)
  with pytest.raises(ValueError, match=r"c\.json: model_type is 'bert', not 'rembert'"):
    cc.config_from_hf({**good, "model_type": "bert"}, "c.json")
  with pytest.raises(ValueError, match=r"hidden_act 'relu'"):
    cc.config_from_hf({**good, "hidden_act": "relu"}, "c.json")
  missing = dict(good)
  del missing["intermediate_size"]
  with pytest.raises(ValueError, match=r"c\.json: missing field 'intermediate_size'"):
    cc.config_from_hf(missing, "c.json")
  with pytest.raises(ValueError, match="not divisible"):
    cc.config_from_hf({**good, "num_attention_heads": 5}, "c.json")


@pytest.mark.parametrize("kind,head,classes", [
    ("mlm", cc.Head.MASKED_LM, None),
    ("pair", cc.Head.SEQUENCE_CLASSIFICATION, 3),
    ("tagging", cc.Head.TOKEN_CLASSIFICATION, 5),
    ("qa", cc.Head.QUESTION_ANSWERING, None),
])
def test_head_from_initialised_params(kind, head, classes):
  from rembert_t5x import models  # pylint: disable=g-import-not-at-top
  cfg = test_utils.TINY_CONFIG
  module = models.make_module(kind, cfg, classes)
  shapes = jax.eval_shape(lambda: module.init(
      jax.random.PRNGKey(0), np.zeros((1, 4), np.int32)))["params"]
  flat = {k: tuple(v.shape) for k, v in cc.flatten(shapes).items()}
  assert cc.head_from_params(flat) == (head, classes)
  # The HF names of that head are recognised from the HF side too.
  hf_names = [e.hf for e in cc.hf_name_map(cfg, head, num_classes=classes)]
  assert cc.head_from_hf_names(hf_names)[0] == head


class _CountingSource(cc.DictSource):
  """A real in-memory source that counts tensor reads."""

  def __init__(self, tensors):
    super().__init__(tensors)
    self.reads = 0

  def get(self, name):
    self.reads += 1
    return super().get(name)


def _tiny_hf_tensors(cfg=test_utils.TINY_CONFIG, vocab=None):
  rng = np.random.default_rng(0)
  entries = cc.hf_name_map(cfg, cc.Head.MASKED_LM)
  return {name: rng.normal(size=shape).astype(np.float32)
          for name, shape in cc.external_specs(entries, vocab)}


def test_all_names_and_shapes_are_checked_before_any_read():
  cfg = test_utils.TINY_CONFIG
  entries = cc.hf_name_map(cfg, cc.Head.MASKED_LM)
  tensors = _tiny_hf_tensors()
  tensors["cls.predictions.decoder.bias"] = np.zeros(5, np.float32)  # last entry
  source = _CountingSource(tensors)
  with pytest.raises(ValueError, match=r"'cls\.predictions\.decoder\.bias' has shape \(5,\), expected \(97,\)"):
    list(cc.iter_to_ours(source, entries, source_name="s"))
  assert source.reads == 0


def test_vocabulary_padding_is_stripped_and_restored():
  cfg = test_utils.TINY_CONFIG  # 97 tokens
  entries = cc.hf_name_map(cfg, cc.Head.MASKED_LM)
  padded = _tiny_hf_tensors(vocab=128)
  with pytest.raises(ValueError, match=r"word_embeddings\.weight' has shape \(128, 16\), expected \(97, 16\)"):
    cc.hf_to_flat_params(padded, entries)
  ours = dict(cc.iter_to_ours(cc.DictSource(padded), entries, source_name="s",
                              source_vocab_size=128))
  assert ours["encoder/embeddings/word_embeddings/embedding"].shape == (97, 16)
  assert ours["mlm_head/decoder/kernel"].shape == (24, 97)
  assert ours["mlm_head/decoder/bias"].shape == (97,)
  np.testing.assert_array_equal(
      ours["mlm_head/decoder/kernel"],
      padded["cls.predictions.decoder.weight"][:97].T)
  back = dict(cc.iter_from_ours(cc.DictSource(ours), entries,
                                target_vocab_size=128))
  for name in ("rembert.embeddings.word_embeddings.weight",
               "cls.predictions.decoder.weight", "cls.predictions.decoder.bias"):
    assert back[name].shape[0] == 128
    np.testing.assert_array_equal(back[name][:97], padded[name][:97])
    assert not back[name][97:].any()  # restored padding rows are zeros
  for name, value in back.items():
    if name not in ("rembert.embeddings.word_embeddings.weight",
                    "cls.predictions.decoder.weight",
                    "cls.predictions.decoder.bias"):
      np.testing.assert_array_equal(value, padded[name])


def test_padded_config_appends_zero_rows_and_strips_them_exactly():
  """HF (real vocabulary) -> ours padded to 128 rows -> HF is bit-exact."""
  cfg = cc.dataclasses.replace(test_utils.TINY_CONFIG, vocab_pad_multiple=128)
  for head, vocab_names in [
      (cc.Head.MASKED_LM, ("rembert.embeddings.word_embeddings.weight",
                           "cls.predictions.decoder.weight",
                           "cls.predictions.decoder.bias")),
      (cc.Head.ENCODER, ("rembert.embeddings.word_embeddings.weight",))]:
    entries = cc.hf_name_map(cfg, head)
    rng = np.random.default_rng(0)
    hf = {name: rng.normal(size=shape).astype(np.float32)
          for name, shape in cc.external_specs(entries)}
    for name in vocab_names:
      assert hf[name].shape[0] == 97, name
    ours = cc.hf_to_flat_params(hf, entries)
    for e in entries:
      assert ours[e.ours].shape == e.shape, e.ours
    emb = ours["encoder/embeddings/word_embeddings/embedding"]
    assert emb.shape == (128, 16) and not emb[97:].any()
    np.testing.assert_array_equal(emb[:97], hf[vocab_names[0]])
    if head == cc.Head.MASKED_LM:
      assert ours["mlm_head/decoder/kernel"].shape == (24, 128)
      assert not ours["mlm_head/decoder/kernel"][:, 97:].any()
      assert not ours["mlm_head/decoder/bias"][97:].any()
    back = cc.flat_params_to_hf(ours, entries)
    assert set(back) == set(hf)
    for name, value in hf.items():
      np.testing.assert_array_equal(back[name], value, err_msg=name)
  # The TF map pads the same way.
  tf_entries = cc.tf_name_map(cfg)
  word = [e for e in tf_entries if e.ours.endswith("word_embeddings/embedding")]
  assert cc.external_shape(word[0]) == (97, 16) and word[0].shape == (128, 16)


def test_resize_vocab_params_moves_between_paddings():
  flat = {"encoder/embeddings/word_embeddings/embedding": np.ones((97, 4)),
          "mlm_head/decoder/kernel": np.ones((3, 97)),
          "mlm_head/decoder/bias": np.ones((97,)),
          "encoder/embeddings/position_embeddings/embedding": np.ones((9, 4))}
  padded = cc.resize_vocab_params(flat, 128)
  assert padded["encoder/embeddings/word_embeddings/embedding"].shape == (128, 4)
  assert padded["mlm_head/decoder/kernel"].shape == (3, 128)
  assert not padded["mlm_head/decoder/bias"][97:].any()
  assert padded["encoder/embeddings/position_embeddings/embedding"].shape == (9, 4)
  back = cc.resize_vocab_params(padded, 97)
  for name, value in flat.items():
    np.testing.assert_array_equal(back[name], value)


def _old_flatten(tree, prefix=""):
  """The hand-written flatten that `cc.flatten` replaced (reference)."""
  out = {}
  for k, v in tree.items():
    path = f"{prefix}/{k}" if prefix else str(k)
    if isinstance(v, dict) or hasattr(v, "items"):
      out.update(_old_flatten(v, path))
    else:
      out[path] = v
  return out


@pytest.mark.parametrize("scan_layers", [False, True])
def test_flatten_and_unflatten_match_the_hand_written_helpers(scan_layers):
  """flax.traverse_util gives the old names, order and leaves, both ways."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import flax  # pylint: disable=g-import-not-at-top
  config = dataclasses.replace(test_utils.TINY_CONFIG,
                               scan_layers=scan_layers)
  model = network.RemBertForMaskedLM(config)
  ids = np.zeros((1, 8), np.int32)
  params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), ids,
                                             ids))["params"]
  for tree in (flax.core.unfreeze(params), flax.core.freeze(params)):
    flat = cc.flatten(tree)
    old = _old_flatten(tree)
    assert list(flat) == list(old)
    assert all(flat[k] is old[k] for k in old)
    assert flax.core.unfreeze(cc.unflatten(flat)) == flax.core.unfreeze(tree)
