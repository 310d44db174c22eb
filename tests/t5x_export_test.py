"""The T5X-native export (`convert_checkpoint.py t5x-native`).

With T5X installed: a tiny random MLM checkpoint in our layout is exported
with T5X's own Checkpointer, then restored the way `finetune_base.gin` does
(mode 'specific', assignment_map (('state/.*', None),), fallback_to_scratch)
into the pair-classification model: the encoder must come back bit for bit.
The reverse (`from_t5x_native`) must give the params back, padded rows kept.
Without T5X only the CLI's one-line error is checked (T5X is blocked in a
subprocess, so that test runs everywhere).
"""

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import traverse_util

from rembert_t5x.common import errors
from rembert_t5x import configs
from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x.convert import checkpoint_io
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import partitioning
from rembert_t5x.runner import checkpoints
from tests import test_utils

HAS_T5X = importlib.util.find_spec("t5x") is not None
needs_t5x = pytest.mark.skipif(
    not HAS_T5X, reason="t5x is not installed (pip install -e '.[t5x]'); "
    "the T5X-native export and its restore need the real T5X")
CFG = test_utils.TINY_CONFIG
SCRIPT = test_utils.REPO_ROOT / "scripts" / "convert_checkpoint.py"


def _flat(tree):
  return {"/".join(k): np.asarray(v)
          for k, v in traverse_util.flatten_dict(dict(tree)).items()}


def _write_ours(path, module=None):
  """Our orbax layout with random params of `module` (default: the MLM)."""
  module = module or network.RemBertForMaskedLM(CFG)
  params = module.init({"params": jax.random.PRNGKey(7)},
                       np.ones((1, 8), np.int32), enable_dropout=False)
  flat = _flat(params["params"])
  checkpoint_io.write_orbax_params(path, iter(flat.items()))
  configs.write_checkpoint_config(path, CFG)
  return flat


# The exported config pads the vocabulary as the T5X run files do.
PADDED = dataclasses.replace(
    CFG, vocab_pad_multiple=partitioning.T5X_VOCAB_PAD_MULTIPLE)


def _padded(flat):
  """What the export holds: vocabulary tensors with zero rows appended."""
  return cc.resize_vocab_params(flat, PADDED.padded_vocab_size)


def test_cli_without_t5x_gives_one_clear_error(tmp_path):
  code = ("import runpy, sys; sys.modules['t5x'] = None; "  # import t5x fails
          f"sys.argv = ['convert_checkpoint.py', 't5x-native', "
          f"'--checkpoint_dir={tmp_path / 'ours'}', "
          f"'--output_dir={tmp_path / 'native'}']; "
          f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")
  env = {**os.environ, "PYTHONPATH": str(test_utils.REPO_ROOT)}
  result = subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=300,
                          cwd=test_utils.REPO_ROOT)
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: the t5x-native export needs T5X"), last
  assert 'pip install -e ".[t5x]"' in last
  assert not (tmp_path / "native").exists()


@needs_t5x
def test_export_restores_for_finetuning_bit_for_bit(tmp_path):
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  flat = _padded(_write_ours(tmp_path / "ours"))
  summary = t5x_export.t5x_native(str(tmp_path / "ours"),
                                  str(tmp_path / "native"))
  assert summary.parameters == sum(v.size for v in flat.values())
  assert summary.vocab_rows_changed == 128 - 97
  assert flat["encoder/embeddings/word_embeddings/embedding"].shape == (128, 16)
  assert configs.read_checkpoint_config(
      tmp_path / "native" / configs.CHECKPOINT_CONFIG_FILE) == PADDED
  assert summary.tensors == len(flat)
  assert sorted(os.listdir(tmp_path / "native")) == [
      "checkpoint_0", configs.CHECKPOINT_CONFIG_FILE]
  assert (tmp_path / "native" / "checkpoint_0" / "checkpoint").is_file()

  pair = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(PADDED, 2))
  state = t5x_export.restore_for_finetuning(
      str(tmp_path / "native" / "checkpoint_0"), pair)
  assert int(state.step) == 0
  got = _flat(state.params)
  encoder = [k for k in got if k.startswith("encoder/")]
  assert encoder and set(encoder) == {k for k in flat
                                      if k.startswith("encoder/")}
  for name in encoder:
    assert got[name].dtype == flat[name].dtype, name
    np.testing.assert_array_equal(got[name], flat[name], err_msg=name)
  # The MLM head is not read; the task head starts from scratch.
  assert not any(k.startswith("mlm_head/") for k in got)
  assert {k.split("/")[0] for k in got} == {"encoder", "pooler", "classifier"}


@needs_t5x
def test_scanned_export_restores_into_scanned_finetuning(tmp_path):
  """SCAN_LAYERS = True through real T5X: the train state of the scanned MLM
  model passes T5X's axis-name check (the stacked 'layers' axis included),
  and a scanned fine-tuning model restores the stacked encoder by name."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from rembert_t5x.convert import checkpoint_conversion as cc  # pylint: disable=g-import-not-at-top
  from rembert_t5x import layer_stacking  # pylint: disable=g-import-not-at-top
  from rembert_t5x import partitioning  # pylint: disable=g-import-not-at-top
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  scanned = dataclasses.replace(CFG, scan_layers=True, remat_policy="full")
  flat = _write_ours(tmp_path / "ours")  # per-layer params, as converted
  configs.write_checkpoint_config(tmp_path / "ours", scanned)
  t5x_export.t5x_native(str(tmp_path / "ours"), str(tmp_path / "native"))
  # The fine-tuning run files pad the vocabulary as the export does.
  pair = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(dataclasses.replace(
          scanned, vocab_pad_multiple=partitioning.T5X_VOCAB_PAD_MULTIPLE),
                                                2))
  state = t5x_export.restore_for_finetuning(
      str(tmp_path / "native" / "checkpoint_0"), pair)
  got = _flat(state.params)
  want = cc.flatten(layer_stacking.stack_layers(
      cc.unflatten({k: v for k, v in flat.items()
                    if k.startswith("encoder/")}), CFG.num_layers))
  assert "encoder/layers/mlp/wi/kernel" in want
  assert {k for k in got if k.startswith("encoder/")} == set(want)
  for name, value in want.items():
    if got[name].shape != value.shape:  # vocabulary rows padded for T5X
      assert name == "encoder/embeddings/word_embeddings/embedding", name
      got[name] = got[name][:value.shape[0]]
    np.testing.assert_array_equal(got[name], value, err_msg=name)


@needs_t5x
def test_export_restores_full_state_for_pretraining(tmp_path):
  """T5X's default restore (all of state/, strict) into the MLM model."""
  from t5x import utils  # pylint: disable=g-import-not-at-top
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  flat = _padded(_write_ours(tmp_path / "ours"))
  t5x_export.t5x_native(str(tmp_path / "ours"), str(tmp_path / "native"))
  mlm = models.RemBertMLMModel(network.RemBertForMaskedLM(PADDED))
  initializer = utils.TrainStateInitializer(
      optimizer_def=t5x_export.make_optimizer("adamw"),
      init_fn=mlm.get_initial_variables,
      input_shapes={"input_tokens": (1, 8)},
      partitioner=t5x_export.make_partitioner())
  state = initializer.from_checkpoint([utils.RestoreCheckpointConfig(
      path=str(tmp_path / "native" / "checkpoint_0"), mode="specific")])
  assert int(state.step) == 0
  got = _flat(state.params)
  assert set(got) == set(flat)
  for name, value in flat.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  for moment in jax.tree_util.tree_leaves(state.param_states):
    assert not np.any(np.asarray(moment))  # fresh optimizer state


@needs_t5x
def test_export_errors(tmp_path):
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  _write_ours(tmp_path / "pair",
              network.RemBertForSequenceClassification(CFG, 2))
  with pytest.raises(errors.UserError, match="pre-training"):
    t5x_export.t5x_native(str(tmp_path / "pair"), str(tmp_path / "o"))
  assert not (tmp_path / "o").exists()
  with pytest.raises(errors.UserError, match="no such directory"):
    t5x_export.t5x_native(str(tmp_path / "nope"), str(tmp_path / "o"))
  (tmp_path / "full").mkdir()
  (tmp_path / "full" / "x").write_text("x")
  _write_ours(tmp_path / "ours")
  with pytest.raises(errors.UserError, match="exists and is not empty"):
    t5x_export.t5x_native(str(tmp_path / "ours"), str(tmp_path / "full"))
  with pytest.raises(errors.UserError, match="optimizer"):
    t5x_export.t5x_native(str(tmp_path / "ours"), str(tmp_path / "o"),
                          optimizer="sgd")


@needs_t5x
def test_cli_writes_checkpoint_0(tmp_path):
  _write_ours(tmp_path / "ours")
  # The source's vocabulary lands beside checkpoint_0, where the T5X run
  # files' hook looks from INITIAL_CHECKPOINT_PATH.
  vocab = b"a SentencePiece model's bytes (copied, not read)"
  (tmp_path / "ours" / "sentencepiece.model").write_bytes(vocab)
  env = {**os.environ, "PYTHONPATH": str(test_utils.REPO_ROOT),
         "JAX_PLATFORMS": "cpu"}
  result = subprocess.run(
      [sys.executable, str(SCRIPT), "t5x-native",
       f"--checkpoint_dir={tmp_path / 'ours'}",
       f"--output_dir={tmp_path / 'native'}"],
      env=env, capture_output=True, text=True, timeout=600,
      cwd=test_utils.REPO_ROOT)
  assert result.returncode == 0, result.stderr[-2000:]
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary["head"] == "masked_lm"
  assert (tmp_path / "native" / "checkpoint_0" / "checkpoint").is_file()
  copied = tmp_path / "native" / "sentencepiece.model"
  assert summary["vocabulary"] == str(copied)
  assert copied.read_bytes() == vocab


@needs_t5x
def test_from_t5x_native_round_trips_and_loads_for_retrieval(tmp_path):
  """ours -> t5x_native -> from_t5x_native: the params come back with the
  export's padded vocabulary rows kept (the config records the padding),
  and the retrieval model of the BUCC/Tatoeba predictions loads them."""
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  flat = _padded(_write_ours(tmp_path / "ours"))
  vocab = b"a SentencePiece model's bytes (copied, not read)"
  (tmp_path / "ours" / "sentencepiece.model").write_bytes(vocab)
  t5x_export.t5x_native(str(tmp_path / "ours"), str(tmp_path / "native"))
  summary = t5x_export.from_t5x_native(
      str(tmp_path / "native" / "checkpoint_0"), str(tmp_path / "back"))
  assert summary.head == "masked_lm"
  assert summary.tensors == len(flat)
  assert summary.vocabulary == str(tmp_path / "back" / "sentencepiece.model")
  assert (tmp_path / "back" / "sentencepiece.model").read_bytes() == vocab
  config = configs.read_checkpoint_config(
      tmp_path / "back" / configs.CHECKPOINT_CONFIG_FILE)
  assert config == PADDED
  got = cc.flatten(checkpoints.load_params(str(tmp_path / "back")))
  assert set(got) == set(flat)
  for name, value in flat.items():
    assert got[name].dtype == value.dtype, name
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  retrieval = models.RemBertRetrievalModel(
      models.make_module("retrieval", config))
  params = checkpoints.load_params_for(retrieval, str(tmp_path / "back"))
  assert "encoder" in params


@needs_t5x
def test_from_t5x_native_errors(tmp_path):
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  (tmp_path / "empty").mkdir()
  with pytest.raises(errors.UserError, match="no T5X checkpoint there"):
    t5x_export.from_t5x_native(str(tmp_path / "empty"), str(tmp_path / "o"))
  assert not (tmp_path / "o").exists()


def _cfg_gin(directory, *extra: str) -> str:
  """A model gin file of CFG (as after `t5x.train`, which writes no
  rembert_config.json), with `extra` lines."""
  gin_file = directory / "tiny.gin"
  gin_file.write_text("\n".join([
      "include 'gin_configs/architectures/rembert.gin'",
      "VOCAB_SIZE = 97", "INPUT_EMBED_DIM = 16", "EMBED_DIM = 32",
      "OUTPUT_EMBED_DIM = 24", "NUM_LAYERS = 2", "NUM_HEADS = 4",
      "HEAD_DIM = 8", "MLP_DIM = 64", "MAX_POSITION_EMBEDDINGS = 40",
      "DROPOUT_RATE = 0.0", *extra]))
  return str(gin_file)


@needs_t5x
def test_from_t5x_native_of_a_scanned_run_with_gin_file(tmp_path):
  """As after `t5x.train`: no rembert_config.json beside the checkpoint, so
  the model gin file (which pads nothing) gives the config; the stacked
  layers come back per layer."""
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  scanned = dataclasses.replace(CFG, scan_layers=True, remat_policy="full")
  flat = _padded(_write_ours(tmp_path / "ours"))
  configs.write_checkpoint_config(tmp_path / "ours", scanned)
  t5x_export.t5x_native(str(tmp_path / "ours"), str(tmp_path / "native"))
  (tmp_path / "native" / configs.CHECKPOINT_CONFIG_FILE).unlink()
  with pytest.raises(errors.UserError, match="pass --gin_file"):
    t5x_export.from_t5x_native(str(tmp_path / "native"), str(tmp_path / "b"))
  gin_file = _cfg_gin(tmp_path, "SCAN_LAYERS = True", "REMAT_POLICY = 'full'")
  t5x_export.from_t5x_native(str(tmp_path / "native"), str(tmp_path / "b"),
                             gin_file=gin_file)
  assert configs.read_checkpoint_config(
      tmp_path / "b" / configs.CHECKPOINT_CONFIG_FILE) == dataclasses.replace(
          PADDED, scan_layers=True, remat_policy="full")
  got = cc.flatten(checkpoints.load_params(str(tmp_path / "b")))
  assert "encoder/layers_1/mlp/wi/kernel" in got
  assert set(got) == set(flat)
  for name, value in flat.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_from_t5x_native_reads_the_orbax_checkpoints_t5x_train_writes(
    tmp_path):
  """`t5x.train` writes `checkpoint_N/state` with Orbax (every host its
  shards, one tree): read without T5X, the newest step of a MODEL_DIR, the
  optimizer state dropped. (The layout was checked against checkpoints of
  real 1- and 2-process `t5x.train` runs, scripts/t5x_multihost_smoke.sh.)"""
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  module = network.RemBertForMaskedLM(CFG)
  params = module.init({"params": jax.random.PRNGKey(3)},
                       np.ones((1, 8), np.int32), enable_dropout=False)
  target = jax.tree_util.tree_map(np.asarray, dict(params["params"]))
  moments = jax.tree_util.tree_map(np.zeros_like, target)
  run = tmp_path / "run"
  for step in (0, 5):
    ocp.PyTreeCheckpointer().save(
        run / f"checkpoint_{step}" / "state",
        {"target": target, "state": {"step": np.int32(step),
                                     "param_states": moments}})
  (run / "checkpoint_7.orbax-checkpoint-tmp-1").mkdir()  # unfinished: ignored
  summary = t5x_export.from_t5x_native(str(run), str(tmp_path / "back"),
                                       gin_file=_cfg_gin(tmp_path))
  assert summary.head == "masked_lm"
  assert summary.tensors == len(_flat(target))
  assert checkpoints.steps(str(tmp_path / "back")) == [5]
  got = cc.flatten(checkpoints.load_params(str(tmp_path / "back")))
  for name, value in _flat(target).items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
