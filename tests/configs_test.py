"""Every gin model file parses and builds; parameter counts; gin errors."""

import dataclasses
import json
import logging
import os
import pathlib
import subprocess
import sys

import gin
import jax
import jax.numpy as jnp
import pytest

from rembert_t5x import configs
from rembert_t5x import gin_path
from rembert_t5x import network
from rembert_t5x.runner import eval as eval_lib  # pylint: disable=unused-import
from rembert_t5x.runner import train  # pylint: disable=unused-import
from tests import test_utils

MODELS = test_utils.REPO_ROOT / "gin_configs" / "models"
PAPER_FILES = [
    "table2_coupled", "table2_decoupled", "table3_ein768_eout128",
    "table3_ein128_eout768", "table4_eout128", "table4_eout3072",
    "table5_extra11_dropped", "table6_width1024", "table6_depth23", "rembert",
]
MODEL_FILES = sorted(str(p.relative_to(test_utils.REPO_ROOT))
                     for p in MODELS.rglob("*.gin"))


def test_all_paper_configurations_ship():
  for name in PAPER_FILES:
    assert (MODELS / "paper" / f"{name}.gin").exists(), name
  assert (MODELS / "tiny.gin").exists()


@pytest.mark.parametrize("gin_file", MODEL_FILES)
def test_model_file_builds_every_network(gin_file):
  config = configs.config_from_gin(gin_file)
  tokens = jax.ShapeDtypeStruct((1, 8), jnp.int32)
  # The pre-training network is built at the file's full depth; the
  # fine-tuning heads do not depend on depth, and tracing RemBERT's 32 layers
  # three more times was most of this test's time.
  shallow = dataclasses.replace(config, num_layers=min(config.num_layers, 2),
                                num_pretraining_only_layers=0)
  for make, c in ((network.RemBertForMaskedLM, config),
                  (lambda c: network.RemBertForSequenceClassification(c, 3),
                   shallow),
                  (lambda c: network.RemBertForTokenClassification(c, 7),
                   shallow),
                  (network.RemBertForQuestionAnswering, shallow)):
    module = make(c)
    shapes = jax.eval_shape(lambda t, m=module: m.init(jax.random.PRNGKey(0), t),
                            tokens)
    assert shapes["params"]["encoder"]["embeddings"]["word_embeddings"][
        "embedding"].shape == (config.vocab_size, config.input_embed_dim)


def test_gin_network_bindings_use_the_model_config():
  """The architecture file wires each network class to the model's config."""
  import gin  # pylint: disable=g-import-not-at-top
  configs.parse_gin(["gin_configs/models/paper/table6_width1024.gin"])
  mlm = gin.get_configurable(network.RemBertForMaskedLM)()
  assert mlm.config.emb_dim == 1024 and mlm.config.num_heads == 16


@pytest.mark.parametrize("name,expected", [
    ("table2_coupled", dict(num_layers=12, input_embed_dim=768, output_embed_dim=768,
                            tie_embeddings=True)),
    ("table5_extra11_dropped", dict(num_layers=12, num_pretraining_only_layers=11,
                                    input_embed_dim=128, output_embed_dim=128)),
    ("table6_width1024", dict(emb_dim=1024, num_heads=16, mlp_dim=4096)),
    ("table6_depth23", dict(num_layers=23, emb_dim=768)),
    ("rembert", dict(vocab_size=250300, input_embed_dim=256, emb_dim=1152,
                     output_embed_dim=1664, num_layers=32, num_heads=18,
                     head_dim=64, mlp_dim=4608, dropout_rate=0.0)),
])
def test_paper_sizes(name, expected):
  config = configs.config_from_gin(f"gin_configs/models/paper/{name}.gin")
  for field, value in expected.items():
    assert getattr(config, field) == value, field


def _count(gin_file, *flags):
  # PYTHONPATH: the script must import this checkout's package, whatever
  # the environment has installed.
  env = dict(os.environ, PYTHONPATH=str(test_utils.REPO_ROOT))
  out = subprocess.run(
      [sys.executable, "scripts/count_params.py", f"--gin_file={gin_file}",
       *flags],
      cwd=test_utils.REPO_ROOT, env=env, capture_output=True, text=True,
      check=False)
  return out


def test_count_params_script_prints_one_json_line():
  out = _count("gin_configs/models/paper/rembert.gin")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  assert len(lines) == 1
  counts = json.loads(lines[0])
  # The paper reports ~995M pre-training and ~575M fine-tuning parameters.
  assert 990e6 < counts["pretraining_params"] < 1000e6
  assert 570e6 < counts["finetuning_params"] < 580e6
  # Vocabulary padding (250,300 -> 250,368 rows) is not counted.
  padded = _count("gin_configs/models/paper/rembert.gin",
                  "--gin.VOCAB_PAD_MULTIPLE=128")
  assert padded.returncode == 0, padded.stderr
  assert json.loads(padded.stdout.strip().splitlines()[-1]) == counts


def test_counts_match_hand_formula_for_tiny():
  c = configs.config_from_gin("gin_configs/models/tiny.gin")
  h, ein, eout, v = c.emb_dim, c.input_embed_dim, c.output_embed_dim, c.vocab_size
  embeddings = (v + c.max_position_embeddings + c.type_vocab_size) * ein + 2 * ein
  projection = ein * h + h
  layer = 4 * (h * h + h) + 2 * h + (h * c.mlp_dim + c.mlp_dim) + (c.mlp_dim * h + h) + 2 * h
  head = (h * eout + eout) + 2 * eout + (eout * v + v)
  finetuning = embeddings + projection + c.num_layers * layer
  assert configs.count_parameters(c) == {
      "pretraining_params": finetuning + head, "finetuning_params": finetuning}


def test_decoupling_saves_finetuning_parameters_as_in_the_paper():
  """Table 3: a 128-wide input embedding saves ~77M fine-tuning parameters."""
  small = configs.count_parameters(
      configs.config_from_gin("gin_configs/models/paper/table3_ein128_eout768.gin"))
  big = configs.count_parameters(
      configs.config_from_gin("gin_configs/models/paper/table2_decoupled.gin"))
  assert big["finetuning_params"] - small["finetuning_params"] == (
      120000 + 512 + 2) * (768 - 128) + 2 * (768 - 128) - (128 * 768 + 768)


def test_unknown_binding_is_one_clear_error(tmp_path):
  bad = tmp_path / "typo.gin"
  bad.write_text("include 'gin_configs/models/tiny.gin'\n"
                 "network.RemBertConfig.num_layrs = 3\n")
  out = _count(str(bad))
  assert out.returncode == 2
  assert f"gin file {bad}" in out.stderr
  assert "num_layrs" in out.stderr
  assert "Traceback" not in out.stderr


def test_missing_required_size_is_one_clear_error(tmp_path):
  bad = tmp_path / "missing.gin"
  text = (MODELS / "tiny.gin").read_text().replace("NUM_LAYERS = 2\n", "")
  bad.write_text(text)
  with pytest.raises(configs.GinConfigError,
                     match="num_layers is required but was not set"):
    configs.config_from_gin(str(bad))


def test_gin_syntax_error_names_the_file(tmp_path):
  bad = tmp_path / "syntax.gin"
  bad.write_text("include 'gin_configs/models/tiny.gin'\nNUM_LAYERS = = 3\n")
  with pytest.raises(configs.GinConfigError, match=f"gin file {bad}"):
    configs.config_from_gin(str(bad))


def test_missing_gin_file_names_the_file():
  with pytest.raises(configs.GinConfigError, match="gin file no/such.gin"):
    configs.config_from_gin("no/such.gin")


def test_count_params_takes_gin_overrides():
  out = _count("gin_configs/models/tiny.gin", "--gin.NUM_LAYERS=4")
  assert out.returncode == 0, out.stderr
  deeper = configs.count_parameters(
      configs.config_from_gin("gin_configs/models/tiny.gin", ["NUM_LAYERS = 4"]))
  assert json.loads(out.stdout) == deeper
  assert deeper != configs.count_parameters(
      configs.config_from_gin("gin_configs/models/tiny.gin"))


def test_binding_a_macro_no_gin_file_uses_is_an_error(tmp_path):
  tiny = "gin_configs/models/tiny.gin"
  with pytest.raises(configs.GinConfigError,
                     match=r"'NUM_LAYER = 4': no gin file of this run uses the "
                           r"macro NUM_LAYER \(did you mean NUM_LAYERS\?\)"):
    configs.parse_gin([tiny], ["NUM_LAYER = 4"])
  with pytest.raises(configs.GinConfigError, match="its macros: .*VOCAB_SIZE"):
    configs.parse_gin([tiny], ["TOTALLY_UNRELATED = 1"])
  # Used: in an included file (architectures/rembert.gin uses NUM_LAYERS) or
  # in another binding.
  configs.parse_gin([tiny], ["NUM_LAYERS = 4", "DEPTH = 3",
                             "network.RemBertConfig.num_layers = %DEPTH"])
  # Configurable bindings are gin's to check, not this one.
  configs.parse_gin([tiny], ["network.RemBertConfig.num_layers = 3"])


def test_gin_search_root_of_a_checkout_is_the_repository_root():
  assert gin_path.search_root() == test_utils.REPO_ROOT
  assert str(test_utils.REPO_ROOT) in configs.gin_search_paths()
  out = subprocess.run([sys.executable, "-m", "rembert_t5x.gin_path"],
                       cwd=test_utils.REPO_ROOT, capture_output=True, text=True,
                       check=True)
  assert out.stdout.strip() == str(test_utils.REPO_ROOT)


def test_search_misses_are_not_logged_as_errors(tmp_path, monkeypatch, caplog):
  """From outside the checkout, gin misses the cwd-relative path of every
  file before it finds it under the repository root: no ERROR records for
  those, the config is built, and a file found nowhere still fails."""
  monkeypatch.chdir(tmp_path)
  # As after an install: the checkout is not importable from sys.path.
  monkeypatch.setattr(sys, "path", [
      p for p in sys.path
      if pathlib.Path(p or ".").resolve() != test_utils.REPO_ROOT.resolve()])
  with caplog.at_level(logging.INFO):
    config = configs.config_from_gin("gin_configs/models/tiny.gin")
  assert config.num_layers >= 1
  assert not [r for r in caplog.records if r.levelno >= logging.ERROR], (
      caplog.text)
  with pytest.raises(configs.GinConfigError, match="no_such_model.gin"):
    configs.parse_gin(["gin_configs/models/no_such_model.gin"])
  # The filter is removed afterwards (also after the error).
  assert not [f for f in logging.getLogger().filters
              if type(f).__name__ == "_GinSearchMiss"]


def test_checkout_on_sys_path_from_elsewhere_reads_the_files(
    tmp_path, monkeypatch):
  """With the checkout on sys.path and the working directory elsewhere (a
  benchmark run from another folder), gin would take gin_configs/ for a
  namespace package; relative and absolute names both read."""
  monkeypatch.chdir(tmp_path)
  monkeypatch.syspath_prepend(str(test_utils.REPO_ROOT))
  for name in ("gin_configs/models/tiny.gin",
               str(test_utils.REPO_ROOT / "gin_configs/models/tiny.gin")):
    assert configs.config_from_gin(name).num_layers == 2
  own = tmp_path / "mine.gin"
  own.write_text("include 'gin_configs/models/tiny.gin'\nNUM_LAYERS = 3\n")
  assert configs.config_from_gin("mine.gin").num_layers == 3


@pytest.mark.parametrize("binding,expected", [
    # `python -m` registers a second copy under __main__ (added below).
    ("train.grad_accum_steps = 2",
     "'train' names several configurables; write one of: train.train "
     "(rembert_t5x.runner.train.train)"),
    ("eval_lib.evaluate.batch_size = 2",
     "no configurable named 'eval_lib.evaluate'; did you mean evaluate?"),
    ("evaluat.batch_size = 2",
     "no configurable named 'evaluat'; did you mean evaluate?"),
    ("MIXTURE_OR_TASK_MODULE = rembert_tasks",
     "'rembert_tasks' is not a Python literal: quote it: "
     "--gin.MIXTURE_OR_TASK_MODULE=\"'rembert_tasks'\""),
])
def test_binding_errors_say_what_to_write(binding, expected):
  def main_copy(grad_accum_steps=1):
    return grad_accum_steps
  # What `python -m rembert_t5x.runner.train` registers besides train.train.
  gin.external_configurable(main_copy, "train", module="__main__")
  try:
    with pytest.raises(configs.GinConfigError) as e:
      configs.parse_gin(["gin_configs/models/tiny.gin"], [binding])
  finally:
    gin.config._REGISTRY.pop("__main__.train")  # pylint: disable=protected-access
  assert str(e.value) == f"gin binding {binding!r}: {expected}"


def test_gin_file_macros_are_the_files_own_literal_bindings(tmp_path):
  path = tmp_path / "run.gin"
  path.write_text("include 'gin_configs/models/tiny.gin'\n"
                  "STEPS = 10\nRATE = 2e-4\nLENGTHS = {'input_tokens': 64}\n"
                  "train.steps = %STEPS\n", encoding="utf-8")
  assert configs.gin_file_macros(str(path)) == {
      "STEPS": 10, "RATE": 2e-4, "LENGTHS": {"input_tokens": 64}}
  run = configs.run_file_macros("pretrain_mlm.gin")
  assert (run["TRAIN_STEPS"], run["WARMUP_STEPS"]) == (1_760_000, 15_000)
