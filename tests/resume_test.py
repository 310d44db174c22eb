"""Reliability of the local runner: SIGKILL + restart, determinism, NaN guard.

The end-to-end test kills real `python -m rembert_t5x.runner.train` subprocesses
(armed by tests/crashing_train.py: inside a checkpoint save, and between
steps), restarts them with the same command and compares
every logged loss with an uninterrupted run. The task is packed MLM over a
two-language mixture of local text files with a SentencePiece vocabulary,
the pipeline pre-training uses.
"""

import json
import logging
import pathlib
import shutil
import sys
import textwrap

import jax
import numpy as np
import pytest

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x import configs
from rembert_t5x.data import inputs
from rembert_t5x.data import pieces
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import input_checkpoints
from rembert_t5x.runner import train
from tests import test_utils

# Minutes, not seconds: `-m 'not slow'` leaves it out of a quick loop
# (.ci/run runs everything).
pytestmark = pytest.mark.slow

STEPS = 12
LENGTH = 32

# The task module (written by `setup`) is imported by the run file.
RUN_GIN = test_utils.tiny_run_gin(
    "resume_test_mlm", imports=["resume_test_tasks"], vocab_size=64,
    length=LENGTH, train_steps=STEPS, pack=True, learning_rate=3e-3,
    checkpoint_period=4, keep_checkpoints=2, log_period=1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """Corpus, vocabulary, a task module and a run file, all under tmp."""
  tmp = tmp_path_factory.mktemp("resume")
  rng = np.random.RandomState(0)
  words = {"en": ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far"],
           "ru": ["кошка", "сидела", "на", "ковре", "собака", "бежала"]}
  files = {}
  for lang, ws in words.items():
    path = tmp / f"{lang}.txt"
    path.write_text("\n".join(" ".join(rng.choice(ws, rng.randint(3, 12)))
                              for _ in range(80)) + "\n", "utf-8")
    files[lang] = [str(path)]
  spm = pieces.train_sentencepiece(files, str(tmp / "spm"), 45,
                                       character_coverage=1.0)
  (tmp / "resume_test_tasks.py").write_text(textwrap.dedent(f"""\
      from rembert_t5x.data import vocabulary
      from rembert_tasks import pretraining
      pretraining.register_local_text_mlm(
          "resume_test_mlm", files_by_lang={files!r},
          vocabulary=vocabulary.RemBertVocabulary({spm!r}),
          sequence_length=12,  # several sequences per packed row of 32
          shuffle_buffer_size={test_utils.TINY_SHUFFLE_BUFFER})
      """))
  (tmp / "run.gin").write_text(RUN_GIN)
  return tmp


def _metrics(model_dir):
  text = (pathlib.Path(model_dir) / "metrics.jsonl").read_text()
  return [json.loads(l) for l in text.splitlines()]


def _checkpoint_names(model_dir):
  return sorted(p.name for p in (pathlib.Path(model_dir) / "checkpoints").iterdir())


def _iterator_names(model_dir):
  return sorted(p.name for p in (pathlib.Path(model_dir) /
                                 input_checkpoints.DIRECTORY).iterdir())


def _run_in_process(setup, model_dir, capsys):
  capsys.readouterr()
  train._main(cli.parse_gin_args([f"--gin_file={setup / 'run.gin'}",
                                 f"--gin.MODEL_DIR='{model_dir}'"]))
  return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _train_in_process(setup, model_dir):
  configs.parse_gin([str(setup / "run.gin")], [f"MODEL_DIR = '{model_dir}'"])
  return train.train()


@pytest.fixture(scope="module")
def reference(setup, tmp_path_factory):
  """The uninterrupted run: (its MODEL_DIR, its metrics)."""
  sys.path.insert(0, str(setup))
  try:
    model_dir = tmp_path_factory.mktemp("reference")
    _train_in_process(setup, model_dir)
  finally:
    sys.path.remove(str(setup))
  records = _metrics(model_dir)
  assert [r["step"] for r in records] == list(range(1, STEPS + 1))
  return model_dir, records


def _assert_same_metrics(records, reference, steps):
  assert [r["step"] for r in records] == list(steps)
  for got in records:
    want = reference[got["step"] - 1]
    for key in ("loss", "grad_norm", "learning_rate", "mlm/accuracy"):
      np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-6,
                                 err_msg=f"step {got['step']} {key}")


def test_killed_runs_resume_to_the_losses_of_an_uninterrupted_run(
    setup, reference, tmp_path, monkeypatch, capsys):
  monkeypatch.syspath_prepend(str(setup))
  _, reference = reference

  model_dir = tmp_path / "crashy"
  # 1. Killed inside the save of step 8: files written, rename not done.
  result = test_utils.run_train_process(setup, model_dir, crash_at="save:8")
  assert result.returncode == -9, result.stderr[-2000:]
  names = _checkpoint_names(model_dir)
  assert "4" in names and "8" not in names
  assert any(n.startswith("8.") for n in names), names  # the killed temporary
  assert checkpoints.latest_checkpoint_dir(str(model_dir)).name == "4"
  assert [r["step"] for r in _metrics(model_dir)] == list(range(1, 9))
  # The iterator of step 8 was saved before orbax's save was killed.
  assert _iterator_names(model_dir) == ["4", "8"]

  # 2. Restarted, then killed after the update of step 10 (never logged).
  result = test_utils.run_train_process(setup, model_dir, crash_at="step:10")
  assert result.returncode == -9, result.stderr[-2000:]
  # Restored, not skipped: the fallback's warnings reach stderr.
  assert "input iterator state" not in result.stderr, result.stderr[-2000:]
  assert checkpoints.latest_checkpoint_dir(str(model_dir)).name == "8"
  assert [r["step"] for r in _metrics(model_dir)] == list(range(1, 10))
  # Step 8's stale state was deleted, then written again by this run.
  assert _iterator_names(model_dir) == ["4", "8"]

  # 3. Restarted with the same command (in this process, to save a start-up):
  # runs to the end.
  final = _run_in_process(setup, model_dir, capsys)
  _assert_same_metrics(_metrics(model_dir), reference, range(1, STEPS + 1))
  np.testing.assert_allclose(final["loss"], reference[-1]["loss"], atol=1e-6)
  assert checkpoints.latest_checkpoint_dir(str(model_dir)).name == str(STEPS)
  # keep_checkpoints = 2: the iterator states follow orbax's deletions.
  assert _checkpoint_names(model_dir) == _iterator_names(model_dir) == [
      "12", "8"]


def _resume_from_step_8(setup, reference, model_dir, monkeypatch,
                        keep_state=True):
  """Resumes a copy of the reference run whose step-12 save never happened
  (and without the iterator state of step 8 unless `keep_state`); returns
  the `skip_batches` of every pipeline the resumed run built."""
  shutil.copytree(reference[0], model_dir)
  shutil.rmtree(model_dir / "checkpoints" / "12")
  for step in ("12",) if keep_state else ("12", "8"):
    shutil.rmtree(input_checkpoints.state_dir(model_dir, int(step)))
  built = []
  make_dataset = inputs.make_dataset

  def recording_make_dataset(*args, **kwargs):
    data = make_dataset(*args, **kwargs)
    built.append(data)
    return data

  monkeypatch.setattr(inputs, "make_dataset", recording_make_dataset)
  monkeypatch.syspath_prepend(str(setup))
  _train_in_process(setup, model_dir)
  _assert_same_metrics(_metrics(model_dir), reference[1], range(1, STEPS + 1))
  # The run's pipeline stopped when the run did (not at a later garbage
  # collection).
  assert built[-1].closed
  return [data.skip_batches for data in built]


def test_resume_restores_the_iterator_and_reads_no_batch_again(
    setup, reference, tmp_path, monkeypatch, caplog):
  """The one pipeline the resumed run built skipped nothing, yet steps 9-12
  saw the reference's batches 9-12: they came from the restored state, not
  from reading batches 1-8 again."""
  with caplog.at_level(logging.INFO):
    built = _resume_from_step_8(setup, reference, tmp_path / "m", monkeypatch)
  assert built == [0]
  assert "Restored the input iterator of step 8" in caplog.text


def test_resume_without_the_iterator_state_skips_with_a_warning(
    setup, reference, tmp_path, monkeypatch, caplog):
  """An old checkpoint, or a deleted state: the pipeline skips the 8
  consumed batches (reading them again) and the run ends the same."""
  with caplog.at_level(logging.WARNING):
    built = _resume_from_step_8(setup, reference, tmp_path / "m", monkeypatch,
                                keep_state=False)
  assert built == [8]
  assert "no input iterator state of step 8" in caplog.text


def test_packed_mixture_pipeline_skips_deterministically(setup, monkeypatch):
  """Skipping k batches gives what an uninterrupted pipeline gives after k."""
  monkeypatch.syspath_prepend(str(setup))
  __import__("resume_test_tasks")
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(
      test_utils.TINY_CONFIG))

  def batches(skip, n):
    it = inputs.make_dataset(model, "resume_test_mlm", {"input_tokens": LENGTH},
                            4, "train", seed=3, pack=True, skip_batches=skip)
    return [next(it) for _ in range(n)]

  full = batches(0, 7)
  tail = batches(4, 3)
  assert any(b["segment_ids"].max() > 1 for b in full)  # really packed
  for got, want in zip(tail, full[4:]):
    for key in want:
      np.testing.assert_array_equal(got[key], want[key], err_msg=key)
  other_seed = inputs.make_dataset(
      model, "resume_test_mlm", {"input_tokens": LENGTH}, 4, "train", seed=4,
      pack=True)
  assert not np.array_equal(next(other_seed)["input_tokens"],
                            full[0]["input_tokens"])


# ----------------------------------------------------------------------------
# NaN / inf guard: one training example carries an infinite loss weight.
# ----------------------------------------------------------------------------

NUM_EXAMPLES = 48


def _register_weight_task(name, weight_of):
  """In-memory MLM task; example i's first position has weight weight_of(i)."""
  return test_utils.register_random_mlm_task(
      name, num_examples=NUM_EXAMPLES, first_weight=weight_of)


def _mlm_model():
  return models.RemBertMLMModel(network.RemBertForMaskedLM(
      test_utils.TINY_CONFIG))


@pytest.fixture(scope="module")
def poisoned_task():
  """(task, step): the task's only non-finite example is read at `step` only.

  The pipeline shuffles across epochs, so an example can recur; the probe
  (weight = example index + 1) finds one read exactly once in six steps.
  """
  probe = _register_weight_task("test_nan_probe", lambda i: i + 1.0)
  it = inputs.make_dataset(_mlm_model(), probe, {"input_tokens": 16}, 8,
                          "train", seed=0, pack=False)
  steps_of = {}
  for step in range(1, 7):
    for weight in next(it)["weights"][:, 0]:
      steps_of.setdefault(int(weight) - 1, []).append(step)
  index, (step,) = next((i, s) for i, s in sorted(steps_of.items())
                        if len(s) == 1 and 3 <= s[0] <= 5)
  task = _register_weight_task(
      "test_nan_poisoned", lambda i: np.inf if i == index else 1.0)
  return task, step


def _train(model_dir, task, nonfinite, checkpoint_period):
  configs.parse_gin([])
  return train.train(
      str(model_dir), model=_mlm_model(), mixture_or_task_name=task,
      task_feature_lengths={"input_tokens": 16}, train_steps=6, batch_size=8,
      learning_rate=1e-3, checkpoint_period=checkpoint_period,
      keep_checkpoints=10, log_period=1, mesh_shape=(1, 1),
      progress_bar=False, nonfinite=nonfinite)


def test_nonfinite_stop_names_the_step_and_keeps_the_last_good_checkpoint(
    poisoned_task, tmp_path):
  task, bad = poisoned_task
  model_dir = tmp_path / "m"
  with pytest.raises(errors.UserError) as e:
    _train(model_dir, task, "stop", checkpoint_period=2)
  message = str(e.value)
  good = (bad - 1) // 2 * 2
  assert f"non-finite loss or gradient at step {bad} " in message
  assert f"last good checkpoint is {model_dir / 'checkpoints' / str(good)}" in message
  assert _checkpoint_names(model_dir) == [str(s) for s in range(2, good + 1, 2)]
  assert [r["step"] for r in _metrics(model_dir)] == list(range(1, bad))
  # What the stop kept is loadable and finite.
  params = checkpoints.load_params(str(model_dir))
  assert all(np.isfinite(x).all() for x in jax.tree_util.tree_leaves(params))


def test_nonfinite_skip_leaves_params_unchanged_and_continues(
    poisoned_task, tmp_path):
  task, bad = poisoned_task
  model_dir = tmp_path / "m"
  last = _train(model_dir, task, "skip", checkpoint_period=1)
  records = _metrics(model_dir)
  assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
  assert [np.isfinite(r["loss"]) for r in records] == [
      r["step"] != bad for r in records]
  assert np.isfinite(last["loss"])
  ckpt = model_dir / "checkpoints"
  before, at, after = (jax.tree_util.tree_leaves(
      checkpoints.load_params(str(ckpt / str(s)))) for s in (bad - 1, bad, bad + 1))
  for a, b in zip(before, at):
    np.testing.assert_array_equal(a, b)  # the bad update was skipped
  assert any(not np.array_equal(a, b) for a, b in zip(at, after))
  assert all(np.isfinite(x).all() for x in after)
