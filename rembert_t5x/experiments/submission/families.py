"""The XTREME tasks of a submission folder, one row of a table per task.

Each row (`Family`) says where the task's XTREME file is, what a prediction
file must match (its rows, its words per sentence, its question ids, its
corpus ids), how that is checked and how the file is written, as XTREME's
`evaluate.py` reads it back (docs/FIDELITY.md, "Submission"). The four kinds
of rows: sentence pairs (XNLI, PAWS-X), tagging (PAN-X, UD-POS), extractive
QA (XQuAD, MLQA, TyDiQA-GoldP) and retrieval (BUCC 2018, Tatoeba).
"""

import dataclasses
import functools
import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from rembert_t5x.common import errors
from rembert_t5x.data import squad_files
from rembert_t5x.data import xtreme_readers
from rembert_t5x.experiments import xtreme_local
from rembert_tasks import panx
from rembert_tasks import pawsx
from rembert_tasks import qa as qa_tasks
from rembert_tasks import retrieval
from rembert_tasks import udpos
from rembert_tasks import xnli

SPLITS = ("test", "dev")


@dataclasses.dataclass(frozen=True)
class Family:
  """One XTREME task as the file of a submission folder.

  Attributes:
    task: XTREME's name of the task (the folder's subfolder).
    kind: "pair", "tagging", "qa" or "retrieval": how a model's outputs
      become the file's rows (each road keys its converters by it).
    suffix: the file's extension (`<task>/test-<lang>.<suffix>`).
    input_file: (xtreme_dir, split, lang) -> the XTREME file whose examples
      the predictions follow, line by line.
    expected: (xtreme_dir, split, lang, that file) -> what the predictions
      must match; raises ValueError on a file it cannot read.
    check: (where, predictions, expected) -> None; raises a UserError that
      starts with `where`.
    render: predictions -> the file's text.
    languages: split -> the languages of a complete folder.
    fixed_split: the split of our local tasks read whatever the split
      predicted (a task with one file), or None.
    extra_inputs: (xtreme_dir, split, lang) -> further files it reads,
      checked before any training with `input_file`.
    labels: class id -> the label as XTREME's files spell it (pairs).
    label_names: our class or tag names (the tasks' `targets`
      vocabularies, what t5x.infer writes), in id order.
  """
  task: str
  kind: str
  suffix: str
  input_file: Callable[[str, str, str], str]
  expected: Callable[[str, str, str, str], Any]
  check: Callable[[str, Any, Any], None]
  render: Callable[[Any], str]
  languages: Callable[[str], List[str]]
  fixed_split: Optional[str] = None
  extra_inputs: Callable[[str, str, str], List[str]] = lambda *_: []
  labels: Tuple[str, ...] = ()
  label_names: Tuple[str, ...] = ()


# --------------------------------------------------------------------------
# Where the XTREME files are
# --------------------------------------------------------------------------

def _tsv_file(task: str, xtreme_dir: str, split: str, lang: str) -> str:
  return os.path.join(xtreme_dir, task, f"{split}-{lang}.tsv")


def _qa_file(key: str, xtreme_dir: str, split: str, lang: str) -> str:
  """`key` names an entry of `qa_tasks.LOCAL_FILES` ({split} filled in);
  the first of the current and the older layout that exists."""
  key = key.format(split=split)
  candidates = [os.path.join(xtreme_dir, table[key].format(lang=lang))
                for table in (qa_tasks.LOCAL_FILES, qa_tasks.LOCAL_FILES_OLD)
                if key in table]
  return qa_tasks.first_existing(candidates)


def tatoeba_files(xtreme_dir: str, lang: str) -> Tuple[str, str, bool]:
  """(source file, English file, whether the English side needs XTREME's
  sort): XTREME's `{lang}-en.*` if present, else LASER's files."""
  base = os.path.join(xtreme_dir, "tatoeba", f"{lang}-en")
  if os.path.isfile(f"{base}.en") or lang not in retrieval.TATOEBA_LANGUAGES:
    return f"{base}.{lang}", f"{base}.en", False
  source, english = xtreme_readers.tatoeba_files(
      xtreme_dir, retrieval.TATOEBA_LANGUAGES[lang])
  return source, english, True


def _tatoeba_english(xtreme_dir: str, split: str, lang: str) -> str:
  """Tatoeba has only its test set: the English side, whatever the split."""
  del split
  return tatoeba_files(xtreme_dir, lang)[1]


def _bucc_source(xtreme_dir: str, split: str, lang: str) -> str:
  return xtreme_readers.bucc_files(xtreme_dir, lang, split)["source"]


def _bucc_inputs(xtreme_dir: str, split: str, lang: str) -> List[str]:
  """Both sides of the split, and the dev set with its gold (the margin
  threshold comes from it)."""
  files = []
  for each in sorted({split, "dev"}):
    bucc = xtreme_readers.bucc_files(xtreme_dir, lang, each)
    files += [bucc[key] for key in ("source", "target")
              + (("gold",) if each == "dev" else ())]
  return files


# --------------------------------------------------------------------------
# What a prediction file must match
# --------------------------------------------------------------------------

def _pair_rows(label_ids: Mapping[str, int], xtreme_dir: str, split: str,
               lang: str, path: str) -> int:
  """The number of sentence pairs (XTREME's test rows have no label)."""
  del xtreme_dir, split, lang
  return len(xtreme_readers.read_pair_tsv(path, label_ids,
                                          require_labels=False))


def _words_per_sentence(label_names: Sequence[str], xtreme_dir: str,
                        split: str, lang: str, path: str) -> List[int]:
  del xtreme_dir, split, lang
  return [len(s["tokens"]) for s in xtreme_readers.read_conll_tags(
      path, label_names, require_labels=False)]


def _question_ids(xtreme_dir: str, split: str, lang: str,
                  path: str) -> List[str]:
  del xtreme_dir, split, lang
  return [ex.example_id
          for ex in squad_files.read_squad_file(path, check_alignment=False)]


def _tatoeba_lines(xtreme_dir: str, split: str, lang: str, path: str) -> int:
  """The number of English lines (one retrieved source line each)."""
  del split, path
  source, english, _ = tatoeba_files(xtreme_dir, lang)
  return len(xtreme_readers.read_parallel_lines(source, english))


def _bucc_ids(xtreme_dir: str, split: str, lang: str,
              path: str) -> Tuple[set, set]:
  """(source ids, English ids) the mined pairs may name."""
  del path
  files = xtreme_readers.bucc_files(xtreme_dir, lang, split)
  return tuple({i for i, _ in xtreme_readers.read_bucc_sentences(
      files[side])} for side in ("source", "target"))


# --------------------------------------------------------------------------
# Checks: each raises a UserError that starts with `where`
# --------------------------------------------------------------------------

def _check_count(where: str, predictions: Sequence[Any],
                 expected: int) -> None:
  if len(predictions) != expected:
    raise errors.UserError(f"{where}: {len(predictions)} predictions for "
                           f"{expected} examples")


def _check_words(where: str, predictions: Sequence[Sequence[str]],
                 expected: Sequence[int]) -> None:
  if len(predictions) != len(expected):
    raise errors.UserError(f"{where}: {len(predictions)} predicted "
                           f"sentences for {len(expected)} sentences")
  for i, (tags, n) in enumerate(zip(predictions, expected)):
    if len(tags) != n:
      raise errors.UserError(f"{where}: sentence {i + 1} has {n} words "
                             f"but {len(tags)} predicted tags")


def _check_questions(where: str, predictions: Mapping[str, str],
                     expected: Sequence[str]) -> None:
  missing = [i for i in expected if i not in predictions]
  extra = sorted(set(predictions) - set(expected))
  if missing or extra:
    raise errors.UserError(
        f"{where}: {len(missing)} of {len(expected)} questions have no "
        f"answer (first: {missing[:1]}), {len(extra)} answers name no "
        f"question of the file (first: {extra[:1]})")


def _check_corpus_ids(where: str, predictions: Sequence[Tuple[str, str]],
                      expected: Tuple[set, set]) -> None:
  sources, english = expected
  bad = [p for p in predictions
         if p[0] not in sources or p[1] not in english]
  if bad:
    raise errors.UserError(f"{where}: {len(bad)} mined pairs name ids "
                           f"not in the corpus (first: {bad[0]})")


# --------------------------------------------------------------------------
# Writers: the text `evaluate.py`'s reader of the task reads back
# --------------------------------------------------------------------------

def _render_lines(predictions: Sequence[Any]) -> str:
  return "".join(f"{p}\n" for p in predictions)


def _render_sentences(predictions: Sequence[Sequence[str]]) -> str:
  # `read_tag` ends a sentence at each blank line; two in a row would be an
  # empty sentence.
  return "".join("\n".join(tags) + "\n\n" for tags in predictions)


def _render_json(predictions: Mapping[str, str]) -> str:
  return json.dumps(dict(predictions), ensure_ascii=False, indent=1) + "\n"


def _render_id_pairs(predictions: Sequence[Tuple[str, str]]) -> str:
  return "".join(f"{s}\t{t}\n" for s, t in predictions)


# --------------------------------------------------------------------------
# Languages of a complete folder
# --------------------------------------------------------------------------

def _task_languages(task: str, split: str) -> List[str]:
  del split
  return list(xtreme_local.family_languages(task))


def _udpos_languages(split: str) -> List[str]:
  """UD-POS on dev: not kk, th, tl, yo, which have no dev set."""
  langs = _task_languages("udpos", split)
  if split == "dev":
    langs = [l for l in langs if "validation" in udpos.local_eval_splits(l)]
  return langs


# --------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------

def _pair(task: str, label_ids: Mapping[str, int], labels: Sequence[str],
          label_names: Sequence[str]) -> Family:
  return Family(
      task, "pair", "tsv", functools.partial(_tsv_file, task),
      functools.partial(_pair_rows, label_ids), _check_count, _render_lines,
      functools.partial(_task_languages, task), labels=tuple(labels),
      label_names=tuple(label_names))


def _tagging(task: str, label_names: Sequence[str],
             languages: Callable[[str], List[str]]) -> Family:
  return Family(
      task, "tagging", "tsv", functools.partial(_tsv_file, task),
      functools.partial(_words_per_sentence, label_names), _check_words,
      _render_sentences, languages, label_names=tuple(label_names))


def _qa(task: str, file_key: str, fixed_split: Optional[str]) -> Family:
  return Family(
      task, "qa", "json", functools.partial(_qa_file, file_key),
      _question_ids, _check_questions, _render_json,
      functools.partial(_task_languages, task), fixed_split=fixed_split)


# XQuAD has one file (its test set); TyDiQA-GoldP's XTREME test set is TyDi's
# dev set, so both splits predict it; Tatoeba has only its test set.
_TABLE = (
    _pair("xnli", xtreme_readers.XNLI_LABEL_IDS, xtreme_readers.XNLI_LABELS,
          xnli.LABELS),
    # PAWS-X files spell the classes "0" / "1".
    _pair("pawsx", xtreme_readers.PAWSX_LABEL_IDS,
          sorted(xtreme_readers.PAWSX_LABEL_IDS,
                 key=xtreme_readers.PAWSX_LABEL_IDS.get), pawsx.LABELS),
    _tagging("panx", panx.LABELS, functools.partial(_task_languages, "panx")),
    _tagging("udpos", udpos.LABELS, _udpos_languages),
    _qa("xquad", "xquad_test", "test"),
    _qa("mlqa", "mlqa_{split}", None),
    _qa("tydiqa", "tydiqa_dev", "validation"),
    Family("bucc2018", "retrieval", "tsv", _bucc_source, _bucc_ids,
           _check_corpus_ids, _render_id_pairs,
           lambda _: list(retrieval.BUCC_LANGUAGES),
           extra_inputs=_bucc_inputs),
    Family("tatoeba", "retrieval", "tsv", _tatoeba_english, _tatoeba_lines,
           _check_count, _render_lines,
           lambda _: list(retrieval.TATOEBA_LANGUAGES),
           fixed_split="test"),
)
FAMILIES: Dict[str, Family] = {f.task: f for f in _TABLE}
TASKS = tuple(FAMILIES)
PAIR_TASKS, TAG_TASKS, QA_TASKS, RETRIEVAL_TASKS = (
    tuple(t for t, f in FAMILIES.items() if f.kind == kind)
    for kind in ("pair", "tagging", "qa", "retrieval"))


def family(task: str) -> Family:
  """The row of `task`; raises ValueError for a task not in the table."""
  if task not in FAMILIES:
    raise ValueError(f"unknown XTREME task {task!r}")
  return FAMILIES[task]


def check_split(split: str) -> None:
  """Raises a UserError unless `split` is one of `SPLITS`."""
  if split not in SPLITS:
    raise errors.UserError(f"submission split {split!r}: expected one of "
                           f"{list(SPLITS)}")


# --------------------------------------------------------------------------
# Per (task, language): the questions the table answers
# --------------------------------------------------------------------------

def file_name(task: str, lang: str) -> str:
  """`<task>/test-<lang>.<suffix>`, as `evaluate.py` opens it."""
  return f"{task}/test-{lang}.{family(task).suffix}"


def seqio_split(task: str, split: str) -> str:
  """The split of our local tasks that reads the file `split` predicts."""
  check_split(split)
  return family(task).fixed_split or ("test" if split == "test"
                                      else "validation")


def input_file(xtreme_dir: str, task: str, split: str, lang: str) -> str:
  """The XTREME file whose examples a prediction file follows, line by line.

  BUCC: the source-language sentences; Tatoeba: the English side (XTREME's
  sorted `{lang}-en.en`, else the LASER file `tatoeba.{xxx}-eng.eng`).
  """
  check_split(split)
  return family(task).input_file(xtreme_dir, split, lang)


def checked_file(xtreme_dir: str, task: str, split: str, lang: str,
                 predict: Callable[[str], Any],
                 source: Optional[str] = None) -> str:
  """The checked file text of (task, language): `predict(XTREME's file)`.

  XTREME's file is read first (pairs: its rows; tags: words per sentence;
  QA: question ids; Tatoeba: English lines; BUCC: the ids pairs may name),
  so a missing or bad one fails before anything is predicted; an error
  names `source`, what the predictions were read from, if given.

  Raises:
    errors.UserError: the XTREME file is missing or unreadable, or the
      predictions do not match it.
  """
  path = input_file(xtreme_dir, task, split, lang)
  if not os.path.isfile(path):
    raise errors.UserError(f"{task} {lang}: {path}: no such file (the "
                           f"{split} file the predictions follow)")
  try:
    expected = family(task).expected(xtreme_dir, split, lang, path)
  except ValueError as e:
    raise errors.UserError(f"{task} {lang}: {e}") from e
  predictions = predict(path)
  check_predictions(task, lang, predictions, expected,
                    f"{source} vs {path}" if source else path)
  return render(task, predictions)


def check_predictions(task: str, lang: str, predictions: Any,
                      expected: Any, path: str) -> None:
  """Raises a UserError naming task, language and file unless the
  predictions match `expected` (what `checked_file` reads)."""
  family(task).check(f"{task} {lang} ({path})", predictions, expected)


def render(task: str, predictions: Any) -> str:
  """The file text `evaluate.py`'s reader for `task` reads back."""
  return family(task).render(predictions)


def required_languages(task: str, split: str,
                       languages: Optional[Sequence[str]] = None
                       ) -> List[str]:
  """The languages a complete folder holds for `task` (with `languages`,
  those of them; UD-POS on dev: not kk, th, tl, yo, which have no dev set)."""
  return [l for l in family(task).languages(split)
          if languages is None or l in languages]
