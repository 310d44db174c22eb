"""Tests for rembert_t5x.data.qa: windows, offsets, span decoding, tf.data wrapper.

The real-data test runs every XQuAD language through pre-processing and
post-processing with gold-peaked logits and scores the result with the SQuAD
metric.
"""

import collections
import functools
import json
import os
import random
import unicodedata

import numpy as np
import pytest
import seqio
import tensorflow as tf

from rembert_t5x.data import pieces
from rembert_t5x.data import qa
from rembert_t5x.data import squad_files
from rembert_t5x.data import vocabulary
from rembert_t5x.scoring import metrics
from tests import test_utils

XQUAD_DIR = test_utils.SHARED_DATA / "xquad"
XQUAD_LANGS = ("ar", "de", "el", "en", "es", "hi", "ro", "ru", "th", "tr",
               "vi", "zh")

CONTEXT = ("Ann met Bob in Paris in 1999. They walked along the river and "
           "talked about books, music and the weather. Later Bob moved to "
           "Berlin, where he opened a small bakery near the station.")
ANSWER = "Berlin"


def _example(answer=ANSWER, start=None, question="Where did Bob move to?"):
  start = CONTEXT.index(answer) if start is None else start
  return qa.QAExample("q1", question, CONTEXT, (answer,), (start,))


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  """A tiny SentencePiece vocabulary with the RemBERT special ids."""
  rng = random.Random(0)
  words = (CONTEXT.replace(".", " .").replace(",", " ,").split() +
           "where did who what when move to opened walked".split())
  corpus = tmp_path_factory.mktemp("corpus") / "en.txt"
  corpus.write_text("\n".join(
      " ".join(rng.choice(words) for _ in range(12)) for _ in range(400)),
                    encoding="utf-8")
  prefix = str(tmp_path_factory.mktemp("spm") / "tiny")
  path = pieces.train_sentencepiece({"en": [str(corpus)]}, prefix,
                                        vocab_size=64,
                                        character_coverage=1.0)
  return vocabulary.RemBertVocabulary(path)


def _check_window_invariants(windows, example, max_seq_length,
                             ids=pieces.TRAINED_LAYOUT):
  """Shape, special-token, token-type and offset invariants of windows."""
  context = example.context
  # Per character of the context: covered by some window's token; a gap
  # character (whitespace or a control/format character) may lie outside
  # every token.
  covered = np.zeros(len(context), bool)
  gap = _gap_characters(context)
  for w in windows:
    n = len(w.input_tokens)
    assert n <= max_seq_length
    assert w.token_types.shape == (n,)
    assert w.token_offsets.shape == (n, 2)
    assert w.input_tokens[0] == ids.cls
    assert w.input_tokens[-1] == ids.sep
    is_context = w.token_offsets[:, 0] != qa.NO_OFFSET
    first = int(np.argmax(is_context)) if is_context.any() else n - 1
    # [CLS] q [SEP] has type 0, the context and the last [SEP] type 1.
    assert w.input_tokens[first - 1] == ids.sep
    assert (w.token_types[:first] == 0).all()
    assert (w.token_types[first:] == 1).all()
    assert is_context[first:-1].all() and not is_context[-1]
    starts, ends = w.token_offsets[is_context].T
    assert (starts <= ends).all()
    assert (np.diff(starts) >= 0).all() and (np.diff(ends) >= 0).all()
    assert starts.min(initial=0) >= 0 and ends.max(initial=0) <= len(context)
    # Characters between tokens are whitespace only.
    if is_context.any():
      in_span = _span_mask(starts, ends, len(context))
      first_char, last_char = starts.min(), ends.max()
      between = ~in_span[first_char:last_char] & ~gap[first_char:last_char]
      assert not between.any(), first_char + int(np.argmax(between))
      covered |= in_span
    assert (w.token_is_max_context[~is_context] == 0).all()
    if w.start_position:
      assert first <= w.start_position <= w.end_position < n - 1
    else:
      assert w.end_position == 0
  # Every visible context character is in some window (SentencePiece drops
  # control and format characters such as U+200F and U+FEFF).
  missed = ~gap & ~covered
  assert not missed.any(), int(np.argmax(missed))


def _span_mask(starts, ends, length):
  """Boolean mask of the characters inside any [start, end) span."""
  edges = np.zeros(length + 1, np.int64)
  np.add.at(edges, starts, 1)
  np.add.at(edges, ends, -1)
  return np.cumsum(edges)[:length] > 0


@functools.lru_cache(maxsize=64)
def _gap_characters(context):
  """Mask of whitespace and control/format (category C) characters: XQuAD
  has ~5 questions per context, so each context is classified once."""
  return np.array([c.isspace() or unicodedata.category(c).startswith("C")
                   for c in context], bool)


def _gold_logits(window):
  """Logits peaked at the window's gold span (zeros when it has none)."""
  logits = np.zeros((2, len(window.input_tokens)))
  if window.start_position:
    logits[0, window.start_position] = 10.0
    logits[1, window.end_position] = 10.0
  return logits


# ---------------------------------------------------------------------------
# Windows.
# ---------------------------------------------------------------------------


def test_single_window_positions(vocab):
  example = _example()
  (window,) = qa.make_windows(example, vocab)
  _check_window_invariants([window], example, qa.MAX_SEQ_LENGTH)
  s, e = window.start_position, window.end_position
  span = CONTEXT[window.token_offsets[s, 0]:window.token_offsets[e, 1]]
  assert span == ANSWER
  assert window.token_is_max_context[window.token_types == 1][:-1].all()


@pytest.mark.parametrize("max_seq_length,doc_stride", [(24, 4), (20, 7),
                                                        (30, 11)])
def test_sliding_windows(vocab, max_seq_length, doc_stride):
  example = _example()
  windows = qa.make_windows(example, vocab, max_seq_length=max_seq_length,
                            doc_stride=doc_stride, max_query_length=5)
  assert len(windows) > 1
  _check_window_invariants(windows, example, max_seq_length)
  # The question is cut to 5 tokens: [CLS] + 5 + [SEP].
  assert all((w.token_types == 0).sum() == 7 for w in windows)
  # Consecutive windows start doc_stride context tokens apart.
  context_ids, context_offsets = qa.encode_with_offsets(vocab, CONTEXT)
  first_offsets = [tuple(w.token_offsets[7]) for w in windows]
  starts = [context_offsets.index(o) for o in first_offsets]
  # The step is the doc stride, or the whole window when that is shorter.
  step = min(doc_stride, max_seq_length - 8)
  assert all(b - a == step for a, b in zip(starts, starts[1:]))
  assert windows[-1].token_offsets[-2, 1] == context_offsets[-1][1]
  # Each context token is the max-context token of exactly one window.
  counts = {}
  for w in windows:
    for offset, flag in zip(map(tuple, w.token_offsets),
                            w.token_is_max_context):
      if offset[0] != qa.NO_OFFSET:
        counts[offset] = counts.get(offset, 0) + int(flag)
  assert set(counts.values()) == {1}
  assert len(counts) == len(set(context_offsets))
  # The answer is found in some window, and gold logits recover it.
  with_answer = [w for w in windows if w.start_position]
  assert with_answer
  predicted = qa.answers_from_logits(windows,
                                     [_gold_logits(w) for w in windows])
  if any(w.token_is_max_context[w.start_position] for w in with_answer):
    assert predicted == {"q1": ANSWER}
  else:
    # BERT's max-context rule: the answer's first token is most central in a
    # window that does not hold the whole answer, so no window may start the
    # answer there (with these tiny windows only).
    assert predicted["q1"] != ANSWER


def test_answer_outside_window_gets_zero_positions(vocab):
  windows = qa.make_windows(_example(answer="Ann"), vocab, max_seq_length=24,
                            doc_stride=4, max_query_length=5)
  assert windows[0].start_position > 0
  assert windows[-1].start_position == windows[-1].end_position == 0


def test_misaligned_answer_names_source_id_and_field(vocab):
  with pytest.raises(ValueError) as error:
    qa.make_windows(_example(start=3), vocab, source="dev.json")
  message = str(error.value)
  assert "dev.json" in message and "'q1'" in message
  assert "answers[0].answer_start=3" in message and "'Berlin'" in message


def test_too_small_max_seq_length(vocab):
  with pytest.raises(ValueError, match="leaves no room for context"):
    qa.make_windows(_example(), vocab, max_seq_length=8, max_query_length=64)


def test_plain_sentencepiece_vocabulary_gives_same_windows(vocab):
  plain = seqio.SentencePieceVocabulary(vocab.sentencepiece_model_file)
  mine = qa.make_windows(_example(), vocab, max_seq_length=24, doc_stride=4)
  theirs = qa.make_windows(_example(), plain, max_seq_length=24,
                           doc_stride=4)
  assert len(mine) == len(theirs)
  for a, b in zip(mine, theirs):
    np.testing.assert_array_equal(a.input_tokens, b.input_tokens)
    np.testing.assert_array_equal(a.token_offsets, b.token_offsets)


# ---------------------------------------------------------------------------
# Span decoding.
# ---------------------------------------------------------------------------

# Tokens 0-1 are [CLS] q, 2-6 context spans, 7 [SEP].
OFFSETS = np.array([[-1, -1], [-1, -1], [0, 3], [4, 7], [8, 11], [12, 15],
                    [16, 19], [-1, -1]])
TEXT = "aaa bbb ccc ddd eee"


def test_best_span_rules():
  start = np.zeros(8)
  end = np.zeros(8)
  start[[0, 2, 3, 5]] = [9.0, -10.0, 5.0, 4.0]  # [CLS] is never a start
  end[[0, 2, 4, 6]] = [9.0, 6.0, 3.0, 2.0]
  # (3, 2) would score 11 but ends before it starts; best valid is (3, 4).
  assert qa.best_span(start, end, OFFSETS) == (8.0, 4, 11)
  assert TEXT[4:11] == "bbb ccc"
  # One-token answers only: (3, 3) scores 5 + 0.
  assert qa.best_span(start, end, OFFSETS, max_answer_length=1) == (5.0, 4,
                                                                     7)
  # A start outside its max-context window is skipped: (5, 6) scores 4 + 2.
  mask = np.ones(8, dtype=np.int32)
  mask[3] = 0
  assert qa.best_span(start, end, OFFSETS, token_is_max_context=mask) == (
      6.0, 12, 19)
  # n_best=1 keeps only start 0 ([CLS]) and end 0: nothing valid.
  assert qa.best_span(start, end, OFFSETS, n_best=1) is None
  # Logits past the window (padding) are ignored.
  padded = qa.best_span(np.append(start, 99.0), np.append(end, 99.0), OFFSETS)
  assert padded == (8.0, 4, 11)


def test_split_prediction_formats():
  flat = np.arange(16.0)
  starts, ends = qa.split_prediction(flat, 8)
  np.testing.assert_array_equal(starts, np.arange(8.0))
  np.testing.assert_array_equal(ends, np.arange(8.0, 16.0))
  starts, ends = qa.split_prediction(flat.reshape(2, 8), 6)
  assert starts.shape == (8,)
  with pytest.raises(ValueError, match="not \\[2, L\\]"):
    qa.split_prediction(np.zeros((3, 8)), 8)
  with pytest.raises(ValueError, match="window length 9"):
    qa.split_prediction(np.zeros((2, 8)), 9)


# ---------------------------------------------------------------------------
# SQuAD JSON files.
# ---------------------------------------------------------------------------


def _squad(context=CONTEXT, answer_start=None, qid="q1"):
  start = CONTEXT.index(ANSWER) if answer_start is None else answer_start
  return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
      "context": context, "qas": [{"id": qid, "question": "Where?",
                                   "answers": [{"text": ANSWER,
                                                "answer_start": start}]}]}]}]}


def test_read_squad_file_and_errors(tmp_path):
  good = tmp_path / "good.json"
  good.write_text(json.dumps(_squad()), encoding="utf-8")
  (example,) = squad_files.read_squad_file(str(good))
  assert example.answer_texts == (ANSWER,)
  bad_json = tmp_path / "bad.json"
  bad_json.write_text("{not json", encoding="utf-8")
  with pytest.raises(ValueError, match="bad.json: not valid JSON"):
    squad_files.read_squad_file(str(bad_json))
  data = _squad()
  data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = (
      "12")
  with pytest.raises(ValueError, match=r"qas\[0\]\.answers\[0\] \(id 'q1'\)"
                     r"\.answer_start: expected an integer"):
    squad_files.parse_squad_json(data, "x.json")
  with pytest.raises(ValueError, match=r"x.json: data\[0\]\.paragraphs\[0\]"
                     r"\.context: expected a string"):
    squad_files.parse_squad_json(_squad(context=None), "x.json")
  with pytest.raises(ValueError, match="x.json: data: expected a top-level"):
    squad_files.parse_squad_json([], "x.json")
  with pytest.raises(ValueError, match="x.json: question 'q1'"):
    squad_files.parse_squad_json(_squad(answer_start=0), "x.json")


# ---------------------------------------------------------------------------
# tf.data wrapper and seqio postprocessor.
# ---------------------------------------------------------------------------


def _features(vocab, max_seq_length=24):
  return qa.output_features(vocab, max_seq_length)


def test_preprocessor_matches_python_windows(vocab, tmp_path):
  path = tmp_path / "squad.json"
  path.write_text(json.dumps(_squad()), encoding="utf-8")
  ds = qa.qa_windows_preprocessor(
      squad_files.squad_file_dataset(str(path)), _features(vocab), max_seq_length=24,
      doc_stride=4, max_query_length=5)
  got = list(ds.as_numpy_iterator())
  expected = qa.make_windows(_example(question="Where?"), vocab,
                             max_seq_length=24, doc_stride=4,
                             max_query_length=5)
  assert len(got) == len(expected)
  for g, w in zip(got, expected):
    np.testing.assert_array_equal(g["input_tokens"], w.input_tokens)
    np.testing.assert_array_equal(g["token_types"], w.token_types)
    np.testing.assert_array_equal(g["token_offsets"], w.token_offsets)
    np.testing.assert_array_equal(g["token_is_max_context"],
                                  w.token_is_max_context)
    assert (g["start_positions"], g["end_positions"]) == (w.start_position,
                                                          w.end_position)
    assert list(g["targets"]) == [w.start_position, w.end_position]
    assert g["example_id"] == b"q1" and g["context"] == CONTEXT.encode()
    assert list(g["answers"]) == [ANSWER.encode()]
  # Each window through the seqio postprocessor, then the metric.
  targets = [qa.postprocess_window(g["targets"], example=g, is_target=True)
             for g in got]
  predictions = [
      qa.postprocess_window(_gold_logits(w), example=g)
      for g, w in zip(got, expected)
  ]
  assert targets[0] == {"example_id": "q1", "answers": [ANSWER]}
  assert metrics.squad_metric(targets, predictions)["exact_match"] == 100.0


def test_preprocessor_misaligned_answers(vocab):
  def source(start):
    return tf.data.Dataset.from_tensors({
        "id": "q9", "question": "Where?", "context": CONTEXT,
        "answers": {"text": [ANSWER], "answer_start": np.int32([start])}})

  good = qa.qa_windows_preprocessor(source(CONTEXT.index(ANSWER)),
                                    _features(vocab), max_seq_length=64)
  assert list(good)
  bad = qa.qa_windows_preprocessor(source(2), _features(vocab),
                                   max_seq_length=64, source="train.json")
  with pytest.raises(tf.errors.OpError, match="train.json: question 'q9'"):
    list(bad)
  skipped = qa.qa_windows_preprocessor(source(2), _features(vocab),
                                       max_seq_length=64,
                                       on_misaligned="skip")
  assert not list(skipped)
  kept = list(qa.qa_windows_preprocessor(source(2), _features(vocab),
                                         max_seq_length=64,
                                         on_misaligned="ignore"))
  assert kept and all(w["start_positions"] == 0 for w in kept)
  assert list(kept[0]["answers"]) == [ANSWER.encode()]
  with pytest.raises(ValueError, match="on_misaligned='drop'"):
    qa.qa_windows_preprocessor(source(2), _features(vocab),
                               on_misaligned="drop")


def test_postprocess_window_without_valid_span():
  example = {"example_id": b"q", "context": TEXT.encode(),
             "token_offsets": OFFSETS, "token_is_max_context": np.ones(8),
             "answers": np.array([b"bbb"])}
  logits = np.zeros((2, 8))
  logits[0, 0] = logits[1, 0] = 50.0
  out = qa.postprocess_window(logits, example=example, n_best=1)
  assert out == {"example_id": "q", "score": None, "text": ""}
  with pytest.raises(ValueError, match="needs the window's features"):
    qa.postprocess_window(logits)


# ---------------------------------------------------------------------------
# Real data: all XQuAD languages, gold spans through the whole pipeline.
# ---------------------------------------------------------------------------


def _require_xquad():
  if not XQUAD_DIR.is_dir():
    if os.environ.get("CI") == "true":
      pytest.fail(f"Real test data missing: {XQUAD_DIR} (CI=true).")
    pytest.skip(f"Real test data not found at {XQUAD_DIR}; it lives in "
                "../shared/data next to the repository.")


@pytest.fixture(scope="module")
def xquad_vocab(tmp_path_factory):
  """A 12-language SentencePiece model trained on XQuAD contexts."""
  _require_xquad()
  text_dir = tmp_path_factory.mktemp("xquad_text")
  files = {}
  for lang in XQUAD_LANGS:
    data = json.loads((XQUAD_DIR / f"xquad.{lang}.json").read_text("utf-8"))
    contexts = [p["context"] for a in data["data"] for p in a["paragraphs"]]
    path = text_dir / f"{lang}.txt"
    path.write_text("\n".join(contexts[::3]), encoding="utf-8")
    files[lang] = [str(path)]
  prefix = str(tmp_path_factory.mktemp("spm") / "xquad")
  model = pieces.train_sentencepiece(files, prefix, vocab_size=8000,
                                         max_sentences=2000,
                                         character_coverage=1.0)
  return vocabulary.RemBertVocabulary(model)


@pytest.mark.parametrize("lang", XQUAD_LANGS)
def test_xquad_gold_spans_round_trip(xquad_vocab, lang):
  data = json.loads((XQUAD_DIR / f"xquad.{lang}.json").read_text("utf-8"))
  # Every third article keeps ~400 questions per language and the test fast.
  data["data"] = data["data"][::3]
  examples = squad_files.parse_squad_json(data, f"xquad.{lang}.json")
  assert len(examples) >= 100
  windows, logits = [], []
  sp = xquad_vocab.tokenizer
  unk_id = xquad_vocab.unk_id
  contexts_checked = set()
  for example in examples:
    example_windows = qa.make_windows(example, xquad_vocab)
    _check_window_invariants(example_windows, example, qa.MAX_SEQ_LENGTH)
    # The windows of any one question cover every token of its context, and
    # a context's tokens and offsets do not depend on the question: the
    # token-by-token check below runs once per context (XQuAD has ~5
    # questions per paragraph).
    check_tokens = example.context not in contexts_checked
    contexts_checked.add(example.context)
    for w in example_windows:
      # Each token's characters come from its span of the context, up to
      # SentencePiece's NFKC normalisation (a shifted offset breaks this).
      for token, (s, e) in zip(w.input_tokens, w.token_offsets):
        if not check_tokens:
          break
        if s == qa.NO_OFFSET or s == e or token == unk_id:
          continue
        # Skip where NFKC rewrites the neighbourhood ("6½" -> "61⁄2" gives a
        # piece "61" over the "6").
        near = example.context[max(0, s - 1):e + 1]
        if unicodedata.normalize("NFKC", near) != near:
          continue
        piece = sp.IdToPiece(int(token)).replace("\u2581", "")
        # The span is of the original text, before "''" -> '"' (HF's
        # pre-normalisation, pieces.prenormalize).
        surface = pieces.prenormalize(example.context[s:e])[0]
        assert not collections.Counter(piece) - collections.Counter(surface), (
            piece, surface)
      windows.append(w)
      logits.append(_gold_logits(w))
  # The 30-token answer cap is a model-side limit; with this small vocabulary
  # some long gold answers exceed it, so the round trip lifts it.
  answers = qa.answers_from_logits(windows, logits,
                                   max_answer_length=qa.MAX_SEQ_LENGTH)
  gold = {e.example_id: list(e.answer_texts) for e in examples}
  scores = metrics.qa_scores(gold, answers)
  print(f"XQuAD {lang}: {len(examples)} questions, {len(windows)} windows, "
        f"EM {scores['exact_match']:.2f} F1 {scores['f1']:.2f}")
  assert scores["f1"] >= 99.0
