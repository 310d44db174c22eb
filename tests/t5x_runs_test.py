"""Checks of the T5X run files in gin_configs/runs/ (not the local_*.gin ones).

Without T5X the files are checked as text against the package (model and
network classes exist, head sizes match the tasks, learning-rate arithmetic,
includes exist). With T5X importable, every run file is parsed by gin over
T5X's own run files and the model it binds is built and initialised;
`scripts/t5x_smoke.sh` runs them end to end.
"""

import glob
import importlib.util
import os
import re
import sys

import jax
import numpy as np
import pytest

from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import partitioning
from rembert_t5x import t5x_partitioning

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(REPO, "gin_configs", "runs")
RUN_FILES = sorted(f for f in glob.glob(os.path.join(RUNS, "*.gin"))
                   if not os.path.basename(f).startswith("local_"))
T5X_RUN_FILES = ("t5x/configs/runs/pretrain.gin",
                 "t5x/configs/runs/finetune.gin", "t5x/configs/runs/eval.gin")
HAS_T5X = importlib.util.find_spec("t5x") is not None
needs_t5x = pytest.mark.skipif(
    not HAS_T5X, reason="t5x is not installed (pip install -e '.[t5x]')")

# finetune/eval file -> (model class, network class, classes of the task).
TASK_FILES = {
    "xnli": ("RemBertPairClassificationModel",
             "RemBertForSequenceClassification", 3),
    "pawsx": ("RemBertPairClassificationModel",
              "RemBertForSequenceClassification", 2),
    "panx": ("RemBertTaggingModel", "RemBertForTokenClassification", 7),
    "xquad": ("RemBertQAModel", "RemBertForQuestionAnswering", None),
}
# RemBERT's fine-tuning learning rates (paper Table 15).
PAPER_LR = {"xnli": 1e-5, "pawsx": 8e-6, "panx": 8e-6, "xquad": 9e-6}


def _read(name):
  with open(os.path.join(RUNS, name), encoding="utf-8") as f:
    return f.read()


def _macros(text):
  return dict(re.findall(r"^([A-Z_]+) = (.+?)\s*(?:#.*)?$", text, re.M))


def test_expected_run_files_exist():
  names = {os.path.basename(f) for f in RUN_FILES}
  for name in ["pretrain_mlm.gin", "t5x_cpu_tiny.gin",
               "t5x_cpu_model_parallel.gin"] + [
                   f"{kind}_{task}.gin" for task in TASK_FILES
                   for kind in ("finetune", "eval")]:
    assert name in names


@pytest.mark.parametrize("path", RUN_FILES, ids=os.path.basename)
def test_header_and_includes(path):
  text = open(path, encoding="utf-8").read()
  header = text.split("from __gin__")[0]
  assert header.startswith("#"), "a run file starts with a comment"
  name = os.path.basename(path)
  if not name.endswith("_base.gin"):
    assert "python -m t5x." in header, "the header gives the command"
    assert "Cost" in header, "the header says what a run costs"
  for line in header.splitlines():
    assert len(line) <= 80, f"{name}: header line over 80 columns: {line}"
  for inc in re.findall(r"^include '([^']+)'", text, re.M):
    if inc.startswith("t5x/"):
      assert inc in T5X_RUN_FILES, inc
    else:
      assert os.path.isfile(os.path.join(REPO, inc)), f"{name}: {inc}"


@pytest.mark.parametrize("path", RUN_FILES, ids=os.path.basename)
def test_referenced_classes_exist(path):
  text = open(path, encoding="utf-8").read()
  for cls in re.findall(r"@?models\.(\w+)", text):
    assert hasattr(models, cls), cls
  for cls in re.findall(r"@?network\.(\w+)", text):
    assert hasattr(network, cls), cls
  for fn in re.findall(r"@rembert_partitioning\.(\w+)\(", text):
    from rembert_t5x import partitioning  # pylint: disable=g-import-not-at-top
    assert hasattr(partitioning, fn), fn
  for fn in re.findall(r"@t5x_partitioning\.(\w+)\(", text):
    assert hasattr(t5x_partitioning, fn), fn


@pytest.mark.parametrize("task", sorted(TASK_FILES))
def test_task_files_bind_model_and_heads(task):
  model_cls, net_cls, classes = TASK_FILES[task]
  for kind in ("finetune", "eval"):
    text = _read(f"{kind}_{task}.gin")
    assert f"MODEL = @models.{model_cls}()" in text
    assert f"@network.{net_cls}()" in text
    if classes is not None:
      assert f"network.{net_cls}.num_classes = {classes}" in text
  # The head sizes are those of the registered tasks' label sets.
  label_counts = {"xnli": ("rembert_tasks.xnli", 3),
                  "pawsx": ("rembert_tasks.pawsx", 2),
                  "panx": ("rembert_tasks.panx", 7)}
  if task in label_counts:
    module, n = label_counts[task]
    assert len(importlib.import_module(module).LABELS) == n


@pytest.mark.parametrize("task", sorted(TASK_FILES))
def test_finetune_schedule_arithmetic(task):
  m = _macros(_read(f"finetune_{task}.gin"))
  steps, warmup = int(m["TRAIN_STEPS"]), int(m["WARMUP_STEPS"])
  assert float(m["LEARNING_RATE"]) == PAPER_LR[task]
  assert float(m["DECAY_FACTOR"]) == pytest.approx(1 / (steps - warmup),
                                                   rel=1e-5)
  assert warmup == steps // 10


def test_pretrain_schedule_matches_paper():
  text = _read("pretrain_mlm.gin")
  m = _macros(text)
  assert int(m["TRAIN_STEPS"]) == 1760000 and int(m["BATCH_SIZE"]) == 2048
  assert m["TASK_FEATURE_LENGTHS"] == "{'input_tokens': 512}"
  params = dict(re.findall(r"^  (\w+) = (.+)$", text, re.M))
  assert float(params["base_learning_rate"]) == 2e-4
  assert int(params["warmup_steps"]) == 15000
  assert float(params["decay_factor"]) == pytest.approx(
      1 / (1760000 - 15000), rel=1e-5)
  assert (params["b1"], params["b2"], params["eps"],
          params["weight_decay"]) == ("0.9", "0.999", "1e-6", "0.01")
  assert "max_norm = 1.0" in text


def test_explicit_mesh_shapes():
  n = jax.device_count()
  mesh = t5x_partitioning.explicit_mesh(1)
  assert dict(mesh.shape) == {"data": n, "model": 1}
  if n % 2 == 0:
    mesh = t5x_partitioning.explicit_mesh(2)
    assert dict(mesh.shape) == {"data": n // 2, "model": 2}
    assert set(mesh.devices.flat) == set(jax.devices())
  with pytest.raises(ValueError, match="must divide"):
    t5x_partitioning.explicit_mesh(n + 1)


# --- With T5X ------------------------------------------------------------------


def _parse(monkeypatch, script, files, bindings=()):
  """Parses gin files as `python -m t5x.<script>` would (search path '.')."""
  import gin  # pylint: disable=g-import-not-at-top
  import t5x  # pylint: disable=g-import-not-at-top
  main = importlib.import_module(f"t5x.{script}")
  monkeypatch.setitem(sys.modules, "__main__", main)
  monkeypatch.chdir(REPO)
  gin.clear_config(clear_constants=True)
  gin.add_config_file_search_path(REPO)
  gin.add_config_file_search_path(
      os.path.dirname(os.path.dirname(os.path.abspath(t5x.__file__))))
  required = {  # what a user passes on the command line
      "train": ["MODEL_DIR = '/tmp/unused'", "MIXTURE_OR_TASK_NAME = 'unused'",
                "INITIAL_CHECKPOINT_PATH = '/tmp/unused'"],
      "eval": ["CHECKPOINT_PATH = '/tmp/unused'",
               "EVAL_OUTPUT_DIR = '/tmp/unused'"],
  }[script]
  gin.parse_config_files_and_bindings(files, required + list(bindings))
  return gin


def _build_model(gin):
  return gin.query_parameter("MODEL/macro.value").scoped_configurable_fn()


@pytest.fixture
def clean_gin():
  yield
  import gin  # pylint: disable=g-import-not-at-top
  gin.clear_config(clear_constants=True)


@needs_t5x
@pytest.mark.parametrize("run", ["pretrain_mlm"] + [
    f"finetune_{t}" for t in sorted(TASK_FILES)])
def test_train_run_files_build_tiny_models(run, monkeypatch, clean_gin):
  from t5x import optimizers  # pylint: disable=g-import-not-at-top
  gin = _parse(monkeypatch, "train", [
      "gin_configs/models/tiny.gin", f"gin_configs/runs/{run}.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"])
  model = _build_model(gin)
  assert isinstance(model.optimizer_def, optimizers.OptaxWrapper)
  variables = model.get_initial_variables(
      jax.random.PRNGKey(0), {"input_tokens": (2, 16)})
  assert "params" in variables and "params_axes" in variables
  if run.startswith("finetune_"):
    assert "mlm_head" not in variables["params"]
    assert gin.query_parameter(
        "utils.RestoreCheckpointConfig.fallback_to_scratch")


@needs_t5x
@pytest.mark.parametrize("task", sorted(TASK_FILES))
def test_eval_run_files_build_tiny_models(task, monkeypatch, clean_gin):
  gin = _parse(monkeypatch, "eval", [
      "gin_configs/models/tiny.gin", f"gin_configs/runs/eval_{task}.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"])
  model = _build_model(gin)
  assert type(model).__name__ == TASK_FILES[task][0]


@needs_t5x
def test_finetune_assignment_map_keeps_encoder_drops_rest(monkeypatch,
                                                         clean_gin):
  """T5X's assignment-map semantics on real train-state keys."""
  from t5x import state_utils  # pylint: disable=g-import-not-at-top
  gin = _parse(monkeypatch, "train", [
      "gin_configs/models/tiny.gin", "gin_configs/runs/finetune_pawsx.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"])
  rules = gin.query_parameter("utils.RestoreCheckpointConfig.assignment_map")
  ft = _build_model(gin)
  pt = models.RemBertMLMModel(network.RemBertForMaskedLM(ft.config))

  def state(model):
    params = model.get_initial_variables(
        jax.random.PRNGKey(0), {"input_tokens": (1, 8)})["params"]
    params = jax.tree_util.tree_map(np.asarray, params)
    return {"target": params,
            "state": {"step": np.int32(7), "param_states": {"mu": params}}}

  out = state_utils.apply_assignment_map(state(pt), state(ft), rules)
  flat = state_utils.flatten_state_dict(out)
  # What T5X restores is the intersection with the new model's state.
  ft_keys = set(state_utils.flatten_state_dict(state(ft)))
  restored = {k for k in flat if k in ft_keys}
  assert restored and all(k.startswith("target/encoder/") for k in restored)
  assert not any("mlm_head" in k for k in restored)
  assert not any(k.startswith("state/") for k in restored)


@needs_t5x
def test_model_parallel_overlay_builds_2x2_partitioner(monkeypatch,
                                                      clean_gin):
  if jax.device_count() % 2:
    pytest.skip("needs an even number of devices")
  gin = _parse(monkeypatch, "train", [
      "gin_configs/models/tiny.gin", "gin_configs/runs/pretrain_mlm.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin",
      "gin_configs/runs/t5x_cpu_model_parallel.gin"])
  partitioner = gin.query_parameter(
      "train_script.train.partitioner").scoped_configurable_fn()
  assert dict(partitioner.mesh.shape) == {"data": jax.device_count() // 2,
                                          "model": 2}
  rules = dict(partitioner._logical_axis_rules)  # pylint: disable=protected-access
  assert rules["vocab"] == "model" and rules["output_embed"] is None
  assert rules["joined_kv"] == "model"


@needs_t5x
def test_two_d_parameter_partitioning_maps_decoupled_widths_to_data(
    monkeypatch, clean_gin):
  gin = _parse(monkeypatch, "train", [
      "gin_configs/models/tiny.gin", "gin_configs/runs/pretrain_mlm.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"],
      ["PARAMETER_PARTITIONING_DIMS = 2"])
  rules = gin.query_parameter(
      "partitioning.PjitPartitioner.logical_axis_rules").scoped_configurable_fn()
  assert ("embed", "data") in rules  # T5X's own 2-D rule
  assert ("input_embed", "data") in rules and ("output_embed", "data") in rules


@needs_t5x
@pytest.mark.parametrize("run,script", [
    ("pretrain_mlm", "train"), ("finetune_pawsx", "train"),
    ("eval_pawsx", "eval")])
def test_t5x_run_files_pad_the_vocabulary(run, script, monkeypatch, clean_gin):
  gin = _parse(monkeypatch, script, [
      "gin_configs/models/paper/rembert.gin", f"gin_configs/runs/{run}.gin"])
  config = _build_model(gin).config
  assert config.vocab_pad_multiple == partitioning.T5X_VOCAB_PAD_MULTIPLE
  assert (config.vocab_size, config.padded_vocab_size) == (250300, 250368)
