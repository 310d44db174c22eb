"""Evaluation metrics of the XTREME tasks RemBERT reports.

Each metric reproduces an official definition to the last digit (entity F1
is seqeval's own code; the rest is written here):

- accuracy (XNLI, PAWS-X, UD-POS tokens);
- entity-level F1 of `seqeval` in its default (conlleval-like, IOB2) mode,
  also applied to plain UD-POS tags as XTREME does (`pos_metric`);
- SQuAD v1.1 exact match / F1 (`evaluate-v1.1.py`), used for XQuAD and
  TyDiQA-GoldP;
- MLQA exact match / F1 (`mlqa_evaluation_v1.py`), whose normalisation depends
  on the answer language.

Scores that XTREME reports in percent (QA EM/F1, seqio metric dicts) are
multiplied by 100; the plain helpers (`accuracy`, `entity_f1`) return
fractions like `sklearn`/`seqeval` do.
"""

import collections
import contextlib
import json
import re
from seqeval import metrics as seqeval_metrics
from seqeval.metrics import sequence_labeling as seqeval_labeling
import string
import unicodedata
import warnings
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple, Union)

import numpy as np

# ---------------------------------------------------------------------------
# Classification and tagging.
# ---------------------------------------------------------------------------


def accuracy(targets: Sequence[Any], predictions: Sequence[Any]) -> float:
  """Fraction of positions where prediction equals target.

  Args:
    targets: gold labels.
    predictions: predicted labels, same length.

  Returns:
    The accuracy in [0, 1].
  """
  if len(targets) != len(predictions):
    raise ValueError(
        f"accuracy: {len(targets)} targets but {len(predictions)} "
        "predictions.")
  if not targets:
    raise ValueError("accuracy: no examples to score.")
  correct = sum(1 for t, p in zip(targets, predictions) if t == p)
  return correct / len(targets)


def extract_entities(labels: Sequence[str]) -> List[Tuple[str, int, int]]:
  """Lists the entities of one label sequence, by seqeval's default mode.

  Args:
    labels: IOB2 labels, e.g. ["B-PER", "I-PER", "O", "I-LOC"].

  Returns:
    (type, first index, last index) per entity, e.g.
    [("PER", 0, 1), ("LOC", 3, 3)] (an I- without a B- opens an entity, as
    in conlleval).
  """
  with _plain_tags_accepted():
    return seqeval_labeling.get_entities(list(labels))


@contextlib.contextmanager
def _plain_tags_accepted():
  """Silences seqeval's "X seems not to be NE tag" warning.

  seqeval is imported where it is used, not with this module: it brings
  scikit-learn (1.6 s of the 2.6 s this module took to import), which the
  QA scorer (`rembert-evaluate-qa`) never needs.

  XTREME scores UD-POS by handing plain UPOS tags ("NOUN") to seqeval
  (`pos_metric`); the warning would fire for every such tag.
  """
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".* seems not to be NE tag")
    yield


def entity_f1(targets: Sequence[Sequence[str]],
              predictions: Sequence[Sequence[str]]) -> float:
  """Micro-averaged entity-level F1, equal to `seqeval.metrics.f1_score`.

  Sentences are joined with an "O" between them (as seqeval does), so an
  entity never spans two sentences. With no gold and no predicted entity the
  score is 0, seqeval's default `zero_division`.

  Args:
    targets: per sentence, the gold IOB2 labels.
    predictions: per sentence, the predicted labels (same lengths).

  Returns:
    F1 in [0, 1].
  """
  if len(targets) != len(predictions):
    raise ValueError(
        f"entity_f1: {len(targets)} target sentences but "
        f"{len(predictions)} predicted sentences.")
  for i, (gold, pred) in enumerate(zip(targets, predictions)):
    if len(gold) != len(pred):
      raise ValueError(
          f"entity_f1: sentence {i} has {len(gold)} gold labels but "
          f"{len(pred)} predicted labels.")
  with _plain_tags_accepted():
    return float(seqeval_metrics.f1_score(
        [list(t) for t in targets], [list(p) for p in predictions],
        zero_division=0))


def entity_counts(targets: Sequence[Sequence[str]],
                  predictions: Sequence[Sequence[str]]
                  ) -> List[Tuple[int, int, int]]:
  """(true positive, predicted, gold) entity counts of every sentence.

  `entity_f1` is 2 * sum(tp) / (sum(predicted) + sum(gold)) over these (an
  entity never spans two sentences), which lets bootstrap standard errors
  (`rembert_t5x.scoring.seed_statistics`) resample sentences without re-extracting.
  """
  if len(targets) != len(predictions):
    raise ValueError(
        f"entity_counts: {len(targets)} target sentences but "
        f"{len(predictions)} predicted sentences.")
  counts = []
  for gold, pred in zip(targets, predictions):
    gold_entities = set(extract_entities(gold))
    pred_entities = set(extract_entities(pred))
    counts.append((len(gold_entities & pred_entities), len(pred_entities),
                   len(gold_entities)))
  return counts


# ---------------------------------------------------------------------------
# SQuAD v1.1.
# ---------------------------------------------------------------------------

_ASCII_PUNCTUATION = frozenset(string.punctuation)
_ENGLISH_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def squad_normalize(text: str) -> str:
  """SQuAD v1.1 answer normalisation.

  Lower-cases, deletes ASCII punctuation, replaces the English articles
  a/an/the (whole words) by spaces, and collapses whitespace.

  Args:
    text: an answer string.

  Returns:
    The normalised string, e.g. "The  Panthers'!" -> "panthers".
  """
  text = text.lower()
  text = "".join(c for c in text if c not in _ASCII_PUNCTUATION)
  text = _ENGLISH_ARTICLES.sub(" ", text)
  return " ".join(text.split())


def _token_f1(prediction_tokens: List[str], gold_tokens: List[str]) -> float:
  """Bag-of-tokens F1 as both official scripts define it."""
  overlap = collections.Counter(prediction_tokens) & collections.Counter(
      gold_tokens)
  num_same = sum(overlap.values())
  # Two empty strings give 0 F1 (but exact match 1), as in the scripts.
  if num_same == 0:
    return 0.0
  precision = 1.0 * num_same / len(prediction_tokens)
  recall = 1.0 * num_same / len(gold_tokens)
  return (2 * precision * recall) / (precision + recall)


def squad_exact_match(prediction: str, gold: str) -> bool:
  """Whether the normalised strings are equal."""
  return squad_normalize(prediction) == squad_normalize(gold)


def squad_f1(prediction: str, gold: str) -> float:
  """Token F1 between the normalised, whitespace-split strings."""
  return _token_f1(squad_normalize(prediction).split(),
                   squad_normalize(gold).split())


# ---------------------------------------------------------------------------
# MLQA.
# ---------------------------------------------------------------------------

def _is_mlqa_punctuation(char: str) -> bool:
  """Every Unicode punctuation character (categories Pc Pd Pe Pf Pi Po Ps)
  plus ASCII punctuation, which includes symbols such as "$" and "+"
  (category S). Asked per character: building the set of all such code
  points took ~1 s at import, in every process that imports this module."""
  return char in _ASCII_PUNCTUATION or unicodedata.category(char)[0] == "P"

_MLQA_ARTICLES = {
    "en": re.compile(r"\b(?:a|an|the)\b"),
    "es": re.compile(r"\b(?:un|una|unos|unas|el|la|los|las)\b"),
    "vi": re.compile(r"\b(?:của|là|cái|chiếc|những)\b"),
    "de": re.compile(
        r"\b(?:ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b"),
}
# The official Arabic rule removes the definite article "ال" wherever it
# occurs, also inside words (its other alternative can never match).
_ARABIC_ARTICLE = "\u0627\u0644"

MLQA_LANGUAGES = ("ar", "de", "en", "es", "hi", "vi", "zh")
_WHITESPACE_LANGUAGES = frozenset(("ar", "de", "en", "es", "hi", "vi"))
# The official script treats exactly U+4E00..U+9FA5 as Chinese characters.
_CJK = re.compile("[\u4e00-\u9fa5]")


def _check_mlqa_language(lang: str) -> None:
  if lang not in MLQA_LANGUAGES:
    raise ValueError(
        f"Unknown MLQA language {lang!r}; MLQA normalisation is defined for "
        f"{', '.join(MLQA_LANGUAGES)}.")


def _mixed_segmentation(text: str) -> List[str]:
  """Splits Chinese characters (and punctuation) into one token each.

  Runs of other characters are whitespace-split, so "2008年北京 olympics"
  -> ["2008", "年", "北", "京", "olympics"].
  """
  tokens, pending = [], ""
  for char in text:
    if _CJK.search(char) or _is_mlqa_punctuation(char):
      tokens.extend(pending.split())
      pending = ""
      tokens.append(char)
    else:
      pending += char
  tokens.extend(pending.split())
  return tokens


def mlqa_normalize(text: str, lang: str) -> str:
  """MLQA answer normalisation for answer language `lang`.

  Lower-cases, deletes Unicode and ASCII punctuation, removes the language's
  articles (en, es, de, vi word lists; Arabic "ال" anywhere; none for hi, zh),
  then tokenises (whitespace, or per Chinese character for zh) and joins with
  single spaces.

  Args:
    text: an answer string.
    lang: one of `MLQA_LANGUAGES`.

  Returns:
    The normalised string, e.g. ("Der Bundestag.", "de") -> "bundestag".
  """
  _check_mlqa_language(lang)
  text = text.lower()
  text = "".join(c for c in text if not _is_mlqa_punctuation(c))
  if lang in _MLQA_ARTICLES:
    text = _MLQA_ARTICLES[lang].sub(" ", text)
  elif lang == "ar":
    text = text.replace(_ARABIC_ARTICLE, " ")
  if lang in _WHITESPACE_LANGUAGES:
    tokens = text.split()
  else:
    tokens = _mixed_segmentation(text)
  return " ".join(t for t in tokens if t.strip())


def mlqa_exact_match(prediction: str, gold: str, lang: str) -> bool:
  """Whether the MLQA-normalised strings are equal."""
  return mlqa_normalize(prediction, lang) == mlqa_normalize(gold, lang)


def mlqa_f1(prediction: str, gold: str, lang: str) -> float:
  """Token F1 between the MLQA-normalised strings."""
  return _token_f1(mlqa_normalize(prediction, lang).split(),
                   mlqa_normalize(gold, lang).split())


# ---------------------------------------------------------------------------
# Corpus-level QA scores.
# ---------------------------------------------------------------------------

NORMALIZATIONS = ("squad", "mlqa")


def _pair_scorers(
    normalization: str, lang: Optional[str]
) -> Tuple[Callable[[str, str], float], Callable[[str, str], float]]:
  """Returns (exact_match, f1) functions of (prediction, gold)."""
  if normalization == "squad":
    return squad_exact_match, squad_f1
  if normalization == "mlqa":
    if lang is None:
      raise ValueError("MLQA normalisation needs the answer language.")
    _check_mlqa_language(lang)
    return (lambda p, g: mlqa_exact_match(p, g, lang),
            lambda p, g: mlqa_f1(p, g, lang))
  raise ValueError(
      f"Unknown normalization {normalization!r}; expected one of "
      f"{', '.join(NORMALIZATIONS)}.")


def qa_scores(gold_answers: Union[Mapping[str, Sequence[str]],
                                  Iterable[Tuple[str, Sequence[str]]]],
              predictions: Mapping[str, str],
              normalization: str = "squad",
              lang: Optional[str] = None,
              on_missing: Optional[Callable[[str], None]] = None
              ) -> Dict[str, float]:
  """Corpus EM/F1 in percent, as the official evaluate scripts compute them.

  Each question scores the maximum over its gold answers; a question without
  a prediction scores 0 (and is reported through `on_missing`).

  Args:
    gold_answers: question id -> its gold answer texts (at least one), or
      (id, answers) pairs; as in the official scripts every pair counts once,
      even when a file repeats an id.
    predictions: question id -> predicted answer text.
    normalization: "squad" (XQuAD, TyDiQA, SQuAD) or "mlqa".
    lang: answer language, required for "mlqa".
    on_missing: called with the id of every unanswered question.

  Returns:
    {"exact_match": float, "f1": float}, both ×100.
  """
  per_question = qa_question_scores(gold_answers, predictions, normalization,
                                    lang, on_missing)
  exact_total = f1_total = 0.0
  for exact, f1 in per_question:
    exact_total += exact
    f1_total += f1
  count = len(per_question)
  return {"exact_match": 100.0 * exact_total / count,
          "f1": 100.0 * f1_total / count}


def qa_question_scores(gold_answers: Union[Mapping[str, Sequence[str]],
                                           Iterable[Tuple[str, Sequence[str]]]],
                       predictions: Mapping[str, str],
                       normalization: str = "squad",
                       lang: Optional[str] = None,
                       on_missing: Optional[Callable[[str], None]] = None
                       ) -> List[Tuple[float, float]]:
  """(exact match, F1) in [0, 1] of every question, in `gold_answers` order.

  The per-question terms `qa_scores` averages (arguments as there); a
  question without a prediction scores (0, 0). Bootstrap standard errors
  (`rembert_t5x.scoring.seed_statistics`) resample these.
  """
  exact_fn, f1_fn = _pair_scorers(normalization, lang)
  if isinstance(gold_answers, Mapping):
    gold_answers = gold_answers.items()
  gold_answers = list(gold_answers)
  if not gold_answers:
    raise ValueError("qa_scores: no questions to score.")
  scores = []
  for question_id, golds in gold_answers:
    if not golds:
      raise ValueError(
          f"qa_scores: question {question_id!r} has no gold answer (test "
          "files from the XTREME download have their answers stripped).")
    if question_id not in predictions:
      if on_missing is not None:
        on_missing(question_id)
      scores.append((0.0, 0.0))
      continue
    prediction = predictions[question_id]
    scores.append((float(max(exact_fn(prediction, g) for g in golds)),
                   float(max(f1_fn(prediction, g) for g in golds))))
  return scores


def xtreme_qa_score(scores: Mapping[str, float]) -> float:
  """XTREME's single number for a QA task: (EM + F1) / 2."""
  return (scores["exact_match"] + scores["f1"]) / 2


def language_table(
    scores_by_lang: Mapping[str, Mapping[str, float]]
) -> Dict[str, Dict[str, float]]:
  """Adds an "avg" row (mean over languages of every metric) to a table.

  Args:
    scores_by_lang: language -> {metric name: value}; every language needs
      the same metric names.

  Returns:
    A copy with the same rows plus "avg"; QA rows (with "exact_match" and
    "f1") also get "xtreme" = (EM + F1) / 2.
  """
  if not scores_by_lang:
    raise ValueError("language_table: no languages given.")
  rows = {lang: dict(row) for lang, row in scores_by_lang.items()}
  names = set(next(iter(rows.values())))
  for lang, row in rows.items():
    if set(row) != names:
      raise ValueError(
          f"language_table: language {lang!r} has metrics {sorted(row)}, "
          f"expected {sorted(names)}.")
    if {"exact_match", "f1"} <= names:
      row["xtreme"] = xtreme_qa_score(row)
  metric_names = list(next(iter(rows.values())))
  rows["avg"] = {
      name: float(np.mean([row[name] for row in rows.values()]))
      for name in metric_names
  }
  return rows


def format_language_table(table: Mapping[str, Mapping[str, float]]) -> str:
  """Renders `language_table` output as aligned text, one language a line."""
  names = list(next(iter(table.values())))
  lines = ["lang  " + "  ".join(f"{n:>11}" for n in names)]
  for lang, row in table.items():
    lines.append(f"{lang:<5} " + "  ".join(f"{row[n]:11.2f}" for n in names))
  return "\n".join(lines)


# ---------------------------------------------------------------------------
# seqio metric functions: fn(targets, predictions) -> {name: value}.
# ---------------------------------------------------------------------------


def accuracy_metric(targets: Sequence[Any],
                    predictions: Sequence[Any]) -> Dict[str, float]:
  """seqio metric: {"accuracy": percent}."""
  return {"accuracy": 100.0 * accuracy(list(targets), list(predictions))}


def entity_f1_metric(targets: Sequence[Sequence[str]],
                     predictions: Sequence[Sequence[str]]
                     ) -> Dict[str, float]:
  """seqio metric: {"f1": percent} entity-level F1 over label sequences."""
  return {"f1": 100.0 * entity_f1(targets, predictions)}


def pos_metric(targets: Sequence[Sequence[str]],
               predictions: Sequence[Sequence[Optional[str]]]
               ) -> Dict[str, float]:
  """seqio metric for UD-POS: {"f1": percent, "accuracy": percent}.

  "f1" is the number XTREME reports: its `evaluate.py` (and `run_tag.py` on
  dev) hands the plain UPOS tag sequences to `seqeval.metrics.f1_score`.
  seqeval reads a tag's first letter as a chunk prefix and the rest as the
  type ("NOUN" -> prefix "N", type "OUN"), so this is not a per-word score:
  a run of equal tags is one chunk ("NOUN NOUN" must be predicted whole),
  tags starting with S (SCONJ, SYM) close a chunk after every word, CCONJ
  and SCONJ share the type "CONJ", and X gets type "_". `entity_f1`
  reproduces seqeval 1.2.2's default mode, so the number is seqeval's.
  (seqeval < 1.0, current when XTREME was released, took the whole tag as
  the type, which differs only in keeping CCONJ and SCONJ apart.)

  "accuracy" is the share of words tagged right.

  A None prediction (a word cut by truncation) scores as "O": no chunk, and
  a wrong word.
  """
  predictions = [["O" if p is None else p for p in sentence]
                 for sentence in predictions]
  flat_targets = [t for sentence in targets for t in sentence]
  flat_predictions = [p for sentence in predictions for p in sentence]
  return {"f1": 100.0 * entity_f1(targets, predictions),
          "accuracy": 100.0 * accuracy(flat_targets, flat_predictions)}


def _as_str(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def qa_metric(targets: Sequence[Mapping[str, Any]],
              predictions: Sequence[Mapping[str, Any]],
              normalization: str = "squad",
              lang: Optional[str] = None) -> Dict[str, float]:
  """seqio metric over QA *windows*, aggregated per question.

  The QA task yields one dataset example per context window; its
  postprocessor (`rembert_t5x.data.qa.postprocess_window`) turns each window's
  target into {"example_id", "answers"} and each prediction into
  {"example_id", "score", "text"}. Here the highest-scoring window answer of
  each question is scored against its gold answers.

  Args:
    targets: per window, {"example_id": id, "answers": [gold texts]}.
    predictions: per window, {"example_id": id, "score": float or None,
      "text": str} (score None: no valid span in that window).
    normalization: "squad" or "mlqa".
    lang: answer language for "mlqa".

  Returns:
    {"exact_match", "f1", "xtreme"} in percent.
  """
  gold, answers = best_window_answers(targets, predictions)
  scores = qa_scores(gold, answers, normalization, lang)
  scores["xtreme"] = xtreme_qa_score(scores)
  return scores


def best_window_answers(targets: Sequence[Mapping[str, Any]],
                        predictions: Sequence[Mapping[str, Any]]
                        ) -> Tuple[Dict[str, List[str]], Dict[str, str]]:
  """({question id: gold texts}, {question id: answer}) from QA windows.

  Each question's answer is the text of its highest-scoring window (see
  `qa_metric` for the window dicts); a question none of whose windows has a
  valid span answers "".
  """
  if len(targets) != len(predictions):
    raise ValueError(
        f"qa_metric: {len(targets)} targets but {len(predictions)} "
        "predictions.")
  gold: Dict[str, List[str]] = {}
  best: Dict[str, Tuple[float, str]] = {}
  for target, prediction in zip(targets, predictions):
    question_id = _as_str(target["example_id"])
    if _as_str(prediction["example_id"]) != question_id:
      raise ValueError(
          f"qa_metric: target of question {question_id!r} is paired with a "
          f"prediction for {_as_str(prediction['example_id'])!r}.")
    gold[question_id] = [_as_str(a) for a in target["answers"]]
    score = prediction["score"]
    if score is None:
      best.setdefault(question_id, (-np.inf, ""))
    elif question_id not in best or score > best[question_id][0]:
      best[question_id] = (float(score), _as_str(prediction["text"]))
  answers = {question_id: text for question_id, (_, text) in best.items()}
  return gold, answers


def squad_metric(targets, predictions) -> Dict[str, float]:
  """seqio metric for XQuAD / TyDiQA / SQuAD windows (SQuAD v1.1 rules)."""
  return qa_metric(targets, predictions, "squad")


def mlqa_metric_for(lang: str) -> Callable[..., Dict[str, float]]:
  """Returns the seqio metric for MLQA windows with answer language `lang`."""
  _check_mlqa_language(lang)

  def mlqa_metric(targets, predictions) -> Dict[str, float]:
    return qa_metric(targets, predictions, "mlqa", lang)

  mlqa_metric.__name__ = f"mlqa_metric_{lang}"
  return mlqa_metric


def squad_json_answers(dataset: Iterable[Mapping[str, Any]]
                       ) -> List[Tuple[str, List[str]]]:
  """(question id, gold answer texts) per question of a SQuAD `data` list.

  Raises:
    ValueError: naming the article/paragraph/question and field that does not
      have the SQuAD structure.
  """
  gold: List[Tuple[str, List[str]]] = []
  for a, article in enumerate(dataset):
    where = f"data[{a}]"
    if not isinstance(article, dict) or not isinstance(
        article.get("paragraphs"), list):
      raise ValueError(f"{where}: expected an object with a 'paragraphs' "
                       "list.")
    for p, paragraph in enumerate(article["paragraphs"]):
      where_p = f"{where}.paragraphs[{p}]"
      if not isinstance(paragraph, dict) or not isinstance(
          paragraph.get("qas"), list):
        raise ValueError(f"{where_p}: expected an object with a 'qas' list.")
      for q, qa in enumerate(paragraph["qas"]):
        where_q = f"{where_p}.qas[{q}]"
        if not isinstance(qa, dict) or not isinstance(qa.get("id"), str):
          raise ValueError(f"{where_q}.id: expected a string question id.")
        answers = qa.get("answers")
        if not isinstance(answers, list) or not all(
            isinstance(x, dict) and isinstance(x.get("text"), str)
            for x in answers):
          raise ValueError(
              f"{where_q}.answers (id {qa['id']!r}): expected a list of "
              "objects with a string 'text'.")
        gold.append((qa["id"], [x["text"] for x in answers]))
  return gold


def _load_json(path: str, what: str) -> Any:
  """Loads a JSON file, raising ValueError that names it on any failure."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: {what} is not valid JSON ({e}).") from e
  except (OSError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: cannot read {what} ({e}).") from e


def evaluate_prediction_file(dataset_file: str,
                             prediction_file: str,
                             normalization: str = "squad",
                             lang: Optional[str] = None,
                             on_missing: Optional[Callable[[str], None]] = None
                             ) -> Dict[str, float]:
  """Scores a `{id: answer}` predictions file like the official scripts.

  Args:
    dataset_file: SQuAD-format JSON with gold answers.
    prediction_file: JSON object mapping question id -> answer text.
    normalization: "squad" or "mlqa".
    lang: answer language (required for "mlqa").
    on_missing: called with the id of every unanswered question.

  Returns:
    {"exact_match": float, "f1": float} in percent.

  Raises:
    ValueError: naming the file and field of malformed input.
  """
  _pair_scorers(normalization, lang)  # fail on bad options before reading
  dataset = _load_json(dataset_file, "the dataset file")
  if not isinstance(dataset, dict) or not isinstance(dataset.get("data"),
                                                     list):
    raise ValueError(f"{dataset_file}: data: expected a top-level object "
                     "with a 'data' list (SQuAD format).")
  try:
    gold = squad_json_answers(dataset["data"])
  except ValueError as e:
    raise ValueError(f"{dataset_file}: {e}") from e
  predictions = _load_json(prediction_file, "the prediction file")
  if not isinstance(predictions, dict):
    raise ValueError(f"{prediction_file}: expected a JSON object mapping "
                     "question id -> answer text.")
  for question_id, answer in predictions.items():
    if not isinstance(answer, str):
      raise ValueError(f"{prediction_file}: prediction for id "
                       f"{question_id!r} is {type(answer).__name__}, expected "
                       "a string.")
  for question_id, answers in gold:
    if not answers:
      raise ValueError(f"{dataset_file}: question {question_id!r} has no "
                       "gold answer (XTREME strips test answers).")
  gold_ids = {question_id for question_id, _ in gold}
  if predictions and not gold_ids & set(predictions):
    # Every question would score 0: almost surely the predictions of
    # another dataset (or language), not a model that answered nothing.
    raise ValueError(
        f"{prediction_file}: none of its {len(predictions)} question ids "
        f"(e.g. {next(iter(predictions))!r}) is in {dataset_file}; wrong "
        "prediction file?")
  return qa_scores(gold, predictions, normalization, lang, on_missing)
