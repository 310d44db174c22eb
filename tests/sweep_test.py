"""Sweeps: grids as data, aggregation, T5X commands, one tiny local sweep."""

import dataclasses
import json

import pytest

from rembert_t5x.common import errors
from rembert_t5x.experiments import sweep
from rembert_t5x.experiments import sweep_report
from rembert_t5x import gin_path
from rembert_t5x import network
from rembert_t5x import protocol
from rembert_tasks import registry
from rembert_tasks import synthetic as synthetic_tasks
from tests import test_utils


def _record(grid, lr, seed, dev, families, train_language="en",
            metric="accuracy", prefix="rembert_"):
  """A results record: English-dev score `dev` of the selected checkpoint,
  and {family: {lang: value}} evaluation results."""
  return {"task": grid, "learning_rate": lr, "seed": seed,
          "train_language": train_language,
          "selection": {"task": f"{prefix}{grid}_en", "split": "validation",
                        "step": 7, "scores": {"3": dev - 1.0, "7": dev}},
          "evaluations": {
              fam: {"mixture": f"{prefix}{fam}_zeroshot", "split": "validation",
                    "tasks": {f"{prefix}{fam}_{l}": (
                        v if isinstance(v, dict) else {metric: v})
                              for l, v in scores.items()}}
              for fam, scores in families.items()}}


def test_best_learning_rate_is_chosen_on_english_dev_of_selected_checkpoint():
  records = [
      # lr 1e-5: English dev mean 80, best average over languages.
      _record("xnli", 1e-5, 0, 79.0, {"xnli": {"en": 79.0, "de": 90.0}}),
      _record("xnli", 1e-5, 1, 81.0, {"xnli": {"en": 81.0, "de": 90.0}}),
      # lr 2e-5: English dev mean 85 -> selected.
      _record("xnli", 2e-5, 0, 84.0, {"xnli": {"en": 84.0, "de": 60.0}}),
      _record("xnli", 2e-5, 1, 86.0, {"xnli": {"en": 86.0, "de": 64.0}}),
  ]
  table = sweep_report.aggregate(records)
  g = table["grids"]["xnli"]
  assert g["best_learning_rate"] == 2e-5
  assert g["learning_rates"]["1e-05"]["dev"] == pytest.approx((80.0, 2 ** 0.5))
  assert g["learning_rates"]["2e-05"]["selected_steps"] == [7, 7]
  f = table["families"]["xnli"]
  assert f["languages"]["en"] == pytest.approx((85.0, 2 ** 0.5))
  assert f["languages"]["de"] == pytest.approx((62.0, 8 ** 0.5))
  # Per-seed averages over languages: 72 and 75.
  assert f["avg"] == pytest.approx((73.5, 4.5 ** 0.5))
  assert f["zero_shot_avg"] == pytest.approx((62.0, 8 ** 0.5))
  assert table["average"] == pytest.approx(73.5)


def test_one_squad_model_reports_xquad_and_mlqa_without_key_collisions():
  """The SQuAD-trained grid reports two families; MLQA's `en` and the SQuAD
  dev set's `en` (rembert_squad_en, in the MLQA mixture) never collide."""
  qa = {"exact_match": 60.0, "f1": 80.0}
  record = _record("squad", 3e-5, 0, 75.0, {
      "xquad": {"en": {"exact_match": 50.0, "f1": 70.0},
                "de": {"exact_match": 40.0, "f1": 50.0}},
      "mlqa": {"en": qa}})
  record["evaluations"]["xquad"]["split"] = "test"
  table = sweep_report.aggregate([record,
                           _record("panx", 1e-5, 0, 80.0,
                                   {"panx": {"en": 80.0, "de": 70.0}},
                                   metric="f1")])
  assert table["families"]["xquad"]["languages"]["en"] == (60.0, 0.0)
  assert table["families"]["mlqa"]["languages"] == {"en": (70.0, 0.0)}
  assert table["families"]["xquad"]["split"] == "test"
  assert table["families"]["xquad"]["avg"] == (52.5, 0.0)
  assert table["average"] == pytest.approx((52.5 + 70.0 + 75.0) / 3)
  text = sweep_report.markdown(table, "t")
  assert "| xquad | test | squad | 3e-05 | 52.5 ± 0.0 | 45.0 ± 0.0 |" in text
  assert "| mlqa | validation | squad | 3e-05 | 70.0 ± 0.0 |  |" in text
  # Family membership comes from the full task name.
  assert sweep._in_family("rembert_mlqa_en", "mlqa")
  assert not sweep._in_family("rembert_squad_en", "mlqa")
  assert sweep._in_family("rembert_local_mlqa_en", "mlqa")
  assert protocol.task_score({"exact_match": 1.0, "f1": 3.0, "xtreme": 2.0}) == 2.0
  # Reference numbers, when given, go in their own column.
  text = sweep_report.markdown(table, "t", paper={"xquad": 61.0})
  assert "| 52.5 ± 0.0 | 45.0 ± 0.0 | 61.0 |" in text


def test_ties_pick_the_smaller_rate():
  records = [_record("p", 2e-5, 0, 50.0, {"p": {"en": 50.0}}),
             _record("p", 1e-5, 0, 50.0, {"p": {"en": 50.0}})]
  assert sweep_report.aggregate(records)["grids"]["p"]["best_learning_rate"] == 1e-5


def test_grids_batch_sizes_and_splits_are_the_papers():
  t10 = sweep.EXPERIMENTS["table10"]
  assert {n: t.learning_rates for n, t in t10.items()} == {
      "pawsx": (3e-5, 4e-5, 5e-5), "xnli": (1e-5, 2e-5, 3e-5),
      "squad": (2e-5, 3e-5, 4e-5), "tydiqa": (2e-5, 3e-5, 4e-5),
      "panx": (1e-5, 2e-5, 3e-5, 4e-5, 5e-5)}
  assert {t.batch_size for t in t10.values()} == {32}  # Table 10
  t15 = sweep.EXPERIMENTS["table15"]
  assert {n: (t.learning_rates, t.batch_size) for n, t in t15.items()} == {
      "pawsx": ((8e-6,), 128), "xnli": ((1e-5,), 128),
      "squad": ((9e-6,), 128), "udpos": ((3e-5,), 128),
      "panx": ((8e-6,), 64), "tydiqa": ((9e-6,), 128)}
  splits = {ev.family: ev.split for t in t15.values() for ev in t.evaluations}
  assert splits == {"xnli": "validation", "pawsx": "validation",
                    "panx": "validation", "udpos": "validation",
                    "xquad": "test", "mlqa": "validation",
                    "tydiqa": "validation"}
  for t in t15.values():
    assert t.train_steps is None and t.epochs == 3  # derived from the data
    assert t.selection_task.endswith("_en")
  from rembert_tasks import udpos  # pylint: disable=g-import-not-at-top
  assert t15["udpos"].num_classes == len(udpos.LABELS)
  points = sweep.expand_grid(t10)
  assert len(points) == (3 + 3 + 3 + 3 + 5) * 3
  assert {p.seed for p in points} == {0, 1, 2}
  assert len(sweep.expand_grid(t10, [1e-4], [7])) == 5
  # Every referenced run file exists; every family's mixture has tasks of
  # that family with the reported split, and so does the selection task.
  import seqio  # pylint: disable=g-import-not-at-top
  for exp in sweep.EXPERIMENTS.values():
    for t in exp.values():
      assert (gin_path.search_root() / t.run_file).exists(), t.run_file
      assert "validation" in seqio.get_mixture_or_task(t.selection_task).splits
      for ev in t.evaluations:
        assert (gin_path.search_root() / ev.eval_file).exists(), ev.eval_file
        tasks = [x for x in seqio.get_mixture_or_task(ev.mixture).tasks
                 if ev.split in x.splits and sweep._in_family(x.name, ev.family)]
        assert tasks, (ev.family, ev.split)


def test_steps_are_derived_from_the_dataset_size():
  import seqio  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from rembert_t5x import protocol  # pylint: disable=g-import-not-at-top

  def dataset_fn(split, shuffle_files, seed=None):
    del split, shuffle_files, seed
    return tf.data.Dataset.from_tensor_slices({"x": list(range(50))})

  # Counted (a local-file-like source) ...
  registry.add_task("sweeptest_counted", source=seqio.FunctionDataSource(
      dataset_fn, splits=["train"]), output_features={})
  # ... or read from the source's metadata (TFDS split info), not counted.
  registry.add_task("sweeptest_declared", source=seqio.FunctionDataSource(
      dataset_fn, splits=["train"], num_input_examples={"train": 1000}),
              output_features={})
  assert protocol.num_examples("sweeptest_counted") == 50
  assert protocol.train_steps("sweeptest_counted", 8) == 3 * 7
  assert protocol.train_steps("sweeptest_declared", 128, epochs=3) == 3 * 8
  spec = sweep.TaskSpec("x", "pair", 2, "sweeptest_counted", "x_en", (),
                        (1e-5,), batch_size=16)
  assert sweep.resolve_steps(spec) == 12
  assert sweep.checkpoint_period(spec, 12) == 4  # one checkpoint per epoch
  assert sweep.resolve_steps(dataclasses.replace(spec, train_steps=5)) == 5
  with pytest.raises(errors.UserError, match="has no 'validation' split"):
    protocol.num_examples("sweeptest_counted", "validation")


def test_protocol_select_reads_seqio_metrics(tmp_path, capsys):
  from rembert_t5x import protocol  # pylint: disable=g-import-not-at-top
  metrics = tmp_path / "inference_eval"
  metrics.mkdir()
  lines = [{"step": 100, "exact_match": 50.0, "f1": 60.0},
           {"step": 200, "exact_match": 70.0, "f1": 72.0},
           {"step": 300, "exact_match": 60.0, "f1": 80.0},  # tie with 200
           {"step": 400, "exact_match": 90.0, "f1": 90.0}]  # no checkpoint
  (metrics / "rembert_squad_en-metrics.jsonl").write_text(
      "\n".join(json.dumps(l) for l in lines) + "\n")
  for step in (100, 200, 300):
    (tmp_path / f"checkpoint_{step}").mkdir()
  path, step, scores = protocol.select_checkpoint(
      str(metrics), "rembert_squad_en", str(tmp_path))
  assert step == 200 and path == str(tmp_path / "checkpoint_200")
  assert scores == {100: 55.0, 200: 71.0, 300: 70.0}
  protocol.main(["select", f"--metrics_dir={metrics}",
                 "--task=rembert_squad_en", f"--checkpoint_dir={tmp_path}"])
  assert capsys.readouterr().out.strip() == str(tmp_path / "checkpoint_200")
  with pytest.raises(SystemExit):
    protocol.main(["select", f"--metrics_dir={metrics}",
                   "--task=rembert_xnli_en", f"--checkpoint_dir={tmp_path}"])
  assert "rembert_xnli_en-metrics.jsonl: no such file" in capsys.readouterr().err


def test_protocol_metrics_lines_end_at_newlines_only(tmp_path):
  # A JSON string may hold U+2028 / U+0085 as they are (ensure_ascii=False);
  # str.splitlines() cut such a record in two.
  path = tmp_path / "t-metrics.jsonl"
  path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in [
      {"step": 1, "f1": 5.0, "note": "a\u2028b\u0085c"},
      {"step": 2, "f1": 6.0}]) + "\r\n", encoding="utf-8")
  assert protocol.read_metrics_jsonl(str(tmp_path), "t") == {
      1: {"f1": 5.0}, 2: {"f1": 6.0}}


def test_t5x_commands_train_select_and_evaluate_each_family():
  points = sweep.expand_grid({"squad": sweep.EXPERIMENTS["table15"]["squad"]},
                             seeds=[1])
  lines = sweep.t5x_commands("/out", points, "gin_configs/models/tiny.gin",
                             "/pre/ck")
  assert lines[0] == "set -e" and lines[2] == "# squad/lr=9e-06/seed=1"
  # The same script for every host of a pod.
  assert lines[1].startswith("# A pod: run this same script on every worker")
  train_cmd, select_cmd, xquad_cmd, mlqa_cmd = lines[3:]
  assert train_cmd.startswith("python -m t5x.train --gin_search_paths=. "
                              "--gin_file=gin_configs/models/tiny.gin "
                              "--gin_file=gin_configs/runs/finetune_xquad.gin ")
  for part in ("--gin.INITIAL_CHECKPOINT_PATH=\"'/pre/ck'\"",
               "--gin.MODEL_DIR=\"'/out/runs/squad/lr=9e-06/seed=1'\"",
               "--gin.LEARNING_RATE=9e-06", "--gin.BATCH_SIZE=128",
               "--gin.EPOCHS=3", "--gin.RANDOM_SEED=1",
               "--gin.train/utils.DatasetConfig.seed=1"):
    assert part in train_cmd.split(" "), part
  # Steps are the run file's (derived from the data), never typed here.
  assert "TRAIN_STEPS" not in train_cmd
  assert select_cmd == (
      "BEST=$(python -m rembert_t5x.protocol select "
      "--metrics_dir=/out/runs/squad/lr=9e-06/seed=1/inference_eval "
      "--task=rembert_squad_en "
      "--checkpoint_dir=/out/runs/squad/lr=9e-06/seed=1)")
  assert "--gin_file=gin_configs/runs/eval_xquad.gin" in xquad_cmd
  assert "--gin.CHECKPOINT_PATH=\"'$BEST'\"" in xquad_cmd
  assert "--gin.utils.DatasetConfig.split=\"'test'\"" in xquad_cmd
  assert "--gin_file=gin_configs/runs/eval_mlqa.gin" in mlqa_cmd
  assert "--gin.utils.DatasetConfig.split=\"'validation'\"" in mlqa_cmd


def test_cli_prints_t5x_commands(capsys):
  sweep.main(["--experiment=table10", "--workdir=/w", "--runner=t5x",
              "--pretrained=/p", "--tasks=xnli", "--seeds=0,1"])
  lines = capsys.readouterr().out.strip().splitlines()
  assert len(lines) == 2 + 3 * 2 * 4
  assert sum(l.startswith("python -m t5x.eval") for l in lines) == 6
  assert all("--gin.BATCH_SIZE=32" in l for l in lines
             if l.startswith("python -m t5x.train"))


def test_cli_count_flags_reach_every_grid(monkeypatch, tmp_path):
  # `--train_steps=1` and the others reach the grids (a truthiness test
  # once dropped a 0: now refused, below); nothing is trained here.
  seen = {}
  monkeypatch.setattr(sweep, "run_local",
                      lambda workdir, points, config, *a, **k:
                      seen.update(points=points, config=config) or {})
  monkeypatch.setattr(sweep.sweep_report, "markdown", lambda *a: "")
  sweep.main(["--experiment=table10", f"--workdir={tmp_path}",
              f"--pretrained={tmp_path}", "--tasks=xnli", "--seeds=3",
              "--learning_rates=2e-5", "--train_steps=1", "--batch_size=1",
              "--vocab_size=1"])
  (point,) = seen["points"]
  assert (point.task.train_steps, point.task.batch_size) == (1, 1)
  assert (point.learning_rate, point.seed) == (2e-5, 3)
  assert seen["config"].vocab_size == 1


@pytest.mark.parametrize("flag, message", [
    ("--train_steps=0", "--train_steps must be at least 1, got 0 (leave it "
     "unset: each grid's steps then come from its epochs)"),
    ("--batch_size=0", "--batch_size must be at least 1, got 0"),
    ("--vocab_size=-3", "--vocab_size must be at least 1, got -3"),
    ("--learning_rates=abc", "--learning_rates=abc: 'abc' is not a positive "
     "finite number"),
    ("--learning_rates=1e-5,-2e-5", "'-2e-5' is not a positive finite number"),
    ("--learning_rates=nan", "'nan' is not a positive finite number"),
    ("--learning_rates=", "--learning_rates=: '' is not a positive finite "
     "number"),
    ("--seeds=0,x", "--seeds=0,x: 'x' is not an integer"),
    ("--seeds=0,,1", "--seeds=0,,1: '' is not an integer"),
    ("--seeds=0,1,0", "--seeds=0,1,0: 0 is given twice"),
])
def test_cli_bad_flag_values_are_one_error_line(capsys, tmp_path, flag,
                                                message):
  with pytest.raises(SystemExit) as exit_info:
    sweep.main(["--experiment=table10", f"--workdir={tmp_path / 'w'}",
                "--runner=t5x", "--pretrained=/p", "--tasks=xnli", flag])
  assert exit_info.value.code == 2
  out, err = capsys.readouterr()
  (line,) = err.strip().splitlines()
  assert not out and line.startswith("error: ") and message in line
  assert not (tmp_path / "w").exists()


CONFIG = network.RemBertConfig(
    vocab_size=400, input_embed_dim=16, emb_dim=32, output_embed_dim=24,
    num_layers=1, num_heads=2, head_dim=16, mlp_dim=64,
    max_position_embeddings=128)


@pytest.mark.slow  # a whole grid: pre-train, fine-tune, evaluate
def test_tiny_local_sweep_end_to_end(tmp_path):
  manifest = synthetic_tasks.prepare(
      str(tmp_path / "data"), corpus_sentences=300, pair_train=64,
      tag_train=64, qa_train=64, eval_examples=16)
  synthetic_tasks.register_synthetic(
      manifest, prefix="sweeptest_",
      shuffle_buffer_size=test_utils.TINY_SHUFFLE_BUFFER)
  # Random weights, not a pre-training run: the sweep fine-tunes from any
  # MODEL_DIR, and a run's input pipeline and compiled step cost seconds of
  # CPU (pre-training has tests of its own).
  test_utils.write_random_checkpoint(tmp_path / "pre", "mlm", CONFIG,
                                     vocab_file=manifest["vocab"])
  tasks = sweep.demo_tasks(prefix="sweeptest_")
  # 64 training pairs at batch 32, 1 epoch: 2 steps, derived from the data.
  tasks = {"pair": dataclasses.replace(tasks["pair"], batch_size=32,
                                       train_steps=None, epochs=1)}
  # One grid point keeps the test fast; `aggregate` tests cover the choice
  # between learning rates.
  points = sweep.expand_grid(tasks, [1e-3], [0])
  work = tmp_path / "sweep"
  table = sweep.run_local(str(work), points, CONFIG, str(tmp_path / "pre"),
                          "tiny", log=lambda _: None)
  langs = set(manifest["languages"])
  assert set(table["families"]["pair"]["languages"]) == langs
  assert table["grids"]["pair"]["best_learning_rate"] == 1e-3
  saved = json.loads((work / "sweep.json").read_text())
  assert len(saved["runs"]) == 1 and saved["average"] == table["average"]
  run = saved["runs"][0]
  assert run["train_steps"] == 2 and run["checkpoint_period"] == 2
  assert run["selection"]["task"] == "sweeptest_pair_qla"
  assert run["selection"]["step"] == 2
  assert set(run["evaluations"]["pair"]["tasks"]) == {
      f"sweeptest_pair_{l}" for l in langs}
  assert "## pair (validation, trained on qla)" in (work / "sweep.md").read_text()
  assert (work / "sweep.png").stat().st_size > 0
  assert not (work / "runs/pair/lr=1e-03/seed=0/model").exists()
  # Resumable: finished grid points are not rerun.
  logs = []
  again = sweep.run_local(str(work), points, CONFIG, str(tmp_path / "pre"),
                          "tiny", log=logs.append)
  assert all(l.endswith("done, skipped") for l in logs) and len(logs) == 1
  assert again == table
