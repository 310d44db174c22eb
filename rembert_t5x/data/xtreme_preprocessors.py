"""Preprocessors and postprocessors for XTREME classification, tagging and
retrieval (retrieval scoring: `rembert_t5x.scoring.retrieval_metrics`).

Task features follow docs/DESIGN.md:

  pair classification: input_tokens, token_types, label (int32 scalar)
  token tagging:       input_tokens, token_types, targets, weights
  retrieval:           input_tokens, token_types, targets = [side, index]

Every sequence is `[CLS] ... [SEP]` (pairs: `[CLS] a [SEP] b [SEP]`), with
the special ids the task's vocabulary gives its pieces, read when the dataset
is built (`vocabulary.special_ids`). Sequence lengths come from the
`sequence_length["input_tokens"]` seqio passes to the preprocessors.

Model predictions the postprocessors expect (after seqio decodes them through
the PassThrough vocabularies of the output features):

  pair classification: one class id per example (a scalar, or a length-1
    sequence such as a `[batch, 1]` array row).
  token tagging: one tag id per sub-token position, aligned with
    `input_tokens` (length = the model's input length; positions past the
    example's own length are ignored). Long sentences are split into
    several examples (`split_long_sentences`); the tagging metrics join
    them back (`WholeSentences`).
  retrieval: one float vector per example (the pooled sentence embedding).
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import seqio
import tensorflow as tf

from rembert_t5x.data import vocabulary as vocab_lib
from rembert_t5x.scoring import retrieval_metrics

# Retrieval `targets[0]`: which side of a parallel corpus a sentence is on.
SIDE_SOURCE = retrieval_metrics.SIDE_SOURCE   # the non-English sentence
SIDE_ENGLISH = retrieval_metrics.SIDE_ENGLISH
# The class / tag id of an example whose data has no label (XTREME's hidden
# test sets, `xtreme_readers`): passed through for predictions; the
# prediction records carry no gold for it and the metrics refuse it.
NO_LABEL = -1


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
  """Casts to int32 and fails (naming field and value) outside the set or
  `NO_LABEL`."""
  value = tf.cast(value, tf.int32)
  ok = tf.reduce_all(((value >= 0) & (value < num_classes))
                     | (value == NO_LABEL))
  check = tf.debugging.Assert(
      ok, [f"field '{field}' has a value outside [0, {num_classes}) and not "
           f"{NO_LABEL} (no label):", value],
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
  Output (ids illustrative, [CLS]=2 and [SEP]=3; length <=
  sequence_length["input_tokens"]):
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
  ids = vocab_lib.special_ids(vocab)
  length = _input_length(sequence_length, minimum=3)
  tokens_a = tf.cast(vocab.encode_tf(ex["sentence1"]), tf.int32)
  tokens_b = tf.cast(vocab.encode_tf(ex["sentence2"]), tf.int32)
  kept_a, kept_b = pair_truncation_lengths(
      tf.size(tokens_a), tf.size(tokens_b), length - 3)
  input_tokens = tf.concat(
      [[ids.cls], tokens_a[:kept_a], [ids.sep], tokens_b[:kept_b], [ids.sep]],
      0)
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
  Output ([CLS]=2, [SEP]=3):
    {"input_tokens": [2, 301, 55, 9, 3], "token_types": [0, 0, 0, 0, 0],
     "text": "Wie geht's?", "targets": [0, 17]}
  """
  vocab = output_features["input_tokens"].vocabulary
  ids = vocab_lib.special_ids(vocab)
  length = _input_length(sequence_length, minimum=2)
  tokens = tf.cast(vocab.encode_tf(ex["text"]), tf.int32)[:length - 2]
  out = dict(ex)
  out["input_tokens"] = tf.concat([[ids.cls], tokens, [ids.sep]], 0)
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
  ids = vocab_lib.special_ids(vocab)
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
      default_value=ids.unk, shape=tf.stack([tf.cast(num_words, tf.int64),
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

  input_tokens = tf.concat([[ids.cls], flat_ids, [ids.sep]], 0)
  out = {
      "input_tokens": input_tokens,
      "token_types": tf.zeros_like(input_tokens),
      "targets": tf.concat([[0], targets, [0]], 0),
      "weights": tf.concat([[0.0], weights, [0.0]], 0),
      "tokens": words,
      "tags": tags,
      **_kept_index(ex),
  }
  if CHUNK_INDEX in ex:  # set by split_long_sentences
    out[CHUNK_INDEX] = ex[CHUNK_INDEX]
  return out


# --- Long sentences: XTREME's panx_tokenize / udpos_tokenize ---------------
# XTREME never truncates a tagging example: `utils_preprocess.py` splits a
# sentence before the word whose sub-tokens would overflow max_len - 2 and
# makes each part an example of its own, for training and evaluation alike.
# Its scorer (`evaluate.py` on the files `run_tag.py` writes with
# `save_predictions`) puts the parts back together, one sequence per original
# sentence, so seqeval sees whole sentences; the metric functions here do the
# same (`WholeSentences`).

CHUNK_INDEX = "chunk_index"


def sentence_chunk_ids(piece_counts: tf.Tensor, budget: int) -> tf.Tensor:
  """Chunk number of every word under XTREME's greedy split.

  A chunk takes words while their sub-tokens fit in `budget`; the word that
  would overflow starts the next chunk. A word with no sub-token counts as
  one ([UNK], as `align_word_tags` encodes it). A word longer than the budget
  on its own gets a chunk to itself (XTREME replaces such a word by [UNK];
  here it keeps its first `budget` sub-tokens, the first one labelled).

  Args:
    piece_counts: int32 [num_words], sub-tokens per word.
    budget: sub-tokens per chunk (sequence length - 2).

  Returns:
    int32 [num_words] chunk ids 0, 0, ..., 1, ... (non-decreasing).
  """
  counts = tf.maximum(tf.cast(piece_counts, tf.int32), 1)

  def step(state, count):
    used, chunk = state[0], state[1]
    overflow = tf.logical_and(used > 0, used + count > budget)
    chunk = chunk + tf.cast(overflow, tf.int32)
    used = tf.where(overflow, count, used + count)
    return tf.stack([used, chunk])

  states = tf.scan(step, counts, initializer=tf.zeros([2], tf.int32))
  return tf.reshape(states, [-1, 2])[:, 1]


def split_long_sentences(dataset: tf.data.Dataset,
                         sequence_length: Mapping[str, int],
                         output_features: Mapping[str, seqio.Feature],
                         ) -> tf.data.Dataset:
  """Splits tagging sentences into parts that fit the sequence length.

  Not a per-example map: one sentence may become several examples.
  Input (words and word-level tags, e.g. with room for 3 sub-tokens and
  "Angela" -> 2 pieces, the others -> 1):
    {"tokens": ["Angela", "Merkel", "spoke", "."], "tags": [1, 2, 0, 0]}
  Output:
    {"tokens": ["Angela", "Merkel"], "tags": [1, 2], "chunk_index": 0}
    {"tokens": ["spoke", "."], "tags": [0, 0], "chunk_index": 1}
  Scalar features (such as `add_example_index`'s `index`) are copied to
  every part; other per-word features are dropped. Run `align_word_tags` after it; every word
  then has its first sub-token in some example.

  Raises:
    tf.errors.InvalidArgumentError: `tokens` and `tags` differ in length.
  """
  vocab = output_features["input_tokens"].vocabulary
  budget = _input_length(sequence_length, minimum=3) - 2

  def chunks(ex):
    words, tags = ex["tokens"], ex["tags"]
    same_length = tf.debugging.assert_equal(
        tf.size(words), tf.size(tags),
        message="fields 'tokens' and 'tags' differ in length")
    with tf.control_dependencies([same_length]):
      pieces = vocab.encode_tf(words)
    if isinstance(pieces, tf.RaggedTensor):
      counts = pieces.row_lengths()
    else:  # every word the same number of pieces
      counts = tf.fill([tf.shape(pieces)[0]], tf.shape(pieces)[1])
    chunk_ids = sentence_chunk_ids(counts, budget)
    num_chunks = tf.reduce_max(tf.concat([chunk_ids + 1, [0]], 0))

    def one(k):
      k = tf.cast(k, tf.int32)
      keep = tf.equal(chunk_ids, k)
      scalars = {key: value for key, value in ex.items()
                 if key not in ("tokens", "tags") and value.shape.rank == 0}
      return {**scalars, "tokens": tf.boolean_mask(words, keep),
              "tags": tf.boolean_mask(tags, keep), CHUNK_INDEX: k}

    return tf.data.Dataset.range(tf.cast(num_chunks, tf.int64)).map(one)

  return dataset.flat_map(chunks)


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


def _gold(label_id: int) -> int:
  if label_id == NO_LABEL:
    raise ValueError("the example has no gold label (XTREME's hidden test "
                     "set): its split is read for predictions, not scored")
  return label_id


def pair_label_postprocessor(output: Any, example: Optional[Mapping] = None,
                             is_target: bool = False) -> int:
  """Class id of a prediction or target (see the module docstring)."""
  if is_target and example is not None and "label" in example:
    return _gold(int(example["label"]))
  if isinstance(output, (bytes, str)):
    return int(output)
  return _as_class_id(output)


class ContinuedSentence(list):
  """Word tags of an example that continues the previous example's sentence.

  What `TaggingPostprocessor` returns for the parts after the first of a
  sentence split by `split_long_sentences`; `join_sentence_parts` appends
  them to the part before. A plain list to any other consumer.
  """


class TaggingPostprocessor:
  """Turns sub-token tag predictions and targets into word-level tag names.

  Targets come from the example's word-level `tags` (all words, even those
  cut by truncation); predictions from the first sub-token of each word,
  with `fill_tag` for words that did not fit in the sequence. Parts of a
  split sentence after the first come back as `ContinuedSentence`.
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
      names = [self._name(_gold(t)) for t in gold]
    else:
      predicted = word_level_predictions(
          np.asarray(output).reshape(-1), np.asarray(example["weights"]),
          len(gold))
      names = [self._name(t) for t in predicted]
    if int(example.get(CHUNK_INDEX, 0)) > 0:
      return ContinuedSentence(names)
    return names


def retrieval_postprocessor(output: Any, example: Optional[Mapping] = None,
                            is_target: bool = False):
  """Targets -> (side, index); predictions -> float32 embedding vector."""
  if is_target:
    source = example["targets"] if example is not None else output
    side, index = (int(v) for v in np.asarray(source).reshape(-1)[:2])
    return side, index
  return np.asarray(output, dtype=np.float32).reshape(-1)


# --- Metric functions (seqio signature: targets, predictions) --------------


def join_sentence_parts(sequences: Sequence[Sequence[Any]]
                        ) -> List[List[Any]]:
  """Puts split sentences back together: one list per original sentence.

  Each `ContinuedSentence` is appended to the sequence before it (SeqIO keeps
  the dataset order, so the parts of a sentence are adjacent).

  Raises:
    ValueError: the first sequence continues a sentence that is not there.
  """
  joined = []
  for sequence in sequences:
    if isinstance(sequence, ContinuedSentence):
      if not joined:
        raise ValueError("the first tagging example continues a sentence "
                         "whose first part is missing.")
      joined[-1].extend(sequence)
    else:
      joined.append(list(sequence))
  return joined


class WholeSentences:
  """Wraps a seqio metric fn so it sees whole sentences, as XTREME scores.

  Example: `WholeSentences(metrics.entity_f1_metric)` scores PAN-X with
  seqeval over the original sentences, not over the parts
  `split_long_sentences` made.
  """

  def __init__(self, metric_fn):
    self.metric_fn = metric_fn
    self.__name__ = getattr(metric_fn, "__name__", type(self).__name__)

  def __call__(self, targets, predictions) -> Dict[str, float]:
    return self.metric_fn(join_sentence_parts(targets),
                          join_sentence_parts(predictions))


# --- Output features --------------------------------------------------------


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
