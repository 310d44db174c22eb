"""The local runner: training, checkpoints, resume, sharding, user errors."""

import contextlib
import dataclasses
import inspect
import io
import json
import os
import pathlib
import re
import shutil

import gin
import numpy as np
import pytest

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x import configs
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import train
from rembert_t5x.runner import train_config
from tests import test_utils

RUN_GIN = test_utils.tiny_run_gin(train_steps=4, learning_rate=1e-3,
                                  log_period=2, mesh_shape=None)


# The tiny MLM task RUN_GIN names; `run_gin` (conftest.py) writes RUN_GIN.
pytestmark = pytest.mark.usefixtures("random_mlm_task")


def _main(*argv):
  train._main(cli.parse_gin_args(list(argv)))


def _metrics(model_dir):
  lines = (pathlib.Path(model_dir) / "metrics.jsonl").read_text().splitlines()
  return [json.loads(l) for l in lines]


def _train(model_dir, steps, mesh_shape=(1, 1), **kwargs):
  configs.parse_gin([])  # no bindings: explicit arguments only
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(test_utils.TINY_CONFIG))
  return train.train(
      str(model_dir), model=model, mixture_or_task_name="test_random_mlm",
      task_feature_lengths={"input_tokens": 16}, train_steps=steps,
      batch_size=8, learning_rate=1e-3, checkpoint_period=2, log_period=2,
      mesh_shape=mesh_shape, progress_bar=False, **kwargs)


@pytest.fixture(scope="module")
def gin_run(tmp_path_factory):
  """One run of RUN_GIN (4 steps) and what it printed: (model_dir, stdout).

  Tests that continue or refuse to continue it work on a copy
  (`_copy_of`)."""
  test_utils.register_random_mlm_task()
  work = tmp_path_factory.mktemp("gin_run")
  (work / "run.gin").write_text(RUN_GIN)
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    _main(f"--gin_file={work / 'run.gin'}", f"--gin.MODEL_DIR='{work / 'm'}'")
  gin.clear_config()
  return work / "m", out.getvalue()


def _copy_of(gin_run, tmp_path):
  model_dir = tmp_path / "m"
  shutil.copytree(gin_run[0], model_dir)
  return model_dir


def test_gin_run_trains_logs_and_checkpoints(gin_run):
  model_dir, stdout = gin_run
  records = _metrics(model_dir)
  assert [r["step"] for r in records] == [2, 4]
  for r in records:
    assert {"loss", "learning_rate", "tokens_per_s", "grad_norm"} <= set(r)
    assert np.isfinite(r["loss"])
  assert sorted(p.name for p in (model_dir / "checkpoints").iterdir()
                if p.name.isdigit()) == ["2", "4"]
  assert list(model_dir.glob("events.out.tfevents.*"))
  assert "train.train_steps = 4" in (model_dir / "config.gin").read_text()
  assert json.loads(stdout.strip().splitlines()[-1])["loss"] == records[-1]["loss"]


def test_restart_resumes_from_latest_checkpoint(gin_run, run_gin, tmp_path):
  model_dir = _copy_of(gin_run, tmp_path)
  first = _metrics(model_dir)
  _main(f"--gin_file={run_gin}", f"--gin.MODEL_DIR='{model_dir}'",
        "--gin.train.train_steps=6")
  records = _metrics(model_dir)
  assert [r["step"] for r in records] == [2, 4, 6]
  assert records[:2] == first  # nothing already written is lost


def test_data_and_model_parallel_mesh_gives_the_same_losses(tmp_path):
  """A data=2 x model=2 mesh computes what one device computes."""
  one = _train(tmp_path / "one", 4, mesh_shape=(1, 1))
  sharded = _train(tmp_path / "sharded", 4, mesh_shape=(2, 2))
  np.testing.assert_allclose(sharded["loss"], one["loss"], rtol=1e-5)
  np.testing.assert_allclose(sharded["grad_norm"], one["grad_norm"], rtol=1e-4)


def test_gradient_accumulation_matches_the_full_batch(tmp_path):
  full = _train(tmp_path / "full", 2)
  accumulated = _train(tmp_path / "acc", 2, grad_accum_steps=2)
  np.testing.assert_allclose(accumulated["learning_rate"], full["learning_rate"])
  # Micro-batch losses are shares of the full batch's mean (the MLM rows
  # carry different numbers of masked positions): the same loss and gradient.
  np.testing.assert_allclose(accumulated["loss"], full["loss"], rtol=1e-4)
  np.testing.assert_allclose(accumulated["grad_norm"], full["grad_norm"],
                             rtol=1e-3)


def test_finetuning_from_a_pretraining_checkpoint(tmp_path):
  _train(tmp_path / "pre", 2)
  params = checkpoints.load_params(str(tmp_path / "pre"))
  assert "mlm_head" in params
  cls = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(test_utils.TINY_CONFIG, 3))
  fresh = cls.get_initial_variables(
      __import__("jax").random.PRNGKey(0), {"input_tokens": (2, 16)})["params"]
  merged = models.finetuning_params_from_pretraining(params, fresh, 2)
  np.testing.assert_array_equal(
      merged["encoder"]["embeddings"]["word_embeddings"]["embedding"],
      params["encoder"]["embeddings"]["word_embeddings"]["embedding"])


def test_train_arguments_are_the_config_fields():
  """`train.train` (the gin-facing entry) takes `model` and the config's
  fields with their defaults; the required fields are gin.REQUIRED."""
  parameters = inspect.signature(train.train).parameters
  fields = dataclasses.fields(train_config.TrainConfig)
  assert list(parameters) == ["model_dir", "model"] + [
      f.name for f in fields][1:]
  for field in fields:
    assert parameters[field.name].default == (
        gin.REQUIRED if field.default is dataclasses.MISSING
        else field.default), field.name
  assert parameters["model"].default is gin.REQUIRED
  assert train_config.TrainConfig(
      mixture_or_task_name="t", task_feature_lengths={"input_tokens": 8},
      train_steps=1).adamw_settings == {
          "b1": 0.9, "b2": 0.999, "eps": 1e-6, "weight_decay": 0.01,
          "clip_norm": 1.0}


def test_nonfinite_stop_names_the_step_between_log_steps(tmp_path):
  """A non-finite step that neither logs nor saves is still the one named.

  Every example has an infinite loss weight, so step 1 is the first
  non-finite step; it is checked after step 2 has been dispatched.
  """
  test_utils.register_random_mlm_task("test_all_inf_mlm",
                                      first_weight=lambda i: np.inf)
  configs.parse_gin([])
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(test_utils.TINY_CONFIG))
  model_dir = tmp_path / "m"
  with pytest.raises(errors.UserError, match=re.escape(
      "non-finite loss or gradient at step 1 (") + ".*last good checkpoint "
                     "is none"):
    train.train(str(model_dir), model=model,
                mixture_or_task_name="test_all_inf_mlm",
                task_feature_lengths={"input_tokens": 16}, train_steps=4,
                batch_size=8, checkpoint_period=4, log_period=4,
                mesh_shape=(1, 1), progress_bar=False)
  assert not [p for p in (model_dir / "checkpoints").iterdir()
              if p.name.isdigit()]
  assert not (model_dir / "metrics.jsonl").exists()


@pytest.mark.parametrize("binding,message", [
    ("--gin.train.train.mixture_or_task_name='no_such_task'",
     "unknown task or mixture 'no_such_task'"),
    ("--gin.train.train.batch_sise=3", "batch_sise"),
])
def test_user_errors_are_one_line(run_gin, tmp_path, capsys, binding, message):
  with pytest.raises(SystemExit) as e:
    cli.run_main(train._main, [f"--gin_file={run_gin}",
                              f"--gin.MODEL_DIR='{tmp_path / 'm'}'", binding])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: ") and message in err
  assert len(err.splitlines()) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_model_dir(run_gin, tmp_path):
  locked = tmp_path / "locked"
  locked.mkdir(mode=0o500)
  with pytest.raises(errors.UserError, match="is not writable"):
    _main(f"--gin_file={run_gin}", f"--gin.MODEL_DIR='{locked / 'm'}'")


def test_model_dir_that_is_a_file(run_gin, tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("not a directory")
  with pytest.raises(errors.UserError, match=f"MODEL_DIR {blocker / 'm'} is not writable"):
    _main(f"--gin_file={run_gin}", f"--gin.MODEL_DIR='{blocker / 'm'}'")


def test_checkpoint_of_another_architecture_is_refused(gin_run, run_gin,
                                                       tmp_path):
  model_dir = _copy_of(gin_run, tmp_path)
  before = sorted(p.name for p in (model_dir / "checkpoints").iterdir())
  metrics_before = (model_dir / "metrics.jsonl").read_text()
  with pytest.raises(errors.UserError, match=r"parameter .* has shape .* this model expects"):
    _main(f"--gin_file={run_gin}", f"--gin.MODEL_DIR='{model_dir}'",
          "--gin.EMBED_DIM=128", "--gin.NUM_HEADS=8", "--gin.train.train_steps=6")
  assert sorted(p.name for p in (model_dir / "checkpoints").iterdir()) == before
  assert (model_dir / "metrics.jsonl").read_text() == metrics_before


def test_missing_model_dir(run_gin, tmp_path):
  with pytest.raises(errors.UserError, match="MODEL_DIR is not set"):
    _main(f"--gin_file={run_gin}")
  # A run file that does not bind train.train.model_dir = %MODEL_DIR: the
  # error says so, and a --gin.MODEL_DIR it would ignore is refused.
  unbound = tmp_path / "unbound.gin"
  unbound.write_text(RUN_GIN.replace("  model_dir = %MODEL_DIR\n", ""))
  with pytest.raises(errors.UserError, match=re.escape(
      "MODEL_DIR is not set: the run file binds no train.train.model_dir")):
    _main(f"--gin_file={unbound}")
  with pytest.raises(errors.UserError, match="no gin file of this run uses the "
                     "macro MODEL_DIR"):
    _main(f"--gin_file={unbound}", f"--gin.MODEL_DIR='{tmp_path / 'm'}'")
  assert not (tmp_path / "m").exists()


def test_parse_gin_args():
  """T5X's gin flags, both value forms, and --gin.KEY=VALUE bindings."""
  args = cli.parse_gin_args(["--gin_file=a.gin", "--gin_file", "b.gin",
                             "--gin.X=3", "--gin.Y", "'s'",
                             "--gin_bindings=Z = 1", "--gin_search_paths=.,x"])
  assert args.gin_file == ["a.gin", "b.gin"]
  assert args.gin_bindings == ["X = 3", "Y = 's'", "Z = 1"]
  assert args.gin_search_paths == [".", "x"]
  for argv, message in [
      (["--gin_file=a.gin", "--lr=3"], "unknown flag --lr=3"),
      (["--gin_file=a.gin", "--gin_fil=b.gin"],
       "unknown flag --gin_fil=b.gin (did you mean --gin_file?)"),
      (["--gin.X=3"], "no --gin_file given"),
      (["--gin_file=a.gin", "extra"], "unexpected arguments: extra"),
      (["--gin_file"], "Missing value for flag --gin_file")]:
    with pytest.raises(errors.UserError, match=re.escape(message)):
      cli.parse_gin_args(argv)


@pytest.mark.parametrize("argv,message", [
    (["--gin_file=a.gin", "--lr=3"], "error: unknown flag --lr=3 (see --help)"),
    ([], "error: no --gin_file given (see --help)")])
def test_flag_errors_exit_2_with_one_line(argv, message, capsys):
  with pytest.raises(SystemExit) as e:
    cli.run_main(train._main, argv)
  assert e.value.code == 2
  assert capsys.readouterr().err.splitlines() == [message]


def test_help_lists_the_flags_and_exits_0(capsys):
  with pytest.raises(SystemExit) as e:
    cli.run_main(train._main, ["--help"], doc=train.__doc__)
  assert e.value.code == 0
  out = capsys.readouterr().out
  assert out.startswith("Local runner: train a RemBERT model")
  for flag in ("--gin_file", "--gin_bindings", "--gin_search_paths"):
    assert flag in out


@pytest.mark.parametrize("run", ["local_tiny_pretrain", "local_tiny_finetune_pair",
                                 "local_tiny_finetune_tag", "local_tiny_finetune_qa"])
def test_local_run_files_take_t5x_macros(run):
  """T5X's macro names, with T5X's meanings, reach the local runner."""
  bindings = ["MODEL_DIR = '/tmp/unused'", "MIXTURE_OR_TASK_NAME = 'my_task'",
              "MIXTURE_OR_TASK_MODULE = 'my_module'", "TRAIN_STEPS = 7",
              "BATCH_SIZE = 4", "TASK_FEATURE_LENGTHS = {'input_tokens': 8}"]
  if "finetune" in run:
    bindings.append("INITIAL_CHECKPOINT_PATH = '/pre/m'")
  # The same parse as `python -m rembert_t5x.runner.train`.
  configs.parse_gin([f"gin_configs/runs/{run}.gin"], bindings)
  bound = gin.get_bindings(train.train, resolve_references=True)
  assert bound["model_dir"] == "/tmp/unused"  # bound, as T5X's run files do
  assert bound["mixture_or_task_name"] == "my_task"
  assert bound["mixture_or_task_module"] == "my_module"
  assert bound["train_steps"] == 7 and bound["batch_size"] == 4
  assert bound["task_feature_lengths"] == {"input_tokens": 8}
  if "finetune" in run:
    assert bound["init_checkpoint"] == "/pre/m"
