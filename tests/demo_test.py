"""The offline demo end to end, at a few steps per stage (a smoke run)."""

import json

import pytest

from rembert_t5x.experiments import demo
from rembert_t5x.experiments import synthetic_runs
from rembert_t5x.runner import jobs as runner_jobs
from tests import test_utils

# Minutes, not seconds: `-m 'not slow'` leaves it out of a quick loop (the
# parsing test below is quick but shares the module).
pytestmark = pytest.mark.slow


def _workers_in_this_process(module, workers, args):
  """`runner.jobs.run_workers`'s work in this process: each worker's
  entry point with the arguments its process gets. Two worker processes
  would each import the stack and compile their own programs (~110 s of
  CPU, on the cores the rest of the suite shares); jobs_test.py starts
  real worker processes."""
  assert module == "rembert_t5x.experiments.demo"
  for i in range(workers):
    demo.main([f"--worker={i}", *args])


_prepare_data = synthetic_runs.prepare_data


def _small_training_sets(out, settings, prefix, register=None, **sizes):
  """`synthetic_runs.prepare_data` with training files and shuffle buffers
  sized for a run of 2 steps of 8 examples: seqio's 1,000-example buffers
  would tokenise (and window, for QA) ~1,000 training examples before each
  fine-tuning run's first batch."""
  register = {**(register or {}),
              "shuffle_buffer_size": test_utils.TINY_SHUFFLE_BUFFER}
  return _prepare_data(out, settings, prefix, register, **{
      "pair_train": 16, "tag_train": 16, "qa_train": 32, **sizes})


def test_demo_reports_seeds_error_bars_and_a_verdict(tmp_path, monkeypatch):
  # One task (QA: its metric groups windows by question) keeps the smoke
  # run short; `seed_statistics_test.py` covers the three-task comparison.
  settings = demo.DemoSettings(pretrain_steps=2, finetune_steps=2,
                               batch_size=8, finetune_seeds=2,
                               eval_examples=24, tasks="qa",
                               corpus_sentences=300)
  monkeypatch.setattr(runner_jobs, "run_workers", _workers_in_this_process)
  monkeypatch.setattr(synthetic_runs, "prepare_data", _small_training_sets)
  results = demo.run(str(tmp_path), settings, log=lambda _: None)
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["variants"].keys() == {"coupled", "decoupled"}
  languages = set(saved["languages"])
  assert saved["train_language"] in languages and len(languages) >= 3
  # One run per (variant, task, fine-tuning seed), each with every language
  # and the metric's evaluation-set standard error.
  assert len(saved["runs"]) == 2 * 2
  assert len({(r["variant"], r["family"], r["finetune_seed"])
              for r in saved["runs"]}) == len(saved["runs"])
  for r in saved["runs"]:
    metric = synthetic_runs.FAMILIES[r["family"]]
    assert set(r["languages"]) == languages
    for m in r["languages"].values():
      assert 0.0 <= m[metric] <= 100.0
      assert m[f"{metric}_se"] >= 0.0
  for variant in saved["variants"].values():
    assert variant["params"]["pretraining_params"] > variant["params"]["finetuning_params"]
    assert len(variant["mlm"]) == 1
  # The coupled model ties E_in = E_out = H; the decoupled one saves
  # fine-tuning parameters with a smaller input embedding.
  assert (saved["variants"]["decoupled"]["params"]["finetuning_params"]
          < saved["variants"]["coupled"]["params"]["finetuning_params"])
  assert set(saved["chance"]) == set(demo.TASKS)
  assert saved["summary"].keys() == saved["comparison"].keys() == {"qa"}
  zero_shot = saved["summary"]["qa"]["coupled"]["zero_shot"]
  assert zero_shot["n"] == 2 and zero_shot["unit"] == "fine-tuning seed"
  assert zero_shot["eval_se"] > 0
  comparison = saved["comparison"]["qa"]
  assert comparison["p"] is not None and comparison["verdict"]
  assert set(saved["timing"]["stages"]) == {"data", "pretrain", "finetune",
                                            "evaluate"}
  table = (tmp_path / "results.md").read_text()
  assert "| task (metric) | coupled | decoupled | eval SE |" in table
  assert "| qa (f1) | " in table and "### qa" in table
  assert (tmp_path / "results_qa.png").stat().st_size > 0
  assert "(n=2)" in demo.summary_table(results)
  # The variants went to two workers (the default); their stage times
  # reach the record.
  assert saved["timing"]["jobs"] == 2
  assert saved["timing"]["stages"]["pretrain"][0] > 0
  # A second call finds every run's record and trains nothing.
  again = demo.run(str(tmp_path), settings, log=lambda _: None)
  assert again["runs"] == results["runs"]
  assert "finetune" not in again["timing"]["stages"]
  assert again["timing"]["jobs"] == 0
  # A lost record is run again, and only it: one variant left, so in this
  # process although jobs=2 (no worker started for the other variant).
  lost = tmp_path / "decoupled" / "qa-0-1" / "demo_run.json"
  lost.unlink()
  assert settings.jobs == 2
  third = demo.run(str(tmp_path), settings, log=lambda _: None)
  assert lost.exists() and third["timing"]["jobs"] == 1
  assert not list((tmp_path / "timing").glob("worker-*.json"))
  assert "pretrain" not in third["timing"]["stages"]
  assert [r["variant"] for r in third["runs"]] == [
      r["variant"] for r in results["runs"]]


def test_full_flag_and_explicit_flags():
  workdir, settings = demo.parse_args(["--workdir", "/w", "--full",
                                       "--finetune_seeds", "5"])
  assert workdir == "/w"
  assert settings.pretrain_seeds == demo.FULL["pretrain_seeds"] > 1
  assert settings.finetune_seeds == 5
  assert settings.pretrain_steps == demo.DemoSettings().pretrain_steps
  assert demo.parse_args(["--workdir", "/w"])[1] == demo.DemoSettings()


def test_finetune_pack_flag_reaches_the_workers():
  settings = demo.parse_args(["--workdir", "/w", "--finetune_pack=false"])[1]
  assert settings.finetune_pack is False
  assert demo.DemoSettings().finetune_pack is True
  # A worker process gets the setting back from the flags it is given.
  assert demo.parse_args(
      ["--workdir", "/w", *synthetic_runs.worker_flags(settings)])[1] == (
      settings)
