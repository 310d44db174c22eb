"""Checks of the T5X run files in gin_configs/runs/ (not the local_*.gin ones).

Without T5X the files are checked as text against the package (model and
network classes exist, head sizes match the tasks, learning-rate arithmetic,
includes exist). With T5X importable, every run file is parsed by gin over
T5X's own run files and the model it binds is built and initialised;
`scripts/t5x_smoke.sh` runs them end to end.
"""

import glob
import importlib
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rembert_t5x.data import pieces
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import partitioning
from rembert_t5x import t5x_partitioning
from rembert_tasks import registry
from tests import test_utils

REPO = str(test_utils.REPO_ROOT)
RUNS = os.path.join(REPO, "gin_configs", "runs")
RUN_FILES = sorted(f for f in glob.glob(os.path.join(RUNS, "*.gin"))
                   if not os.path.basename(f).startswith("local_"))
T5X_RUN_FILES = ("t5x/configs/runs/pretrain.gin",
                 "t5x/configs/runs/finetune.gin", "t5x/configs/runs/eval.gin",
                 "t5x/configs/runs/infer.gin")
needs_t5x = test_utils.needs_t5x

# finetune/eval file -> (model class, network class, classes of the task).
TASK_FILES = {
    "xnli": ("RemBertPairClassificationModel",
             "RemBertForSequenceClassification", 3),
    "pawsx": ("RemBertPairClassificationModel",
              "RemBertForSequenceClassification", 2),
    "panx": ("RemBertTaggingModel", "RemBertForTokenClassification", 7),
    "udpos": ("RemBertTaggingModel", "RemBertForTokenClassification", 18),
    "xquad": ("RemBertQAModel", "RemBertForQuestionAnswering", None),
    "tydiqa": ("RemBertQAModel", "RemBertForQuestionAnswering", None),
}
# infer file -> (model class, task module with LABELS or None for QA, the
# t5x_infer writer it binds).
INFER_FILES = {
    "xnli": ("RemBertPairClassificationModel", "xnli",
             "write_pair_predictions"),
    "pawsx": ("RemBertPairClassificationModel", "pawsx",
              "write_pair_predictions"),
    "panx": ("RemBertTaggingModel", "panx", "write_tagging_predictions"),
    "udpos": ("RemBertTaggingModel", "udpos", "write_tagging_predictions"),
    "xquad": ("RemBertQAModel", None, "write_qa_windows"),
    "mlqa": ("RemBertQAModel", None, "write_qa_windows"),
    "tydiqa": ("RemBertQAModel", None, "write_qa_windows"),
}
# RemBERT's fine-tuning learning rates and batch sizes (paper Table 15;
# TyDiQA-GoldP has no row there: SQuAD's, our choice).
PAPER_LR = {"xnli": 1e-5, "pawsx": 8e-6, "panx": 8e-6, "udpos": 3e-5,
            "xquad": 9e-6, "tydiqa": 9e-6}
PAPER_BATCH = {"xnli": 128, "pawsx": 128, "panx": 64, "udpos": 128,
               "xquad": 128, "tydiqa": 128}
# The split each family reports (paper §4: dev sets; XQuAD has only test).
EVAL_SPLITS = {"xnli": "validation", "pawsx": "validation",
               "panx": "validation", "udpos": "validation", "xquad": "test",
               "mlqa": "validation", "tydiqa": "validation"}


def _read(name):
  with open(os.path.join(RUNS, name), encoding="utf-8") as f:
    return f.read()


def _macros(text):
  return dict(re.findall(r"^([A-Z_]+) = (.+?)\s*(?:#.*)?$", text, re.M))


def test_expected_run_files_exist():
  names = {os.path.basename(f) for f in RUN_FILES}
  for name in ["pretrain_mlm.gin", "t5x_cpu_tiny.gin",
               "t5x_cpu_model_parallel.gin"] + [
                   f"{kind}_{task}.gin" for task in [*TASK_FILES, "mlqa"]
                   for kind in ("finetune", "eval")] + [
                       f"infer_{task}.gin" for task in INFER_FILES]:
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
  for fn in re.findall(r"@?rembert_optimizer\.(\w+)", text):
    from rembert_t5x import optimizer  # pylint: disable=g-import-not-at-top
    assert hasattr(optimizer, fn), fn


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
                  "panx": ("rembert_tasks.panx", 7),
                  "udpos": ("rembert_tasks.udpos", 18)}
  if task in label_counts:
    module, n = label_counts[task]
    assert len(importlib.import_module(module).LABELS) == n


@pytest.mark.parametrize("task", sorted(INFER_FILES))
def test_infer_files_bind_model_writer_and_heads(task):
  model_cls, module, writer = INFER_FILES[task]
  text = _read(f"infer_{task}.gin")
  assert f"MODEL = @models.{model_cls}()" in text
  assert f"@t5x_infer.{writer}" in text
  assert hasattr(importlib.import_module("rembert_t5x.t5x_infer"), writer)
  assert "include 'gin_configs/runs/infer_base.gin'" in text
  if module is None:  # QA: the windows are merged per question
    assert "merge_fn = @t5x_infer.merge_qa_predictions" in text
    assert _macros(text)["TASK_FEATURE_LENGTHS"] == "{'input_tokens': 384}"
  else:
    if writer == "write_tagging_predictions":  # split sentences are joined
      assert "merge_fn = @t5x_infer.merge_tagging_predictions" in text
    labels = importlib.import_module(f"rembert_tasks.{module}").LABELS
    assert re.search(rf"num_classes = {len(labels)}$", text, re.M)
    assert _macros(text)["MIXTURE_OR_TASK_NAME"] == f"'rembert_{task}_en'"


@pytest.mark.parametrize("task", sorted(TASK_FILES))
def test_finetune_files_follow_table15_and_type_no_steps(task):
  m = _macros(_read(f"finetune_{task}.gin"))
  assert float(m["LEARNING_RATE"]) == PAPER_LR[task]
  assert int(m["BATCH_SIZE"]) == PAPER_BATCH[task]
  # Steps, warm-up, decay and the checkpoint/eval period are derived from
  # the dataset in finetune_base.gin, never typed into a task file.
  for derived in ("TRAIN_STEPS", "WARMUP_STEPS", "DECAY_FACTOR",
                  "EVAL_PERIOD", "INFER_EVAL_MIXTURE"):
    assert derived not in m, derived
  assert m["TRAIN_EVAL_TASK"].endswith("_en'")


def test_finetune_base_derives_steps_and_selects_per_epoch():
  m = _macros(_read("finetune_base.gin"))
  assert m["TRAIN_STEPS"] == "@protocol.train_steps()"
  assert m["EVAL_PERIOD"] == "@epoch/protocol.train_steps()"
  assert m["INFER_EVAL_MIXTURE"] == "%TRAIN_EVAL_TASK"
  assert int(m["EPOCHS"]) == 3
  # The warm-up is BERT's 10% of the steps; the decay rate follows from the
  # steps in optimizer.learning_rate_schedule (train_base.gin).
  assert m["WARMUP_STEPS"] == "@protocol.warmup_steps()"
  assert "DECAY_FACTOR" not in m
  text = _read("finetune_base.gin")
  assert "utils.SaveCheckpointConfig.period = %EVAL_PERIOD" in text
  assert "epoch/protocol.train_steps.epochs = 1" in text
  # MLQA trains exactly as XQuAD (one SQuAD-trained model).
  assert "include 'gin_configs/runs/finetune_xquad.gin'" in _read(
      "finetune_mlqa.gin")


@pytest.mark.parametrize("task", sorted(EVAL_SPLITS))
def test_eval_files_use_the_papers_split(task):
  m = _macros(_read(f"eval_{task}.gin"))
  assert m["EVAL_SPLIT"] == f"'{EVAL_SPLITS[task]}'"
  mixture = m["MIXTURE_OR_TASK_NAME"].strip("'")
  import seqio  # pylint: disable=g-import-not-at-top
  import rembert_tasks  # pylint: disable=g-import-not-at-top,unused-import
  # The split exists for the family's tasks (eval_base's old 'test' left
  # TyDiQA with no task at all).
  tasks = [t.name for t in seqio.get_mixture_or_task(mixture).tasks
           if EVAL_SPLITS[task] in t.splits and f"_{task}_" in t.name]
  assert tasks, (task, mixture)


def test_parameter_layout_is_the_same_in_every_t5x_run_file():
  """A checkpoint restores only into the layout it was saved with."""
  layouts = {name: (_macros(_read(name))["VOCAB_PAD_MULTIPLE"],
                    _macros(_read(name))["PARAMETER_PARTITIONING_DIMS"])
             for name in ("pretrain_mlm.gin", "finetune_base.gin",
                          "eval_base.gin", "infer_base.gin")}
  assert len(set(layouts.values())) == 1, layouts


def test_pretrain_schedule_matches_paper():
  text = _read("pretrain_mlm.gin")
  m = _macros(text)
  assert int(m["TRAIN_STEPS"]) == 1760000 and int(m["BATCH_SIZE"]) == 2048
  assert m["TASK_FEATURE_LENGTHS"] == "{'input_tokens': 512}"
  assert float(m["LEARNING_RATE"]) == 2e-4
  assert int(m["WARMUP_STEPS"]) == 15000
  assert "include 'gin_configs/runs/train_base.gin'" in text
  # Table 14's Adam settings are optimizer.adamw's defaults (train_base.gin
  # binds only its learning rate).
  import inspect  # pylint: disable=g-import-not-at-top
  from rembert_t5x import optimizer  # pylint: disable=g-import-not-at-top
  defaults = {k: p.default for k, p in
              inspect.signature(optimizer.adamw).parameters.items()}
  assert (defaults["b1"], defaults["b2"], defaults["eps"],
          defaults["weight_decay"], defaults["clip_norm"]) == (
              0.9, 0.999, 1e-6, 0.01, 1.0)


def test_explicit_mesh_shapes():
  n = jax.device_count()
  mesh = t5x_partitioning.explicit_mesh(1)
  assert dict(mesh.shape) == {"data": n, "model": 1}
  if n % 2 == 0:
    mesh = t5x_partitioning.explicit_mesh(2)
    assert dict(mesh.shape) == {"data": n // 2, "model": 2}
    # What the hand-built mesh was (devices reshaped in order, Auto axes):
    # jax.make_mesh keeps CPU devices in order.
    assert mesh == jax.sharding.Mesh(
        np.asarray(jax.devices()).reshape(n // 2, 2), ("data", "model"))
  with pytest.raises(ValueError, match="must divide"):
    t5x_partitioning.explicit_mesh(n + 1)


# --- With T5X ------------------------------------------------------------------


@needs_t5x
@pytest.mark.parametrize("run", ["pretrain_mlm"] + [
    f"finetune_{t}" for t in sorted(TASK_FILES)])
def test_train_run_files_build_tiny_models(run, monkeypatch, clean_gin):
  from t5x import optimizers  # pylint: disable=g-import-not-at-top
  gin = test_utils.parse_t5x_gin(monkeypatch, "train", [
      "gin_configs/models/tiny.gin", f"gin_configs/runs/{run}.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"])
  model = test_utils.build_gin_model(gin)
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
  gin = test_utils.parse_t5x_gin(monkeypatch, "eval", [
      "gin_configs/models/tiny.gin", f"gin_configs/runs/eval_{task}.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"])
  model = test_utils.build_gin_model(gin)
  assert type(model).__name__ == TASK_FILES[task][0]


@pytest.mark.parametrize("name", ["eval_tatoeba.gin", "eval_bucc.gin"])
def test_retrieval_eval_files_bind_the_retrieval_model(name):
  # eval_bucc.gin includes eval_tatoeba.gin and overrides some macros.
  text = _read("eval_tatoeba.gin") + _read(name)
  assert "MODEL = @models.RemBertRetrievalModel()" in text
  assert "@network.RemBertForRetrieval()" in text
  m = _macros(text)
  assert m["RETRIEVAL_LAYER"].startswith("None")  # XTREME's L/2 + 2
  assert m["RETRIEVAL_POOLING"] == "'mean'"
  assert m["EVAL_SPLIT"] == ("'validation'" if name == "eval_bucc.gin"
                            else "'test'")


@needs_t5x
@pytest.mark.parametrize("name", ["eval_tatoeba", "eval_bucc"])
def test_retrieval_eval_files_build_tiny_models(name, monkeypatch, clean_gin):
  gin = test_utils.parse_t5x_gin(monkeypatch, "eval", [
      "gin_configs/models/tiny.gin", f"gin_configs/runs/{name}.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"],
      bindings=["RETRIEVAL_LAYER = 1"])
  model = test_utils.build_gin_model(gin)
  assert isinstance(model, models.RemBertRetrievalModel)
  assert model.module.layer == 1
  variables = model.get_initial_variables(
      jax.random.PRNGKey(0), {"input_tokens": (2, 16)})
  assert set(variables["params"]) == {"encoder"}
  split = gin.query_parameter("EVAL_SPLIT/macro.value")
  assert split == ("validation" if name == "eval_bucc" else "test")


@needs_t5x
def test_finetune_steps_are_derived_from_the_dataset(monkeypatch, clean_gin):
  """TRAIN_STEPS, EVAL_PERIOD, warm-up and decay as T5X's gin evaluates them,
  over a counted 50-example task at batch 8: 7 steps per epoch, 3 epochs."""
  import seqio  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def dataset_fn(split, shuffle_files, seed=None):
    del split, shuffle_files, seed
    return tf.data.Dataset.from_tensor_slices({"x": list(range(50))})

  registry.add_task("runs_test_count_en", source=seqio.FunctionDataSource(
      dataset_fn, splits=["train"]), output_features={})
  gin = test_utils.parse_t5x_gin(monkeypatch, "train", [
      "gin_configs/models/tiny.gin", "gin_configs/runs/finetune_pawsx.gin"],
      ["MIXTURE_OR_TASK_NAME = 'runs_test_count_en'", "BATCH_SIZE = 8",
       "MIXTURE_OR_TASK_MODULE = None"])

  def value(macro):
    return gin.query_parameter(f"{macro}/macro.value").scoped_configurable_fn()

  assert value("TRAIN_STEPS") == 21 and value("EVAL_PERIOD") == 7
  assert value("WARMUP_STEPS") == 2
  # The optimizer's schedule decays linearly over the other 19 steps.
  schedule = gin.query_parameter(
      "rembert_optimizer.adamw.learning_rate").scoped_configurable_fn()
  peak = gin.query_parameter("LEARNING_RATE/macro.value")
  for step, want in ((1, peak / 2), (2, peak), (12, peak * 9 / 19), (21, 0.0)):
    assert float(schedule(step)) == pytest.approx(want, rel=1e-5, abs=1e-12)


@needs_t5x
def test_finetune_assignment_map_keeps_encoder_drops_rest(monkeypatch,
                                                         clean_gin):
  """T5X's assignment-map semantics on real train-state keys."""
  from t5x import state_utils  # pylint: disable=g-import-not-at-top
  gin = test_utils.parse_t5x_gin(monkeypatch, "train", [
      "gin_configs/models/tiny.gin", "gin_configs/runs/finetune_pawsx.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"])
  rules = gin.query_parameter("utils.RestoreCheckpointConfig.assignment_map")
  ft = test_utils.build_gin_model(gin)
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
  gin = test_utils.parse_t5x_gin(monkeypatch, "train", [
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
  gin = test_utils.parse_t5x_gin(monkeypatch, "train", [
      "gin_configs/models/tiny.gin", "gin_configs/runs/pretrain_mlm.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"],
      ["PARAMETER_PARTITIONING_DIMS = 2"])
  rules = gin.query_parameter(
      "partitioning.PjitPartitioner.logical_axis_rules").scoped_configurable_fn()
  assert ("embed", "data") in rules  # T5X's own 2-D rule
  assert ("input_embed", "data") in rules and ("output_embed", "data") in rules


@needs_t5x
@pytest.mark.parametrize("run,script,bindings", [
    ("pretrain_mlm", "train", ()),
    # The schedule in the model's optimiser needs TRAIN_STEPS, which
    # fine-tuning derives from the task's size ('unused' has none).
    ("finetune_pawsx", "train", ("TRAIN_STEPS = 100",)),
    ("eval_pawsx", "eval", ())])
def test_t5x_run_files_pad_the_vocabulary(run, script, bindings, monkeypatch,
                                          clean_gin):
  gin = test_utils.parse_t5x_gin(monkeypatch, script, [
      "gin_configs/models/paper/rembert.gin", f"gin_configs/runs/{run}.gin"],
               bindings)
  config = test_utils.build_gin_model(gin).config
  assert config.vocab_pad_multiple == partitioning.T5X_VOCAB_PAD_MULTIPLE
  assert (config.vocab_size, config.padded_vocab_size) == (250300, 250368)


@needs_t5x
@pytest.mark.parametrize("task", sorted(INFER_FILES))
def test_infer_run_files_build_tiny_models(task, monkeypatch, clean_gin):
  from rembert_t5x import t5x_infer  # pylint: disable=g-import-not-at-top
  gin = test_utils.parse_t5x_gin(monkeypatch, "infer", [
      "gin_configs/models/tiny.gin", f"gin_configs/runs/infer_{task}.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"])
  model = test_utils.build_gin_model(gin)
  assert type(model).__name__ == INFER_FILES[task][0]
  write_fn = gin.query_parameter("infer_script.infer.write_fn")
  assert write_fn.scoped_configurable_fn.__name__ == INFER_FILES[task][2]
  verify = gin.query_parameter("infer_script.infer.verify_matching_vocabs_fn")
  assert (verify.scoped_configurable_fn.__name__ ==
          t5x_infer.verify_task_vocabulary.__name__)
  assert gin.query_parameter("utils.RestoreCheckpointConfig.dtype") == "float32"


@needs_t5x
def test_pretrain_train_eval_off_without_a_validation_split(monkeypatch,
                                                            clean_gin):
  name = test_utils.register_random_mlm_task()  # a 'train' split only

  def train_eval_config(*bindings):
    gin = test_utils.parse_t5x_gin(monkeypatch, "train", [
        "gin_configs/models/tiny.gin", "gin_configs/runs/pretrain_mlm.gin",
        "gin_configs/runs/t5x_cpu_tiny.gin"],
                 [f"MIXTURE_OR_TASK_NAME = '{name}'",
                  "MIXTURE_OR_TASK_MODULE = None", *bindings])
    return gin.query_parameter(
        "train_script.train.train_eval_dataset_cfg").scoped_configurable_fn()

  assert train_eval_config() is None
  # With the split, T5X's own train-eval config comes through unchanged.
  config = train_eval_config("train_eval/utils.DatasetConfig.split = 'train'")
  assert (config.mixture_or_task_name, config.split) == (name, "train")


@needs_t5x
def test_vocabulary_hook_follows_the_checkpoint(monkeypatch, clean_gin,
                                                tmp_path):
  """INITIAL_CHECKPOINT_PATH's vocabulary reaches the tasks and MODEL_DIR.

  As `t5x-native` leaves it: `C/sentencepiece.model` beside
  `C/checkpoint_0`. Building the model (what t5x.train does before any
  dataset) makes it the lazy tasks' vocabulary and copies it into
  MODEL_DIR, where the t5x.eval run files find it from CHECKPOINT_PATH.
  """
  import seqio  # pylint: disable=g-import-not-at-top
  from rembert_t5x.data import vocabulary  # pylint: disable=g-import-not-at-top
  import rembert_tasks  # pylint: disable=g-import-not-at-top,unused-import
  monkeypatch.delenv(vocabulary.SPM_PATH_ENV, raising=False)
  corpus = tmp_path / "en.txt"
  corpus.write_text("the cat sat on a mat\nthe dog ran far away\n" * 40,
                    "utf-8")
  trained = pieces.train_sentencepiece(
      {"en": [str(corpus)]}, str(tmp_path / "spm"), 24,
      character_coverage=1.0)
  (tmp_path / "C").mkdir()
  checkpoint_vocab = vocabulary.move_special_pieces(
      trained, str(tmp_path / "C" / pieces.VOCABULARY_FILENAME),
      {"[CLS]": 20, "[SEP]": 21, "[MASK]": 22})
  model_dir = tmp_path / "ft"
  gin = test_utils.parse_t5x_gin(monkeypatch, "train", [
      "gin_configs/models/tiny.gin", "gin_configs/runs/finetune_pawsx.gin",
      "gin_configs/runs/t5x_cpu_tiny.gin"],
               [f"INITIAL_CHECKPOINT_PATH = '{tmp_path}/C/checkpoint_0'",
                f"MODEL_DIR = '{model_dir}'"])
  model = test_utils.build_gin_model(gin)
  task_vocab = seqio.get_mixture_or_task(
      "rembert_pawsx_train_en").output_features["input_tokens"].vocabulary
  assert vocabulary.special_ids(task_vocab) == pieces.SpecialIds(
      pad=0, unk=1, cls=20, sep=21, mask=22)
  assert model.input_vocabulary == task_vocab
  copied = model_dir / pieces.VOCABULARY_FILENAME
  assert copied.read_bytes() == open(checkpoint_vocab, "rb").read()

  # t5x.eval of the fine-tuned run: found through CHECKPOINT_PATH.
  vocabulary.use_checkpoint_vocabulary()
  gin = test_utils.parse_t5x_gin(monkeypatch, "eval", [
      "gin_configs/models/tiny.gin", "gin_configs/runs/eval_pawsx.gin"],
               [f"CHECKPOINT_PATH = '{model_dir}/checkpoint_4'"])
  test_utils.build_gin_model(gin)
  assert vocabulary.default_model_file() == str(copied)

  # An explicit SENTENCEPIECE_MODEL wins over $REMBERT_SPM_PATH and the
  # checkpoint's.
  monkeypatch.setenv(vocabulary.SPM_PATH_ENV, trained)
  gin = test_utils.parse_t5x_gin(monkeypatch, "eval", [
      "gin_configs/models/tiny.gin", "gin_configs/runs/eval_pawsx.gin"],
               [f"CHECKPOINT_PATH = '{model_dir}/checkpoint_4'",
                f"SENTENCEPIECE_MODEL = '{checkpoint_vocab}'"])
  test_utils.build_gin_model(gin)
  assert vocabulary.default_model_file() == checkpoint_vocab
  assert vocabulary.special_ids(task_vocab).cls == 20


@needs_t5x
@pytest.mark.parametrize("cpu", [False, True])
def test_training_run_files_compute_in_bfloat16_on_accelerators(
    cpu, monkeypatch, clean_gin):
  """train_base.gin: bf16 activations, float32 params; CPU overlay: f32."""
  files = ["gin_configs/models/tiny.gin", "gin_configs/runs/pretrain_mlm.gin"]
  gin = test_utils.parse_t5x_gin(
      monkeypatch, "train",
      files + (["gin_configs/runs/t5x_cpu_tiny.gin"] if cpu else []))
  config = test_utils.build_gin_model(gin).config
  assert jnp.dtype(config.dtype) == (jnp.float32 if cpu else jnp.bfloat16)
  assert jnp.dtype(config.param_dtype) == jnp.float32
