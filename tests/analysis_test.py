"""Paper §5 analyses on a tiny model: per-layer features, probes, dropped layers."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from rembert_t5x import configs
from rembert_t5x.experiments import analysis
from rembert_t5x.experiments import sweep
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import train
from tests import test_utils

# Minutes, not seconds: `-m 'not slow'` leaves it out of a quick loop
# (.ci/run runs everything).
pytestmark = pytest.mark.slow

CONFIG = network.RemBertConfig(
    vocab_size=400, input_embed_dim=16, emb_dim=32, output_embed_dim=24,
    num_layers=2, num_heads=2, head_dim=16, mlp_dim=64,
    max_position_embeddings=128)


def test_layer_features_are_the_hidden_states_of_the_full_encoder():
  module = network.RemBertForMaskedLM(CONFIG)
  tokens = np.array([[2, 10, 11, 12, 3, 0]], np.int32)
  params = module.init(jax.random.PRNGKey(0), tokens)["params"]
  batch = {"input_tokens": tokens, "token_types": np.zeros_like(tokens),
           "segment_ids": (tokens > 0).astype(np.int32),
           "positions": np.arange(6, dtype=np.int32)[None]}
  inputs = [batch[k] for k in ("input_tokens", "token_types", "segment_ids",
                               "positions")]
  _, state = network.RemBertEncoder(CONFIG).apply(
      {"params": params["encoder"]}, *inputs, capture_intermediates=True)
  inter = state["intermediates"]
  expected = [inter["embedding_projection"]["__call__"][0]] + [
      inter[f"layers_{i}"]["__call__"][0] for i in range(CONFIG.num_layers)]
  for l, want in enumerate(expected):
    np.testing.assert_allclose(
        analysis.layer_features(CONFIG, params, l, batch), want,
        rtol=1e-5, atol=1e-5)


def test_linear_probe_learns_a_separable_problem():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 5)).astype(np.float32)
  y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
  predict = analysis.train_linear_probe(x, y, 2, steps=200)
  assert np.mean(predict(x) == y) > 0.95


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
  from rembert_tasks import synthetic as synthetic_tasks  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("analysis")
  manifest = synthetic_tasks.prepare(
      str(root / "data"), corpus_sentences=300, pair_train=64, tag_train=64,
      qa_train=64, eval_examples=16)
  names = synthetic_tasks.register_synthetic(
      manifest, prefix="analysistest_",
      shuffle_buffer_size=test_utils.TINY_SHUFFLE_BUFFER)
  configs.parse_gin([])
  train.train(str(root / "pre"), model=models.RemBertMLMModel(
      network.RemBertForMaskedLM(CONFIG), max_predictions_per_seq=16),
              mixture_or_task_name=names["mlm"],
              task_feature_lengths={"input_tokens": 64}, train_steps=2,
              batch_size=8, pack=True, checkpoint_period=2, progress_bar=False)
  task = dataclasses.replace(
      sweep.demo_tasks(prefix="analysistest_", train_steps=2)["tag"],
      batch_size=8)
  return root, str(root / "pre"), manifest, task


def test_probe_writes_a_table_per_layer(pretrained):
  root, pre, manifest, task = pretrained
  result = analysis.probe(str(root / "probe"), CONFIG, pre, task,
                          manifest["languages"], "analysistest_",
                          train_examples=16, eval_examples=8, steps=5,
                          log=lambda _: None)
  assert [r["layer"] for r in result["rows"]] == [0, 1, 2]
  for r in result["rows"]:
    assert set(r["scores"]) == set(manifest["languages"])
    assert all(0 <= v <= 100 for v in r["scores"].values())
  analysis.write(str(root / "probe"), result)
  saved = json.loads((root / "probe" / "probe.json").read_text())
  assert saved["rows"] == result["rows"]
  text = (root / "probe" / "probe.md").read_text()
  assert "| majority |" in text and "| 2 |" in text
  assert (root / "probe" / "probe.png").stat().st_size > 0


def test_drop_layers_fine_tunes_each_kept_depth(pretrained):
  root, pre, manifest, task = pretrained
  work = str(root / "drop")
  # One depth keeps the test fast; the sweep tests cover multi-point runs.
  result = analysis.drop_layers(work, CONFIG, pre, task, [1],
                                log=lambda _: None)
  assert [r["layers"] for r in result["rows"]] == [1]
  assert set(result["rows"][0]["scores"]) == set(manifest["languages"])
  analysis.write(work, result)
  assert "| layers |" in (root / "drop" / "drop_layers.md").read_text()
  assert (root / "drop" / "drop_layers.png").stat().st_size > 0
  with pytest.raises(Exception, match="cannot keep 3 layers"):
    analysis.drop_layers(work, CONFIG, pre, task, [3], log=lambda _: None)
