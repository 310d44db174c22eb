"""`rembert_tasks.synthetic`: registering reads and writes nothing; the first
read of a task makes the data and vocabulary."""

import json

import pytest
import seqio

from rembert_t5x.common import errors
from rembert_t5x.data import synthetic
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


# Task files of a few examples: only the corpus decides the vocabulary.
_FEW = dict(pair_train=4, tag_train=4, qa_train=4, eval_examples=4)


@pytest.mark.parametrize("sentences", [synthetic_files.CORPUS_SENTENCES, 300])
def test_the_default_vocabulary_fits_the_demo_corpus(tmp_path, sentences):
  """SentencePiece makes at most ~340 pieces of the 4 languages' corpus
  (a few hundred words): a change of the languages must keep VOCAB_SIZE
  below that, at the demo's corpus size and its smoke test's (300)."""
  manifest = synthetic_tasks.prepare(str(tmp_path / "d"),
                                     corpus_sentences=sentences, **_FEW)
  assert len(manifest["languages"]) == synthetic.DEFAULT_NUM_LANGUAGES
  assert (tmp_path / "d" / "spm.model").is_file()


def test_a_vocabulary_the_corpus_cannot_fill_is_one_clear_error(tmp_path):
  with pytest.raises(errors.UserError, match=(
      r"a 720-piece vocabulary does not fit the synthetic corpus of 200 "
      r"sentences per language \(SentencePiece makes at most \d+ pieces")):
    synthetic_tasks.prepare(str(tmp_path / "d"), vocab_size=720,
                            num_languages=12, corpus_sentences=200, **_FEW)
  # Nothing half-made is left under the name.
  assert not (tmp_path / "d").exists()
