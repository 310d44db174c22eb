"""Tests for rembert_t5x.runner.embed_corpus: the streaming embedding pass.

A tiny random retrieval model over a few sentences: the pass gives the
embeddings of the evaluation path (seqio preprocessing, the retrieval
feature converter, one batch after another in corpus order), its chunks
hold the sorted corpus, an interrupted pass resumes from its last chunk to
the result of an uninterrupted one, and a folder of other inputs is refused.
"""

import json

import jax
import numpy as np
import pytest
import tensorflow as tf

from rembert_t5x.common import errors
from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x import feature_converters
from rembert_t5x import models
from rembert_t5x.runner import embed_corpus
from rembert_t5x.runner import predict_batches
from tests import test_utils

CONFIG = test_utils.TINY_CONFIG
LENGTH = 40  # TINY_CONFIG's positions
# Lengths far apart and out of order, so sorting moves them; a duplicate.
SENTENCES = [
    "Paris is the capital of France .",
    "A dog .",
    "Tom and Mary say they do not want to sing with us anymore , said John "
    "Smith in New York .",
    "Die Katze sitzt auf der Matte .",
    "The cat sat on the mat and looked at the dog .",
    "Le chat .",
    "A dog .",
]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return test_utils.train_tiny_vocab(tmp_path_factory.mktemp("spm"))


@pytest.fixture(scope="module")
def model_and_params():
  model = models.RemBertRetrievalModel(models.make_module("retrieval",
                                                          CONFIG))
  params = model.get_initial_variables(
      jax.random.PRNGKey(3), {"input_tokens": (1, 8)})["params"]
  return model, params


def _encoder(model_and_params, vocab, work_dir, log=None, **settings):
  model, params = model_and_params
  return embed_corpus.CorpusEncoder(
      model, params, vocab, str(work_dir), max_length=LENGTH,
      log=log or (lambda line: None), **{"chunk_size": 2, "batch_size": 2,
                                         **settings})


def _reference(model_and_params, vocab, sentences):
  """The evaluation path's embeddings, in corpus order, one batch after
  another at the full length (`predict_batches`, unsorted)."""
  model, params = model_and_params
  ds = tf.data.Dataset.from_tensor_slices({"text": sentences})
  ds = xp.encode_single_sentence(
      ds, sequence_length={"input_tokens": LENGTH},
      output_features=xp.retrieval_output_features(vocab))
  ds = feature_converters.RetrievalFeatureConverter(pack=False)(
      ds, {"input_tokens": LENGTH})
  outputs = dict(predict_batches.make_predict_fn(
      model, params, 4, length_sorted=False)(ds.enumerate()))
  return np.stack([outputs[i] for i in range(len(sentences))])


def test_the_pass_gives_the_evaluation_paths_embeddings_in_corpus_order(
    model_and_params, vocab, tmp_path):
  tokens = embed_corpus.tokenize(SENTENCES, vocab, LENGTH)
  assert len(tokens) == len(SENTENCES)
  assert len(set(tokens.lengths().tolist())) > 3  # sorting moves rows
  got = _encoder(model_and_params, vocab, tmp_path).embed("c", SENTENCES)
  assert got.shape == (len(SENTENCES), CONFIG.emb_dim)
  np.testing.assert_allclose(got, _reference(model_and_params, vocab,
                                             SENTENCES), atol=2e-5)
  np.testing.assert_array_equal(got[1], got[6])  # the same sentence
  # Finished: embeddings.npy and the manifest, the chunks gone.
  assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [
      embed_corpus.EMBEDDINGS, embed_corpus.MANIFEST]


class _Stop(Exception):
  pass


def _stop_after(chunks):
  """A log that interrupts the pass once `chunks` chunks are on disk."""
  lines = []

  def log(line):
    lines.append(line)
    if sum(" chunk " in l for l in lines) == chunks:
      raise _Stop(line)

  return log, lines


def test_an_interrupted_pass_resumes_from_its_last_chunk(
    model_and_params, vocab, tmp_path, monkeypatch):
  whole = _encoder(model_and_params, vocab, tmp_path / "whole").embed(
      "c", SENTENCES)
  log, _ = _stop_after(2)
  with pytest.raises(_Stop):
    _encoder(model_and_params, vocab, tmp_path / "cut", log).embed(
        "c", SENTENCES)
  folder = tmp_path / "cut" / "c"
  assert sorted(p.name for p in folder.glob("chunk-*.npy")) == [
      "chunk-00000.npy", "chunk-00001.npy"]
  # The chunks hold the sorted corpus: chunk 0 the two longest sentences.
  lengths = embed_corpus.tokenize(SENTENCES, vocab, LENGTH).lengths()
  longest = np.argsort(-lengths, kind="stable")[:2]
  np.testing.assert_array_equal(np.load(folder / "chunk-00000.npy"),
                                whole[longest])
  computed = []
  embed_chunk = embed_corpus._embed_chunk
  monkeypatch.setattr(embed_corpus, "_embed_chunk",
                      lambda *a: computed.append(a[-1]) or embed_chunk(*a))
  lines = []
  resumed = _encoder(model_and_params, vocab, tmp_path / "cut",
                     lines.append).embed("c", SENTENCES)
  assert computed == [2, 3]  # 7 sentences in chunks of 2: only the rest
  assert "2 chunks on disk, resuming" in lines[0]
  assert "left" in lines[-1] and "sentences/s" in lines[-1]
  np.testing.assert_array_equal(resumed, whole)
  # A finished folder is only opened.
  computed.clear()
  again = _encoder(model_and_params, vocab, tmp_path / "cut").embed(
      "c", SENTENCES)
  assert computed == [] and np.array_equal(again, whole)


def test_a_folder_of_other_inputs_is_refused(model_and_params, vocab,
                                             tmp_path):
  log, _ = _stop_after(1)
  with pytest.raises(_Stop):
    _encoder(model_and_params, vocab, tmp_path, log).embed("c", SENTENCES)
  manifest = json.loads((tmp_path / "c" / embed_corpus.MANIFEST).read_text())
  assert manifest["sentences"] == len(SENTENCES)
  assert manifest["chunk_size"] == 2
  with pytest.raises(errors.UserError,
                     match=r"c: an embedding pass of other inputs .*"
                     r"chunk_size 2 \(now 3\).*delete the folder"):
    _encoder(model_and_params, vocab, tmp_path, chunk_size=3).embed(
        "c", SENTENCES)
  with pytest.raises(errors.UserError, match=r"sentences 7 \(now 6\); tokens"):
    _encoder(model_and_params, vocab, tmp_path).embed("c", SENTENCES[:-1])
  model, params = model_and_params
  other = jax.tree_util.tree_map(lambda x: x + 1, params)
  with pytest.raises(errors.UserError, match=r"model '[0-9a-f]{64}'"):
    _encoder((model, other), vocab, tmp_path).embed("c", SENTENCES)


def test_command_line_embeds_a_file_with_a_model_dir(vocab, tmp_path,
                                                     capsys):
  model_dir = test_utils.write_random_checkpoint(
      tmp_path / "model", "mlm", CONFIG, vocab_file=vocab.sentencepiece_model_file)
  corpus = tmp_path / "corpus.txt"
  # U+2028 and U+0085 inside sentences end no line: one embedding a line.
  lines = [SENTENCES[0].replace(" is ", " is\u2028"),
           SENTENCES[1] + "\u0085", *SENTENCES[2:]]
  corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
  embed_corpus.main([f"--pretrained={model_dir}", f"--sentences={corpus}",
                     f"--work_dir={tmp_path / 'w'}", "--chunk_size=4"])
  report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert report["sentences"] == len(SENTENCES)
  assert report["dim"] == CONFIG.emb_dim
  assert np.load(report["embeddings"]).shape == (len(SENTENCES),
                                                 CONFIG.emb_dim)
  with pytest.raises(SystemExit):
    embed_corpus.main([f"--sentences={corpus}", f"--work_dir={tmp_path}"])
  assert "pass one of --pretrained and --model_gin" in capsys.readouterr().err


def test_the_corpus_splits_lines_as_text_mode_iteration(tmp_path):
  # XTREME iterates the corpus file in text mode: lines end at \n, \r\n
  # and \r only; str.splitlines() also ends them at these characters.
  inside = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1e"]
  text = ("".join(f"s{i}{c}x\n" for i, c in enumerate(inside))
          + "dos\r\nmac\r\n\nlast")
  corpus = tmp_path / "bucc.txt"
  corpus.write_bytes(text.encode("utf-8"))
  with open(corpus, encoding="utf-8") as f:
    iterated = [line.rstrip("\n") for line in f]
  sentences = embed_corpus.read_corpus(str(corpus))
  assert sentences == iterated
  assert len(sentences) == len(inside) + 4  # the blank line is a sentence
  assert sentences[0] == "s0\u2028x" and sentences[-1] == "last"
  assert len(text.splitlines()) > len(sentences)


@pytest.mark.parametrize("content, flag, message", [
    ("", "", "corpus.txt: the file is empty (one sentence a line)"),
    ("a\n", "--batch_size=0", "flag --batch_size=0: 0 is not a positive "
     "integer"),
    ("a\n", "--chunk_size=-1", "flag --chunk_size=-1: -1 is not a positive "
     "integer"),
])
def test_command_line_user_errors_are_one_line(tmp_path, capsys, content,
                                               flag, message):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text(content, encoding="utf-8")
  argv = ["--model_gin=gin_configs/models/tiny.gin", "--vocab=spm.model",
          f"--sentences={corpus}", f"--work_dir={tmp_path / 'w'}"]
  with pytest.raises(SystemExit) as exit_info:
    embed_corpus.main(argv + ([flag] if flag else []))
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: ")
  assert message in err[0]
  assert not (tmp_path / "w").exists()
