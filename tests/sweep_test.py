"""Sweeps: grids as data, aggregation, T5X commands, one tiny local sweep."""

import json

import pytest

from rembert_t5x import configs
from rembert_t5x import gin_path
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import sweep
from rembert_t5x import train


def _record(task, lr, seed, scores, train_language="en", metric="accuracy"):
  return {"task": task, "learning_rate": lr, "seed": seed,
          "train_language": train_language,
          "languages": {l: {metric: v} for l, v in scores.items()}}


def test_best_learning_rate_is_chosen_on_training_language_dev_mean():
  records = [
      # lr 1e-5: en mean 80, best average over languages (but not on en dev).
      _record("xnli", 1e-5, 0, {"en": 79.0, "de": 90.0}),
      _record("xnli", 1e-5, 1, {"en": 81.0, "de": 90.0}),
      # lr 2e-5: en mean 85 -> selected.
      _record("xnli", 2e-5, 0, {"en": 84.0, "de": 60.0}),
      _record("xnli", 2e-5, 1, {"en": 86.0, "de": 64.0}),
  ]
  table = sweep.aggregate(records)
  t = table["tasks"]["xnli"]
  assert t["best_learning_rate"] == 2e-5
  assert t["languages"]["en"] == pytest.approx((85.0, 2 ** 0.5))
  assert t["languages"]["de"] == pytest.approx((62.0, 8 ** 0.5))
  # Per-seed averages over languages: 72 and 75.
  assert t["avg"] == pytest.approx((73.5, 4.5 ** 0.5))
  assert t["zero_shot_avg"] == pytest.approx((62.0, 8 ** 0.5))
  assert t["learning_rates"]["1e-05"]["dev"] == pytest.approx((80.0, 2 ** 0.5))
  assert table["average"] == pytest.approx(73.5)


def test_qa_is_scored_as_mean_of_em_and_f1_and_tasks_are_averaged():
  qa = {"en": {"exact_match": 60.0, "f1": 80.0},
        "de": {"exact_match": 40.0, "f1": 50.0}}
  records = [{"task": "xquad", "learning_rate": 3e-5, "seed": 0,
              "train_language": "en", "languages": qa},
             _record("panx", 1e-5, 0, {"en": 80.0, "de": 70.0}, metric="f1")]
  table = sweep.aggregate(records)
  assert table["tasks"]["xquad"]["languages"]["en"] == (70.0, 0.0)
  assert table["tasks"]["xquad"]["avg"] == (57.5, 0.0)
  assert table["average"] == pytest.approx((57.5 + 75.0) / 2)
  assert sweep.task_score({"exact_match": 1.0, "f1": 3.0, "xtreme": 2.0}) == 2.0
  text = sweep.markdown(table, "t")
  assert "| xquad | 3e-05 | 70.0 ± 0.0 | 57.5 ± 0.0 | 45.0 ± 0.0 |" in text


def test_ties_pick_the_smaller_rate_and_missing_train_language_fails():
  records = [_record("p", 2e-5, 0, {"en": 50.0}), _record("p", 1e-5, 0, {"en": 50.0})]
  assert sweep.aggregate(records)["tasks"]["p"]["best_learning_rate"] == 1e-5
  with pytest.raises(ValueError, match="no en dev"):
    sweep.aggregate([_record("p", 1e-5, 0, {"de": 50.0})])


def test_grids_are_the_papers():
  t10 = sweep.EXPERIMENTS["table10"]
  assert t10["pawsx"].learning_rates == (3e-5, 4e-5, 5e-5)
  assert t10["xnli"].learning_rates == (1e-5, 2e-5, 3e-5)
  assert t10["xquad"].learning_rates == (2e-5, 3e-5, 4e-5)
  assert t10["panx"].learning_rates == (1e-5, 2e-5, 3e-5, 4e-5, 5e-5)
  t15 = sweep.EXPERIMENTS["table15"]
  assert {n: (t.learning_rates, t.batch_size) for n, t in t15.items()} == {
      "pawsx": ((8e-6,), 32), "xnli": ((1e-5,), 32), "xquad": ((9e-6,), 32),
      "udpos": ((3e-5,), 128), "panx": ((8e-6,), 64)}
  points = sweep.expand_grid(t10)
  assert len(points) == (3 + 3 + 3 + 5) * 3
  assert {p.seed for p in points} == {0, 1, 2}
  assert len(sweep.expand_grid(t10, [1e-4], [7])) == 4
  # Every referenced run file exists.
  for exp in sweep.EXPERIMENTS.values():
    for t in exp.values():
      for f in (t.run_file, t.eval_file):
        assert f is None or (gin_path.search_root() / f).exists(), f


def test_t5x_commands():
  points = sweep.expand_grid({"panx": sweep.EXPERIMENTS["table10"]["panx"]},
                             [2e-5], [1])
  train_cmd, eval_cmd = sweep.t5x_commands("/out", points,
                                           "gin_configs/models/tiny.gin", "/pre/ck")
  assert train_cmd.startswith("python -m t5x.train --gin_search_paths=. "
                              "--gin_file=gin_configs/models/tiny.gin "
                              "--gin_file=gin_configs/runs/finetune_panx.gin ")
  for part in ("--gin.INITIAL_CHECKPOINT_PATH=\"'/pre/ck'\"",
               "--gin.MODEL_DIR=\"'/out/runs/panx/lr=2e-05/seed=1'\"",
               "--gin.LEARNING_RATE=2e-05", "--gin.BATCH_SIZE=32",
               "--gin.TRAIN_STEPS=1875", "--gin.WARMUP_STEPS=187",
               "--gin.RANDOM_SEED=1", "--gin.train/utils.DatasetConfig.seed=1"):
    assert part in train_cmd.split(" "), part
  assert "--gin_file=gin_configs/runs/eval_panx.gin" in eval_cmd
  assert ("--gin.CHECKPOINT_PATH=\"'/out/runs/panx/lr=2e-05/seed=1/"
          "checkpoint_1875'\"") in eval_cmd
  udpos = sweep.expand_grid({"udpos": sweep.EXPERIMENTS["table15"]["udpos"]},
                            seeds=[0])
  assert sweep.t5x_commands("/o", udpos, "m.gin", "/p")[0].startswith("# ")


def test_cli_prints_t5x_commands(capsys):
  sweep.main(["--experiment=table10", "--workdir=/w", "--runner=t5x",
              "--pretrained=/p", "--tasks=xnli", "--seeds=0,1"])
  lines = capsys.readouterr().out.strip().splitlines()
  assert len(lines) == 3 * 2 * 2
  assert sum(l.startswith("python -m t5x.eval") for l in lines) == 6


CONFIG = network.RemBertConfig(
    vocab_size=400, input_embed_dim=16, emb_dim=32, output_embed_dim=24,
    num_layers=1, num_heads=2, head_dim=16, mlp_dim=64,
    max_position_embeddings=128)


def test_tiny_local_sweep_end_to_end(tmp_path):
  from rembert_tasks import synthetic as synthetic_tasks  # pylint: disable=g-import-not-at-top
  manifest = synthetic_tasks.prepare(
      str(tmp_path / "data"), corpus_sentences=300, pair_train=64,
      tag_train=64, qa_train=64, eval_examples=16)
  names = synthetic_tasks.register_synthetic(manifest, prefix="sweeptest_")
  configs.parse_gin([])
  train.train(str(tmp_path / "pre"), model=models.RemBertMLMModel(
      network.RemBertForMaskedLM(CONFIG), max_predictions_per_seq=16),
              mixture_or_task_name=names["mlm"],
              task_feature_lengths={"input_tokens": 64}, train_steps=2,
              batch_size=8, pack=True, checkpoint_period=2, progress_bar=False)
  tasks = sweep.demo_tasks(prefix="sweeptest_", train_steps=2)
  tasks = {"pair": tasks["pair"]}
  import dataclasses  # pylint: disable=g-import-not-at-top
  tasks["pair"] = dataclasses.replace(tasks["pair"], batch_size=8)
  points = sweep.expand_grid(tasks, [1e-3, 2e-3], [0])
  work = tmp_path / "sweep"
  table = sweep.run_local(str(work), points, CONFIG, str(tmp_path / "pre"),
                          "tiny", log=lambda _: None)
  langs = set(manifest["languages"])
  assert set(table["tasks"]["pair"]["languages"]) == langs
  assert table["tasks"]["pair"]["best_learning_rate"] in (1e-3, 2e-3)
  saved = json.loads((work / "sweep.json").read_text())
  assert len(saved["runs"]) == 2 and saved["average"] == table["average"]
  assert "## pair (trained on qla)" in (work / "sweep.md").read_text()
  assert (work / "sweep.png").stat().st_size > 0
  assert not (work / "runs/pair/lr=1e-03/seed=0/model").exists()
  # Resumable: finished grid points are not rerun.
  logs = []
  again = sweep.run_local(str(work), points, CONFIG, str(tmp_path / "pre"),
                          "tiny", log=logs.append)
  assert all(l.endswith("done, skipped") for l in logs) and len(logs) == 2
  assert again == table
