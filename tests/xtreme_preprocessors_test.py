"""Tests for rembert_t5x.data.xtreme_preprocessors on hand-made fixtures."""

import numpy as np
import pytest
import seqio
import tensorflow as tf

from rembert_t5x.data import lazy_vocabulary
from rembert_t5x.data import vocabulary
from rembert_t5x.data import xtreme_preprocessors as xp
from tests import test_utils

@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return test_utils.train_tiny_vocab(tmp_path_factory.mktemp("spm"))


def _features(vocab):
  return {"input_tokens": seqio.Feature(vocab, add_eos=False)}


def _run(preprocessor, ex, vocab, length, **kwargs):
  """Runs a map preprocessor eagerly and inside tf.data; checks they agree."""
  eager = preprocessor.__wrapped__(
      {k: tf.constant(v) for k, v in ex.items()},
      sequence_length={"input_tokens": length},
      output_features=_features(vocab), **kwargs)
  eager = {k: v.numpy() for k, v in eager.items()}
  ds = preprocessor(tf.data.Dataset.from_tensors(ex),
                    sequence_length={"input_tokens": length},
                    output_features=_features(vocab), **kwargs)
  (graph,) = list(ds.as_numpy_iterator())
  assert eager.keys() == graph.keys()
  for key in eager:
    np.testing.assert_array_equal(eager[key], graph[key])
  return graph


def _bert_truncate(len_a, len_b, budget):
  """BERT's `_truncate_seq_pair` loop, for reference."""
  while len_a + len_b > budget:
    if len_a > len_b:
      len_a -= 1
    else:
      len_b -= 1
  return len_a, len_b


def test_pair_truncation_matches_bert_loop():
  for budget in (0, 1, 4, 7):
    for len_a in range(0, 10, 1):
      for len_b in (0, 1, 3, 4, 9):
        kept = xp.pair_truncation_lengths(len_a, len_b, budget)
        assert tuple(int(k) for k in kept) == _bert_truncate(
            len_a, len_b, budget), (len_a, len_b, budget)


def test_encode_sentence_pair(vocab):
  ex = {"sentence1": "The cat sat .", "sentence2": "Die Katze sitzt .",
        "label": 1}
  out = _run(xp.encode_sentence_pair, ex, vocab, 64, num_classes=2)
  a, b = vocab.encode("The cat sat ."), vocab.encode("Die Katze sitzt .")
  cls, sep = vocab.cls_id, vocab.sep_id
  assert list(out["input_tokens"]) == [cls, *a, sep, *b, sep]
  assert list(out["token_types"]) == [0] * (len(a) + 2) + [1] * (len(b) + 1)
  assert out["label"] == 1 and out["label"].dtype == np.int32
  assert list(out["targets"]) == [1]


def test_encode_sentence_pair_truncates_longest_first(vocab):
  ex = {"sentence1": "John Smith works for the United Nations in New York .",
        "sentence2": "Paris .", "label": 0}
  out = _run(xp.encode_sentence_pair, ex, vocab, 12, num_classes=2)
  a, b = vocab.encode(ex["sentence1"]), vocab.encode(ex["sentence2"])
  kept_a, kept_b = _bert_truncate(len(a), len(b), 12 - 3)
  assert len(out["input_tokens"]) == 12
  assert list(out["input_tokens"]) == [
      vocab.cls_id, *a[:kept_a], vocab.sep_id, *b[:kept_b], vocab.sep_id]
  assert kept_b == len(b)  # the short segment survives whole


def test_encode_sentence_pair_rejects_unknown_label(vocab):
  ex = {"sentence1": "a", "sentence2": "b", "label": 3}
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"field 'label' has a value outside \[0, 3\)"):
    _run(xp.encode_sentence_pair, ex, vocab, 16, num_classes=3)
  with pytest.raises(ValueError, match=r"sequence_length\['input_tokens'\]"):
    xp.encode_sentence_pair.__wrapped__(
        ex, sequence_length={"input_tokens": 2},
        output_features=_features(vocab), num_classes=3)


def test_align_word_tags_labels_first_subtoken(vocab):
  words = ["Angela", "Merkel", "spoke", "\x01", "."]
  tags = [1, 2, 0, 0, 0]
  out = _run(xp.align_word_tags, {"tokens": words, "tags": tags}, vocab, 64,
             num_tags=7)
  pieces = [vocab.encode(w) or [vocab.unk_id] for w in words]
  # A word the normaliser deletes (a control character) becomes [UNK].
  assert vocab.encode("\x01") == []
  assert any(len(p) > 1 for p in pieces)  # some words really split
  flat = [i for p in pieces for i in p]
  assert list(out["input_tokens"]) == [vocab.cls_id, *flat, vocab.sep_id]
  expected_targets, expected_weights = [0], [0.0]
  for piece_ids, tag in zip(pieces, tags):
    expected_targets += [tag] + [0] * (len(piece_ids) - 1)
    expected_weights += [1.0] + [0.0] * (len(piece_ids) - 1)
  assert list(out["targets"]) == expected_targets + [0]
  assert list(out["weights"]) == expected_weights + [0.0]
  assert list(out["token_types"]) == [0] * len(out["input_tokens"])
  assert list(out["tags"]) == tags
  # The inverse gives the word tags back.
  assert xp.word_level_predictions(out["targets"], out["weights"], 5) == tags


def test_align_word_tags_truncation_and_inverse(vocab):
  words = "John Smith works for the United Nations".split()
  tags = [1, 2, 0, 0, 0, 3, 4]
  out = _run(xp.align_word_tags, {"tokens": words, "tags": tags}, vocab, 8,
             num_tags=7)
  assert len(out["input_tokens"]) == 8
  assert out["input_tokens"][0] == vocab.cls_id
  assert out["input_tokens"][-1] == vocab.sep_id
  labelled = int(out["weights"].sum())
  assert 0 < labelled < len(words)
  # Model output is padded beyond the example; truncated words get `fill`.
  padded = np.concatenate([out["targets"], np.full(5, 6)])
  assert xp.word_level_predictions(padded, out["weights"], len(words),
                                   fill=0) == (
                                       tags[:labelled] +
                                       [0] * (len(words) - labelled))


def test_align_word_tags_errors(vocab):
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="'tokens' and 'tags' differ in length"):
    _run(xp.align_word_tags, {"tokens": ["a", "b"], "tags": [0]}, vocab, 16,
         num_tags=2)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"field 'tags' has a value outside \[0, 2\)"):
    _run(xp.align_word_tags, {"tokens": ["a", "b"], "tags": [0, 7]}, vocab,
         16, num_tags=2)


def _xtreme_split(counts, max_seq_len):
  """XTREME's `udpos_tokenize` / `panx_tokenize` loop over sub-token counts.

  Written from `utils_preprocess.py`: a word of 0 or more than max_seq_len
  pieces counts as one [UNK]; a word that would overflow the running count
  starts a new part. Returns the part number of every word.
  """
  used, part, parts = 0, 0, []
  for count in counts:
    if count == 0 or count > max_seq_len:
      count = 1
    if used + count > max_seq_len:
      part += 1
      used = count
    else:
      used += count
    parts.append(part)
  return parts


def test_sentence_chunk_ids_match_xtreme_loop():
  rng = np.random.RandomState(0)
  for _ in range(200):
    budget = int(rng.randint(1, 12))
    # Words of at most `budget` pieces (and some of 0): XTREME's [UNK]
    # substitution of longer words is the one documented difference.
    counts = rng.randint(0, budget + 1, size=rng.randint(0, 30))
    got = xp.sentence_chunk_ids(tf.constant(counts, tf.int32), budget)
    assert list(got.numpy()) == _xtreme_split(list(counts), budget), (
        budget, counts)
  # A word longer than the budget gets a part of its own.
  assert list(xp.sentence_chunk_ids(tf.constant([2, 9, 1, 1]), 4).numpy()) == [
      0, 1, 2, 2]


def test_split_long_sentences_then_align_keeps_every_word(vocab):
  words = ("John Smith works for the United Nations in New York and Angela "
           "Merkel spoke in Berlin yesterday .").split()
  tags = [1, 2, 0, 0, 0, 3, 4, 0, 5, 6, 0, 1, 2, 0, 0, 5, 0, 0]
  length = 10
  counts = [len(vocab.encode(w)) for w in words]
  assert sum(counts) > 3 * (length - 2)  # several windows' worth
  ds = tf.data.Dataset.from_tensors({"tokens": words, "tags": tags})
  features = _features(vocab)
  parts = list(xp.split_long_sentences(
      ds, {"input_tokens": length}, features).as_numpy_iterator())
  expected = _xtreme_split(counts, length - 2)
  assert [int(p["chunk_index"]) for p in parts] == sorted(set(expected))
  assert [w.decode() for p in parts for w in p["tokens"]] == words
  assert [int(t) for p in parts for t in p["tags"]] == tags
  aligned = list(xp.align_word_tags(
      xp.split_long_sentences(ds, {"input_tokens": length}, features),
      sequence_length={"input_tokens": length}, output_features=features,
      num_tags=7).as_numpy_iterator())
  for part, out in zip(parts, aligned):
    assert len(out["input_tokens"]) <= length
    # Nothing cut: one labelled position per word of the part.
    assert out["weights"].sum() == len(part["tags"])
    assert out["chunk_index"] == part["chunk_index"]
  # The postprocessor marks the later parts; the metric helper joins them.
  post = xp.TaggingPostprocessor(("O", "B-PER", "I-PER", "B-ORG", "I-ORG",
                                  "B-LOC", "I-LOC"))
  gold = [post(None, example=out, is_target=True) for out in aligned]
  predicted = [post(out["targets"], example=out) for out in aligned]
  assert [type(g) for g in gold] == (
      [list] + [xp.ContinuedSentence] * (len(aligned) - 1))
  joined = xp.join_sentence_parts(predicted)
  assert joined == xp.join_sentence_parts(gold) == [
      [post.label_names[t] for t in tags]]


def test_split_long_sentences_errors_and_empty(vocab):
  features = _features(vocab)
  bad = tf.data.Dataset.from_tensors({"tokens": ["a", "b"], "tags": [0]})
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="'tokens' and 'tags' differ in length"):
    list(xp.split_long_sentences(bad, {"input_tokens": 8}, features))
  empty = tf.data.Dataset.from_tensors(
      {"tokens": tf.constant([], tf.string), "tags": tf.constant([], tf.int32)})
  assert not list(xp.split_long_sentences(empty, {"input_tokens": 8},
                                          features))


def test_whole_sentences_metric_wrapper():
  seen = {}

  def metric(targets, predictions):
    seen["targets"], seen["predictions"] = targets, predictions
    return {"n": len(targets)}

  wrapped = xp.WholeSentences(metric)
  targets = [["B-PER"], xp.ContinuedSentence(["I-PER", "O"]), ["O"]]
  assert wrapped(targets, targets) == {"n": 2}
  assert seen["targets"] == [["B-PER", "I-PER", "O"], ["O"]]
  with pytest.raises(ValueError, match="first part is missing"):
    xp.join_sentence_parts([xp.ContinuedSentence(["O"])])


def test_encode_single_sentence_keeps_other_features(vocab):
  out = _run(xp.encode_single_sentence,
             {"text": "Paris is the capital of France .", "targets": [1, 4]},
             vocab, 6)
  assert list(out["input_tokens"]) == [
      vocab.cls_id, *vocab.encode("Paris is the capital of France .")[:4],
      vocab.sep_id]
  assert list(out["targets"]) == [1, 4]
  assert list(out["token_types"]) == [0] * 6


def test_select_xnli_language():
  ex = {"premise": {"de": "P-de", "en": "P-en"},
        "hypothesis": {"language": ["en", "de"],
                       "translation": ["H-en", "H-de"]},
        "label": 2}
  ds = xp.select_xnli_language(tf.data.Dataset.from_tensors(ex),
                               language="de")
  assert list(ds.as_numpy_iterator()) == [
      {"sentence1": b"P-de", "sentence2": b"H-de", "label": 2}]


def test_split_parallel_pairs():
  ds = tf.data.Dataset.from_tensor_slices(
      {"source_sentence": ["s0", "s1"], "target_sentence": ["e0", "e1"]})
  rows = [(r["text"], list(r["targets"]))
          for r in xp.split_parallel_pairs(ds).as_numpy_iterator()]
  assert rows == [(b"s0", [0, 0]), (b"e0", [1, 0]), (b"s1", [0, 1]),
                  (b"e1", [1, 1])]


def test_postprocessors():
  ex = {"label": np.int32(2)}
  assert xp.pair_label_postprocessor("2", example=ex, is_target=True) == 2
  assert xp.pair_label_postprocessor([1], example=ex) == 1
  assert xp.pair_label_postprocessor(np.int64(0)) == 0
  with pytest.raises(ValueError, match="one class id per example"):
    xp.pair_label_postprocessor([0, 1])

  post = xp.TaggingPostprocessor(("O", "B-PER", "I-PER"), fill_tag="O")
  ex = {"tags": np.array([1, 2, 0]), "weights": np.array([0, 1, 0, 1, 1, 0.])}
  assert post([0, 1, 1], example=ex, is_target=True) == ["B-PER", "I-PER",
                                                           "O"]
  # Sub-token predictions: the ones on non-first positions are ignored.
  assert post([0, 1, 2, 2, 0, 1, 1, 1], example=ex) == ["B-PER", "I-PER",
                                                         "O"]
  short = {"tags": np.array([1, 2, 0]), "weights": np.array([0, 1, 0.])}
  assert post([0, 1, 0], example=short) == ["B-PER", "O", "O"]
  with pytest.raises(ValueError, match="tag id 5 is outside"):
    post([0, 5, 0, 0, 0, 0], example=ex)

  assert xp.retrieval_postprocessor([1, 7], example={"targets": [1, 7]},
                                    is_target=True) == (1, 7)
  assert xp.retrieval_postprocessor([0.5, 1.0]).dtype == np.float32


def test_default_vocabulary_is_lazy(vocab, monkeypatch):
  monkeypatch.delenv(vocabulary.SPM_PATH_ENV, raising=False)
  lazy = lazy_vocabulary.DefaultVocabulary()  # constructing needs no model file
  assert lazy == lazy_vocabulary.DefaultVocabulary()
  with pytest.raises(ValueError, match=vocabulary.SPM_PATH_ENV):
    lazy.encode("Paris")
  monkeypatch.setenv(vocabulary.SPM_PATH_ENV, vocab.sentencepiece_model_file)
  lazy = lazy_vocabulary.DefaultVocabulary()
  assert lazy.encode("Paris") == vocab.encode("Paris")
  assert list(lazy.encode_tf(tf.constant("Paris")).numpy()) == vocab.encode(
      "Paris")
  assert lazy.vocab_size == vocab.vocab_size == 80
  assert lazy == vocab
