"""`rembert_tasks.synthetic`: registering reads and writes nothing; the first
read of a task makes the data and vocabulary."""

import json

import seqio

from rembert_t5x.data import synthetic_files
from rembert_t5x.data import text_sources
from rembert_tasks import synthetic as synthetic_tasks
from tests import test_utils


def test_layout_is_what_prepare_writes(tmp_path):
  manifest = synthetic_tasks.prepare(
      str(tmp_path / "data"), corpus_sentences=300, pair_train=4,
      tag_train=4, qa_train=4, eval_examples=4)
  planned = synthetic_tasks.layout(str(tmp_path / "data"))
  assert planned["files"] == manifest["files"]
  for key in ("dir", "vocab", "languages", "train_language"):
    assert planned[key] == manifest[key]
  assert planned["sizes"]["corpus"] == synthetic_files.CORPUS_SENTENCES


def test_importing_registers_the_tasks_and_touches_no_data(tmp_path):
  data = tmp_path / "synthetic"
  code = ("import seqio\n"
          "from rembert_tasks import synthetic\n"
          "names = [n for n in seqio.TaskRegistry.names()\n"
          "         if n.startswith(synthetic.PREFIX)]\n"
          "print(len(names), sorted(synthetic.NAMES.values()))\n")
  out = test_utils.run_python(
      code, **{synthetic_tasks.DATA_DIR_ENV: str(data)})
  count, names = out.split(" ", 1)
  # Per language: MLM, and pair, tag and QA evaluation; + 3 training tasks.
  assert int(count) == 4 * len(synthetic_files.language_codes()) + 3
  assert json.loads(names.replace("'", '"')) == sorted(
      synthetic_tasks.PREFIX + n for n in
      ("mlm", "pair_zeroshot", "tag_zeroshot", "qa_zeroshot"))
  assert not data.exists() and not (tmp_path / ".synthetic.lock").exists()


def test_the_first_read_of_a_task_prepares_its_directory(tmp_path):
  root = tmp_path / "synthetic"
  names = synthetic_tasks.register_synthetic(
      synthetic_tasks.layout(str(root)), prefix="onread_test_",
      shuffle_buffer_size=test_utils.TINY_SHUFFLE_BUFFER,
      prepare_on_read=True)
  assert not root.exists()
  task = seqio.get_mixture_or_task("onread_test_pair_train")
  first = next(task.get_dataset({"input_tokens": 64}, split="train",
                                shuffle=False).as_numpy_iterator())
  assert first["input_tokens"][0] == task.output_features[
      "input_tokens"].vocabulary.special_ids.cls
  corpus = root / "corpus" / "qla.txt"
  assert text_sources.count_text_lines(str(corpus)) == (
      synthetic_files.CORPUS_SENTENCES)
  # The MLM tasks' counts (the mixture rates) were the layout's sizes.
  mlm = seqio.get_mixture_or_task("onread_test_mlm_qla")
  assert mlm.source.num_input_examples("train") == synthetic_files.CORPUS_SENTENCES
  assert names["mlm"] == "onread_test_mlm"
