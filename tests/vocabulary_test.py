"""Tests for rembert_t5x.data.vocabulary on real multilingual Tatoeba text."""

import os
import unicodedata

import pytest
import sentencepiece as spm

from rembert_t5x.common import errors
from rembert_t5x.data import pieces
from rembert_t5x.data import text_sources
from rembert_t5x.data import vocabulary
from tests import test_utils

DATA_DIR = test_utils.SHARED_DATA
TATOEBA = DATA_DIR / "tatoeba"
# Many scripts: Thai, Han, Devanagari, Arabic, Cyrillic, Greek, Hangul, Kana,
# Hebrew, Georgian, Latin with diacritics.
LANGS = ("tha", "cmn", "hin", "ara", "rus", "ell", "kor", "jpn", "heb", "kat",
         "deu", "vie")


def _require_tatoeba():
  if not TATOEBA.is_dir():
    if os.environ.get("CI") == "true":
      pytest.fail(f"Real test data missing: {TATOEBA} (CI=true).")
    pytest.skip(f"Real test data not found at {TATOEBA}; it lives in "
                "../shared/data next to the repository.")


def _tatoeba_files(langs=LANGS):
  return {l: [str(TATOEBA / f"tatoeba.{l}-eng.{l}")] for l in langs}


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  _require_tatoeba()
  prefix = str(tmp_path_factory.mktemp("spm") / "tatoeba")
  path = pieces.train_sentencepiece(
      _tatoeba_files(), prefix, vocab_size=4000, alpha=0.5,
      max_sentences=20000, character_coverage=1.0)
  return vocabulary.RemBertVocabulary(path)


def _sentences(lang, n=20):
  lines = (TATOEBA / f"tatoeba.{lang}-eng.{lang}").read_text("utf-8")
  return [l for l in lines.splitlines() if l.strip()][:n]


def test_special_ids(vocab):
  assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id,
          vocab.mask_id) == (0, 1, 2, 3, 4)
  names = [vocab.tokenizer.IdToPiece(i) for i in range(5)]
  assert names == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert vocab.vocab_size == 4000
  assert vocab.eos_id is None and vocab.bos_id is None
  # [MASK] is user-defined (typed masks encode to it); [CLS]/[SEP] are
  # control symbols that raw text can never produce.
  assert vocab.special_ids == pieces.TRAINED_LAYOUT
  assert vocab.mask_id in vocab.encode("a [MASK] b")
  ids = vocab.encode("[CLS] x [SEP]")
  assert vocab.cls_id not in ids and vocab.sep_id not in ids


@pytest.mark.parametrize("lang", LANGS)
def test_round_trip(vocab, lang):
  for text in _sentences(lang):
    ids = vocab.encode(text)
    assert vocab.unk_id not in ids, text
    expected = " ".join(unicodedata.normalize("NFKC", text).split())
    assert vocab.decode(ids) == expected


def test_tf_encoding_matches_python(vocab):
  import tensorflow as tf
  for lang in ("tha", "cmn", "hin"):
    for text in _sentences(lang, 5):
      tf_ids = vocab.encode_tf(tf.constant(text)).numpy().tolist()
      assert tf_ids == vocab.encode(text)


@pytest.mark.parametrize("lang", LANGS)
def test_offsets_exact(vocab, lang):
  for text in _sentences(lang):
    # Extra spaces around and inside exercise the whitespace handling.
    text = "  " + text.replace(" ", "  ", 1) + " "
    ids, offsets = vocab.encode_with_offsets(text)
    assert ids == vocab.encode(text)
    previous_end = 0
    pending = ""  # Pieces of one expanded character before its last piece.
    for token_id, (start, end) in zip(ids, offsets):
      assert 0 <= start <= end <= len(text)
      assert start >= previous_end
      previous_end = end
      piece = vocab.tokenizer.IdToPiece(token_id).replace("\u2581", "")
      span = text[start:end]
      if not span:
        # Whitespace-only pieces, or leading parts of a character that NFKC
        # expands (e.g. "…" -> "..."), which SentencePiece gives no span.
        pending += piece
        continue
      # The span is the original text of the piece(s), before normalisation.
      assert unicodedata.normalize("NFKC", span) == pending + piece, (
          text, span, piece)
      pending = ""
    assert pending == ""
    visible = "".join(text[s:e] for s, e in offsets)
    assert visible == "".join(text.split())


def test_offsets_are_char_not_byte_offsets(vocab):
  text = "我们 今天 去"
  ids, offsets = vocab.encode_with_offsets(text)
  assert offsets[-1][1] == len(text)  # 7 chars, 19 UTF-8 bytes.
  assert "".join(text[s:e] for s, e in offsets) == "我们今天去"


def test_vocabulary_without_special_tokens(tmp_path):
  _require_tatoeba()
  prefix = str(tmp_path / "plain")
  spm.SentencePieceTrainer.train(
      input=str(TATOEBA / "tatoeba.deu-eng.deu"), model_prefix=prefix,
      vocab_size=300, minloglevel=2)
  vocab = vocabulary.RemBertVocabulary(prefix + ".model")
  with pytest.raises(ValueError, match=r"plain\.model: SentencePiece model "
                     r"has no piece '\[PAD\]'"):
    vocab.encode("hallo")


def test_default_vocabulary(vocab, monkeypatch, tmp_path):
  monkeypatch.delenv(vocabulary.SPM_PATH_ENV, raising=False)
  lazy = vocabulary.default_vocabulary()  # Reads nothing yet.
  with pytest.raises(ValueError, match="REMBERT_SPM_PATH is not set"):
    lazy.encode("hallo")
  missing = str(tmp_path / "missing.model")
  monkeypatch.setenv(vocabulary.SPM_PATH_ENV, missing)
  with pytest.raises(ValueError, match="missing.model"):
    _ = vocabulary.default_vocabulary().vocab_size
  monkeypatch.setenv(vocabulary.SPM_PATH_ENV, vocab.sentencepiece_model_file)
  lazy = vocabulary.default_vocabulary()
  assert lazy == vocab
  assert lazy.encode("hallo") == vocab.encode("hallo")
  assert lazy.special_ids == vocab.special_ids
  assert lazy == vocab


def test_a_vocabulary_other_than_the_checkpoints_is_refused(
    monkeypatch, tmp_path, caplog):
  checkpoint = tmp_path / "model_dir"
  checkpoint.mkdir()
  (checkpoint / pieces.VOCABULARY_FILENAME).write_bytes(b"the checkpoint's")
  other = tmp_path / "other.model"
  other.write_bytes(b"another vocabulary")
  monkeypatch.delenv(vocabulary.ALLOW_OTHER_VOCABULARY_ENV, raising=False)
  monkeypatch.setenv(vocabulary.SPM_PATH_ENV, str(other))
  with pytest.raises(errors.UserError) as e:
    vocabulary.use_checkpoint_vocabulary(str(checkpoint))
  assert str(e.value).startswith(
      f"the run's vocabulary {other} ($REMBERT_SPM_PATH) differs from the "
      f"checkpoint's {checkpoint / pieces.VOCABULARY_FILENAME}")
  monkeypatch.delenv(vocabulary.SPM_PATH_ENV)
  with pytest.raises(errors.UserError, match=r"\(SENTENCEPIECE_MODEL\)"):
    vocabulary.use_checkpoint_vocabulary(str(checkpoint),
                                         sentencepiece_model=str(other))
  # The same bytes under another name, or the explicit opt-in (logged), pass.
  same = tmp_path / "same.model"
  same.write_bytes(b"the checkpoint's")
  assert vocabulary.use_checkpoint_vocabulary(
      str(checkpoint), sentencepiece_model=str(same)) == str(same)
  monkeypatch.setenv(vocabulary.ALLOW_OTHER_VOCABULARY_ENV, "1")
  assert vocabulary.use_checkpoint_vocabulary(
      str(checkpoint), sentencepiece_model=str(other)) == str(other)
  assert "not the checkpoint's vocabulary" in caplog.text
  vocabulary.use_checkpoint_vocabulary()  # leave no choice behind


def test_alpha_sampling_rates():
  rates = pieces.alpha_sampling_rates({"a": 100, "b": 1}, alpha=0.5)
  assert rates["a"] == pytest.approx(10 / 11)
  assert rates["b"] == pytest.approx(1 / 11)
  assert pieces.alpha_sampling_rates({"a": 5, "b": 1}, 0.0) == {
      "a": 0.5, "b": 0.5}
  with pytest.raises(ValueError, match="'b' has count 0"):
    pieces.alpha_sampling_rates({"a": 1, "b": 0}, 0.5)


def test_sample_sentences_upsamples_small_languages(tmp_path):
  big = tmp_path / "big.txt"
  big.write_text("".join(f"big {i}\n" for i in range(400)), "utf-8")
  small = tmp_path / "small.txt"
  small.write_text("".join(f"small {i}\n" for i in range(4)), "utf-8")
  sampled = pieces.sample_sentences(
      {"en": [str(big)], "sw": [str(small)]}, max_sentences=300, alpha=0.5)
  # p = 20/22 and 2/22 of 300 lines.
  assert len(sampled["en"]) == 273 and len(sampled["sw"]) == 27
  assert len(set(sampled["en"])) == 273  # Without replacement.
  assert set(sampled["sw"]) == {f"small {i}" for i in range(4)}


def test_bad_files(tmp_path):
  empty = tmp_path / "empty.txt"
  empty.write_text("\n  \n", "utf-8")
  with pytest.raises(ValueError, match=r"empty\.txt: file is empty"):
    pieces.train_sentencepiece({"en": [str(empty)]}, str(tmp_path / "m"),
                                   vocab_size=100)
  latin1 = tmp_path / "latin1.txt"
  latin1.write_bytes("ok\nGrüße\n".encode("latin-1"))
  with pytest.raises(ValueError, match=r"latin1\.txt, line 2: not valid"):
    text_sources.read_text_lines(str(latin1))
  with pytest.raises(ValueError, match=r"nope\.txt: cannot read"):
    text_sources.read_text_lines(str(tmp_path / "nope.txt"))
