"""Readers for the XTREME download formats (local files, no TFDS).

The layout follows what XTREME's `scripts/download_data.sh` leaves in its
`download/` folder (google-research/xtreme), plus the original LASER file
names for Tatoeba:

  xnli/train-en.tsv, xnli/dev-{lang}.tsv, xnli/test-{lang}.tsv
      sentence1 <TAB> sentence2 <TAB> label, no header; labels are
      "entailment" / "neutral" / "contradiction" ("contradictory" is accepted
      as XNLI's original spelling). Read as XTREME reads them: fields split
      at tabs only, quote characters kept as written (docs/FIDELITY.md).
  pawsx/train-en.tsv, pawsx/dev-{lang}.tsv, pawsx/test-{lang}.tsv
      the same three columns; labels "0" (different meaning) / "1"
      (paraphrase).
  panx/{split}-{lang}.tsv, udpos/{split}-{lang}.tsv
      one `token <TAB> tag` per line, a blank line between sentences. The
      raw PAN-X files (before XTREME's preprocessing) prefix every token with
      "{lang}:"; pass `strip_prefix` to remove it.
  tatoeba/tatoeba.{xxx}-eng.{xxx} and tatoeba/tatoeba.{xxx}-eng.eng
      LASER's layout (ISO 639-3 codes): line i of one file translates line i
      of the other. XTREME's own `tatoeba/{xx}-en.en` is *sorted* to hide the
      alignment, so it cannot be scored without separate gold labels.
  bucc2018/{xx}-en.{dev,test}.{xx|en}
      `sentence_id <TAB> sentence` per line; `{xx}-en.dev.gold` holds
      `source_id <TAB> english_id` gold pairs (XTREME deletes the test gold).

The official XTREME download strips test labels: the readers raise a clear
error when a labelled split is read from such a file (pass
`require_labels=False` to read the text only). The sources read the "test"
split of such a file for predictions, every label `NO_LABEL` (no gold: the
prediction writers write none, the metrics refuse it), and `squad_source`
reads QA files whose gold answers XTREME blanked.

Every malformed line raises ValueError naming the file, the 1-based line
number and the field; an empty file raises ValueError naming the file.
"""

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import seqio
import tensorflow as tf

from rembert_t5x.common import shutdown
from rembert_t5x.data import squad_files
from rembert_t5x.data import xtreme_preprocessors as xp

# XTREME's XNLI label names -> class ids, in TFDS `xnli` / `multi_nli` order.
XNLI_LABELS = ("entailment", "neutral", "contradiction")
XNLI_LABEL_IDS = {
    "entailment": 0,
    "neutral": 1,
    "contradiction": 2,
    # The original XNLI files spell it this way; XTREME rewrites it.
    "contradictory": 2,
}
# PAWS-X: TFDS `paws_x_wiki` ClassLabel order (0 = different meaning).
PAWSX_LABELS = ("different_meaning", "paraphrase")
PAWSX_LABEL_IDS = {"0": 0, "1": 1}
# XTREME writes its XNLI / PAWS-X test rows without the label column and its
# PAN-X / UD-POS test words without their tag (`utils_preprocess.py`). The
# sources still read the "test" split of such a file, for predictions (the
# submission folders of `rembert_t5x.experiments.submission`, t5x.infer):
# every example then carries `xtreme_preprocessors.NO_LABEL` as its class /
# tag ids, which the preprocessors pass through, the prediction records leave
# out (`t5x_infer`: no "gold") and the metrics refuse. Other splits, and a
# file with only some labels missing, still fail.
NO_LABEL = xp.NO_LABEL
UNLABELLED_SPLITS = ("test",)


def _open_lines(path: str) -> List[str]:
  """Returns the lines of a UTF-8 file without line ends; errors name it."""
  try:
    # bytes.splitlines() ends lines at "\n", "\r\n" and "\r" only, as
    # XTREME's text-mode reads do; str.splitlines() would also end them
    # inside a sentence, at U+2028, U+0085, form feeds and the like.
    with open(path, "rb") as f:
      raw_lines = f.read().splitlines()
  except OSError as e:
    raise ValueError(f"{path}: cannot read file ({e}).") from e
  lines = []
  for line_number, raw in enumerate(raw_lines, start=1):
    try:
      lines.append(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
      raise ValueError(
          f"{path}, line {line_number}: not valid UTF-8 ({e}).") from e
  if not any(line.strip() for line in lines):
    raise ValueError(f"{path}: file is empty (no non-blank lines).")
  return lines


def _label_id(label: str, label_ids: Mapping[str, int], path: str,
              line_number: int, field: str = "label") -> int:
  if label not in label_ids:
    raise ValueError(
        f"{path}, line {line_number}: field '{field}' has value {label!r}, "
        f"expected one of {sorted(label_ids)}.")
  return label_ids[label]


def read_pair_tsv(path: str,
                  label_ids: Mapping[str, int],
                  require_labels: bool = True) -> List[Dict[str, object]]:
  """Reads an XNLI / PAWS-X style `sentence1 TAB sentence2 TAB label` file.

  Args:
    path: the TSV file (no header).
    label_ids: label string -> class id (e.g. `XNLI_LABEL_IDS`).
    require_labels: if True every row needs a label; if False two-column
      rows (XTREME's unlabelled test files) are read with label `NO_LABEL`.

  Returns:
    One dict per row: {"sentence1": str, "sentence2": str, "label": int}.

  Raises:
    ValueError: naming file, line and field for a malformed row, an unknown
      label, an empty sentence, or an empty file.
  """
  lines = _open_lines(path)
  # XTREME's processors read these files with transformers'
  # `DataProcessor._read_tsv`: utf-8-sig, lines split in text mode, csv with
  # quotechar=None, i.e. tabs only and no quote processing. XTREME wrote them
  # with csv.writer, which wraps a field holding '"' in quotes and doubles
  # it; its models see those quotes as written, and so do ours. Splitting
  # each line ourselves also makes a stray quote a field-count error of its
  # own line rather than a merge of the lines after it, and has no csv field
  # size limit.
  if lines and lines[0].startswith("\ufeff"):
    lines[0] = lines[0][1:]
  examples = []
  for line_number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    row = line.split("\t")
    if len(row) not in (2, 3):
      raise ValueError(
          f"{path}, line {line_number}: expected 3 tab-separated fields "
          f"(sentence1, sentence2, label), found {len(row)}.")
    if len(row) == 2:
      if require_labels:
        raise ValueError(
            f"{path}, line {line_number}: field 'label' is missing (the "
            "official XTREME download strips test labels; use the validation "
            "split or supply labelled files).")
      label = NO_LABEL
    else:
      label = _label_id(row[2].strip(), label_ids, path, line_number)
    for field, text in (("sentence1", row[0]), ("sentence2", row[1])):
      if not text.strip():
        raise ValueError(f"{path}, line {line_number}: field '{field}' is "
                         "empty.")
    examples.append(
        {"sentence1": row[0].strip(), "sentence2": row[1].strip(),
         "label": label})
  if not examples:
    raise ValueError(f"{path}: no examples found.")
  return examples


def read_conll_tags(path: str,
                    label_names: Sequence[str],
                    require_labels: bool = True,
                    strip_prefix: Optional[str] = None,
                    ) -> List[Dict[str, list]]:
  """Reads a PAN-X / UD-POS style `token TAB tag` file, blank-line separated.

  Args:
    path: the file.
    label_names: the tag set; a tag's id is its index here.
    require_labels: if False, lines holding only a token (XTREME's unlabelled
      test files) are read with tag id `NO_LABEL`.
    strip_prefix: removed from the start of every token that carries it
      (e.g. "en:" for the raw PAN-X files).

  Returns:
    One dict per sentence: {"tokens": [str, ...], "tags": [int, ...]}.

  Raises:
    ValueError: naming file, line and field for a malformed line, an unknown
      tag, or an empty file.
  """
  tag_ids = {name: i for i, name in enumerate(label_names)}
  sentences = []
  tokens, tags = [], []
  for line_number, line in enumerate(_open_lines(path), start=1):
    if not line.strip():
      if tokens:
        sentences.append({"tokens": tokens, "tags": tags})
        tokens, tags = [], []
      continue
    fields = line.rstrip("\r\n").split("\t")
    if len(fields) == 1 and len(fields[0].split()) == 2:
      # Some CoNLL exports separate with spaces; tokens never hold spaces.
      fields = fields[0].split()
    if len(fields) > 2:
      raise ValueError(
          f"{path}, line {line_number}: expected 'token<TAB>tag', found "
          f"{len(fields)} fields.")
    token = fields[0].strip()
    if strip_prefix and token.startswith(strip_prefix):
      token = token[len(strip_prefix):]
    if not token:
      raise ValueError(f"{path}, line {line_number}: field 'token' is empty.")
    if len(fields) == 1 or not fields[1].strip():
      if require_labels:
        raise ValueError(
            f"{path}, line {line_number}: field 'tag' is missing (the "
            "official XTREME download strips test labels).")
      tag = NO_LABEL
    else:
      tag = _label_id(fields[1].strip(), tag_ids, path, line_number, "tag")
    tokens.append(token)
    tags.append(tag)
  if tokens:
    sentences.append({"tokens": tokens, "tags": tags})
  return sentences


def read_parallel_lines(source_path: str,
                        target_path: str) -> List[Tuple[str, str]]:
  """Reads two line-aligned files (Tatoeba): line i of one ↔ line i of other.

  Returns:
    [(source_line, target_line), ...], stripped.

  Raises:
    ValueError: a file is empty or unreadable, the line counts differ, or a
      line is blank (it would silently shift the alignment).
  """
  source = _open_lines(source_path)
  target = _open_lines(target_path)
  # A trailing newline gives no extra line with splitlines(); a trailing
  # blank line would, so drop those at the end only.
  while source and not source[-1].strip():
    source.pop()
  while target and not target[-1].strip():
    target.pop()
  if len(source) != len(target):
    raise ValueError(
        f"{source_path} has {len(source)} lines but {target_path} has "
        f"{len(target)}; parallel files must align line by line.")
  for path, lines in ((source_path, source), (target_path, target)):
    for line_number, line in enumerate(lines, start=1):
      if not line.strip():
        raise ValueError(
            f"{path}, line {line_number}: field 'sentence' is empty.")
  return [(s.strip(), t.strip()) for s, t in zip(source, target)]


def read_bucc_sentences(path: str) -> List[Tuple[str, str]]:
  """Reads a BUCC 2018 `sentence_id TAB sentence` file.

  Returns:
    [(sentence_id, sentence), ...] in file order.

  Raises:
    ValueError: malformed line, duplicate id, or empty file.
  """
  rows = []
  seen = set()
  for line_number, line in enumerate(_open_lines(path), start=1):
    if not line.strip():
      continue
    fields = line.split("\t")
    if len(fields) != 2:
      raise ValueError(
          f"{path}, line {line_number}: expected 'id<TAB>sentence', found "
          f"{len(fields)} fields.")
    sentence_id, sentence = fields[0].strip(), fields[1].strip()
    if not sentence_id:
      raise ValueError(f"{path}, line {line_number}: field 'id' is empty.")
    if not sentence:
      raise ValueError(
          f"{path}, line {line_number}: field 'sentence' is empty.")
    if sentence_id in seen:
      raise ValueError(
          f"{path}, line {line_number}: field 'id' repeats {sentence_id!r}.")
    seen.add(sentence_id)
    rows.append((sentence_id, sentence))
  return rows


def read_bucc_gold(path: str) -> List[Tuple[str, str]]:
  """Reads a BUCC 2018 gold file: `source_id TAB english_id` per line."""
  pairs = []
  for line_number, line in enumerate(_open_lines(path), start=1):
    if not line.strip():
      continue
    fields = line.split("\t")
    if len(fields) != 2 or not all(f.strip() for f in fields):
      raise ValueError(
          f"{path}, line {line_number}: expected 'source_id<TAB>target_id'.")
    pairs.append((fields[0].strip(), fields[1].strip()))
  return pairs


# --- Paths in the XTREME download layout -----------------------------------


def xtreme_split_file(data_dir: str, family: str, split: str,
                      lang: str) -> str:
  """`{data_dir}/{family}/{split}-{lang}.tsv`; split is train / dev / test."""
  return os.path.join(data_dir, family, f"{split}-{lang}.tsv")


def tatoeba_files(data_dir: str, lang3: str) -> Tuple[str, str]:
  """LASER Tatoeba paths (source, English) for an ISO 639-3 code."""
  base = os.path.join(data_dir, "tatoeba", f"tatoeba.{lang3}-eng")
  return f"{base}.{lang3}", f"{base}.eng"


def bucc_files(data_dir: str, lang: str, split: str) -> Dict[str, str]:
  """BUCC 2018 paths in XTREME's layout; split is "dev" or "test"."""
  base = os.path.join(data_dir, "bucc2018", f"{lang}-en.{split}")
  return {"source": f"{base}.{lang}", "target": f"{base}.en",
          "gold": f"{base}.gold"}


# --- seqio sources over local files ----------------------------------------
# Files are read when a split is first requested, not at registration, so
# tasks can be registered for a directory that is filled in later.


def _function_source(splits: Mapping[str, object], make_rows,
                     output_signature) -> seqio.FunctionDataSource:
  """`make_rows(path, split)` -> the split's rows, read when it is built."""

  def dataset_fn(split: str, shuffle_files: bool = False, seed=None):
    del shuffle_files, seed  # One file per split: nothing to shuffle.
    rows = make_rows(splits[split], split)
    # The generator runs on tf.data's threads: end them before the
    # interpreter.
    shutdown.end_pipelines_at_exit()
    return tf.data.Dataset.from_generator(
        lambda: iter(rows), output_signature=output_signature)

  return seqio.FunctionDataSource(dataset_fn, splits=list(splits))


def _all_or_no_labels(rows: List[Dict[str, Any]], key: str,
                      path: str) -> List[Dict[str, Any]]:
  """Rows read with `require_labels=False` (missing ids are `NO_LABEL`),
  checked: every label there, or none (XTREME's hidden test set).

  Raises:
    ValueError: naming the file, when only some labels are missing.
  """
  missing = [np.asarray(r[key]) == NO_LABEL for r in rows]
  if not any(m.any() for m in missing):
    return rows
  if not all(m.all() for m in missing):
    partial = sum(int(m.any()) for m in missing)
    raise ValueError(
        f"{path}: {partial} of {len(rows)} examples lack some '{key}' value; "
        "XTREME's test files have no labels at all, its other files all of "
        "them.")
  logging.info("%s: no labels (XTREME's hidden test set): read for "
               "predictions only (%s %d: no gold).", path, key, NO_LABEL)
  return rows


def pair_source(paths: Mapping[str, str], label_ids: Mapping[str, int]
                ) -> seqio.FunctionDataSource:
  """Source of {"sentence1", "sentence2", "label"} from split -> TSV path.

  A "test" file without labels reads with `NO_LABEL`.
  """
  signature = {
      "sentence1": tf.TensorSpec([], tf.string),
      "sentence2": tf.TensorSpec([], tf.string),
      "label": tf.TensorSpec([], tf.int32),
  }

  def rows(path, split):
    if split not in UNLABELLED_SPLITS:
      return read_pair_tsv(path, label_ids)
    return _all_or_no_labels(
        read_pair_tsv(path, label_ids, require_labels=False), "label", path)

  return _function_source(paths, rows, signature)


def tagging_source(paths: Mapping[str, str], label_names: Sequence[str],
                   strip_prefix: Optional[str] = None
                   ) -> seqio.FunctionDataSource:
  """Source of {"tokens": [words], "tags": [ids]} from split -> CoNLL path.

  A "test" file without tags reads with `NO_LABEL`.
  """
  signature = {
      "tokens": tf.TensorSpec([None], tf.string),
      "tags": tf.TensorSpec([None], tf.int32),
  }

  def rows(path, split):
    labelled = split not in UNLABELLED_SPLITS
    sentences = read_conll_tags(path, label_names, require_labels=labelled,
                                strip_prefix=strip_prefix)
    return sentences if labelled else _all_or_no_labels(sentences, "tags",
                                                        path)

  return _function_source(paths, rows, signature)


def squad_source(path: str, split: str) -> seqio.FunctionDataSource:
  """One SQuAD-format file as one split; blank gold answers are read.

  For predictions on the QA sets XTREME keeps hidden (XQuAD and MLQA test,
  TyDiQA-GoldP dev in its current layout), whose answers it blanks; the
  registered evaluation tasks refuse such a file (`squad_files.check_gold_answers`: it
  cannot be scored), the prediction-only ones (tasks/qa.py) read it. Yields
  TFDS' SQuAD-like features (`squad_files.SQUADLIKE_SIGNATURE`).
  """

  def rows(path, split):
    del split
    return [{"id": ex.example_id, "question": ex.question,
             "context": ex.context,
             "answers": {"text": np.asarray(ex.answer_texts, dtype=object),
                         "answer_start": np.asarray(ex.answer_starts,
                                                    dtype=np.int32)}}
            for ex in squad_files.read_squad_file(path, check_alignment=False)]

  return _function_source({split: path}, rows, squad_files.SQUADLIKE_SIGNATURE)


def _retrieval_signature():
  return {"text": tf.TensorSpec([], tf.string),
          "targets": tf.TensorSpec([2], tf.int32)}


def parallel_source(source_path: str, english_path: str, split: str = "test"
                    ) -> seqio.FunctionDataSource:
  """Retrieval source over line-aligned files (Tatoeba), one split.

  Yields one example per sentence: {"text", "targets": [side, line index]}
  with side 0 for the source language and 1 for English (the
  `xtreme_preprocessors.SIDE_*` constants).
  """

  def rows(paths, split):
    del split
    pairs = read_parallel_lines(*paths)
    out = []
    for index, (source, english) in enumerate(pairs):
      out.append({"text": source, "targets": [0, index]})
      out.append({"text": english, "targets": [1, index]})
    return out

  return _function_source({split: (source_path, english_path)}, rows,
                          _retrieval_signature())


def bucc_source(source_path: str, english_path: str,
                split: str = "validation") -> seqio.FunctionDataSource:
  """Retrieval source over BUCC 2018 sentence files, one split.

  Yields {"text", "targets": [side, row index]}: every source-language
  sentence (side 0), then every English sentence (side 1), indices in file
  order (`read_bucc_sentences` maps them back to BUCC ids).
  """

  def rows(paths, split):
    del split
    out = []
    for side, path in enumerate(paths):
      for index, (_, sentence) in enumerate(read_bucc_sentences(path)):
        out.append({"text": sentence, "targets": [side, index]})
    return out

  return _function_source({split: (source_path, english_path)}, rows,
                          _retrieval_signature())
