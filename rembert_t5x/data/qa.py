"""Extractive QA: SQuAD-format examples -> model windows -> answer text.

Pre-processing follows BERT's `run_squad.py` as XTREME used it (docs/FIDELITY.md):

  [CLS] question [SEP] context window [SEP]

with the question cut to `max_query_length` tokens, windows of at most
`max_seq_length` tokens, and a window start that advances by `doc_stride`
context tokens (BERT's meaning of "doc stride": the step between windows, not
the overlap). Token types are 0 for "[CLS] question [SEP]" and 1 for the
context and its closing [SEP]. Unlike BERT, the context is tokenised whole
by SentencePiece (no whitespace pre-split), and every context token keeps its
(start, end) character span in the original context, so a predicted token
span maps back to the exact original characters.

Post-processing: in every window the `n_best` highest start logits and end
logits form candidate spans; a span is valid when both ends are context
tokens, end >= start, it is at most `max_answer_length` tokens long, and the
window is the start token's "max context" window (BERT's rule for tokens seen
in several overlapping windows). The best start+end logit sum over all
windows of a question wins; its text is `context[start_char:end_char]`.

The core is plain Python/numpy (`make_windows`, `best_span`,
`answers_from_logits`). `qa_windows_preprocessor` wraps it for tf.data with
`tf.numpy_function` + `flat_map`: SentencePiece offsets and the window
arithmetic are Python, and one example turns into a variable number of
windows, which a per-example numpy function followed by `flat_map` expresses
directly (a generator source would not work on TFDS inputs).

Model predictions (the QA model class's contract): start and end logits over
each window's tokens, `[2, length]` (row 0 start, row 1 end) or flat
`[2 * length]`; only the window's context tokens are candidates.
"""

import dataclasses
import functools
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple)

from absl import logging
import numpy as np
import seqio
import tensorflow as tf

from rembert_t5x.common import shutdown
from rembert_t5x.data import vocabulary as vocab_lib

# BERT's run_squad.py defaults, as XTREME uses them.
MAX_SEQ_LENGTH = 384
DOC_STRIDE = 128
MAX_QUERY_LENGTH = 64
MAX_ANSWER_LENGTH = 30
N_BEST = 20

# Offset of a token that is not part of the context ([CLS], question, [SEP]).
NO_OFFSET = -1
MISALIGNED_ACTIONS = ("raise", "skip", "ignore")


@dataclasses.dataclass(frozen=True)
class QAExample:
  """One SQuAD question with its context.

  Attributes:
    example_id: the question id.
    question: question text.
    context: the paragraph.
    answer_texts: gold answer texts (empty for unlabelled test data).
    answer_starts: character offset of each answer in `context`.
  """
  example_id: str
  question: str
  context: str
  answer_texts: Tuple[str, ...] = ()
  answer_starts: Tuple[int, ...] = ()


@dataclasses.dataclass
class QAWindow:
  """One model input: a question and a window of its context.

  Attributes:
    example_id: id of the question.
    input_tokens: int32 [length], [CLS] q [SEP] window [SEP].
    token_types: int32 [length], 0 for [CLS] q [SEP], 1 after.
    start_position: index of the first answer token, 0 ([CLS]) when the
      answer is not inside this window.
    end_position: index of the last answer token, 0 when outside.
    token_offsets: int32 [length, 2], (start, end) character span in the
      context of each context token; (-1, -1) for the other tokens.
    token_is_max_context: int32 [length], 1 where this window gives the token
      its most central position among all windows holding it.
    context: the context text.
    answers: gold answer texts of the question.
  """
  example_id: str
  input_tokens: np.ndarray
  token_types: np.ndarray
  start_position: int
  end_position: int
  token_offsets: np.ndarray
  token_is_max_context: np.ndarray
  context: str
  answers: Tuple[str, ...]


def encode_with_offsets(vocabulary: seqio.Vocabulary,
                        text: str) -> Tuple[List[int], List[Tuple[int, int]]]:
  """Token ids and character spans of `text`, for any SentencePiece vocab.

  `RemBertVocabulary.encode_with_offsets` only needs a SentencePiece
  tokenizer, so a plain `seqio.SentencePieceVocabulary` works as well.
  """
  if hasattr(vocabulary, "encode_with_offsets"):
    return vocabulary.encode_with_offsets(text)
  if isinstance(vocabulary, seqio.SentencePieceVocabulary):
    return vocab_lib.encode_with_offsets(vocabulary.tokenizer, text)
  raise ValueError(
      f"QA preprocessing needs character offsets; vocabulary {vocabulary} is "
      "neither a RemBertVocabulary nor a seqio.SentencePieceVocabulary.")


# (vocabulary, context, its encoding) of the last context encoded.
_last_context: Optional[Tuple[Any, str, Any]] = None


def _encode_context(vocabulary: seqio.Vocabulary, context: str):
  """`encode_with_offsets` of a context, remembering the last one.

  SQuAD-format files list a paragraph's questions together (XQuAD: ~5 per
  paragraph), so consecutive questions mostly share their context; the
  character-offset encoding is the costly part of building windows. One
  entry, compared by vocabulary identity and text, read and replaced whole
  (safe under tf.data's reader threads).
  """
  global _last_context
  last = _last_context
  if last is not None and last[0] is vocabulary and last[1] == context:
    return last[2]
  encoded = encode_with_offsets(vocabulary, context)
  _last_context = (vocabulary, context, encoded)
  return encoded


def check_answers(example: QAExample, source: str = "<input>") -> None:
  """Raises ValueError unless every answer_start points at its answer text.

  Args:
    example: the question to check.
    source: file or dataset name for the error message.
  """
  if len(example.answer_texts) != len(example.answer_starts):
    raise ValueError(
        f"{source}: question {example.example_id!r}: "
        f"{len(example.answer_texts)} answer texts but "
        f"{len(example.answer_starts)} answer_start values.")
  for i, (text, start) in enumerate(
      zip(example.answer_texts, example.answer_starts)):
    found = example.context[start:start + len(text)] if start >= 0 else None
    if found != text:
      raise ValueError(
          f"{source}: question {example.example_id!r}: answers[{i}]."
          f"answer_start={start} points at {found!r} in the context, not at "
          f"the answer text {text!r}.")


def _answer_token_span(offsets: Sequence[Tuple[int, int]], char_start: int,
                       char_end: int) -> Optional[Tuple[int, int]]:
  """First and last context token overlapping [char_start, char_end)."""
  first = last = None
  for i, (start, end) in enumerate(offsets):
    if start == end:  # whitespace-only piece: no visible text
      continue
    if end > char_start and start < char_end:
      if first is None:
        first = i
      last = i
  return None if first is None else (first, last)


def _window_starts(num_tokens: int, window_size: int,
                   doc_stride: int) -> List[Tuple[int, int]]:
  """(start, length) of each context window, BERT's sliding rule."""
  spans, start = [], 0
  while True:
    length = min(window_size, num_tokens - start)
    spans.append((start, length))
    if start + length >= num_tokens:
      return spans
    start += min(length, doc_stride)


def _max_context_masks(spans: Sequence[Tuple[int, int]]) -> List[np.ndarray]:
  """Per window, 1 where it is the most central window of a context token.

  A token's score in a window is min(tokens left, tokens right) plus
  0.01 * window length; the first window with the highest score wins.
  """
  num_tokens = max(start + length for start, length in spans) if spans else 0
  best_score = np.full(num_tokens, -np.inf)
  best_window = np.zeros(num_tokens, dtype=np.int64)
  for w, (start, length) in enumerate(spans):
    positions = np.arange(start, start + length)
    left = positions - start
    right = start + length - 1 - positions
    score = np.minimum(left, right) + 0.01 * length
    better = score > best_score[positions]
    best_score[positions[better]] = score[better]
    best_window[positions[better]] = w
  return [(best_window[start:start + length] == w).astype(np.int32)
          for w, (start, length) in enumerate(spans)]


def make_windows(example: QAExample,
                 vocabulary: seqio.Vocabulary,
                 max_seq_length: int = MAX_SEQ_LENGTH,
                 doc_stride: int = DOC_STRIDE,
                 max_query_length: int = MAX_QUERY_LENGTH,
                 source: str = "<input>",
                 on_misaligned: str = "raise") -> List[QAWindow]:
  """Splits one question + context into model windows.

  The gold positions come from the first answer (SQuAD training data has
  exactly one); windows not containing it get positions 0.

  Args:
    example: the question; answers are checked with `check_answers`.
    vocabulary: a SentencePiece vocabulary with RemBERT's special pieces
      (their ids are read from it).
    max_seq_length: maximum window length in tokens, specials included.
    doc_stride: step between window starts, in context tokens.
    max_query_length: the question is cut to this many tokens.
    source: file or dataset name for error messages.
    on_misaligned: what an answer_start that does not point at its answer
      text does: "raise" a ValueError naming source, id and field; "skip"
      the question (return no window); or "ignore" it for positions (all
      windows get 0) while keeping the question and its gold texts, which is
      all that scoring uses.

  Returns:
    The windows, in context order (at least one unless skipped; an empty
    context gives one window with no context token).
  """
  if on_misaligned not in MISALIGNED_ACTIONS:
    raise ValueError(f"on_misaligned={on_misaligned!r}; expected one of "
                     f"{', '.join(MISALIGNED_ACTIONS)}.")
  aligned = True
  try:
    check_answers(example, source)
  except ValueError:
    if on_misaligned == "raise":
      raise
    if on_misaligned == "skip":
      return []
    aligned = False
  ids = vocab_lib.special_ids(vocabulary)
  question_ids, _ = encode_with_offsets(vocabulary, example.question)
  question_ids = list(question_ids[:max_query_length])
  context_ids, context_offsets = _encode_context(vocabulary, example.context)
  prefix_length = len(question_ids) + 2  # [CLS] q [SEP]
  window_size = max_seq_length - prefix_length - 1  # closing [SEP]
  if window_size < 1 or doc_stride < 1:
    raise ValueError(
        f"{source}: question {example.example_id!r}: "
        f"max_seq_length={max_seq_length} leaves no room for context after a "
        f"{len(question_ids)}-token question (doc_stride={doc_stride}); "
        "raise max_seq_length or lower max_query_length.")

  gold_span = None
  if example.answer_texts and aligned:
    char_start = example.answer_starts[0]
    char_end = char_start + len(example.answer_texts[0])
    gold_span = _answer_token_span(context_offsets, char_start, char_end)

  spans = _window_starts(len(context_ids), window_size, doc_stride)
  masks = _max_context_masks(spans)
  no_offsets = [(NO_OFFSET, NO_OFFSET)] * prefix_length
  windows = []
  for (start, length), mask in zip(spans, masks):
    tokens = ([ids.cls] + question_ids + [ids.sep] +
              list(context_ids[start:start + length]) + [ids.sep])
    offsets = (no_offsets + list(context_offsets[start:start + length]) +
               [(NO_OFFSET, NO_OFFSET)])
    start_position = end_position = 0
    if (gold_span is not None and start <= gold_span[0] and
        gold_span[1] < start + length):
      start_position = gold_span[0] - start + prefix_length
      end_position = gold_span[1] - start + prefix_length
    windows.append(QAWindow(
        example_id=example.example_id,
        input_tokens=np.asarray(tokens, dtype=np.int32),
        token_types=np.asarray(
            [0] * prefix_length + [1] * (length + 1), dtype=np.int32),
        start_position=start_position,
        end_position=end_position,
        token_offsets=np.asarray(offsets, dtype=np.int32).reshape(-1, 2),
        token_is_max_context=np.concatenate(
            [np.zeros(prefix_length, np.int32), mask,
             np.zeros(1, np.int32)]),
        context=example.context,
        answers=tuple(example.answer_texts)))
  return windows


def best_span(start_logits: np.ndarray,
              end_logits: np.ndarray,
              token_offsets: np.ndarray,
              token_is_max_context: Optional[np.ndarray] = None,
              n_best: int = N_BEST,
              max_answer_length: int = MAX_ANSWER_LENGTH
              ) -> Optional[Tuple[float, int, int]]:
  """The best valid answer span of one window.

  Args:
    start_logits: float [>= length]; entries past the window are ignored.
    end_logits: float [>= length].
    token_offsets: int [length, 2] character spans (-1 off the context).
    token_is_max_context: int [length]; starts outside the token's max
      context window are skipped. None: no such filter.
    n_best: how many top start and top end indices are paired.
    max_answer_length: longest answer in tokens.

  Returns:
    (start logit + end logit, start char, end char), or None when no pair is
    valid.
  """
  offsets = np.asarray(token_offsets).reshape(-1, 2)
  length = offsets.shape[0]
  start_logits = np.asarray(start_logits, dtype=np.float64)[:length]
  end_logits = np.asarray(end_logits, dtype=np.float64)[:length]
  if start_logits.shape[0] < length or end_logits.shape[0] < length:
    raise ValueError(
        f"Window has {length} tokens but the prediction has "
        f"{start_logits.shape[0]} start and {end_logits.shape[0]} end logits.")
  # Stable sorts: ties go to the earlier token, as BERT's sorted() did.
  top_starts = np.argsort(-start_logits, kind="stable")[:n_best]
  top_ends = np.argsort(-end_logits, kind="stable")[:n_best]
  best = None
  for s in top_starts:
    if offsets[s, 0] == NO_OFFSET:
      continue
    if token_is_max_context is not None and not token_is_max_context[s]:
      continue
    for e in top_ends:
      if offsets[e, 0] == NO_OFFSET or e < s or e - s + 1 > max_answer_length:
        continue
      score = float(start_logits[s] + end_logits[e])
      if best is None or score > best[0]:
        best = (score, int(offsets[s, 0]), int(offsets[e, 1]))
  return best


def split_prediction(prediction: Any,
                     length: int) -> Tuple[np.ndarray, np.ndarray]:
  """(start logits, end logits) from a `[2, L]` or flat `[2 * L]` prediction.

  Args:
    prediction: the model's output for one window (see module docstring).
    length: the window's token count (L must be >= length).
  """
  logits = np.asarray(prediction, dtype=np.float64)
  if logits.ndim == 1 and logits.shape[0] % 2 == 0:
    logits = logits.reshape(2, -1)
  if logits.ndim != 2 or logits.shape[0] != 2 or logits.shape[1] < length:
    raise ValueError(
        f"QA prediction of shape {np.asarray(prediction).shape} is not "
        f"[2, L] start/end logits with L >= the window length {length}.")
  return logits[0], logits[1]


def answers_from_logits(windows: Sequence[QAWindow],
                        predictions: Sequence[Any],
                        n_best: int = N_BEST,
                        max_answer_length: int = MAX_ANSWER_LENGTH
                        ) -> Dict[str, str]:
  """Best answer text per question over all its windows.

  Args:
    windows: the windows of one or more questions.
    predictions: per window, its `[2, length]` start/end logits.
    n_best: candidates per window and side.
    max_answer_length: longest answer in tokens.

  Returns:
    question id -> answer text ("" when no window has a valid span).
  """
  if len(windows) != len(predictions):
    raise ValueError(f"{len(windows)} windows but {len(predictions)} "
                     "predictions.")
  best: Dict[str, Tuple[float, str]] = {}
  for window, prediction in zip(windows, predictions):
    starts, ends = split_prediction(prediction, len(window.input_tokens))
    span = best_span(starts, ends, window.token_offsets,
                     window.token_is_max_context, n_best, max_answer_length)
    current = best.setdefault(window.example_id, (-np.inf, ""))
    if span is not None and span[0] > current[0]:
      best[window.example_id] = (span[0], window.context[span[1]:span[2]])
  return {example_id: text for example_id, (_, text) in best.items()}


# --- tf.data / seqio wrappers ------------------------------------------------


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _stack_windows(windows: Sequence[QAWindow], max_seq_length: int
                   ) -> Tuple[np.ndarray, ...]:
  """The windows as int32 arrays padded to `max_seq_length` (n windows).

  Returns:
    (input_tokens [n, L], token_types [n, L], token_offsets [n, L, 2],
     token_is_max_context [n, L], lengths [n], positions [n, 2]) with
    L = max_seq_length; padding is 0 (offsets: NO_OFFSET), `positions` holds
    each window's (start_position, end_position).
  """
  n = len(windows)
  tokens = np.zeros((n, max_seq_length), np.int32)
  types = np.zeros((n, max_seq_length), np.int32)
  offsets = np.full((n, max_seq_length, 2), NO_OFFSET, np.int32)
  max_context = np.zeros((n, max_seq_length), np.int32)
  lengths = np.zeros(n, np.int32)
  positions = np.zeros((n, 2), np.int32)
  for i, w in enumerate(windows):
    length = len(w.input_tokens)
    lengths[i] = length
    tokens[i, :length] = w.input_tokens
    types[i, :length] = w.token_types
    offsets[i, :length] = w.token_offsets
    max_context[i, :length] = w.token_is_max_context
    positions[i] = (w.start_position, w.end_position)
  return tokens, types, offsets, max_context, lengths, positions


def _windows_numpy(example_id, question, context, texts, starts, *,
                   vocabulary: seqio.Vocabulary, max_seq_length: int,
                   doc_stride: int, max_query_length: int, source: str,
                   on_misaligned: str) -> Tuple[np.ndarray, ...]:
  """The preprocessor's `tf.numpy_function`: one question -> its windows.

  Input: the element's numpy values, strings as bytes, e.g.
    b"q1", b"Who?", b"Ann met Bob.", [b"Ann"], [0]
  Output: `make_windows` of that question as `_stack_windows` arrays. Under
  "skip" and "ignore" a misaligned question is logged as a warning.
  """
  example = QAExample(_text(example_id), _text(question), _text(context),
                      tuple(_text(t) for t in texts),
                      tuple(int(s) for s in starts))
  if on_misaligned != "raise":
    try:
      check_answers(example, source)
    except ValueError as e:
      logging.warning("%s misaligned question (%s): %s",
                      "Skipping" if on_misaligned == "skip" else "Keeping",
                      on_misaligned, e)
  windows = make_windows(example, vocabulary, max_seq_length, doc_stride,
                         max_query_length, source, on_misaligned)
  return _stack_windows(windows, max_seq_length)


def _window_features(window: Dict[str, tf.Tensor],
                     shared: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """One window's output features from its padded row.

  Input: {"input_tokens", "token_types", "token_offsets",
  "token_is_max_context" (padded), "length", "targets": [start, end]}.
  Output: the padded four cut to "length", "targets", "start_positions",
  "end_positions", and `shared` (example_id, question, context, answers).
  """
  length = window["length"]
  out = {k: v[:length] for k, v in window.items()
         if k not in ("length", "targets")}
  out["targets"] = window["targets"]
  out["start_positions"] = window["targets"][0]
  out["end_positions"] = window["targets"][1]
  out.update(shared)
  return out


def _example_windows(ex: Dict[str, Any], windows_numpy: Callable[..., Any],
                     max_seq_length: int) -> tf.data.Dataset:
  """The dataset of one SQuAD-like element's windows (`_window_features`).

  `windows_numpy` is `_windows_numpy` with its settings bound.
  """
  outputs = tf.numpy_function(
      windows_numpy,
      [ex["id"], ex["question"], ex["context"], ex["answers"]["text"],
       ex["answers"]["answer_start"]],
      [tf.int32] * 6, stateful=False)
  tokens, types, offsets, max_context, lengths, positions = outputs
  per_window = {
      "input_tokens": tf.ensure_shape(tokens, [None, max_seq_length]),
      "token_types": tf.ensure_shape(types, [None, max_seq_length]),
      "token_offsets": tf.ensure_shape(offsets, [None, max_seq_length, 2]),
      "token_is_max_context": tf.ensure_shape(max_context,
                                              [None, max_seq_length]),
      "length": tf.ensure_shape(lengths, [None]),
      "targets": tf.ensure_shape(positions, [None, 2]),
  }
  shared = {"example_id": ex["id"], "question": ex["question"],
            "context": ex["context"], "answers": ex["answers"]["text"]}
  return tf.data.Dataset.from_tensor_slices(per_window).map(
      functools.partial(_window_features, shared=shared))


def qa_windows_preprocessor(
    dataset: tf.data.Dataset,
    output_features: Mapping[str, seqio.Feature],
    max_seq_length: int = MAX_SEQ_LENGTH,
    doc_stride: int = DOC_STRIDE,
    max_query_length: int = MAX_QUERY_LENGTH,
    source: str = "<dataset>",
    on_misaligned: str = "raise",
    sequence_length: Optional[Mapping[str, int]] = None) -> tf.data.Dataset:
  """Turns SQuAD-like examples into one dataset element per window.

  Input element (TFDS `squad`, `xquad`, `mlqa`, `tydi_qa`, or
  `squad_file_dataset`):
    {"id": "q1", "question": "Who?", "context": "Ann met Bob.",
     "answers": {"text": ["Ann"], "answer_start": [0]}}
  Output elements (one per window):
    {"input_tokens": [2, <q>, 3, <ctx>, 3], "token_types": [0, .., 1, ..],
     "start_positions": 4, "end_positions": 4,   # int32 scalars
     "targets": [4, 4],                          # the same two, see below
     "example_id": "q1", "question": "Who?", "context": "Ann met Bob.",
     "answers": ["Ann"],
     "token_offsets": [[-1, -1], .., [0, 3], ..],  # int32 [length, 2]
     "token_is_max_context": [0, .., 1, ..]}     # int32 [length]

  `targets` exists because seqio's Evaluator and T5X's infer read the task's
  "targets" feature (its vocabulary decodes the model output, its values
  reach the postprocessor); the model's training signal is
  start_positions / end_positions.

  Args:
    dataset: SQuAD-like examples.
    output_features: the task's features; `input_tokens` gives the
      vocabulary.
    max_seq_length: window length in tokens.
    doc_stride: step between windows in context tokens.
    max_query_length: question length cap in tokens.
    source: dataset or file name for error messages.
    on_misaligned: for a question whose answer_start does not point at its
      answer text: "raise" (default), "skip" it, or "ignore" it for the
      positions (see `make_windows`); each skipped or ignored question is
      logged as a warning. "skip" suits noisy (machine-translated)
      training data, "ignore" evaluation data, whose scores use only the
      answer texts.
    sequence_length: the task feature lengths seqio passes (T5X's
      TASK_FEATURE_LENGTHS); seqio cuts `input_tokens` to its length after
      this preprocessor, so a length below `max_seq_length` is refused here.

  Returns:
    The windows dataset.

  Raises:
    ValueError: `sequence_length["input_tokens"] < max_seq_length`, naming
      both.
  """
  requested = (sequence_length or {}).get("input_tokens")
  if requested is not None and requested < max_seq_length:
    raise ValueError(
        f"{source}: task_feature_lengths['input_tokens'] = {requested} is "
        f"shorter than this QA task's windows (max_seq_length = "
        f"{max_seq_length}): windows would be cut, losing context and "
        "answer positions. Set TASK_FEATURE_LENGTHS = {'input_tokens': "
        f"{max_seq_length}}} (or register the task with max_seq_length <= "
        f"{requested}).")
  vocabulary = output_features["input_tokens"].vocabulary
  if on_misaligned not in MISALIGNED_ACTIONS:
    raise ValueError(f"on_misaligned={on_misaligned!r}; expected one of "
                     f"{', '.join(MISALIGNED_ACTIONS)}.")
  windows_numpy = functools.partial(
      _windows_numpy, vocabulary=vocabulary, max_seq_length=max_seq_length,
      doc_stride=doc_stride, max_query_length=max_query_length,
      source=source, on_misaligned=on_misaligned)
  # windows_numpy runs on tf.data's threads: end them before the interpreter.
  shutdown.end_pipelines_at_exit()
  return dataset.flat_map(functools.partial(
      _example_windows, windows_numpy=windows_numpy,
      max_seq_length=max_seq_length))


def postprocess_window(output: Any,
                       example: Optional[Mapping[str, Any]] = None,
                       is_target: bool = False,
                       n_best: int = N_BEST,
                       max_answer_length: int = MAX_ANSWER_LENGTH
                       ) -> Dict[str, Any]:
  """seqio postprocessor of one window (see `rembert_t5x.scoring.metrics.qa_metric`).

  Args:
    output: for predictions, the window's `[2, L]` start/end logits; for
      targets, the decoded `targets` feature (unused).
    example: the window's task features (numpy), as seqio passes them.
    is_target: whether `output` is the target.
    n_best: candidates per side.
    max_answer_length: longest answer in tokens.

  Returns:
    Targets: {"example_id", "answers"}; predictions: {"example_id",
    "score" (None without a valid span), "text"}.
  """
  if example is None:
    raise ValueError("postprocess_window needs the window's features "
                     "(seqio passes them as `example`).")
  example_id = _text(example["example_id"])
  if is_target:
    return {"example_id": example_id,
            "answers": [_text(a) for a in example["answers"]]}
  offsets = np.asarray(example["token_offsets"]).reshape(-1, 2)
  starts, ends = split_prediction(output, offsets.shape[0])
  span = best_span(starts, ends, offsets, example["token_is_max_context"],
                   n_best, max_answer_length)
  if span is None:
    return {"example_id": example_id, "score": None, "text": ""}
  context = _text(example["context"])
  return {"example_id": example_id, "score": span[0],
          "text": context[span[1]:span[2]]}


def output_features(vocabulary: seqio.Vocabulary,
                    max_seq_length: int = MAX_SEQ_LENGTH
                    ) -> Dict[str, seqio.Feature]:
  """The seqio output features of QA tasks.

  Only rank-1 features are declared: seqio's Evaluator measures every output
  feature's length, which fails on scalars; `start_positions` and
  `end_positions` still travel in the dataset (the feature converter reads
  them), as do the evaluation features.
  """
  positions = seqio.PassThroughVocabulary(size=max_seq_length)
  return {
      "input_tokens": seqio.Feature(vocabulary, add_eos=False),
      "token_types": seqio.Feature(seqio.PassThroughVocabulary(size=2),
                                   add_eos=False),
      "targets": seqio.Feature(positions, add_eos=False),
  }
