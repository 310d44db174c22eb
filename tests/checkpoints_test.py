"""Checking a checkpoint's params against the model of the gin files."""

import dataclasses

import jax
import numpy as np
import pytest

from rembert_t5x import configs
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.common import errors
from rembert_t5x.runner import checkpoints
from tests import test_utils


def _mlm_params(config):
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(config))
  return jax.tree_util.tree_map(
      lambda x: np.zeros(x.shape, x.dtype),
      jax.eval_shape(lambda r: model.get_initial_variables(
          r, {"input_tokens": (1, 8)}), jax.random.PRNGKey(0))["params"])


def test_a_pretraining_checkpoint_fits_the_retrieval_model():
  params = _mlm_params(test_utils.TINY_CONFIG)
  retrieval = models.RemBertRetrievalModel(
      network.RemBertForRetrieval(test_utils.TINY_CONFIG))
  # The MLM head is extra, not missing.
  checkpoints.check_params_fit(retrieval, params, "/ckpt")


def test_another_architecture_is_one_line_naming_params_and_fields(tmp_path):
  configs.write_checkpoint_config(tmp_path, test_utils.TINY_CONFIG)
  (tmp_path / "checkpoints" / "7").mkdir(parents=True)
  wider = dataclasses.replace(test_utils.TINY_CONFIG, vocab_size=120,
                              mlp_dim=96)
  model = models.RemBertRetrievalModel(network.RemBertForRetrieval(wider))
  source = str(tmp_path / "checkpoints" / "7")
  with pytest.raises(errors.UserError) as e:
    checkpoints.check_params_fit(
        model, _mlm_params(test_utils.TINY_CONFIG), source)
  message = str(e.value)
  assert "\n" not in message
  assert message.startswith(
      f"checkpoint {source} does not fit the model of the gin files: it has "
      "encoder/embeddings/word_embeddings/embedding of shape (97, 16), the "
      "model expects (120, 16)")
  assert "vocab_size 97 vs 120, mlp_dim 64 vs 96" in message


def test_a_missing_head_is_named():
  tagging = models.RemBertTaggingModel(
      network.RemBertForTokenClassification(test_utils.TINY_CONFIG,
                                            num_classes=3))
  with pytest.raises(errors.UserError, match="it has no parameter "):
    checkpoints.check_params_fit(
        tagging, _mlm_params(test_utils.TINY_CONFIG), "/ckpt")
