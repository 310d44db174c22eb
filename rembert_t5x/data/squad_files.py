"""SQuAD-format JSON files -> `qa.QAExample`s, checked, or a tf.data source.

XTREME's QA files (SQuAD v1.1 train, XQuAD, MLQA, TyDiQA-GoldP) share the
SQuAD JSON layout: `data[*].paragraphs[*].qas[*]` with `answers` of `text`
and `answer_start`. Test files XTREME blanks (no answers) read as examples
without gold when `require_gold` is False.
"""

import json
from typing import Any, Dict, Iterator, List, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

from rembert_t5x.common import shutdown
from rembert_t5x.data.qa import QAExample
from rembert_t5x.data.qa import check_answers


def parse_squad_json(data: Any, source: str,
                     check_alignment: bool = True) -> List[QAExample]:
  """Turns a loaded SQuAD-format JSON object into examples.

  Questions that repeat an id (XTREME's flattened files) are merged, their
  answers concatenated, as TFDS does.

  Args:
    data: the object from `json.load`.
    source: file name for error messages.
    check_alignment: also check every answer_start (`check_answers`); the
      windows preprocessor does it itself, with its own policy.

  Returns:
    The questions in file order.

  Raises:
    ValueError: naming the file and the JSON path of the first bad field.
  """
  def fail(where: str, what: str):
    raise ValueError(f"{source}: {where}: {what}")

  if not isinstance(data, dict) or not isinstance(data.get("data"), list):
    fail("data", "expected a top-level object with a 'data' list (SQuAD "
         "format).")
  merged: Dict[str, Dict[str, Any]] = {}
  for a, article in enumerate(data["data"]):
    paragraphs = article.get("paragraphs") if isinstance(article,
                                                         dict) else None
    if not isinstance(paragraphs, list):
      fail(f"data[{a}].paragraphs", "expected a list.")
    for p, paragraph in enumerate(paragraphs):
      where_p = f"data[{a}].paragraphs[{p}]"
      if not isinstance(paragraph, dict):
        fail(where_p, "expected an object.")
      context = paragraph.get("context")
      if not isinstance(context, str):
        fail(f"{where_p}.context", "expected a string.")
      qas = paragraph.get("qas")
      if not isinstance(qas, list):
        fail(f"{where_p}.qas", "expected a list.")
      for q, qa in enumerate(qas):
        where_q = f"{where_p}.qas[{q}]"
        if not isinstance(qa, dict):
          fail(where_q, "expected an object.")
        for key in ("id", "question"):
          if not isinstance(qa.get(key), str):
            fail(f"{where_q}.{key}", "expected a string.")
          if not qa[key].strip():
            fail(f"{where_q}.{key}", "is empty.")
        answers = qa.get("answers", [])
        if not isinstance(answers, list):
          fail(f"{where_q}.answers", "expected a list.")
        texts, starts = [], []
        for i, answer in enumerate(answers):
          where_a = f"{where_q}.answers[{i}] (id {qa['id']!r})"
          if not isinstance(answer, dict) or not isinstance(
              answer.get("text"), str):
            fail(f"{where_a}.text", "expected a string.")
          start = answer.get("answer_start")
          if isinstance(start, bool) or not isinstance(start, int):
            fail(f"{where_a}.answer_start", "expected an integer.")
          texts.append(answer["text"])
          starts.append(start)
        entry = merged.get(qa["id"])
        if entry is None:
          merged[qa["id"]] = {"question": qa["question"], "context": context,
                              "texts": texts, "starts": starts}
        else:
          entry["texts"].extend(texts)
          entry["starts"].extend(starts)
  if not merged:
    fail("data", "the file holds no questions.")
  examples = [
      QAExample(example_id, e["question"], e["context"], tuple(e["texts"]),
                tuple(e["starts"])) for example_id, e in merged.items()
  ]
  if check_alignment:
    for example in examples:
      check_answers(example, source)
  return examples


def read_squad_file(path: str,
                    check_alignment: bool = True) -> List[QAExample]:
  """Reads and validates a SQuAD-format JSON file (see `parse_squad_json`)."""
  try:
    with tf.io.gfile.GFile(path, "r") as f:
      data = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not valid JSON ({e}).") from e
  except (OSError, tf.errors.OpError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: cannot read file ({e}).") from e
  return parse_squad_json(data, path, check_alignment)


def check_gold_answers(examples: Sequence[QAExample], source: str) -> None:
  """Refuses a file whose gold answers are all blank; warns on some.

  XTREME's download blanks the answers of the sets it keeps hidden (XQuAD
  and MLQA test; in its current layout also the TyDiQA-GoldP dev files):
  scoring predictions against them would silently report 0.

  Raises:
    ValueError: naming the file, when no question has a non-empty answer.
  """
  blank = [ex.example_id for ex in examples
           if not any(text.strip() for text in ex.answer_texts)]
  if len(blank) == len(examples):
    raise ValueError(
        f"{source}: every one of the {len(examples)} questions has blank gold "
        "answers (XTREME's download blanks hidden evaluation sets); it cannot "
        "be trained on or scored (every score would be 0). Use the original "
        "dataset's file or the TFDS task instead; to predict on it, the "
        "prediction-only task (rembert_local_<family>_predict_<lang>).")
  if blank:
    logging.warning("%s: %d of %d questions have blank gold answers (first: "
                    "%s); each of them scores 0 in evaluation.",
                    source, len(blank), len(examples), blank[0])


# The element spec of TFDS' SQuAD-like datasets (`qa_utils.squadlike_features`
# minus the title), which the local-file source reproduces.
SQUADLIKE_SIGNATURE = {
    "id": tf.TensorSpec([], tf.string),
    "question": tf.TensorSpec([], tf.string),
    "context": tf.TensorSpec([], tf.string),
    "answers": {
        "text": tf.TensorSpec([None], tf.string),
        "answer_start": tf.TensorSpec([None], tf.int32),
    },
}


def squad_file_dataset(path: str, require_gold: bool = True
                       ) -> tf.data.Dataset:
  """A tf.data dataset of a SQuAD file, with TFDS' SQuAD-like features.

  The file is read and validated here, eagerly, so a bad file fails with its
  name before any training starts (answer alignment: `qa_windows_preprocessor`).
  `require_gold=False`, for tasks without a metric only, reads XTREME's hidden
  sets with their blank answers (`check_gold_answers` refuses them otherwise).
  """
  examples = read_squad_file(path, check_alignment=False)
  if require_gold:
    check_gold_answers(examples, path)

  def generate() -> Iterator[Dict[str, Any]]:
    for ex in examples:
      yield {"id": ex.example_id, "question": ex.question,
             "context": ex.context,
             "answers": {"text": np.asarray(ex.answer_texts, dtype=object),
                         "answer_start": np.asarray(ex.answer_starts,
                                                    dtype=np.int32)}}

  # The generator runs on tf.data's threads: end them before the interpreter.
  shutdown.end_pipelines_at_exit()
  return tf.data.Dataset.from_generator(
      generate, output_signature=SQUADLIKE_SIGNATURE)
