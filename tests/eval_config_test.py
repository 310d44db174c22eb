"""The evaluation's settings: `eval.evaluate`'s gin signature and its
paths (the evaluation, and the messages for unset directories:
eval_test.py)."""

import dataclasses
import inspect
import os

import gin
import pytest

from rembert_t5x.runner import eval as eval_lib
from rembert_t5x.runner import eval_config


def test_evaluate_takes_the_config_fields_with_their_defaults():
  parameters = inspect.signature(eval_lib.evaluate).parameters
  fields = dataclasses.fields(eval_config.EvalConfig)
  assert list(parameters) == (["checkpoint_dir", "output_dir", "model"]
                              + [f.name for f in fields[2:]])
  assert parameters["split"].default == "validation"
  assert parameters["batch_size"].default == 32
  assert parameters["mixture_or_task_name"].default is gin.REQUIRED
  assert parameters["checkpoint_dir"].kind is (
      inspect.Parameter.POSITIONAL_OR_KEYWORD)


def test_gin_refuses_a_binding_that_is_no_field():
  with pytest.raises(ValueError, match="batch_sise"):
    gin.parse_config("eval_lib.evaluate.batch_sise = 8")


def test_directories_are_made_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  config = eval_config.validate(eval_config.EvalConfig(
      checkpoint_dir="runs/m", output_dir="~/e", mixture_or_task_name="t"))
  assert config.checkpoint_dir == os.path.join(str(tmp_path), "runs", "m")
  assert config.output_dir == os.path.join(str(tmp_path), "home", "e")
