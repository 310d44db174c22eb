"""docs/ERRORS.md rows of the tools beside the runner: parameter counting and
the offline demo (split from bad_inputs_test.py, which holds the rest)."""

import json
import re

import pytest

from rembert_t5x.common import errors
from rembert_t5x import configs
from tests import test_utils


# ----------------------------------------------------------------------------
# Parameter counting
# ----------------------------------------------------------------------------


def test_count_params_unset_macro(tmp_path):
  gin_file = str(tmp_path / "m.gin")
  with open(gin_file, "w", encoding="utf-8") as f:
    f.write("include 'gin_configs/architectures/rembert.gin'\n")
  with pytest.raises(configs.GinConfigError, match=f"gin file {gin_file}"):
    configs.config_from_gin(gin_file)


# ----------------------------------------------------------------------------
# The scripts, run as a user would (exit 2, one line, no traceback).
# ----------------------------------------------------------------------------


def test_cli_count_params_unknown_binding():
  line = test_utils.run_script_user_error(
      ["scripts/count_params.py", "--gin_file=gin_configs/models/tiny.gin",
       "--gin_bindings=network.RemBertConfig.num_layerz = 3"])
  assert "doesn't have a parameter named 'num_layerz'" in line


def test_cli_count_params_unused_macro():
  line = test_utils.run_script_user_error(
      ["scripts/count_params.py", "--gin_file=gin_configs/models/tiny.gin",
       "--gin.NUM_LAYER=4"])
  assert ("gin binding 'NUM_LAYER = 4': no gin file of this run uses the "
          "macro NUM_LAYER (did you mean NUM_LAYERS?)") in line


def test_cli_train_vocab_missing_input_dir(tmp_path):
  line = test_utils.run_script_user_error(
      ["scripts/train_vocab.py", f"--input_dir={tmp_path / 'no'}",
       f"--model_prefix={tmp_path / 'v'}"])
  assert f"input_dir '{tmp_path / 'no'}': not a directory" in line
  assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------
# The offline demo
# ----------------------------------------------------------------------------


def test_demo_needs_at_least_one_seed(tmp_path, capsys):
  from rembert_t5x.experiments import demo  # pylint: disable=g-import-not-at-top
  with pytest.raises(SystemExit) as exit_info:
    demo.main(["--workdir", str(tmp_path), "--finetune_seeds", "0"])
  assert exit_info.value.code == 2
  lines = capsys.readouterr().err.strip().splitlines()
  assert lines == ["error: --finetune_seeds must be at least 1, got 0"]
  assert not list(tmp_path.iterdir())


def test_demo_workdir_with_other_evaluation_sets(tmp_path):
  from rembert_t5x.experiments import demo  # pylint: disable=g-import-not-at-top
  data = tmp_path / "data"
  data.mkdir()
  manifest = {"seed": 0, "sizes": {"eval_examples": 200, "corpus": 3000,
                                   "pair_unrelated_fraction": 0.8},
              "languages": [],
              "train_language": "qla", "files": {}}
  (data / "manifest.json").write_text(json.dumps(manifest))
  (data / "spm.model").write_bytes(b"")
  with pytest.raises(errors.UserError,
                     match=f"{data / 'manifest.json'}: data were generated "
                     "with data_seed=0, eval_examples=200, corpus=3000, "
                     "not data_seed=0, eval_examples=1000, corpus=3000; "
                     "use a new --workdir"):
    demo.run(str(tmp_path), demo.DemoSettings(eval_examples=1000))


def test_demo_workdir_with_the_earlier_pair_task(tmp_path):
  """Data made before the pair task had 80% unrelated negatives (their
  manifest does not record it) are not mixed with the current task."""
  from rembert_t5x.experiments import demo  # pylint: disable=g-import-not-at-top
  data = tmp_path / "data"
  data.mkdir()
  manifest = {"seed": 0, "sizes": {"eval_examples": 400, "corpus": 3000},
              "languages": [], "train_language": "qla", "files": {}}
  (data / "manifest.json").write_text(json.dumps(manifest))
  (data / "spm.model").write_bytes(b"")
  before = test_utils.tree_snapshot(data)
  with pytest.raises(errors.UserError, match=re.escape(
      f"{data / 'manifest.json'}: sizes.pair_unrelated_fraction=0.5: these "
      "data were made with another pair task than this version's "
      "(pair_unrelated_fraction=0.8); generate them in a new directory")):
    demo.run(str(tmp_path), demo.DemoSettings())
  assert test_utils.tree_snapshot(data) == before
