"""Local evaluation through SeqIO's evaluator, on the synthetic tasks."""

import json
import re

import numpy as np
import pytest

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x import configs
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import protocol
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import eval as eval_lib
from rembert_t5x.runner import predict_batches
from rembert_t5x.runner import train
from tests import test_utils


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
  return test_utils.register_tiny_synthetic(
      tmp_path_factory.mktemp("synthetic"), "evaltest_")


CONFIG = network.RemBertConfig(
    vocab_size=400, input_embed_dim=16, emb_dim=32, output_embed_dim=24,
    num_layers=1, num_heads=2, head_dim=16, mlp_dim=64,
    max_position_embeddings=128)


@pytest.mark.parametrize("family,model,length", [
    ("pair", models.RemBertPairClassificationModel(
        network.RemBertForSequenceClassification(CONFIG, 2)), 64),
    ("qa", models.RemBertQAModel(network.RemBertForQuestionAnswering(CONFIG),
                                 max_answer_length=12), 96),
])
def test_train_then_evaluate_every_language(tasks, tmp_path, family, model, length):
  configs.parse_gin([])
  lengths = {"input_tokens": length}
  train.train(str(tmp_path / "m"), model=model,
              mixture_or_task_name=f"evaltest_{family}_train",
              task_feature_lengths=lengths, train_steps=2, batch_size=8,
              checkpoint_period=2, progress_bar=False)
  params = checkpoints.load_params(str(tmp_path / "m"))
  results = eval_lib.evaluate_params(model, params, tasks[family],
                                     "validation", lengths, batch_size=8)
  langs = {protocol.task_language(t) for t in results}
  assert langs == {"qla", "qcy", "qgr", "qdv"}
  for metrics in results.values():
    main = eval_lib.main_metric(metrics)
    assert 0.0 <= metrics[main] <= 100.0
  record = eval_lib.write_results(str(tmp_path / "eval"), results, "test")
  saved = json.loads((tmp_path / "eval" / "results.json").read_text())
  assert saved["tasks"] == record["tasks"]
  table = (tmp_path / "eval" / "results.md").read_text()
  assert "| qdv |" in table and "**avg**" in table
  assert (tmp_path / "eval" / "results.png").stat().st_size > 0


def test_predict_fn_puts_params_on_the_device_once():
  """No implicit host-to-device copy of the parameters per batch."""
  import jax  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(CONFIG, 2))
  shapes = {"input_tokens": (4, 8), "token_types": (4, 8), "label": (4, 1)}
  params = jax.device_get(model.get_initial_variables(
      jax.random.PRNGKey(0), shapes)["params"])  # host numpy, as loaded
  rng = np.random.default_rng(0)
  features = {"input_tokens": rng.integers(5, 400, (7, 8)).astype(np.int32),
              "token_types": np.zeros((7, 8), np.int32),
              "label": np.zeros((7, 1), np.int32)}
  ds = tf.data.Dataset.from_tensor_slices(features).enumerate()
  predict_fn = predict_batches.make_predict_fn(model, params, batch_size=4)
  # Explicit transfers (device_put/device_get) pass; an implicit copy of
  # host arrays into the jitted call raises.
  with jax.transfer_guard("disallow"):
    outputs = predict_fn(ds)
  assert [i for i, _ in outputs] == list(range(7))  # last batch unpadded
  want = np.asarray(model.predict_batch(params, features))
  np.testing.assert_array_equal(np.stack([p for _, p in outputs]), want)


def test_language_table_and_helpers():
  metrics = {"x_pair_de": {"accuracy": 80.0}, "x_pair_en": {"accuracy": 90.0}}
  table = eval_lib.language_table(metrics, chance={"de": 50.0, "en": 50.0})
  assert "| x_pair | de | 80.0 | 50.0 |" in table
  assert "| x_pair | **avg** | 85.0 |" in table
  assert protocol.task_language("rembert_xnli_de") == "de"
  assert protocol.task_family("rembert_local_mlqa_en") == "rembert_local_mlqa"
  assert eval_lib.main_metric({"exact_match": 1, "f1": 2, "xtreme": 3}) == "xtreme"


def test_results_are_keyed_by_full_task_name(tmp_path):
  """rembert_mlqa_en and rembert_squad_en both end in `en`: two rows."""
  metrics = {"rembert_mlqa_en": {"exact_match": 40.0, "f1": 60.0},
             "rembert_mlqa_de": {"exact_match": 30.0, "f1": 50.0},
             "rembert_squad_en": {"exact_match": 80.0, "f1": 88.0}}
  record = eval_lib.write_results(str(tmp_path), metrics, "mlqa")
  assert record["families"] == {
      "rembert_mlqa": {"de": metrics["rembert_mlqa_de"],
                       "en": metrics["rembert_mlqa_en"]},
      "rembert_squad": {"en": metrics["rembert_squad_en"]}}
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["tasks"] == metrics and "languages" not in saved
  table = (tmp_path / "results.md").read_text()
  assert "| rembert_mlqa | en | 40.0 | 60.0 |" in table
  assert "| rembert_squad | en | 80.0 | 88.0 |" in table
  assert "| rembert_mlqa | **avg** | 35.0 | 55.0 |" in table


def _save_checkpoint(model_dir, step, params):
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  mngr = ocp.CheckpointManager(model_dir / "checkpoints")
  mngr.save(step, args=ocp.args.StandardSave({"params": params}), force=True)
  mngr.wait_until_finished()
  mngr.close()


def test_selection_picks_the_best_english_dev_checkpoint(tmp_path):
  """Three checkpoints whose dev accuracies are 0, 100 and 0: the middle one
  (neither the first nor the last) is selected and evaluated."""
  import jax  # pylint: disable=g-import-not-at-top
  test_utils.register_constant_pair_task("evaltest_select_en", label=1)
  test_utils.register_constant_pair_task("evaltest_select_de", label=0)
  model = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(test_utils.TINY_CONFIG, 2))
  params = jax.tree_util.tree_map(np.asarray, model.get_initial_variables(
      jax.random.PRNGKey(0), {"input_tokens": (1, 8)})["params"])

  def always(label):
    p = jax.tree_util.tree_map(np.copy, params)
    p["classifier"]["kernel"][:] = 0.0
    p["classifier"]["bias"][:] = [5.0, -5.0] if label == 0 else [-5.0, 5.0]
    return p

  for step, label in ((10, 0), (20, 1), (30, 0)):
    _save_checkpoint(tmp_path / "m", step, always(label))
  lengths = {"input_tokens": 8}
  record = eval_lib.evaluate(
      str(tmp_path / "m"), str(tmp_path / "out"), model=model,
      mixture_or_task_name="evaltest_select_de", task_feature_lengths=lengths,
      batch_size=4, selection_task="evaltest_select_en")
  assert record["selection"] == {
      "task": "evaltest_select_en", "split": "validation", "step": 20,
      "scores": {"10": 0.0, "20": 100.0, "30": 0.0}}
  # The selected checkpoint (always 1), not the latest (always 0), was
  # evaluated on the other task.
  assert record["tasks"]["evaltest_select_de"]["accuracy"] == 0.0
  saved = json.loads((tmp_path / "out" / "results.json").read_text())
  assert saved["selection"]["step"] == 20
  latest = eval_lib.evaluate(
      str(tmp_path / "m"), str(tmp_path / "out2"), model=model,
      mixture_or_task_name="evaltest_select_de", task_feature_lengths=lengths,
      batch_size=4)
  assert latest["tasks"]["evaltest_select_de"]["accuracy"] == 100.0
  assert "selection" not in latest


def test_eval_cli_needs_checkpoint_path(tmp_path):
  run = "gin_configs/runs/local_tiny_eval_pair.gin"
  with pytest.raises(errors.UserError, match="CHECKPOINT_PATH is not set"):
    eval_lib._main(cli.parse_gin_args([
        f"--gin_file={run}", f"--gin.EVAL_OUTPUT_DIR='{tmp_path}'"]))
  with pytest.raises(errors.UserError, match="EVAL_OUTPUT_DIR is not set"):
    eval_lib._main(cli.parse_gin_args([
        f"--gin_file={run}", f"--gin.CHECKPOINT_PATH='{tmp_path}'"]))
  # Gin files that do not bind the directories: the error names the binding.
  configs.parse_gin([])
  with pytest.raises(errors.UserError, match=re.escape(
      "CHECKPOINT_PATH is not set: the gin files bind no "
      "eval_lib.evaluate.checkpoint_dir")):
    eval_lib.evaluate(model=None, mixture_or_task_name="unused")


def test_evaluate_missing_checkpoint_is_a_user_error(tasks, tmp_path):
  model = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(CONFIG, 2))
  configs.parse_gin([])
  with pytest.raises(errors.UserError, match="no such directory"):
    eval_lib.evaluate(str(tmp_path / "nothing"), str(tmp_path / "out"),
                      model=model, mixture_or_task_name=tasks["pair"])
  assert not (tmp_path / "out").exists()


def test_local_run_files_train_then_evaluate_the_named_tasks(tasks, tmp_path):
  """The shipped local pair files, with T5X macros pointing at other tasks."""
  del tasks  # registers the evaltest_* tasks
  model_dir, out = tmp_path / "ft", tmp_path / "eval"
  # The tasks are registered already: no module to import.
  common = ["--gin.MIXTURE_OR_TASK_MODULE=None", "--gin.BATCH_SIZE=8"]
  train._main(cli.parse_gin_args([
      "--gin_file=gin_configs/runs/local_tiny_finetune_pair.gin",
      f"--gin.MODEL_DIR='{model_dir}'", "--gin.TRAIN_STEPS=2",
      "--gin.MIXTURE_OR_TASK_NAME='evaltest_pair_train'",
      "--gin.train.train.progress_bar=False", *common]))
  assert json.loads((model_dir / "metrics.jsonl").read_text()
                    .splitlines()[-1])["step"] == 2
  eval_lib._main(cli.parse_gin_args([
      "--gin_file=gin_configs/runs/local_tiny_eval_pair.gin",
      f"--gin.CHECKPOINT_PATH='{model_dir}'", f"--gin.EVAL_OUTPUT_DIR='{out}'",
      "--gin.MIXTURE_OR_TASK_NAME='evaltest_pair_qcy'", *common]))
  # Only the named task (one language), not the file's zero-shot mixture.
  saved = json.loads((out / "results.json").read_text())
  assert list(saved["tasks"]) == ["evaltest_pair_qcy"]


@pytest.mark.parametrize("files", [
    ["gin_configs/runs/local_tiny_eval_pair.gin"],
    ["gin_configs/runs/local_tiny_eval_tag.gin"],
    ["gin_configs/runs/local_tiny_eval_qa.gin"],
    ["gin_configs/models/tiny.gin", "gin_configs/runs/local_eval_retrieval.gin"],
])
def test_local_eval_files_take_t5x_macros(files):
  """T5X's eval macros, with T5X's meanings, reach the local evaluator."""
  import gin  # pylint: disable=g-import-not-at-top
  # The same parse as `python -m rembert_t5x.runner.eval`.
  configs.parse_gin(files, [
      "CHECKPOINT_PATH = '/ck'", "EVAL_OUTPUT_DIR = '/out'",
      "MIXTURE_OR_TASK_NAME = 'my_task'", "MIXTURE_OR_TASK_MODULE = 'my_module'",
      "TASK_FEATURE_LENGTHS = {'input_tokens': 8}"])
  bound = gin.get_bindings(eval_lib.evaluate, resolve_references=True)
  # Bound, as T5X's eval.gin binds them.
  assert (bound["checkpoint_dir"], bound["output_dir"]) == ("/ck", "/out")
  assert bound["mixture_or_task_name"] == "my_task"
  assert bound["mixture_or_task_module"] == "my_module"
  assert bound["task_feature_lengths"] == {"input_tokens": 8}
