"""Tests for rembert_t5x.data.preprocessors (MLM pre-training)."""

import numpy as np
import pytest
import seqio
import tensorflow as tf

from rembert_t5x.data import pieces
from rembert_t5x.data import preprocessors
from rembert_t5x.data import vocabulary
from tests import test_utils

VOCAB_SIZE = 1000
TRAINED = pieces.TRAINED_LAYOUT
# Special ids scattered as in the released RemBERT vocabulary: nothing may
# assume they are 0..4.
RELEASED = test_utils.RELEASED_LAYOUT_IDS
LAYOUTS = pytest.mark.parametrize("ids", [TRAINED, RELEASED],
                                  ids=["trained", "released"])


def _token_dataset(token_lists, key="tokens"):
  return tf.data.Dataset.from_generator(
      lambda: ({key: t} for t in token_lists),
      output_signature={key: tf.TensorSpec([None], tf.int32)})


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("vocab")
  rng = np.random.RandomState(0)
  words = {"en": ["the", "cat", "sat", "on", "mat", "dog", "ran"],
           "el": ["η", "γάτα", "κάθισε", "στο", "χαλί", "σκύλος"]}
  files = {}
  for lang, ws in words.items():
    path = tmp / f"{lang}.txt"
    path.write_text("\n".join(" ".join(rng.choice(ws, 6))
                              for _ in range(200)), "utf-8")
    files[lang] = [str(path)]
  model = pieces.train_sentencepiece(files, str(tmp / "spm"),
                                         vocab_size=40, character_coverage=1.0)
  return vocabulary.RemBertVocabulary(model)


def test_line_to_text():
  ds = tf.data.Dataset.from_tensor_slices(["α β", "x"])
  out = list(preprocessors.line_to_text(ds).as_numpy_iterator())
  assert out == [{"text": "α β".encode()}, {"text": b"x"}]


def test_tokenize_text(vocab):
  features = {"input_tokens": seqio.Feature(vocab, add_eos=False)}
  ds = tf.data.Dataset.from_tensor_slices(
      {"text": ["the cat sat", "η γάτα"], "url": ["a", "b"]})
  out = list(preprocessors.tokenize_text(
      ds, output_features=features).as_numpy_iterator())
  assert set(out[0]) == {"tokens"}
  assert out[0]["tokens"].tolist() == vocab.encode("the cat sat")
  assert out[1]["tokens"].tolist() == vocab.encode("η γάτα")
  assert out[0]["tokens"].dtype == np.int32


@LAYOUTS
def test_pack_contiguous_tokens(ids):
  c, s = ids.cls, ids.sep
  ds = _token_dataset([[11, 12, 13], [14, 15, 16, 17], [], [18]])
  out = preprocessors.pack_contiguous_tokens(ds, {"input_tokens": 6},
                                             special_ids=ids)
  got = [ex["input_tokens"].tolist() for ex in out.as_numpy_iterator()]
  assert got == [[c, 11, 12, 13, 14, s], [c, 15, 16, 17, 18, s]]
  ds = _token_dataset([[11, 12, 13], [14, 15, 16, 17]])
  out = preprocessors.pack_contiguous_tokens(ds, {"input_tokens": 4},
                                             special_ids=ids)
  got = [ex["input_tokens"].tolist() for ex in out.as_numpy_iterator()]
  assert got == [[c, 11, 12, s], [c, 13, 14, s], [c, 15, 16, s], [c, 17, s]]


def test_pack_contiguous_tokens_reads_ids_from_the_vocabulary(vocab):
  features = {"input_tokens": seqio.Feature(vocab, add_eos=False)}
  out = preprocessors.pack_contiguous_tokens(
      _token_dataset([[11, 12]]), {"input_tokens": 6},
      output_features=features)
  assert [ex["input_tokens"].tolist() for ex in out.as_numpy_iterator()] == [
      [vocab.cls_id, 11, 12, vocab.sep_id]]
  with pytest.raises(ValueError, match="needs output_features"):
    preprocessors.pack_contiguous_tokens(_token_dataset([[5]]),
                                         {"input_tokens": 6})


def test_pack_contiguous_tokens_keeps_every_token():
  rng = np.random.RandomState(1)
  docs = [list(rng.randint(5, 50, size=rng.randint(0, 30))) for _ in range(50)]
  out = preprocessors.pack_contiguous_tokens(
      _token_dataset(docs), {"input_tokens": 16}, special_ids=TRAINED)
  rows = [ex["input_tokens"] for ex in out.as_numpy_iterator()]
  assert all(r[0] == TRAINED.cls and r[-1] == TRAINED.sep for r in rows)
  assert all(len(r) == 16 for r in rows[:-1]) and len(rows[-1]) <= 16
  np.testing.assert_array_equal(np.concatenate([r[1:-1] for r in rows]),
                                np.concatenate(docs))


def test_pack_contiguous_tokens_rejects_tiny_length():
  with pytest.raises(ValueError, match="at least 3"):
    preprocessors.pack_contiguous_tokens(_token_dataset([[5]]),
                                         {"input_tokens": 2},
                                         special_ids=TRAINED)


def _random_sequences(num, rng, ids=TRAINED):
  seqs = []
  for _ in range(num):
    body = rng.randint(1, VOCAB_SIZE, size=rng.randint(1, 60))
    # Sprinkle special ids inside: they must never be selected.
    body[rng.rand(len(body)) < 0.05] = ids.unk
    body[rng.rand(len(body)) < 0.05] = ids.mask
    body[rng.rand(len(body)) < 0.02] = ids.cls
    seqs.append([ids.cls] + body.tolist() + [ids.sep])
  return seqs


def test_mask_tokens_eager_example():
  fn = preprocessors.mask_tokens.__wrapped__  # The undecorated function.
  tokens = tf.constant([2] + list(range(10, 50)) + [3], tf.int32)
  out = fn({"input_tokens": tokens}, seed=tf.constant([1, 2]),
           vocab_size=VOCAB_SIZE, special_ids=TRAINED)
  assert set(out) == {"input_tokens", "token_types", "targets", "weights"}
  assert out["targets"].numpy().tolist() == tokens.numpy().tolist()
  assert out["token_types"].numpy().tolist() == [0] * 42
  assert out["weights"].dtype == tf.float32
  assert out["weights"].numpy().sum() == 6  # round(0.15 * 40)
  assert out["weights"].numpy()[[0, -1]].tolist() == [0, 0]
  changed = out["input_tokens"].numpy() != tokens.numpy()
  assert not (changed & (out["weights"].numpy() == 0)).any()
  again = fn({"input_tokens": tokens}, seed=tf.constant([1, 2]),
             vocab_size=VOCAB_SIZE, special_ids=TRAINED)
  np.testing.assert_array_equal(again["input_tokens"], out["input_tokens"])
  other = fn({"input_tokens": tokens}, seed=tf.constant([7, 2]),
             vocab_size=VOCAB_SIZE, special_ids=TRAINED)
  assert not np.array_equal(other["weights"], out["weights"])


@LAYOUTS
def test_mask_tokens_short_and_special_only(ids):
  fn = preprocessors.mask_tokens.__wrapped__
  out = fn({"input_tokens": tf.constant([ids.cls, 77, ids.sep])},
           seed=tf.constant([0, 0]), vocab_size=VOCAB_SIZE, special_ids=ids)
  assert out["weights"].numpy().tolist() == [0, 1, 0]  # At least one.
  out = fn({"input_tokens": tf.constant([ids.cls, ids.unk, ids.mask,
                                         ids.sep])},
           seed=tf.constant([0, 0]), vocab_size=VOCAB_SIZE, special_ids=ids)
  assert out["weights"].numpy().tolist() == [0, 0, 0, 0]


def _masked_dataset(seqs, seed, ids=TRAINED):
  ds = _token_dataset(seqs, key="input_tokens")
  with seqio.utils.map_seed_manager(seed):
    return preprocessors.mask_tokens(ds, vocab_size=VOCAB_SIZE,
                                     special_ids=ids)


@LAYOUTS
def test_mask_tokens_statistics_in_tf_data(ids):
  rng = np.random.RandomState(0)
  seqs = _random_sequences(1500, rng, ids)
  outs = list(_masked_dataset(seqs, seed=123, ids=ids).as_numpy_iterator())
  num_candidates = num_selected = num_mask = num_random = num_kept = 0
  random_draws = []
  for seq, out in zip(seqs, outs):
    seq = np.array(seq)
    np.testing.assert_array_equal(out["targets"], seq)
    special = np.isin(seq, ids.as_tuple())
    selected = out["weights"] == 1.0
    assert not (selected & special).any()
    assert set(np.unique(out["weights"])) <= {0.0, 1.0}
    # Unselected positions are untouched.
    np.testing.assert_array_equal(out["input_tokens"][~selected],
                                  seq[~selected])
    inputs = out["input_tokens"][selected]
    is_mask = inputs == ids.mask
    is_kept = inputs == seq[selected]
    is_random = ~is_mask & ~is_kept
    assert not np.isin(inputs[is_random], ids.as_tuple()).any()
    assert (inputs[is_random] < VOCAB_SIZE).all()
    random_draws.extend(inputs[is_random].tolist())
    num_candidates += (~special).sum()
    num_selected += selected.sum()
    num_mask += is_mask.sum()
    num_random += is_random.sum()
    num_kept += is_kept.sum()
  assert abs(num_selected / num_candidates - 0.15) < 0.01
  assert abs(num_mask / num_selected - 0.8) < 0.02
  # A random draw equal to the original counts as kept (p = 1/995).
  assert abs(num_random / num_selected - 0.1) < 0.015
  assert abs(num_kept / num_selected - 0.1) < 0.015
  # The replacements cover the whole ordinary range, both ends included.
  assert min(random_draws) <= 20 and max(random_draws) >= VOCAB_SIZE - 20


def test_random_replacements_are_uniform_over_ordinary_ids():
  # Tiny vocabulary with the specials in the middle: every ordinary id is
  # drawn about equally often, and no special id ever.
  ids = pieces.SpecialIds(pad=0, unk=3, cls=5, sep=6, mask=9)
  fn = preprocessors.mask_tokens.__wrapped__
  tokens = tf.constant([ids.cls] + [1] * 4000 + [ids.sep], tf.int32)
  out = fn({"input_tokens": tokens}, seed=tf.constant([4, 4]), vocab_size=12,
           special_ids=ids, select_rate=1.0, mask_rate=0.0, random_rate=1.0)
  counts = np.bincount(out["input_tokens"].numpy()[1:-1], minlength=12)
  ordinary = [1, 2, 4, 7, 8, 10, 11]
  assert counts[[0, 3, 5, 6, 9]].sum() == 0
  assert counts[ordinary].sum() == 4000
  assert counts[ordinary].min() > 4000 / 7 * 0.85


def test_mask_tokens_reads_ids_from_the_vocabulary(vocab):
  features = {"input_tokens": seqio.Feature(vocab, add_eos=False)}
  fn = preprocessors.mask_tokens.__wrapped__
  out = fn({"input_tokens": tf.constant([vocab.cls_id] + [30] * 40 +
                                        [vocab.sep_id])},
           seed=tf.constant([0, 1]), output_features=features)
  assert vocab.mask_id in out["input_tokens"].numpy().tolist()


def test_mask_tokens_deterministic_per_seed():
  seqs = _random_sequences(20, np.random.RandomState(3))
  first = list(_masked_dataset(seqs, seed=5).as_numpy_iterator())
  second = list(_masked_dataset(seqs, seed=5).as_numpy_iterator())
  other = list(_masked_dataset(seqs, seed=6).as_numpy_iterator())
  for a, b in zip(first, second):
    np.testing.assert_array_equal(a["input_tokens"], b["input_tokens"])
    np.testing.assert_array_equal(a["weights"], b["weights"])
  assert any(not np.array_equal(a["weights"], c["weights"])
             for a, c in zip(first, other))


def test_mask_tokens_uses_output_features_vocab_size(vocab):
  features = {"input_tokens": seqio.Feature(vocab, add_eos=False)}
  seqs = _random_sequences(200, np.random.RandomState(4))
  seqs = [[t % 40 for t in s] for s in seqs]
  ds = _token_dataset(seqs, key="input_tokens")
  def masked(**kwargs):
    with seqio.utils.map_seed_manager(1):
      out = list(preprocessors.mask_tokens(
          ds, output_features=features, **kwargs).as_numpy_iterator())
    assert len(out) == len(seqs)
    return np.concatenate([ex["input_tokens"] for ex in out])
  assert vocab.vocab_size == 40
  tokens = masked()
  changed = tokens != np.concatenate(seqs)
  assert changed.sum() > 100  # masking happened (200 sequences)
  assert (tokens < 40).all()  # random replacements from the 40 pieces
  # The check can fail: a larger vocabulary gives replacements beyond 40.
  assert (masked(vocab_size=1000) >= 40).any()


def test_mask_tokens_bad_arguments():
  ds = _token_dataset([[2, 9, 3]], key="input_tokens")
  with pytest.raises(ValueError, match="needs vocab_size"):
    preprocessors.mask_tokens(ds)
  with pytest.raises(ValueError, match="no ordinary tokens"):
    preprocessors.mask_tokens(ds, vocab_size=5, special_ids=TRAINED)
  with pytest.raises(ValueError, match="needs output_features"):
    preprocessors.mask_tokens(ds, vocab_size=50)
