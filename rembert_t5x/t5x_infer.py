"""Readable predictions from `python -m t5x.infer` (gin_configs/runs/infer_*.gin).

T5X's infer writes one JSON line per example, `{"inputs": {...},
"prediction": ...}`, with the prediction decoded through the task's
`targets` vocabulary: for RemBERT that is a class id, a tag id per
sub-token, or a window's raw start/end logits. The infer run files replace
its `write_fn` (and, for QA, its `merge_fn`) with the functions here, so the
file T5X leaves in INFER_OUTPUT_DIR holds one readable record per example:

  pairs (XNLI, PAWS-X), `write_pair_predictions`:
    {"index": 3, "sentence1": "...", "sentence2": "...",
     "prediction": "entailment",
     "probabilities": {"entailment": 0.91, "neutral": 0.06, ...},
     "gold": "neutral"}
  tagging (PAN-X, UD-POS), `write_tagging_predictions` +
  `merge_tagging_predictions`:
    {"index": 0, "words": ["Angela", "Merkel", "spoke"],
     "prediction": ["B-PER", "I-PER", "O"], "gold": ["B-PER", "I-PER", "O"]}
  QA (XQuAD, MLQA, TyDiQA), `write_qa_windows` + `merge_qa_predictions`:
    {"id": "56be4db0acb8001400a502ec", "question": "...",
     "prediction": "Denver Broncos", "score": 7.31, "windows": 2,
     "gold": ["Denver Broncos", ...]}

What happens where:
  * Class and tag names come from the task's `targets` vocabulary
    (`xtreme_preprocessors.LabelVocabulary`), the only task object T5X hands
    to `write_fn`; `index` is the example's position in the split
    (`xtreme_preprocessors.add_example_index`; XTREME's pair and tagging data
    have no ids). "gold" is written when the data has labels: XTREME's
    label-less test files are read with `xtreme_preprocessors.NO_LABEL`
    (never a made-up class), and their records have no "gold" field.
  * Tagging: the model predicts a tag per sub-token; a word's tag is that
    of its first sub-token (the one trained on, `align_word_tags`). A
    sentence longer than TASK_FEATURE_LENGTHS is split into parts
    (`split_long_sentences`, as XTREME does); the writer writes parts and
    `merge_tagging_predictions`, T5X's `merge_fn`, joins them into one line
    per sentence. A word that could not be predicted gets `null`.
  * QA: a question with a long context has several windows, and T5X infers
    (and writes chunks of) windows. `write_qa_windows` writes each window's
    best span after the n-best search (`qa.best_span`: top-n starts x ends,
    context tokens only, BERT's max-context rule, at most
    `max_answer_length` tokens) as text; `merge_qa_predictions`, T5X's
    `merge_fn`, runs once all chunks are written and keeps each question's
    best window, exactly as the QA evaluation (`qa.answers_from_logits`)
    does. The score is the start + end logit of the chosen span (null when
    no window has a valid span, prediction ""). A question's windows are
    never split across infer shards (seqio shards examples before
    windowing); with `infer.merge_chunked_results = False` the chunk files
    keep one line per window.

The model side is unchanged: `predict_batch(_with_aux)` of
`rembert_t5x.models`. No function here imports t5x.
"""

import json
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional

from absl import logging
import numpy as np
import tensorflow as tf

# The local runner's vocabulary check (`inputs.check_task_vocabulary`).
# Imported with this module (when gin parses a run file), never later: a
# module registering a gin configurable after t5x.infer has locked the config
# is refused.
from rembert_t5x.common import task_modules
from rembert_t5x.data import inputs
from rembert_t5x.data import qa
from rembert_t5x.data import xtreme_preprocessors as xp

_PREDICT_MODES = ("predict", "predict_with_aux")
_DIGITS = 4  # rounding of the probabilities and scores written


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _check_mode(mode: str, writer: str) -> None:
  if mode not in _PREDICT_MODES:
    raise ValueError(
        f"{writer} writes predictions (infer.mode 'predict' or "
        f"'predict_with_aux'), not mode {mode!r}; for scores use T5X's own "
        "write_fn (infer.write_fn = @infer_script.write_inferences_to_file).")


def _label_name(vocabulary: Any, label_id: int):
  """The label's name, or the id itself for a vocabulary without names."""
  if isinstance(vocabulary, xp.LabelVocabulary):
    return vocabulary.name(label_id)
  return label_id


def _rows(inferences, task_ds: tf.data.Dataset):
  """(task example, prediction, aux row) per example, in dataset order."""
  predictions, aux = inferences
  examples = list(task_ds.as_numpy_iterator())
  if len(examples) != len(predictions):
    raise ValueError(f"{len(predictions)} predictions for {len(examples)} "
                     "examples.")
  for i, example in enumerate(examples):
    yield example, np.asarray(predictions[i]), {
        k: np.asarray(v[i]) for k, v in (aux or {}).items()}


def _trim_padding(values: np.ndarray, padding: Any) -> np.ndarray:
  """Drops trailing `padding` (T5X pads the task features of a chunk)."""
  values = np.asarray(values).reshape(-1)
  keep = len(values)
  while keep and values[keep - 1] == padding:
    keep -= 1
  return values[:keep]


def _write_lines(path: str, records: Iterable[Mapping[str, Any]]) -> None:
  # tf.io.gfile, as T5X does, so INFER_OUTPUT_DIR may be a bucket.
  with tf.io.gfile.GFile(path, "w") as f:
    for record in records:
      f.write(json.dumps(record, ensure_ascii=False) + "\n")


# --- Pair classification ------------------------------------------------------


def pair_record(example: Mapping[str, Any], prediction: np.ndarray,
                aux: Mapping[str, np.ndarray],
                vocabulary: Any) -> Dict[str, Any]:
  """One readable pair prediction (see the module docstring)."""
  label_id = xp.pair_label_postprocessor(prediction)
  record = {}
  if "index" in example:
    record["index"] = int(example["index"])
  for key in ("sentence1", "sentence2"):
    if key in example:
      record[key] = _text(example[key])
  record["prediction"] = _label_name(vocabulary, label_id)
  if "log_probs" in aux:  # infer.mode = 'predict_with_aux'
    probs = np.exp(aux["log_probs"].astype(np.float64)).reshape(-1)
    record["probabilities"] = {
        str(_label_name(vocabulary, i)): round(float(p), _DIGITS)
        for i, p in enumerate(probs)}
  if "label" in example and int(example["label"]) != xp.NO_LABEL:
    record["gold"] = _label_name(vocabulary, int(example["label"]))
  return record


def write_pair_predictions(path: str, inferences, task_ds: tf.data.Dataset,
                           mode: str, vocabulary: Any = None) -> None:
  """T5X `write_fn` for pair classification: class names per example."""
  _check_mode(mode, "write_pair_predictions")
  _write_lines(path, (pair_record(example, prediction, aux, vocabulary)
                      for example, prediction, aux in _rows(inferences,
                                                            task_ds)))


# --- Token tagging ------------------------------------------------------------


def tagging_record(example: Mapping[str, Any], prediction: np.ndarray,
                   vocabulary: Any) -> Dict[str, Any]:
  """One readable tagging prediction: a tag per word (module docstring)."""
  # Words are never empty (the readers refuse empty tokens), so trailing
  # empty strings are T5X's padding of the chunk.
  words = [_text(w) for w in _trim_padding(example["tokens"], b"")]
  tag_ids = xp.word_level_predictions(
      prediction.reshape(-1), np.asarray(example["weights"]).reshape(-1),
      len(words))
  record = {}
  if "index" in example:
    record["index"] = int(example["index"])
  if xp.CHUNK_INDEX in example:  # a part of a split sentence
    record[xp.CHUNK_INDEX] = int(example[xp.CHUNK_INDEX])
  record["words"] = words
  record["prediction"] = [None if t is None else _label_name(vocabulary, t)
                          for t in tag_ids]
  gold = np.asarray(example.get("tags", [])).reshape(-1)[:len(words)]
  if len(gold) == len(words) and (gold != xp.NO_LABEL).all():
    record["gold"] = [_label_name(vocabulary, int(t)) for t in gold]
  return record


def write_tagging_predictions(path: str, inferences,
                              task_ds: tf.data.Dataset, mode: str,
                              vocabulary: Any = None) -> None:
  """T5X `write_fn` for tagging: word-level tag names per sentence part."""
  _check_mode(mode, "write_tagging_predictions")
  _write_lines(path, (tagging_record(example, prediction, vocabulary)
                      for example, prediction, _ in _rows(inferences,
                                                          task_ds)))


def join_tagging_parts(parts: Iterable[Mapping[str, Any]]
                       ) -> List[Dict[str, Any]]:
  """Puts sentences split by `split_long_sentences` back together.

  Args:
    parts: `tagging_record`s in dataset order; a part with `chunk_index` > 0
      continues the record before it (the parts of a sentence are adjacent).

  Returns:
    One {"index", "words", "prediction", "gold"} per original sentence.

  Raises:
    ValueError: a continuation whose first part is not right before it.
  """
  sentences: List[Dict[str, Any]] = []
  for part in parts:
    part = dict(part)
    chunk = part.pop(xp.CHUNK_INDEX, 0)
    if chunk == 0:
      sentences.append(part)
      continue
    if not sentences or sentences[-1].get("index") != part.get("index"):
      raise ValueError(f"tagging part {chunk} of sentence "
                       f"{part.get('index')} does not follow its sentence.")
    for key in ("words", "prediction", "gold"):
      if key in part:
        sentences[-1].setdefault(key, []).extend(part[key])
  return sentences


def merge_tagging_predictions(output_dir: str, output_fname: str,
                              tmp_dir: str, step: Optional[int] = None
                              ) -> None:
  """T5X `merge_fn` for tagging: sentence parts -> one line per sentence.

  Parts of a long sentence may sit in different chunk files, so they are
  joined here, after T5X has written every chunk.
  """
  del step
  _merge_chunk_files(output_dir, output_fname, tmp_dir, join_tagging_parts,
                     "sentences")


# --- Extractive QA ------------------------------------------------------------


def qa_window_record(example: Mapping[str, Any], prediction: np.ndarray,
                     n_best: int = qa.N_BEST,
                     max_answer_length: int = qa.MAX_ANSWER_LENGTH
                     ) -> Dict[str, Any]:
  """A window's best span after the n-best search, as text and score."""
  # [PAD] = 0 never occurs inside a window: trailing zeros are padding.
  length = len(_trim_padding(example["input_tokens"], 0))
  offsets = np.asarray(example["token_offsets"]).reshape(-1, 2)[:length]
  starts, ends = qa.split_prediction(prediction, length)
  span = qa.best_span(starts, ends, offsets,
                      np.asarray(example["token_is_max_context"])[:length],
                      n_best, max_answer_length)
  context = _text(example["context"])
  return {
      "id": _text(example["example_id"]),
      "question": _text(example.get("question", b"")),
      "score": None if span is None else span[0],
      "text": "" if span is None else context[span[1]:span[2]],
      # Gold answers are never empty; empty strings are chunk padding.
      "gold": [_text(a) for a in np.asarray(example["answers"]).reshape(-1)
               if _text(a)],
  }


def write_qa_windows(path: str, inferences, task_ds: tf.data.Dataset,
                     mode: str, vocabulary: Any = None,
                     n_best: int = qa.N_BEST,
                     max_answer_length: int = qa.MAX_ANSWER_LENGTH) -> None:
  """T5X `write_fn` for QA: one line per window (merged by the merge_fn).

  Args:
    path: the chunk file T5X names.
    inferences: (per-window `[2, length]` start/end logits, aux).
    task_ds: the windows (`qa.qa_windows_preprocessor` features).
    mode: T5X's infer mode.
    vocabulary: unused (the logits need no decoding).
    n_best: start and end candidates per window (XTREME: 20).
    max_answer_length: longest answer in tokens (XTREME: 30); bind the
      task's value in gin when it differs.
  """
  del vocabulary
  _check_mode(mode, "write_qa_windows")
  _write_lines(path, (
      qa_window_record(example, prediction, n_best, max_answer_length)
      for example, prediction, _ in _rows(inferences, task_ds)))


def merge_qa_windows(windows: Iterable[Mapping[str, Any]]
                     ) -> List[Dict[str, Any]]:
  """Per question, the best-scoring window's answer (first-seen order).

  Args:
    windows: `qa_window_record`s, in any order.

  Returns:
    One {"id", "question", "prediction", "score", "windows", "gold"} per
    question; ties keep the earlier window, as `qa.answers_from_logits`.
  """
  merged: Dict[str, Dict[str, Any]] = {}
  for window in windows:
    record = merged.setdefault(window["id"], {
        "id": window["id"], "question": window["question"],
        "prediction": "", "score": None, "windows": 0})
    record["windows"] += 1
    score = window["score"]
    if score is not None and (record["score"] is None
                              or score > record["score"]):
      record["prediction"], record["score"] = window["text"], score
    if window["gold"] and "gold" not in record:
      record["gold"] = list(window["gold"])
  for record in merged.values():
    if record["score"] is not None:
      record["score"] = round(record["score"], _DIGITS)
  return list(merged.values())


def merge_qa_predictions(output_dir: str, output_fname: str, tmp_dir: str,
                         step: Optional[int] = None) -> None:
  """T5X `merge_fn` for QA: the chunk files' windows -> one line per question.

  Reads `{tmp_dir}/{output_fname}-chunkNNNNN` (written by `write_qa_windows`)
  in chunk order and writes `{output_dir}/{output_fname}`.
  """
  del step
  _merge_chunk_files(output_dir, output_fname, tmp_dir, merge_qa_windows,
                     "questions")


def _merge_chunk_files(output_dir: str, output_fname: str, tmp_dir: str,
                       merge, what: str) -> None:
  """Reads T5X's chunk files in order, merges their lines, writes the file.

  Args:
    output_dir, output_fname, tmp_dir: as T5X passes them to `merge_fn`;
      the chunks are `{tmp_dir}/{output_fname}-chunkNNNNN`.
    merge: JSON records in dataset order -> merged records.
    what: what the merged records are, for the log line.
  """
  pattern = re.compile(re.escape(output_fname) + r"-chunk(\d{5})$")
  chunks = sorted(p for p in tf.io.gfile.glob(
      os.path.join(tmp_dir, f"{output_fname}-chunk*"))
                  if pattern.search(os.path.basename(p)))
  if not chunks:
    raise FileNotFoundError(
        f"no chunk files {output_fname}-chunkNNNNN in {tmp_dir}: did the "
        "split hold no examples?")
  numbers = [int(pattern.search(os.path.basename(p)).group(1))
             for p in chunks]
  if numbers != list(range(len(chunks))):
    raise ValueError(f"chunk files in {tmp_dir} are not numbered 0.."
                     f"{len(chunks) - 1}: {numbers}")
  lines = []
  for chunk in chunks:
    with tf.io.gfile.GFile(chunk, "r") as f:
      lines.extend(json.loads(line) for line in f if line.strip())
  records = merge(lines)
  final = os.path.join(output_dir, output_fname)
  # Through a temporary name: a reader never sees half a file.
  _write_lines(final + ".tmp", records)
  tf.io.gfile.rename(final + ".tmp", final, overwrite=True)
  logging.info("%d %s (from %d lines) written to %s", len(records), what,
               len(lines), final)


# --- Vocabulary check -----------------------------------------------------------


def verify_task_vocabulary(dataset_cfg: Any, model: Any) -> None:
  """T5X infer's `verify_matching_vocabs_fn` for RemBERT models.

  T5X's default compares the model's `input_vocabulary`/`output_vocabulary`
  with the task's, which made every infer run bind both by hand. A RemBERT
  model never encodes or decodes text (the task tokenises; outputs are ids
  or logits), so what can go wrong is a task vocabulary with more ids than
  the model's embedding table: JAX would clamp those ids silently. This
  checks that instead, with the local runner's check.

  Args:
    dataset_cfg: T5X's `utils.DatasetConfig` (its task and module).
    model: a `rembert_t5x.models` model.

  Raises:
    rembert_t5x.common.errors.UserError: naming the task and both sizes.
  """
  task_modules.import_task_module(getattr(dataset_cfg, "module", None))
  name = dataset_cfg.mixture_or_task_name
  inputs.check_task_vocabulary(model, getattr(name, "name", name))
