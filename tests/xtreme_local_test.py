"""The sweep over an XTREME download folder (`--xtreme_dir`): which files
each grid needs, the errors when one is missing, local task names, and the
T5X commands (parsed by the real T5X's gin when it is installed)."""

import importlib
import shlex

import pytest

from rembert_t5x.experiments import sweep
from rembert_t5x.experiments import xtreme_local
from tests import test_utils

TABLE15 = sweep.EXPERIMENTS["table15"]


def _fill(root, grids, languages=None, skip=()):
  """Writes every file the grids read (tiny valid rows); `skip`: relative
  paths left out."""
  for grid in grids:
    for _, candidates in xtreme_local.required_files(TABLE15[grid], languages):
      rel = candidates[0]
      if rel in skip:
        continue
      path = root / rel
      path.parent.mkdir(parents=True, exist_ok=True)
      if rel.endswith(".tsv"):
        text = ("Two words\tAnother one\t0\nMore words\tAnd more\t1\n"
                if grid == "pawsx" else "Tom\tO\nran\tO\n")
      else:
        text = ('{"version": "1.1", "data": [{"title": "t", "paragraphs": '
                '[{"context": "Tom ran home.", "qas": [{"id": "q1", '
                '"question": "Who ran?", "answers": [{"text": "Tom", '
                '"answer_start": 0}]}]}]}]}')
      path.write_text(text, encoding="utf-8")


def _error(capsys, argv):
  with pytest.raises(SystemExit) as e:
    sweep.main(argv)
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: "), err
  return err[0]


def test_required_files_follow_xtremes_layout():
  files = dict(xtreme_local.required_files(TABLE15["squad"]))
  assert files["squad English training set"] == ("squad/train-v1.1.json",)
  assert files["xquad th (test)"] == ("xquad/xquad.th.json",)
  assert files["mlqa zh (validation)"] == (
      "mlqa/MLQA_V1/dev/dev-context-zh-question-zh.json",)
  tydi = dict(xtreme_local.required_files(TABLE15["tydiqa"]))
  # Both of XTREME's TyDi layouts are accepted.
  assert tydi["tydiqa ko (validation)"] == (
      "tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.ko.dev.json",
      "tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.ko.dev.json")
  pos = dict(xtreme_local.required_files(TABLE15["udpos"]))
  assert pos["udpos de (validation)"] == ("udpos/dev-de.tsv",)
  # No dev set in UD for these: evaluated on validation, they are skipped.
  assert not any(f"udpos {l} " in what for what in pos
                 for l in ("kk", "th", "tl", "yo"))
  assert len(dict(xtreme_local.required_files(TABLE15["pawsx"], ["en", "de"]))) == 4


def test_local_names_and_specs():
  spec = xtreme_local.local_spec(TABLE15["squad"])
  assert spec.train_task == "rembert_local_squad_train_en"
  assert spec.selection_task == "rembert_local_squad_en"
  assert [e.mixture for e in spec.evaluations] == [
      "rembert_local_xquad_zeroshot", "rembert_local_mlqa_zeroshot"]
  assert [e.split for e in spec.evaluations] == ["test", "validation"]
  with pytest.raises(ValueError, match="not a TFDS-backed task name"):
    xtreme_local.local_name("rembert_local_xnli_en")


def test_missing_file_is_one_error_naming_it(tmp_path, capsys):
  _fill(tmp_path, ["pawsx"], skip=("pawsx/dev-ko.tsv",))
  err = _error(capsys, ["--experiment=table15", "--workdir=/w",
                        "--runner=t5x", "--pretrained=/p", "--tasks=pawsx",
                        f"--xtreme_dir={tmp_path}"])
  assert f"{tmp_path}/pawsx/dev-ko.tsv: no such file" in err
  assert "pawsx ko (validation)" in err
  # The first of several missing files, with a count of the rest.
  (tmp_path / "pawsx" / "train-en.tsv").unlink()
  err = _error(capsys, ["--experiment=table15", "--workdir=/w",
                        "--pretrained=/p", "--tasks=pawsx",
                        f"--xtreme_dir={tmp_path}"])
  assert "pawsx/train-en.tsv: no such file" in err
  assert "English training set" in err and "1 more" in err


def test_xtreme_dir_usage_errors(tmp_path, capsys):
  common = ["--workdir=/w", "--pretrained=/p"]
  err = _error(capsys, ["--experiment=table15", *common,
                        f"--xtreme_dir={tmp_path}/nope"])
  assert f"{tmp_path}/nope: no such directory" in err
  err = _error(capsys, ["--experiment=demo", *common,
                        f"--xtreme_dir={tmp_path}"])
  assert "not to the demo tasks" in err
  err = _error(capsys, ["--experiment=table15", *common, "--languages=de"])
  assert "--languages needs --xtreme_dir" in err
  _fill(tmp_path, ["pawsx"])
  err = _error(capsys, ["--experiment=table15", *common, "--runner=t5x",
                        "--tasks=pawsx", f"--xtreme_dir={tmp_path}",
                        "--languages=de"])
  assert "--languages applies to the local runner" in err


def test_old_tydi_layout_is_accepted(tmp_path):
  _fill(tmp_path, ["tydiqa"])
  new = tmp_path / "tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.fi.dev.json"
  new.rename(new.with_name("tydiqa.fi.dev.json"))
  specs = xtreme_local.prepare(str(tmp_path), {"tydiqa": TABLE15["tydiqa"]})
  assert specs["tydiqa"].train_task == "rembert_local_tydiqa_train_en"


def _t5x_lines(tmp_path, capsys):
  sweep.main(["--experiment=table15", "--workdir=/out", "--runner=t5x",
              "--pretrained=/pre/checkpoint_0", "--tasks=pawsx,tydiqa",
              "--seeds=0", f"--xtreme_dir={tmp_path}",
              "--model_gin=gin_configs/models/tiny.gin"])
  return capsys.readouterr().out.strip().splitlines()


def test_t5x_commands_export_the_folder_and_name_local_tasks(tmp_path,
                                                              capsys):
  _fill(tmp_path, ["pawsx", "tydiqa"])
  lines = _t5x_lines(tmp_path, capsys)
  assert lines[0] == "set -e" and lines[1].startswith("# A pod:")
  assert lines[2] == f"export REMBERT_XTREME_DIR={tmp_path}"
  train = [l for l in lines if l.startswith("python -m t5x.train")]
  evals = [l for l in lines if l.startswith("python -m t5x.eval")]
  assert "--gin.MIXTURE_OR_TASK_NAME=\"'rembert_local_pawsx_train_en'\"" in (
      train[0].split(" "))
  assert "--gin.TRAIN_EVAL_TASK=\"'rembert_local_pawsx_en'\"" in train[0]
  assert "--gin.MIXTURE_OR_TASK_NAME=\"'rembert_local_tydiqa_zeroshot'\"" in (
      evals[1].split(" "))
  assert "--task=rembert_local_tydiqa_en" in [
      l for l in lines if "protocol select" in l][1]


def _gin_args(line):
  """(gin files, bindings) of a printed t5x command, as the shell passes
  them."""
  files, bindings = [], []
  for arg in shlex.split(line.replace("$BEST", "/out/best")):
    if arg.startswith("--gin_file="):
      files.append(arg.split("=", 1)[1])
    elif arg.startswith("--gin."):
      bindings.append(" = ".join(arg[len("--gin."):].split("=", 1)))
  return files, bindings


@test_utils.needs_t5x
def test_t5x_parses_the_printed_commands(tmp_path, capsys, monkeypatch):
  """The printed train and eval commands parse under the real T5X; with
  $REMBERT_XTREME_DIR set, the task modules register the local tasks they
  name, and the train run derives its steps from the folder's files."""
  import seqio  # pylint: disable=g-import-not-at-top
  _fill(tmp_path, ["pawsx", "tydiqa"])
  lines = _t5x_lines(tmp_path, capsys)
  monkeypatch.setenv(xtreme_local.XTREME_DIR_ENV, str(tmp_path))
  from rembert_tasks import pawsx, qa  # pylint: disable=g-import-not-at-top
  for module in (pawsx, qa):  # what importing rembert_tasks does in T5X
    importlib.reload(module)
  train = [l for l in lines if l.startswith("python -m t5x.train")]
  evals = [l for l in lines if l.startswith("python -m t5x.eval")]
  for line, script in ((train[0], "train"), (evals[1], "eval")):
    files, bindings = _gin_args(line)
    gin = test_utils.parse_t5x_gin(monkeypatch, script, files, bindings)
    name = gin.query_parameter("MIXTURE_OR_TASK_NAME/macro.value")
    assert name.startswith("rembert_local_")
    seqio.get_mixture_or_task(name)  # registered from the folder
    if script == "train":
      assert gin.query_parameter("TRAIN_EVAL_TASK/macro.value") == (
          "rembert_local_pawsx_en")
      # 2 training pairs at batch 128, 3 epochs: 3 steps, counted from the
      # folder's train-en.tsv.
      steps = gin.query_parameter("TRAIN_STEPS/macro.value")
      assert steps.scoped_configurable_fn() == 3
    else:
      assert gin.query_parameter("utils.DatasetConfig.split") == "validation"
  gin.clear_config(clear_constants=True)
