"""Preprocessors, postprocessors and metrics for XTREME classification,
tagging and retrieval.

Task features follow docs/DESIGN.md:

  pair classification: input_tokens, token_types, label (int32 scalar)
  token tagging:       input_tokens, token_types, targets, weights
  retrieval:           input_tokens, token_types, targets = [side, index]

Every sequence is `[CLS] ... [SEP]` (pairs: `[CLS] a [SEP] b [SEP]`), with
the special ids of `rembert_t5x.vocabulary`. Sequence lengths come from the
`sequence_length["input_tokens"]` seqio passes to the preprocessors.

Model predictions the postprocessors expect (after seqio decodes them through
the PassThrough vocabularies of the output features):

  pair classification: one class id per example (a scalar, or a length-1
    sequence such as a `[batch, 1]` array row).
  token tagging: one tag id per sub-token position, aligned with
    `input_tokens` (length = the model's input length; positions past the
    example's own length are ignored).
  retrieval: one float vector per example (the pooled sentence embedding).
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import seqio
import tensorflow as tf

from rembert_t5x import metrics as metrics_lib
from rembert_t5x import vocabulary as vocab_lib
from rembert_t5x import xtreme_readers

CLS_ID = vocab_lib.CLS_ID
SEP_ID = vocab_lib.SEP_ID
UNK_ID = vocab_lib.UNK_ID

# Retrieval `targets[0]`: which side of a parallel corpus a sentence is on.
SIDE_SOURCE = 0   # the non-English sentence
SIDE_ENGLISH = 1


class DefaultVocabulary(seqio.Vocabulary):
  """Defers to `vocabulary.default_vocabulary()` ($REMBERT_SPM_PATH) on use.

  Lets the default tasks register at import time without a SentencePiece
  model on disk (docs/DESIGN.md). Every method delegates to the real
  vocabulary, loaded the first time one is called. (A generic helper: it
  could live in rembert_t5x/vocabulary.py.)
  """

  def __init__(self):
    self._vocab = None
    super().__init__(extra_ids=0)

  def resolve(self) -> seqio.Vocabulary:
    if self._vocab is None:
      self._vocab = vocab_lib.default_vocabulary()
    return self._vocab

  def __getattr__(self, name):
    # Only reached for attributes not defined here (tokenizer,
    # encode_with_offsets, sentencepiece_model_file, ...).
    if name.startswith("__") or name == "_vocab":
      raise AttributeError(name)
    return getattr(self.resolve(), name)

  @property
  def eos_id(self) -> Optional[int]:
    return self.resolve().eos_id

  @property
  def unk_id(self) -> Optional[int]:
    return self.resolve().unk_id

  @property
  def pad_id(self) -> int:
    return vocab_lib.PAD_ID

  @property
  def _base_vocab_size(self) -> int:
    return self.resolve().vocab_size

  def _encode(self, s):
    return self.resolve().encode(s)

  def _decode(self, ids):
    return self.resolve().decode(ids)

  def _encode_tf(self, s):
    return self.resolve().encode_tf(s)

  def _decode_tf(self, ids):
    return self.resolve().decode_tf(ids)

  def __eq__(self, other):
    if isinstance(other, DefaultVocabulary):
      return True
    return isinstance(other, seqio.Vocabulary) and self.resolve() == other

  def __hash__(self):
    return hash(DefaultVocabulary)


def _input_length(sequence_length: Optional[Mapping[str, int]],
                  minimum: int) -> int:
  if not sequence_length or sequence_length.get("input_tokens") is None:
    raise ValueError(
        "sequence_length['input_tokens'] is required by the XTREME "
        "preprocessors (pass sequence_length to get_dataset).")
  length = int(sequence_length["input_tokens"])
  if length < minimum:
    raise ValueError(
        f"sequence_length['input_tokens']={length} is too short: at least "
        f"{minimum} positions are needed for the special tokens and text.")
  return length


def _checked_class_id(value: tf.Tensor, num_classes: int,
                      field: str) -> tf.Tensor:
  """Casts to int32 and fails (naming field and value) outside the set."""
  value = tf.cast(value, tf.int32)
  ok = tf.reduce_all((value >= 0) & (value < num_classes))
  check = tf.debugging.Assert(
      ok, [f"field '{field}' has a value outside [0, {num_classes}):", value],
      summarize=20)
  with tf.control_dependencies([check]):
    return tf.identity(value)


def pair_truncation_lengths(length_a: tf.Tensor, length_b: tf.Tensor,
                            budget: int) -> Tuple[tf.Tensor, tf.Tensor]:
  """Lengths BERT's longest-first truncation keeps for a pair.

  BERT drops one token at a time from the longer segment (from the second on
  ties) until the pair fits. The result in closed form: a segment shorter
  than its half of the budget is kept whole and the other fills the rest;
  otherwise the first gets ceil(budget / 2) and the second floor(budget / 2).

  Args:
    length_a: int32 scalar, tokens in the first segment.
    length_b: int32 scalar, tokens in the second segment.
    budget: tokens available for both segments together.

  Returns:
    (kept_a, kept_b), int32 scalars.
  """
  length_a = tf.cast(length_a, tf.int32)
  length_b = tf.cast(length_b, tf.int32)
  half_a = (budget + 1) // 2
  kept_a = tf.minimum(length_a, tf.maximum(half_a, budget - length_b))
  kept_b = tf.minimum(length_b, budget - kept_a)
  fits = length_a + length_b <= budget
  return (tf.where(fits, length_a, kept_a), tf.where(fits, length_b, kept_b))


@seqio.map_over_dataset
def encode_sentence_pair(ex: Dict[str, tf.Tensor],
                         sequence_length: Mapping[str, int],
                         output_features: Mapping[str, seqio.Feature],
                         num_classes: int) -> Dict[str, tf.Tensor]:
  """Tokenises a sentence pair as `[CLS] a [SEP] b [SEP]` with its label.

  Input:
    {"sentence1": "The cat sat.", "sentence2": "A cat sits.", "label": 0}
  Output (ids illustrative; length <= sequence_length["input_tokens"]):
    {"input_tokens": [2, 41, 9, 77, 3, 12, 9, 80, 3],
     "token_types":  [0, 0, 0, 0, 0, 1, 1, 1, 1],
     "label": 0,
     "targets": [0],
     "sentence1": "The cat sat.", "sentence2": "A cat sits."}

  Over-long pairs are truncated longest-first, as BERT does. The model
  trains on the scalar `label`; the rank-1 `targets` copy is what seqio's
  evaluator (and so `t5x.eval`) decodes for metrics. The texts (and an
  `index` from `add_example_index`, when present) stay for readable
  predictions (`rembert_t5x.t5x_infer`); feature converters drop them.

  Raises:
    tf.errors.InvalidArgumentError: `label` outside [0, num_classes).
  """
  vocab = output_features["input_tokens"].vocabulary
  length = _input_length(sequence_length, minimum=3)
  tokens_a = tf.cast(vocab.encode_tf(ex["sentence1"]), tf.int32)
  tokens_b = tf.cast(vocab.encode_tf(ex["sentence2"]), tf.int32)
  kept_a, kept_b = pair_truncation_lengths(
      tf.size(tokens_a), tf.size(tokens_b), length - 3)
  input_tokens = tf.concat(
      [[CLS_ID], tokens_a[:kept_a], [SEP_ID], tokens_b[:kept_b], [SEP_ID]], 0)
  token_types = tf.concat(
      [tf.zeros([kept_a + 2], tf.int32), tf.ones([kept_b + 1], tf.int32)], 0)
  label = _checked_class_id(ex["label"], num_classes, "label")
  return {
      "input_tokens": input_tokens,
      "token_types": token_types,
      "label": label,
      # Rank-1 copy for seqio's evaluator and T5X, which decode predictions
      # and targets through the `targets` output feature.
      "targets": label[None],
      "sentence1": ex["sentence1"],
      "sentence2": ex["sentence2"],
      **_kept_index(ex),
  }


def _kept_index(ex: Mapping[str, Any]) -> Dict[str, Any]:
  return {"index": ex["index"]} if "index" in ex else {}


def add_example_index(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """Numbers the examples of a split in order: adds `index` (int32).

  Input:  {"sentence1": "a", ...}, {"sentence1": "b", ...}, ...
  Output: {"sentence1": "a", ..., "index": 0}, {..., "index": 1}, ...

  XTREME's pair and tagging data have no example ids; the index is the
  example's position in the split (in a sharded run, in the shard), which
  readable predictions report as the example id. Not a per-example map: it
  must run before anything that drops, adds or reorders examples.
  """
  return dataset.enumerate().map(
      lambda i, ex: {**ex, "index": tf.cast(i, tf.int32)},
      num_parallel_calls=tf.data.AUTOTUNE)


@seqio.map_over_dataset
def encode_single_sentence(ex: Dict[str, tf.Tensor],
                           sequence_length: Mapping[str, int],
                           output_features: Mapping[str, seqio.Feature],
                           ) -> Dict[str, tf.Tensor]:
  """Tokenises one sentence as `[CLS] s [SEP]` (retrieval); keeps the rest.

  Input:
    {"text": "Wie geht's?", "targets": [0, 17]}
  Output:
    {"input_tokens": [2, 301, 55, 9, 3], "token_types": [0, 0, 0, 0, 0],
     "text": "Wie geht's?", "targets": [0, 17]}
  """
  vocab = output_features["input_tokens"].vocabulary
  length = _input_length(sequence_length, minimum=2)
  tokens = tf.cast(vocab.encode_tf(ex["text"]), tf.int32)[:length - 2]
  out = dict(ex)
  out["input_tokens"] = tf.concat([[CLS_ID], tokens, [SEP_ID]], 0)
  out["token_types"] = tf.zeros_like(out["input_tokens"])
  return out


@seqio.map_over_dataset
def select_xnli_language(ex: Dict[str, Any], language: str
                         ) -> Dict[str, tf.Tensor]:
  """Picks one language out of a TFDS `xnli` example.

  Input (TFDS xnli:1.1.0):
    {"premise": {"de": "...", "en": "...", ...},
     "hypothesis": {"language": ["ar", ..., "de", ...],
                    "translation": ["...", ..., "...", ...]},
     "label": 2}
  Output:
    {"sentence1": premise["de"], "sentence2": <the "de" hypothesis>,
     "label": 2}
  """
  languages = ex["hypothesis"]["language"]
  position = tf.where(tf.equal(languages, language))
  check = tf.debugging.Assert(
      tf.size(position) > 0,
      [f"field 'hypothesis' has no translation in language {language!r}"])
  with tf.control_dependencies([check]):
    hypothesis = ex["hypothesis"]["translation"][tf.reshape(position, [-1])[0]]
  return {"sentence1": ex["premise"][language], "sentence2": hypothesis,
          "label": ex["label"]}


@seqio.map_over_dataset
def align_word_tags(ex: Dict[str, tf.Tensor],
                    sequence_length: Mapping[str, int],
                    output_features: Mapping[str, seqio.Feature],
                    num_tags: int) -> Dict[str, tf.Tensor]:
  """Tokenises each word and puts its tag on the word's first sub-token.

  Input (words and word-level tag ids):
    {"tokens": ["Angela", "Merkel", "spoke"], "tags": [1, 2, 0]}
  Output, if "Angela" -> 2 pieces and the others -> 1 piece each:
    {"input_tokens": [CLS, An, gela, Merkel, spoke, SEP],
     "token_types":  [0,   0,  0,    0,      0,     0],
     "targets":      [0,   1,  0,    2,      0,     0],
     "weights":      [0.,  1., 0.,   1.,     1.,    0.],
     "tokens": ..., "tags": ...}   # word-level copies for evaluation
  (plus `index`, from `add_example_index`, when present).

  Only first sub-tokens carry a loss (weight 1); other sub-tokens, [CLS] and
  [SEP] get weight 0 and target 0. A word that tokenises to nothing (e.g.
  only characters SentencePiece normalises away) becomes [UNK], so every word
  keeps a labelled position, as XTREME does. Sequences longer than
  sequence_length["input_tokens"] - 2 sub-tokens are cut; words whose first
  sub-token is cut are not predicted (see `word_level_predictions`).

  Raises:
    tf.errors.InvalidArgumentError: `tokens` and `tags` differ in length or a
      tag is outside [0, num_tags).
  """
  vocab = output_features["input_tokens"].vocabulary
  length = _input_length(sequence_length, minimum=3)
  words = ex["tokens"]
  num_words = tf.size(words)
  same_length = tf.debugging.assert_equal(
      num_words, tf.size(ex["tags"]),
      message="fields 'tokens' and 'tags' differ in length")
  with tf.control_dependencies([same_length]):
    tags = _checked_class_id(ex["tags"], num_tags, "tags")

  pieces = vocab.encode_tf(words)  # [num_words, (pieces)]
  if not isinstance(pieces, tf.RaggedTensor):
    pieces = tf.RaggedTensor.from_tensor(pieces)
  pieces = tf.cast(pieces, tf.int32)
  # Empty words -> one [UNK]: pad every row to >= 1 piece with [UNK].
  piece_counts = pieces.row_lengths()
  width = tf.reduce_max(tf.concat([piece_counts, [1]], 0))
  dense = pieces.to_tensor(
      default_value=UNK_ID, shape=tf.stack([tf.cast(num_words, tf.int64),
                                            width]))
  pieces = tf.RaggedTensor.from_tensor(
      dense, lengths=tf.maximum(piece_counts, 1))

  flat_ids = pieces.flat_values
  is_first = tf.equal(tf.ragged.range(pieces.row_lengths()).flat_values, 0)
  word_tags = tf.repeat(tags, pieces.row_lengths())
  keep = length - 2
  targets = tf.where(is_first, word_tags, 0)[:keep]
  weights = tf.cast(is_first, tf.float32)[:keep]
  flat_ids = flat_ids[:keep]

  input_tokens = tf.concat([[CLS_ID], flat_ids, [SEP_ID]], 0)
  return {
      "input_tokens": input_tokens,
      "token_types": tf.zeros_like(input_tokens),
      "targets": tf.concat([[0], targets, [0]], 0),
      "weights": tf.concat([[0.0], weights, [0.0]], 0),
      "tokens": words,
      "tags": tags,
      **_kept_index(ex),
  }


def split_parallel_pairs(dataset: tf.data.Dataset,
                         source_key: str = "source_sentence",
                         target_key: str = "target_sentence",
                         ) -> tf.data.Dataset:
  """Turns parallel pairs into one example per sentence for retrieval.

  Input: a dataset of {"source_sentence": s_i, "target_sentence": e_i}
  (the i-th pair; English is the target side, as in TFDS `tatoeba`).
  Output: for each pair i two examples
    {"text": s_i, "targets": [SIDE_SOURCE, i]}
    {"text": e_i, "targets": [SIDE_ENGLISH, i]}

  Not a per-example map: the pair index comes from the dataset order, so
  this must run before any shuffling.
  """

  def _two(index, ex):
    index = tf.cast(index, tf.int32)
    texts = tf.stack([ex[source_key], ex[target_key]])
    targets = tf.stack([tf.stack([SIDE_SOURCE, index]),
                        tf.stack([SIDE_ENGLISH, index])])
    return tf.data.Dataset.from_tensor_slices(
        {"text": texts, "targets": targets})

  return dataset.enumerate().flat_map(_two)


# --- From model outputs back to what the metrics need ----------------------


def word_level_predictions(subtoken_predictions: Sequence[int],
                           weights: Sequence[float],
                           num_words: int,
                           fill: Optional[int] = None) -> List[Optional[int]]:
  """Inverse of `align_word_tags`: one predicted tag id per word.

  Args:
    subtoken_predictions: a tag id per sub-token position (aligned with
      `input_tokens`; may be longer, the model's padded length).
    weights: the example's `weights` (1 on each word's first sub-token).
    num_words: words in the original sentence.
    fill: prediction for words cut by truncation (e.g. the id of "O").

  Returns:
    num_words tag ids (or `fill`), in word order.
  """
  firsts = [int(p) for p, w in zip(subtoken_predictions, weights) if w > 0]
  if len(firsts) > num_words:
    raise ValueError(
        f"weights mark {len(firsts)} first sub-tokens but the sentence has "
        f"{num_words} words.")
  return firsts + [fill] * (num_words - len(firsts))


def _as_class_id(output: Any) -> int:
  values = np.asarray(output).reshape(-1)
  if values.size != 1:
    raise ValueError(
        f"pair classification expects one class id per example, got "
        f"{values.size} values: {values[:8]}")
  return int(values[0])


def pair_label_postprocessor(output: Any, example: Optional[Mapping] = None,
                             is_target: bool = False) -> int:
  """Class id of a prediction or target (see the module docstring)."""
  if is_target and example is not None and "label" in example:
    return int(example["label"])
  if isinstance(output, (bytes, str)):
    return int(output)
  return _as_class_id(output)


class TaggingPostprocessor:
  """Turns sub-token tag predictions and targets into word-level tag names.

  Targets come from the example's word-level `tags` (all words, even those
  cut by truncation); predictions from the first sub-token of each word,
  with `fill_tag` for words that did not fit in the sequence.
  """

  def __init__(self, label_names: Sequence[str],
               fill_tag: Optional[str] = None):
    self.label_names = tuple(label_names)
    self.fill_tag = fill_tag

  def _name(self, tag_id: Optional[int]) -> Optional[str]:
    if tag_id is None:
      return self.fill_tag
    if not 0 <= tag_id < len(self.label_names):
      raise ValueError(
          f"predicted tag id {tag_id} is outside [0, {len(self.label_names)}).")
    return self.label_names[tag_id]

  def __call__(self, output: Any, example: Optional[Mapping] = None,
               is_target: bool = False) -> List[Optional[str]]:
    if example is None:
      raise ValueError("tagging postprocessing needs the task example "
                       "(its 'tags' and 'weights').")
    gold = [int(t) for t in np.asarray(example["tags"]).reshape(-1)]
    if is_target:
      return [self._name(t) for t in gold]
    predicted = word_level_predictions(
        np.asarray(output).reshape(-1), np.asarray(example["weights"]),
        len(gold))
    return [self._name(t) for t in predicted]


def retrieval_postprocessor(output: Any, example: Optional[Mapping] = None,
                            is_target: bool = False):
  """Targets -> (side, index); predictions -> float32 embedding vector."""
  if is_target:
    source = example["targets"] if example is not None else output
    side, index = (int(v) for v in np.asarray(source).reshape(-1)[:2])
    return side, index
  return np.asarray(output, dtype=np.float32).reshape(-1)


# --- Metric functions (seqio signature: targets, predictions) --------------
# Accuracy and entity F1 are `rembert_t5x.metrics.accuracy_metric` and
# `entity_f1_metric`; only the word-level flattening for POS lives here.


def word_accuracy(targets: Sequence[Sequence[str]],
                  predictions: Sequence[Sequence[Optional[str]]]
                  ) -> Dict[str, float]:
  """seqio metric for POS: accuracy (percent) over all words.

  Words cut by truncation are predicted as None and so count as wrong.
  """
  flat_targets = [t for sentence in targets for t in sentence]
  flat_predictions = [p for sentence in predictions for p in sentence]
  return metrics_lib.accuracy_metric(flat_targets, flat_predictions)


# --- Retrieval scoring (pure numpy) ----------------------------------------


def _normalise_rows(x: np.ndarray) -> np.ndarray:
  x = np.asarray(x, dtype=np.float64)
  if x.ndim != 2:
    raise ValueError(f"embeddings must be [num_sentences, dim], got shape "
                     f"{x.shape}.")
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  return x / np.maximum(norms, 1e-12)


def cosine_similarity(queries: np.ndarray, candidates: np.ndarray
                      ) -> np.ndarray:
  """[num_queries, num_candidates] cosine similarities."""
  return _normalise_rows(queries) @ _normalise_rows(candidates).T


def nearest_neighbour_accuracy(queries: np.ndarray,
                               candidates: np.ndarray) -> float:
  """Share of queries i whose cosine nearest candidate is candidate i.

  Tatoeba scoring: XTREME queries with the English sentences and searches
  the other language (`tatoeba_metric` does the same). Ties go to the
  lowest index.
  """
  if len(queries) != len(candidates) or len(queries) == 0:
    raise ValueError(
        f"need equally many (> 0) queries and candidates, got "
        f"{len(queries)} and {len(candidates)}.")
  nearest = np.argmax(cosine_similarity(queries, candidates), axis=1)
  return float(np.mean(nearest == np.arange(len(queries))))


def _group_by_side(targets, predictions) -> Tuple[np.ndarray, np.ndarray]:
  """Stacks (side, index)-keyed embeddings into source and English matrices."""
  sides = {SIDE_SOURCE: {}, SIDE_ENGLISH: {}}
  for (side, index), embedding in zip(targets, predictions):
    if side not in sides:
      raise ValueError(f"retrieval target side {side} is not 0 or 1.")
    if index in sides[side]:
      raise ValueError(f"retrieval target {(side, index)} appears twice.")
    sides[side][index] = np.asarray(embedding, dtype=np.float64)
  source, english = sides[SIDE_SOURCE], sides[SIDE_ENGLISH]
  if sorted(source) != sorted(english) or not source:
    raise ValueError("retrieval needs the same (non-empty) set of pair "
                     "indices on both sides.")
  order = sorted(source)
  return (np.stack([source[i] for i in order]),
          np.stack([english[i] for i in order]))


def tatoeba_metric(targets: Sequence[Tuple[int, int]],
                   predictions: Sequence[np.ndarray]) -> Dict[str, float]:
  """Tatoeba accuracy (percent): English queries, nearest source sentence."""
  source, english = _group_by_side(targets, predictions)
  return {"accuracy": 100.0 * nearest_neighbour_accuracy(english, source)}


def margin_candidates(source: np.ndarray, target: np.ndarray,
                      k: int = 4) -> List[Tuple[int, int, float]]:
  """Bitext mining candidates by ratio margin, as XTREME's BUCC scripts.

  The score of a pair is cos(x, y) divided by the mean of the average cosine
  of x's k nearest targets and y's k nearest sources (Artetxe & Schwenk
  2019). Each source proposes its best target and each target its best
  source; candidates are then taken greedily by descending score so that
  every sentence is used at most once (XTREME's "max" retrieval).

  Args:
    source: [num_source, dim] embeddings.
    target: [num_target, dim] embeddings.
    k: neighbourhood size (4 in XTREME).

  Returns:
    [(source_index, target_index, score)], best first.
  """
  similarity = cosine_similarity(source, target)
  k_fwd = min(k, similarity.shape[1])
  k_bwd = min(k, similarity.shape[0])
  fwd_mean = -np.mean(np.sort(-similarity, axis=1)[:, :k_fwd], axis=1)
  bwd_mean = -np.mean(np.sort(-similarity, axis=0)[:k_bwd, :], axis=0)
  margin = similarity / ((fwd_mean[:, None] + bwd_mean[None, :]) / 2.0)
  # XTREME scores only each side's k nearest neighbours; a best margin lies
  # among them, so restricting the argmax to them gives the same proposals.
  fwd_nn = np.argsort(-similarity, axis=1)[:, :k_fwd]
  bwd_nn = np.argsort(-similarity, axis=0)[:k_bwd, :]
  proposals = []
  for i in range(similarity.shape[0]):
    j = fwd_nn[i][np.argmax(margin[i, fwd_nn[i]])]
    proposals.append((margin[i, j], i, int(j)))
  for j in range(similarity.shape[1]):
    i = bwd_nn[:, j][np.argmax(margin[bwd_nn[:, j], j])]
    proposals.append((margin[i, j], int(i), j))
  proposals.sort(key=lambda p: -p[0])
  used_source, used_target, chosen = set(), set(), []
  for score, i, j in proposals:
    if i not in used_source and j not in used_target:
      used_source.add(i)
      used_target.add(j)
      chosen.append((i, j, float(score)))
  return chosen


def bucc_f1(candidates: Sequence[Tuple[Any, Any, float]],
            gold: Sequence[Tuple[Any, Any]],
            threshold: Optional[float] = None) -> Dict[str, float]:
  """Precision / recall / F1 (percent) of mined pairs against gold pairs.

  With `threshold=None` the threshold maximising F1 on this gold is chosen
  (XTREME does this on the BUCC dev gold, then reuses it on test); pairs
  scoring at least the threshold count as extracted.

  Args:
    candidates: (source_id, target_id, score) triples.
    gold: (source_id, target_id) gold pairs.
    threshold: fixed score threshold, or None to optimise it.

  Returns:
    {"precision", "recall", "f1", "threshold"}.
  """
  gold_set = set(gold)
  if not gold_set:
    raise ValueError("bucc_f1 needs at least one gold pair.")
  ranked = sorted(candidates, key=lambda c: -c[2])
  if threshold is None:
    best_f1, threshold, correct = -1.0, float("inf"), 0
    for n, (s, t, score) in enumerate(ranked, start=1):
      correct += int((s, t) in gold_set)
      if correct == 0:
        continue
      f1 = 2.0 * correct / (n + len(gold_set))
      if f1 > best_f1:
        best_f1 = f1
        # Midway to the next score, so the cut is not on a tie boundary.
        following = ranked[n][2] if n < len(ranked) else score - 1.0
        threshold = (score + following) / 2.0
  extracted = [(s, t) for s, t, score in ranked if score >= threshold]
  correct = sum(int(p in gold_set) for p in extracted)
  precision = correct / len(extracted) if extracted else 0.0
  recall = correct / len(gold_set)
  f1 = (2 * precision * recall / (precision + recall)) if correct else 0.0
  return {"precision": 100.0 * precision, "recall": 100.0 * recall,
          "f1": 100.0 * f1, "threshold": float(threshold)}


class BuccMetric:
  """seqio metric fn for BUCC: mines pairs from embeddings, scores vs gold.

  Targets are (side, index) with index the row of the sentence in its BUCC
  file; the files are read when the metric is computed to map rows back to
  BUCC ids and to load the gold pairs.
  """

  def __init__(self, source_path: str, english_path: str, gold_path: str,
               k: int = 4):
    self.paths = (source_path, english_path)
    self.gold_path = gold_path
    self.k = k

  def __call__(self, targets, predictions) -> Dict[str, float]:
    ids = [[i for i, _ in xtreme_readers.read_bucc_sentences(p)]
           for p in self.paths]
    by_side = ({}, {})
    for (side, index), embedding in zip(targets, predictions):
      by_side[side][index] = embedding
    orders = [sorted(rows) for rows in by_side]
    candidates = margin_candidates(
        np.stack([by_side[0][i] for i in orders[0]]),
        np.stack([by_side[1][i] for i in orders[1]]), self.k)
    named = [(ids[0][orders[0][i]], ids[1][orders[1][j]], score)
             for i, j, score in candidates]
    return bucc_f1(named, xtreme_readers.read_bucc_gold(self.gold_path))


# --- Output features and idempotent registration ---------------------------


def _ids(size: int) -> seqio.Vocabulary:
  # eos_id=None: seqio's decode would otherwise cut at the first id 0,
  # which is a real class / tag ("O") here.
  return seqio.PassThroughVocabulary(size=size, eos_id=None)


class LabelVocabulary(seqio.PassThroughVocabulary):
  """Class or tag ids that pass through unchanged, plus their names.

  Decoding stays the identity: seqio's evaluator decodes predictions through
  the `targets` vocabulary and the postprocessors expect ids. The names are
  for readable predictions: T5X's infer hands its `write_fn` only this
  vocabulary, so it is where a writer finds "entailment" for class 0
  (`rembert_t5x.t5x_infer`).
  """

  def __init__(self, names: Sequence[str]):
    self.names = tuple(str(n) for n in names)
    # eos_id=None, as `_ids`: id 0 is a real class.
    super().__init__(size=len(self.names), eos_id=None)

  def name(self, label_id: int) -> str:
    if not 0 <= label_id < len(self.names):
      raise ValueError(f"predicted id {label_id} is outside the "
                       f"{len(self.names)} labels {list(self.names)}.")
    return self.names[label_id]

  def __eq__(self, other):
    return super().__eq__(other) and getattr(other, "names", None) == self.names

  def __hash__(self):
    return hash(self.names)

  def __str__(self) -> str:
    return f"LabelVocabulary({list(self.names)})"


def _labels(labels: Union[int, Sequence[str]]) -> LabelVocabulary:
  if isinstance(labels, int):
    labels = [str(i) for i in range(labels)]
  return LabelVocabulary(labels)


def pair_output_features(vocabulary: seqio.Vocabulary,
                         labels: Union[int, Sequence[str]]
                         ) -> Dict[str, seqio.Feature]:
  """input_tokens, token_types, targets ([label], for the evaluator).

  The scalar `label` the model trains on travels as an extra feature; seqio's
  evaluator measures every output feature's length, so output features are
  rank 1.

  Args:
    vocabulary: the SentencePiece vocabulary.
    labels: the class names in id order (or a count: names "0", "1", ...).
  """
  return {
      "input_tokens": seqio.Feature(vocabulary, add_eos=False),
      "token_types": seqio.Feature(_ids(2), add_eos=False),
      "targets": seqio.Feature(_labels(labels), add_eos=False),
  }


def tagging_output_features(vocabulary: seqio.Vocabulary,
                            labels: Union[int, Sequence[str]]
                            ) -> Dict[str, seqio.Feature]:
  """input_tokens, token_types, targets (tag ids), weights (float32).

  `labels`: the tag names in id order (or a count: names "0", "1", ...).
  """
  return {
      "input_tokens": seqio.Feature(vocabulary, add_eos=False),
      "token_types": seqio.Feature(_ids(2), add_eos=False),
      "targets": seqio.Feature(_labels(labels), add_eos=False),
      "weights": seqio.Feature(_ids(2), add_eos=False, dtype=tf.float32),
  }


def retrieval_output_features(vocabulary: seqio.Vocabulary
                              ) -> Dict[str, seqio.Feature]:
  """input_tokens, token_types, targets = [side, index] (evaluation key)."""
  return {
      "input_tokens": seqio.Feature(vocabulary, add_eos=False),
      "token_types": seqio.Feature(_ids(2), add_eos=False),
      # Large enough for any sentence index; PassThrough never checks it.
      "targets": seqio.Feature(_ids(2**31 - 1), add_eos=False),
  }


def add_task(name: str, **kwargs) -> seqio.Task:
  """seqio.TaskRegistry.add that replaces an existing task of that name."""
  if name in seqio.TaskRegistry.names():
    seqio.TaskRegistry.remove(name)
  return seqio.TaskRegistry.add(name, **kwargs)


def add_mixture(name: str, tasks: Sequence[str],
                default_rate: float = 1.0) -> seqio.Mixture:
  """seqio.MixtureRegistry.add that replaces an existing mixture."""
  if name in seqio.MixtureRegistry.names():
    seqio.MixtureRegistry.remove(name)
  return seqio.MixtureRegistry.add(name, list(tasks),
                                   default_rate=default_rate)
