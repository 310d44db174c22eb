"""The paper's layer analyses (Figure 1, probes) on a tiny model: per-layer
features, probes, dropped layers; on the demo tasks and on XTREME's."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from rembert_t5x.convert import checkpoint_io
from rembert_t5x.common import errors
from rembert_t5x.experiments import analysis
from rembert_t5x.experiments import sweep
from rembert_t5x.experiments import xtreme_road
from rembert_t5x import models
from rembert_t5x import network
from rembert_tasks import synthetic as synthetic_tasks
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
  encoder = models.pretrained_encoder(params, CONFIG.num_layers)
  states = analysis.hidden_states(CONFIG, encoder, batch)
  assert len(states) == len(expected)
  for got, want in zip(states, expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # The probe's features, read in padded chunks, are those of one pass.
  pair = sweep.demo_tasks()["pair"]
  rows = {k: np.repeat(v, 3, axis=0) for k, v in batch.items()}
  rows["input_tokens"][1, 3] = 13  # the rows differ
  rows["label"] = np.array([0, 1, 0], np.int32)
  whole = analysis.layer_probe_data(pair, CONFIG, encoder, rows, chunk_size=3)
  chunked = analysis.layer_probe_data(pair, CONFIG, encoder, rows,
                                      chunk_size=2)
  assert len(whole) == CONFIG.num_layers + 1
  for (x, y), (xc, yc) in zip(whole, chunked):
    assert x.shape == (3, CONFIG.emb_dim)
    np.testing.assert_allclose(xc, x, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(yc, y)


def test_linear_probe_learns_a_separable_problem():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 5)).astype(np.float32)
  y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
  predict = analysis.train_linear_probe(x, y, 2, steps=200)
  assert np.mean(predict(x) == y) > 0.95


def test_retrieval_accuracy_finds_counterparts_and_is_chance_without_them():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 16))
  assert analysis.retrieval_accuracy(x, 3 * x + 0.01 * rng.normal(
      size=x.shape)) == 100.0
  # Unrelated candidates: near chance (100 / 64 = 1.6%).
  assert analysis.retrieval_accuracy(x, rng.normal(size=x.shape)) < 15.0
  # Counterparts in another order are not counted as found.
  assert analysis.retrieval_accuracy(x, x[::-1]) < 5.0
  # Large offsets of their own on both sides (a language's own direction)
  # hide the counterparts from the cosine; removing each side's mean finds
  # them again.
  a = x + 100 * rng.normal(size=(1, 16))
  b = x + 100 * rng.normal(size=(1, 16))
  assert analysis.retrieval_accuracy(a, b) < 50.0
  assert analysis.retrieval_accuracy(a, b, center=True) == 100.0


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
  """Synthetic tasks and a randomly initialised MLM model's MODEL_DIR.

  Random weights, not a pre-training run: the analyses read any
  encoder, and a run (its input pipeline and compiled step) took seconds
  of CPU that tell these tests nothing (train_test covers pre-training).
  """
  root = tmp_path_factory.mktemp("analysis")
  manifest = synthetic_tasks.prepare(
      str(root / "data"), corpus_sentences=300, pair_train=64, tag_train=64,
      qa_train=64, eval_examples=16)
  synthetic_tasks.register_synthetic(
      manifest, prefix="analysistest_",
      shuffle_buffer_size=test_utils.TINY_SHUFFLE_BUFFER)
  test_utils.write_random_checkpoint(root / "pre", "mlm", CONFIG,
                                     vocab_file=manifest["vocab"])
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


def test_align_retrieves_each_language_per_layer(pretrained):
  root, pre, manifest, task = pretrained
  result = analysis.align(str(root / "align"), CONFIG, pre, task,
                          manifest["languages"], "analysistest_",
                          eval_examples=8, log=lambda _: None)
  others = set(manifest["languages"]) - {task.train_language}
  assert [r["layer"] for r in result["rows"]] == [0, 1, 2]
  assert result["eval_examples"] == 8 and result["chance"] == 12.5
  for r in result["rows"]:
    assert set(r["scores"]) == set(r["centered"]) == others
    assert all(0 <= v <= 100 for v in r["scores"].values())
  analysis.write(str(root / "align"), result)
  text = (root / "align" / "align.md").read_text()
  assert "chance 12.5" in text and "| 2 |" in text


def test_align_refuses_a_checkpoint_of_another_shape(pretrained):
  """The pre-trained encoder is checked against the config before use: one
  line naming the misfit parameter (it was Flax's traceback)."""
  root, pre, manifest, task = pretrained
  coupled = dataclasses.replace(CONFIG, input_embed_dim=CONFIG.emb_dim)
  with pytest.raises(errors.UserError, match=(
      f"checkpoint {pre} does not fit the model of the gin files: it has "
      r"encoder/.* of shape .*differs from the gin files in input_embed_dim")):
    analysis.align(str(root / "misfit"), coupled, pre, task,
                   manifest["languages"], "analysistest_", eval_examples=8,
                   log=lambda _: None)
  assert not (root / "misfit").exists()


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


# --------------------------------------------------------------------------
# XTREME tasks from a converted checkpoint
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def xtreme(tmp_path_factory):
  """A converted tiny released-like RemBERT (2 layers, the released special
  ids) and a tiny folder in XTREME's layout for XNLI and PAN-X, English and
  German (real sentences, synthetic labels: `xtreme_road`), both built
  under tmp from ../shared/data."""
  data = test_utils.shared_data_dir("tatoeba").parent
  root = tmp_path_factory.mktemp("xtreme_analysis")
  hf_dir = xtreme_road.build_released_like_hf(
      str(root / "hf"), str(data), ["en", "de"], vocab_size=500)
  checkpoint_io.hf_to_t5x(hf_dir, str(root / "model"))
  xtreme_road.write_tiny_xtreme(str(root / "xtreme"), str(data),
                                ("xnli", "panx"), examples=4,
                                languages=["de"])
  return root


def test_probe_and_drop_layers_run_on_xtreme_tasks(xtreme, capsys):
  common = [f"--pretrained={xtreme / 'model'}",
            f"--xtreme_dir={xtreme / 'xtreme'}", "--languages=de"]
  analysis.main(["--mode=probe", "--task=panx", *common,
                 f"--workdir={xtreme / 'probe'}", "--train_examples=8",
                 "--eval_examples=4", "--probe_steps=5"])
  result = json.loads((xtreme / "probe" / "probe.json").read_text())
  assert result["task"] == "panx" and result["split"] == "validation"
  assert [r["layer"] for r in result["rows"]] == [0, 1, 2]
  for r in result["rows"]:
    assert set(r["scores"]) == {"en", "de"}
  assert "| majority |" in capsys.readouterr().out
  # Figure 1 on XNLI: the table15 grid (batch 128, lr 1e-5), one kept layer.
  analysis.main(["--mode=drop_layers", "--task=xnli", *common,
                 f"--workdir={xtreme / 'drop'}", "--layers=1",
                 "--train_steps=1"])
  result = json.loads((xtreme / "drop" / "drop_layers.json").read_text())
  assert [r["layers"] for r in result["rows"]] == [1]
  assert set(result["rows"][0]["scores"]) == {"en", "de"}
  assert result["learning_rate"] == 1e-5
  run = json.loads((xtreme / "drop" / "l=1" / "runs" / "xnli" / "lr=1e-05" /
                    "seed=0" / "results.json").read_text())
  assert run["batch_size"] == 128
  assert run["selection"]["task"] == "rembert_local_xnli_en"


def _usage_error(capsys, argv):
  with pytest.raises(SystemExit) as e:
    analysis.main(argv)
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: "), err
  return err[0]


def test_task_errors_name_the_fix(tmp_path, capsys):
  common = [f"--workdir={tmp_path / 'w'}", f"--pretrained={tmp_path / 'p'}"]
  err = _usage_error(capsys, ["--mode=probe", "--task=xnli", *common])
  assert "add --xtreme_dir" in err
  err = _usage_error(capsys, ["--mode=probe", "--task=squad", *common,
                              f"--xtreme_dir={tmp_path}"])
  assert "squad is a qa task" in err
  err = _usage_error(capsys, ["--mode=align", "--task=qa", *common])
  assert "align: qa is a qa task" in err
  err = _usage_error(capsys, ["--mode=probe", "--task=xnli", *common,
                              f"--xtreme_dir={tmp_path}"])
  assert "rembert_config.json" in err and "--model_gin" in err
  err = _usage_error(capsys, ["--mode=probe", "--task=tag", "--languages=de",
                              *common])
  assert "--languages needs --xtreme_dir" in err
