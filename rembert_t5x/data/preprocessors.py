"""SeqIO preprocessors for RemBERT masked-LM pre-training.

The pipeline of a pre-training task, one language per task:

  "..." (a line of a local file) -> line_to_text -> {"text": "..."}
  {"text": "..."}                                  raw document or line
    -> tokenize_text         {"tokens": [...]}
    -> pack_contiguous_tokens {"input_tokens": [CLS] ... [SEP]}   (dataset level)
    -> mask_tokens           {"input_tokens", "token_types", "targets",
                              "weights"}                      (docs/DESIGN.md)

The fine-tuning (XTREME) preprocessors live in their own module.
"""

from typing import Mapping, Optional

import seqio
import tensorflow as tf

from rembert_t5x.data import pieces
from rembert_t5x.data import vocabulary as vocab_lib


def _special_ids(caller: str,
                 output_features: Optional[Mapping[str, seqio.Feature]],
                 special_ids: Optional[pieces.SpecialIds]
                 ) -> pieces.SpecialIds:
  """Explicit ids, else those of the `input_tokens` vocabulary (loaded now,
  when the dataset is built, never at import)."""
  if special_ids is not None:
    return special_ids
  if output_features is None or "input_tokens" not in output_features:
    raise ValueError(f"{caller} needs output_features (an input_tokens "
                     "vocabulary) or special_ids.")
  return vocab_lib.special_ids(output_features["input_tokens"].vocabulary)


@seqio.map_over_dataset
def line_to_text(line: tf.Tensor) -> Mapping[str, tf.Tensor]:
  """Wraps a line of a plain-text file (seqio.TextLineDataSource) in a dict.

  Input:  "Grüße aus Köln"   (scalar string)
  Output: {"text": "Grüße aus Köln"}
  """
  return {"text": line}


@seqio.map_over_dataset
def tokenize_text(example: Mapping[str, tf.Tensor],
                  output_features: Mapping[str, seqio.Feature],
                  text_key: str = "text") -> Mapping[str, tf.Tensor]:
  """Tokenises one text with the vocabulary of the `input_tokens` feature.

  Other fields (urls, titles, timestamps) are dropped: pre-training reads
  text only.

  Input:  {"text": "Grüße aus Köln", "url": "..."}
  Output: {"tokens": [87, 1203, 9, 511]}   (int32, no special tokens)

  Args:
    example: a dict holding a scalar string at `text_key`.
    output_features: the task's features; `input_tokens` gives the vocabulary.
    text_key: the field holding the text.

  Returns:
    {"tokens": int32 [num_tokens]}.
  """
  vocabulary = output_features["input_tokens"].vocabulary
  tokens = vocabulary.encode_tf(example[text_key])
  return {"tokens": tf.cast(tokens, tf.int32)}


def pack_contiguous_tokens(
    dataset: tf.data.Dataset,
    sequence_length: Optional[Mapping[str, int]],
    output_features: Optional[Mapping[str, seqio.Feature]] = None,
    special_ids: Optional[pieces.SpecialIds] = None) -> tf.data.Dataset:
  """Cuts one language's token stream into `[CLS] … [SEP]` sequences.

  Documents (or lines) are concatenated in order and the stream is cut every
  `length - 2` tokens, so a sequence may span document boundaries (contiguous
  text, as in BERT/RemBERT pre-training; no separator is inserted between
  documents). The last, shorter piece of the stream is kept.

  Input (length 6; [CLS]=2, [SEP]=3 as in TRAINED_LAYOUT):
                     {"tokens": [11, 12, 13]}, {"tokens": [14, 15, 16, 17]}
  Output:            {"input_tokens": [2, 11, 12, 13, 14, 3]},
                     {"input_tokens": [2, 15, 16, 17, 3]}

  Args:
    dataset: examples with int32 `tokens` (ids > 0, i.e. no [PAD]).
    sequence_length: {"input_tokens": length, ...}; length >= 3.
    output_features: the task's features; the `input_tokens` vocabulary
      gives [CLS] and [SEP] (read when the dataset is built).
    special_ids: the ids to use instead (no vocabulary needed).

  Returns:
    A dataset of {"input_tokens": int32 [<= length]}.
  """
  if not sequence_length or not sequence_length.get("input_tokens"):
    raise ValueError(
        "pack_contiguous_tokens needs sequence_length['input_tokens'] (the "
        f"packed length), got {sequence_length!r}.")
  length = sequence_length["input_tokens"]
  if length < 3:
    raise ValueError(
        f"sequence_length['input_tokens'] = {length}: need at least 3 "
        "([CLS], one token, [SEP]).")
  body = length - 2
  ids = _special_ids("pack_contiguous_tokens", output_features, special_ids)

  stream = dataset.map(lambda ex: (tf.cast(ex["tokens"], tf.int32), False))
  # A final empty element marks the end so the leftover tokens get flushed.
  stream = stream.concatenate(tf.data.Dataset.from_tensors(
      (tf.zeros([0], tf.int32), True)))

  def cut(leftover, element):
    tokens, is_last = element
    buffer = tf.concat([leftover, tokens], axis=0)
    num_full = tf.size(buffer) // body
    full = tf.reshape(buffer[:num_full * body], [num_full, body])
    rest = buffer[num_full * body:]
    # Flush: the rest becomes one more row, padded with 0 (removed below).
    flushed = tf.pad(rest, [[0, body - tf.size(rest)]])[tf.newaxis]
    rows = tf.cond(
        tf.logical_and(is_last, tf.size(rest) > 0),
        lambda: tf.concat([full, flushed], axis=0), lambda: full)
    return rest, rows

  rows = stream.scan(tf.zeros([0], tf.int32), cut).unbatch()

  def add_special_tokens(row):
    num_tokens = tf.reduce_sum(tf.cast(tf.not_equal(row, 0), tf.int32))
    return {"input_tokens": tf.concat(
        [[ids.cls], row[:num_tokens], [ids.sep]], axis=0)}

  return rows.map(add_special_tokens, num_parallel_calls=tf.data.AUTOTUNE)


@seqio.map_over_dataset(num_seeds=1)
def mask_tokens(example: Mapping[str, tf.Tensor],
                seed: tf.Tensor,
                output_features: Optional[Mapping[str, seqio.Feature]] = None,
                vocab_size: Optional[int] = None,
                special_ids: Optional[pieces.SpecialIds] = None,
                select_rate: float = 0.15,
                mask_rate: float = 0.8,
                random_rate: float = 0.1,
                seed_key: int = 0) -> Mapping[str, tf.Tensor]:
  """BERT masking: select 15% of tokens; 80% [MASK], 10% random, 10% kept.

  Exactly round(select_rate * n) of the n non-special tokens are selected
  (at least one when n > 0), as in BERT; the special pieces ([PAD], [UNK],
  [CLS], [SEP], [MASK], at the ids the vocabulary gives them) are never
  selected. The loss covers every selected position, including those left
  unchanged or randomised. Random replacements are drawn uniformly from the
  non-special ids. Randomness is stateless: the same seed (and `seed_key`)
  gives the same masks.

  seqio gives every task of a mixture the same seed, so the tasks' k-th rows
  get the same per-example seed; without a `seed_key` of its own per task
  they would all be masked at the same positions (in the synthetic demo's
  4-language mixture, 1,600 rows had 414 distinct masks).
  `tasks/pretraining.mlm_task_seed_key` gives each task one from its name.

  Input ([CLS]=2, [SEP]=3, [MASK]=4 as in TRAINED_LAYOUT):
          {"input_tokens": [2, 17, 18, 19, 20, 3]}
  Output: {"input_tokens": [2, 17, 4, 19, 20, 3],
           "token_types":  [0, 0, 0, 0, 0, 0],
           "targets":      [2, 17, 18, 19, 20, 3],
           "weights":      [0., 0., 1., 0., 0., 0.]}

  Args:
    example: a dict with int32 `input_tokens`.
    seed: int32 [2] stateless seed (supplied by seqio).
    output_features: the task's features; the `input_tokens` vocabulary
      gives vocab_size and the special ids when they are not passed.
    vocab_size: size of the vocabulary random replacements come from.
    special_ids: the special ids (default: read from the vocabulary when
      the dataset is built).
    select_rate: share of non-special tokens selected for prediction.
    mask_rate: share of selected tokens replaced by [MASK].
    random_rate: share of selected tokens replaced by a random token.
    seed_key: folded into `seed` when not 0 (a task's own stream of masks,
      see above); 0 uses `seed` as given.

  Returns:
    The MLM task features of docs/DESIGN.md.
  """
  if vocab_size is None:
    if output_features is None:
      raise ValueError("mask_tokens needs vocab_size or output_features.")
    vocab_size = output_features["input_tokens"].vocabulary.vocab_size
  ids = _special_ids("mask_tokens", output_features, special_ids)
  specials = sorted(set(ids.as_tuple()))
  if vocab_size <= len(specials) or specials[-1] >= vocab_size:
    raise ValueError(
        f"mask_tokens: vocab_size {vocab_size} leaves no ordinary tokens "
        f"besides the special ids {specials}.")
  if mask_rate + random_rate > 1.0:
    raise ValueError(
        f"mask_tokens: mask_rate {mask_rate} + random_rate {random_rate} > 1.")

  tokens = tf.cast(example["input_tokens"], tf.int32)
  n = tf.size(tokens)
  if seed_key:
    seed = tf.random.experimental.stateless_fold_in(seed, seed_key)
  select_seed, action_seed, random_seed = tf.unstack(
      tf.random.experimental.stateless_split(seed, 3))

  candidate = tf.reduce_all(
      tf.not_equal(tokens[:, tf.newaxis], tf.constant(specials, tf.int32)),
      axis=1)
  num_candidates = tf.reduce_sum(tf.cast(candidate, tf.int32))
  num_selected = tf.cast(
      tf.floor(tf.cast(num_candidates, tf.float32) * select_rate + 0.5),
      tf.int32)
  num_selected = tf.minimum(tf.maximum(num_selected, 1), num_candidates)

  # The num_selected candidates with the smallest random scores are chosen.
  scores = tf.random.stateless_uniform([n], select_seed)
  scores = tf.where(candidate, scores, 2.0)
  ranks = tf.argsort(tf.argsort(scores))
  selected = tf.logical_and(candidate, ranks < num_selected)

  action = tf.random.stateless_uniform([n], action_seed)
  use_mask = tf.logical_and(selected, action < mask_rate)
  use_random = tf.logical_and(
      selected,
      tf.logical_and(action >= mask_rate, action < mask_rate + random_rate))
  # Uniform over the vocab_size - len(specials) ordinary ids: draw a rank r
  # among them and step over each special id at or below it (ascending).
  random_tokens = tf.random.stateless_uniform(
      [n], random_seed, minval=0, maxval=vocab_size - len(specials),
      dtype=tf.int32)
  for special in specials:
    random_tokens += tf.cast(random_tokens >= special, tf.int32)

  inputs = tf.where(use_mask, ids.mask, tokens)
  inputs = tf.where(use_random, random_tokens, inputs)
  return {
      "input_tokens": inputs,
      "token_types": tf.zeros_like(tokens),
      "targets": tokens,
      "weights": tf.cast(selected, tf.float32),
  }
