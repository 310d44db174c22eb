"""Numerical parity with Hugging Face RemBERT / BERT on random weights.

Hugging Face `transformers` is an independent implementation of the same
architecture. Every parameter (biases and LayerNorms included) is drawn at
random, loaded into our tree through the explicit map in
`checkpoint_conversion`, and the outputs must agree to 1e-5 in float32 with
padding and token types exercised.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x import network
from tests import test_utils

torch = test_utils.LazyModule("torch")
transformers = test_utils.LazyModule("transformers")

jax.config.update("jax_default_matmul_precision", "highest")


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
  torch.set_num_threads(1)


def _state_dict(model):
  return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def _our_params(model, cfg, head, num_classes=None, flavour="rembert",
                ignore=()):
  entries = cc.hf_name_map(cfg, head, num_classes=num_classes,
                           flavour=flavour)
  flat = cc.hf_to_flat_params(_state_dict(model), entries,
                              ignore_unused=ignore)
  return {"params": jax.tree_util.tree_map(jnp.asarray, cc.unflatten(flat))}


def _check_masked_lm_logits(cfg):
  """Our MLM logits equal a randomised HF RemBertForMaskedLM's."""
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(cfg)))
  ids, types, mask = test_utils.hf_inputs(cfg)
  variables = _our_params(hf, cfg, cc.Head.MASKED_LM)
  ours = network.RemBertForMaskedLM(cfg).apply(
      variables, jnp.asarray(ids), jnp.asarray(types),
      jnp.asarray(mask, jnp.int32))
  test_utils.assert_close_to_hf(
      ours, test_utils.run_hf(hf, ids, types, mask).logits, mask)


def test_masked_lm_logits_match_hf():
  _check_masked_lm_logits(test_utils.TINY_CONFIG)


def test_masked_lm_gathered_positions_equal_full_logits():
  cfg = test_utils.TINY_CONFIG
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(cfg)))
  ids, types, mask = test_utils.hf_inputs(cfg)
  variables = _our_params(hf, cfg, cc.Head.MASKED_LM)
  model = network.RemBertForMaskedLM(cfg)
  positions = jnp.array([[0, 3, 5], [1, 2, 6], [0, 1, 3]])
  full = model.apply(variables, jnp.asarray(ids), jnp.asarray(types),
                     jnp.asarray(mask, jnp.int32))
  gathered = model.apply(variables, jnp.asarray(ids), jnp.asarray(types),
                         jnp.asarray(mask, jnp.int32),
                         masked_positions=positions)
  expected = np.take_along_axis(np.asarray(full), np.asarray(positions)[..., None], 1)
  np.testing.assert_allclose(gathered, expected, atol=1e-6)


@pytest.mark.parametrize("coupled", [False, True])
def test_padded_vocabulary_matches_hf(coupled):
  """97 tokens stored as 128 rows: real logits equal HF's, padded ones are
  the most negative number (never predicted), gathered or not."""
  base = test_utils.TINY_COUPLED_CONFIG if coupled else test_utils.TINY_CONFIG
  cfg = network.RemBertConfig(**{**base.__dict__, "vocab_pad_multiple": 128})
  assert cfg.padded_vocab_size == 128
  if coupled:
    bert_cfg = transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.emb_dim,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.mlp_dim, hidden_act="gelu",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size, layer_norm_eps=1e-12,
        pad_token_id=0, attn_implementation="eager")
    hf = test_utils.randomise_hf(transformers.BertForMaskedLM(bert_cfg))
    variables = _our_params(hf, cfg, cc.Head.MASKED_LM, flavour="bert",
                            ignore=("cls.predictions.decoder.",))
  else:
    hf = test_utils.randomise_hf(
        transformers.RemBertForMaskedLM(test_utils.hf_config(cfg)))
    variables = _our_params(hf, cfg, cc.Head.MASKED_LM)
  ids, types, mask = test_utils.hf_inputs(cfg)
  model = network.RemBertForMaskedLM(cfg)
  args = (jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask, jnp.int32))
  ours = np.asarray(model.apply(variables, *args))
  assert ours.shape == (test_utils.HF_BATCH, test_utils.HF_LENGTH, 128)
  test_utils.assert_close_to_hf(
      ours[..., :97], test_utils.run_hf(hf, ids, types, mask).logits, mask)
  assert np.all(ours[..., 97:] == np.finfo(np.float32).min)
  positions = jnp.array([[0, 3, 5], [1, 2, 6], [0, 1, 3]])
  gathered = model.apply(variables, *args, masked_positions=positions)
  np.testing.assert_allclose(
      gathered, np.take_along_axis(ours, np.asarray(positions)[..., None], 1),
      atol=1e-6)


@pytest.mark.parametrize("implementation", ["einsum", "xla"])
def test_attention_implementations_match_hf(implementation):
  """Our einsum attention and jax.nn.dot_product_attention (XLA) both agree
  with HF to 1e-5 (cuDNN: tests/layers_test.py, on a GPU)."""
  _check_masked_lm_logits(network.RemBertConfig(**{
      **test_utils.TINY_CONFIG.__dict__,
      "attention_implementation": implementation}))


def test_pretraining_only_layers_are_on_top():
  _check_masked_lm_logits(network.RemBertConfig(**{
      **test_utils.TINY_CONFIG.__dict__, "num_pretraining_only_layers": 1}))


def test_encoder_hidden_states_and_pooler_match_hf():
  cfg = test_utils.TINY_CONFIG
  hf = test_utils.randomise_hf(
      transformers.RemBertModel(test_utils.hf_config(cfg)))
  ids, types, mask = test_utils.hf_inputs(cfg)
  sd = {f"rembert.{k}": v for k, v in _state_dict(hf).items()}
  entries = cc.hf_name_map(cfg, cc.Head.ENCODER)
  flat = cc.hf_to_flat_params(sd, entries, ignore_unused=("rembert.pooler.",))
  variables = {"params": cc.unflatten(flat)}
  hidden = network.RemBertEncoder(cfg).apply(
      {"params": variables["params"]["encoder"]}, jnp.asarray(ids),
      jnp.asarray(types), jnp.asarray(mask, jnp.int32))
  out = test_utils.run_hf(hf, ids, types, mask)
  test_utils.assert_close_to_hf(hidden, out.last_hidden_state, mask)
  # The pooler: dense + tanh on the [CLS] position.
  w = sd["rembert.pooler.dense.weight"]
  b = sd["rembert.pooler.dense.bias"]
  pooled = np.tanh(np.asarray(hidden)[:, 0] @ w.T + b)
  test_utils.assert_close_to_hf(pooled, out.pooler_output)


def test_retrieval_embedding_is_xtremes_pooling_of_hf_hidden_states():
  # XTREME's evaluate_retrieval.py: the HF model's hidden states (embedding
  # output first), `all_layer_outputs[-num_layers:][specific_layer]`, mean
  # over the attention mask ([CLS] and [SEP] included).
  cfg = network.RemBertConfig(**{**test_utils.TINY_CONFIG.__dict__,
                                 "num_layers": 4})
  hf = test_utils.randomise_hf(
      transformers.RemBertModel(test_utils.hf_config(cfg)))
  ids, types, mask = test_utils.hf_inputs(cfg)
  sd = {f"rembert.{k}": v for k, v in _state_dict(hf).items()}
  flat = cc.hf_to_flat_params(sd, cc.hf_name_map(cfg, cc.Head.ENCODER),
                              ignore_unused=("rembert.pooler.",))
  with torch.no_grad():
    hidden = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                output_hidden_states=True).hidden_states
  layer_outputs = hidden[-cfg.num_layers:]
  for specific_layer in range(cfg.num_layers):
    states = layer_outputs[specific_layer].numpy()
    expected = ((states * mask[..., None]).sum(1)
                / mask.sum(1, keepdims=True))
    ours = network.RemBertForRetrieval(cfg, layer=specific_layer + 1).apply(
        {"params": cc.unflatten(flat)}, jnp.asarray(ids),
        segment_ids=jnp.asarray(mask, jnp.int32))
    test_utils.assert_close_to_hf(ours, expected)


@pytest.mark.parametrize("head_cls,head,num_labels", [
    ("RemBertForSequenceClassification", cc.Head.SEQUENCE_CLASSIFICATION, 3),
    ("RemBertForTokenClassification", cc.Head.TOKEN_CLASSIFICATION, 5),
    ("RemBertForQuestionAnswering", cc.Head.QUESTION_ANSWERING, 2),
])
def test_task_heads_match_hf(head_cls, head, num_labels):
  cfg = test_utils.TINY_CONFIG
  hf = test_utils.randomise_hf(
      getattr(transformers, head_cls)(test_utils.hf_config(cfg, num_labels)))
  ids, types, mask = test_utils.hf_inputs(cfg)
  variables = _our_params(hf, cfg, head, num_classes=num_labels,
                          ignore=("rembert.pooler.",)
                          if head != cc.Head.SEQUENCE_CLASSIFICATION else ())
  args = (jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask, jnp.int32))
  out = test_utils.run_hf(hf, ids, types, mask)
  if head == cc.Head.SEQUENCE_CLASSIFICATION:
    ours = network.RemBertForSequenceClassification(cfg, num_labels).apply(
        variables, *args)
    test_utils.assert_close_to_hf(ours, out.logits)
  elif head == cc.Head.TOKEN_CLASSIFICATION:
    ours = network.RemBertForTokenClassification(cfg, num_labels).apply(
        variables, *args)
    test_utils.assert_close_to_hf(ours, out.logits, mask)
  else:
    start, end = network.RemBertForQuestionAnswering(cfg).apply(
        variables, *args)
    test_utils.assert_close_to_hf(start, out.start_logits, mask)
    test_utils.assert_close_to_hf(end, out.end_logits, mask)


def test_coupled_mode_matches_hf_bert_with_tied_decoder():
  cfg = test_utils.TINY_COUPLED_CONFIG
  bert_cfg = transformers.BertConfig(
      vocab_size=cfg.vocab_size, hidden_size=cfg.emb_dim,
      num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
      intermediate_size=cfg.mlp_dim, hidden_act="gelu",
      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
      max_position_embeddings=cfg.max_position_embeddings,
      type_vocab_size=cfg.type_vocab_size, layer_norm_eps=1e-12,
      pad_token_id=0, attn_implementation="eager")
  hf = test_utils.randomise_hf(transformers.BertForMaskedLM(bert_cfg))
  # The decoder must be tied to the word embeddings in HF as in ours.
  assert (hf.cls.predictions.decoder.weight.data_ptr()
          == hf.bert.embeddings.word_embeddings.weight.data_ptr())
  ids, types, mask = test_utils.hf_inputs(cfg)
  variables = _our_params(hf, cfg, cc.Head.MASKED_LM, flavour="bert",
                          ignore=("cls.predictions.decoder.",))
  ours = network.RemBertForMaskedLM(cfg).apply(
      variables, jnp.asarray(ids), jnp.asarray(types),
      jnp.asarray(mask, jnp.int32))
  test_utils.assert_close_to_hf(
      ours, test_utils.run_hf(hf, ids, types, mask).logits, mask)


@pytest.mark.parametrize("path", [
    "encoder/embedding_projection/bias",
    "encoder/embeddings/layer_norm/scale",
    "encoder/layers_1/attention/out/bias",
    "encoder/layers_0/mlp/wi/bias",
    "encoder/layers_1/mlp_layer_norm/bias",
    "mlm_head/layer_norm/scale",
    "mlm_head/decoder/bias",
])
def test_parity_breaks_when_one_parameter_is_wrong(path):
  """The parity check is sharp: perturbing any one tensor is detected."""
  cfg = test_utils.TINY_CONFIG
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(cfg)))
  ids, types, mask = test_utils.hf_inputs(cfg)
  flat = cc.flatten(_our_params(hf, cfg, cc.Head.MASKED_LM)["params"])
  flat[path] = flat[path] * 0.9
  ours = network.RemBertForMaskedLM(cfg).apply(
      {"params": cc.unflatten(flat)}, jnp.asarray(ids), jnp.asarray(types),
      jnp.asarray(mask, jnp.int32))
  with pytest.raises(AssertionError, match="max abs difference"):
    test_utils.assert_close_to_hf(
        ours, test_utils.run_hf(hf, ids, types, mask).logits, mask)


def test_round_trip_hf_ours_hf_is_bit_identical():
  cfg = test_utils.TINY_CONFIG
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(cfg)))
  sd = _state_dict(hf)
  entries = cc.hf_name_map(cfg, cc.Head.MASKED_LM)
  back = cc.flat_params_to_hf(cc.hf_to_flat_params(sd, entries), entries)
  assert set(back) == {k for k in sd if not k.endswith("position_ids")}
  for k, v in back.items():
    np.testing.assert_array_equal(v, sd[k])


def test_conversion_errors_name_the_tensor():
  cfg = test_utils.TINY_CONFIG
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(cfg)))
  sd = _state_dict(hf)
  entries = cc.hf_name_map(cfg, cc.Head.MASKED_LM)
  missing = dict(sd)
  del missing["rembert.encoder.layer.1.output.dense.bias"]
  with pytest.raises(ValueError, match=r"missing tensor 'rembert\.encoder\.layer\.1\.output\.dense\.bias'"):
    cc.hf_to_flat_params(missing, entries)
  wrong = dict(sd)
  wrong["cls.predictions.dense.weight"] = np.zeros((7, 7), np.float32)
  with pytest.raises(ValueError, match=r"'cls\.predictions\.dense\.weight' has shape \(7, 7\)"):
    cc.hf_to_flat_params(wrong, entries)
  extra = dict(sd)
  extra["rembert.encoder.layer.9.output.dense.bias"] = np.zeros(3)
  with pytest.raises(ValueError, match="another architecture"):
    cc.hf_to_flat_params(extra, entries)
