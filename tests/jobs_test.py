"""The runner's job API: the `TrainConfig` an experiment asks for,
`Evaluations` building each mixture's examples once (the demo, sweep and
reproduction tests run it at experiment scale), and `run_workers`."""

import textwrap

import pytest
import seqio

from rembert_t5x.common import errors
from rembert_t5x import configs
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import jobs
from rembert_t5x.runner import train
from tests import test_utils


def _config(**overrides):
  fields = dict(model_dir="/tmp/unused", mixture_or_task_name="t",
                task_feature_lengths={"input_tokens": 8}, train_steps=100,
                batch_size=4, learning_rate=1e-3, seed=7)
  fields.update(overrides)
  return jobs.experiment_config(**fields)


@pytest.mark.parametrize("steps", [1, 3, 9, 10, 30, 70, 150, 600, 1000, 4375])
def test_warmup_is_a_tenth_of_the_steps_rounded_down(steps):
  assert _config(train_steps=steps).warmup_steps == steps // 10


def test_one_seed_names_the_run_and_every_checkpoint_is_kept():
  config = _config(train_steps=10, checkpoint_period=3)
  assert config.seed == config.data_seed == 7
  assert config.checkpoint_period == 3
  # Saves at 3, 6, 9 and 10: all four stay for checkpoint selection.
  assert sum(map(config.saves_at, range(1, 11))) == 4
  assert config.keep_checkpoints >= 4
  assert config.log_period == 10 and config.progress_bar is False
  assert config.checkpoint_input_iterator is True
  end_only = _config(train_steps=10)
  assert end_only.checkpoint_period == 10
  assert end_only.init_checkpoint is None and end_only.pack is None
  # Only a run checkpointed along the way saves its input iterator.
  assert end_only.checkpoint_input_iterator is False
  # Any field given overrides the conventions.
  assert _config(keep_checkpoints=1).keep_checkpoints == 1


@pytest.fixture(scope="module")
def pair_task(tmp_path_factory):
  return test_utils.register_tiny_synthetic(
      tmp_path_factory.mktemp("synthetic"), "jobstest_", pair_train=32,
      tag_train=8, qa_train=8, eval_examples=8)


def test_register_synthetic_gives_every_task_the_buffer(pair_task):
  """`register_synthetic(shuffle_buffer_size=...)` reaches the MLM, pair,
  tag and QA tasks (training and per-language)."""
  del pair_task
  tasks = [n for n in seqio.TaskRegistry.names() if n.startswith("jobstest_")]
  assert len(tasks) == 4 + 3 * 5  # MLM per language; train + 4 per family
  assert {seqio.get_mixture_or_task(n).shuffle_buffer_size
          for n in tasks} == {test_utils.TINY_SHUFFLE_BUFFER}


def _pair_model():
  config = network.RemBertConfig(
      vocab_size=400, input_embed_dim=16, emb_dim=32, output_embed_dim=24,
      num_layers=1, num_heads=2, head_dim=16, mlp_dim=64,
      max_position_embeddings=64)
  return models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(config, 2))


def test_run_trains_and_evaluations_reuse_one_evaluator(pair_task, tmp_path):
  configs.parse_gin([])
  model = _pair_model()
  lengths = {"input_tokens": 48}
  metrics = train.train_model(model, _config(
      model_dir=str(tmp_path / "m"), mixture_or_task_name="jobstest_pair_train",
      task_feature_lengths=lengths, train_steps=2, checkpoint_period=1,
      batch_size=8))
  assert all(isinstance(v, float) for v in metrics.values())
  assert "loss" in metrics
  assert checkpoints.steps(str(tmp_path / "m")) == [1, 2]

  evaluations = jobs.Evaluations()
  by_language = evaluations.last_checkpoint(str(tmp_path / "m"), model,
                                            pair_task["pair"], lengths)
  assert set(by_language) == {"qla", "qcy", "qgr", "qdv"}
  # A second model object of the same family: the same evaluator, and the
  # same scores from the same checkpoint.
  by_task = evaluations.last_checkpoint(str(tmp_path / "m"), _pair_model(),
                                        pair_task["pair"], lengths,
                                        by_language=False)
  assert len(evaluations._evaluators) == 1  # pylint: disable=protected-access
  assert {t.rsplit("_", 1)[-1]: m for t, m in by_task.items()} == by_language


# A worker module that imports nothing of ours: records its arguments, then
# exits with the code named by `--fail_worker` (0 for the others).
WORKER = """
import pathlib, sys
worker = int(sys.argv[1].removeprefix("--worker="))
out = pathlib.Path(sys.argv[2].removeprefix("--out="))
fail = int(sys.argv[3].removeprefix("--fail_worker="))
(out / f"worker-{worker}.txt").write_text(" ".join(sys.argv[1:]))
sys.exit(3 if worker == fail else 0)
"""


def test_run_workers_starts_each_worker_process_and_names_the_failed(
    tmp_path, monkeypatch):
  (tmp_path / "jobs_test_worker.py").write_text(textwrap.dedent(WORKER))
  monkeypatch.setenv("PYTHONPATH", str(tmp_path))
  out = tmp_path / "out"
  out.mkdir()
  jobs.run_workers("jobs_test_worker", 2, [f"--out={out}", "--fail_worker=-1"])
  assert sorted(p.read_text() for p in out.iterdir()) == [
      f"--worker={i} --out={out} --fail_worker=-1" for i in range(2)]
  with pytest.raises(errors.UserError) as e:
    jobs.run_workers("jobs_test_worker", 3,
                     [f"--out={out}", "--fail_worker=1"])
  assert str(e.value).startswith(
      "jobs_test_worker: worker(s) [1] failed (their output is above)")
  # The others ran to the end: their records are kept for a rerun.
  assert sorted(p.name for p in out.iterdir()) == [
      "worker-0.txt", "worker-1.txt", "worker-2.txt"]
