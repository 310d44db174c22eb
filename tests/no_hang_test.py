"""A run that stops on bad data ends: no hang after its error line.

The local runner, run as a user would, on a SQuAD-format training file
whose one `answer_start` is off by 5: the QA windows preprocessor's
`tf.numpy_function` raises on tf.data's threads, the runner prints one
`error:` line, and the process must exit with code 2 within the timeout.
It used to hang at 0% CPU (or abort) about every other run: the failed
iterator, held by the error's traceback, was destroyed during interpreter
finalization while a worker thread waited for the GIL to run Python
(`rembert_t5x.common.shutdown`).
"""

import json
import os
import subprocess
import sys

import pytest

from tests import test_utils

TASK = "test_no_hang_qa"
CONTEXT = "The cat sat on the mat and looked at the dog ."
ANSWER = "mat"
# A run that does not hang takes 20-30 s on 2 busy cores; one that hangs is
# killed here.
TIMEOUT_S = 120

# A shuffle buffer of seqio's default 1,000 windows over this 40-question
# file kept filling past the error (TF logged it 8 times, ~2 s apart) before
# the run saw it: 10 s more a run. With 64 the error ends the run after one
# pass, and the run still hung 3 of 3 times with the fix switched off.
SHUFFLE_BUFFER = 64

# The task module the run imports (MIXTURE_OR_TASK_MODULE). Its first
# preprocessor sleeps 0.1 s in a `tf.numpy_function` per question, 16 at a
# time, as a reader of a slow disk or a remote file would: Python calls are
# then in flight when the process exits, and without the fix the run hung
# in 4 of 4 tries; with the plain reader only about every other run hung.
TASK_MODULE = """
import functools
import time

import tensorflow as tf

from rembert_t5x.data import qa
from rembert_t5x.data import vocabulary
from rembert_tasks import qa as qa_tasks
from rembert_tasks import registry


def slow_reader(dataset, **unused_kwargs):
  def read(example_id):
    time.sleep(0.1)
    return example_id
  return dataset.map(lambda ex: dict(ex, id=tf.ensure_shape(
      tf.numpy_function(read, [ex["id"]], tf.string, stateful=False), [])),
      num_parallel_calls=16)


registry.add_task(
    {task!r},
    source=qa_tasks.squad_file_source({{"train": {path!r}}}),
    preprocessors=[slow_reader, functools.partial(
        qa.qa_windows_preprocessor, max_seq_length=32, doc_stride=8,
        source={path!r})],
    output_features=qa.output_features(
        vocabulary.RemBertVocabulary({spm!r}), 32),
    shuffle_buffer_size={shuffle_buffer})
"""


@pytest.fixture
def bad_squad_run(tmp_path):
  """(the command, its working directory, environment, the SQuAD file)."""
  vocab = test_utils.train_tiny_vocab(tmp_path)
  start = CONTEXT.index(ANSWER)
  questions = [{"id": f"q{i}", "question": "Where did the cat sit?",
                "answers": [{"text": ANSWER, "answer_start": start}]}
               for i in range(40)]
  questions[3]["answers"][0]["answer_start"] = start + 5
  squad = tmp_path / "train-v1.1.json"
  squad.write_text(json.dumps({"data": [{"paragraphs": [
      {"context": CONTEXT, "qas": questions}]}]}))
  (tmp_path / "no_hang_tasks.py").write_text(TASK_MODULE.format(
      task=TASK, path=str(squad), spm=vocab.sentencepiece_model_file,
      shuffle_buffer=SHUFFLE_BUFFER))
  run_gin = tmp_path / "run.gin"
  run_gin.write_text(test_utils.tiny_run_gin(
      TASK, length=32, model="RemBertQAModel",
      module="RemBertForQuestionAnswering",
      mixture_or_task_module="'no_hang_tasks'"))
  command = [sys.executable, "-m", "rembert_t5x.runner.train",
             f"--gin_file={run_gin}", "--gin_search_paths=.",
             f"--gin.MODEL_DIR='{tmp_path / 'model'}'"]
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(tmp_path), str(test_utils.REPO_ROOT)]))
  return command, test_utils.REPO_ROOT, env, squad


@pytest.mark.slow  # a CLI run of the runner, 20-30 s
def test_training_on_a_misaligned_answer_exits(bad_squad_run):
  command, cwd, env, squad = bad_squad_run
  try:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=TIMEOUT_S)
  except subprocess.TimeoutExpired as e:
    pytest.fail(f"the run did not end within {TIMEOUT_S} s (hung after its "
                f"error?); stderr tail: {(e.stderr or b'')[-2000:]!r}")
  errors = [l for l in result.stderr.splitlines() if l.startswith("error: ")]
  assert result.returncode == 2, result.stderr[-3000:]
  bad = CONTEXT.index(ANSWER) + 5
  assert errors == [
      f"error: task {TASK}, reading the batch of step 1: {squad}: question "
      f"'q3': answers[0].answer_start={bad} points at "
      f"{CONTEXT[bad:bad + len(ANSWER)]!r} in the context, not at the answer "
      f"text {ANSWER!r}."], result.stderr[-3000:]
