"""Tests for rembert_t5x.scoring.metrics: hand-computed cases for each official rule."""

import random
import warnings

import pytest
from seqeval.metrics import f1_score as seqeval_f1
from seqeval.metrics.sequence_labeling import get_entities

from rembert_t5x.scoring import metrics

# ---------------------------------------------------------------------------
# Accuracy and seqeval entity F1.
# ---------------------------------------------------------------------------


def test_accuracy():
  assert metrics.accuracy([1, 2, 3, 4], [1, 0, 3, 0]) == 0.5
  assert metrics.accuracy_metric(["a", "b"], ["a", "b"]) == {"accuracy": 100.0}
  with pytest.raises(ValueError, match="2 targets but 1 predictions"):
    metrics.accuracy([1, 2], [1])


TRICKY_TAGGINGS = [
    # I- without B- opens an entity.
    ([["I-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]]),
    # A type switch inside an I- run splits the entity.
    ([["B-PER", "I-LOC", "I-LOC"]], [["B-PER", "I-PER", "I-LOC"]]),
    # B- after B- of the same type: two entities.
    ([["B-ORG", "B-ORG", "O", "B-MISC"]], [["B-ORG", "I-ORG", "O", "B-MISC"]]),
    # Entities at sentence ends do not merge across sentences.
    ([["O", "B-LOC"], ["I-LOC", "O"]], [["O", "B-LOC"], ["B-LOC", "O"]]),
    # Nothing predicted.
    ([["B-PER", "O"]], [["O", "O"]]),
    # Nothing gold, something predicted.
    ([["O", "O"]], [["B-PER", "O"]]),
    # Neither: seqeval's zero_division gives 0.
    ([["O", "O"]], [["O", "O"]]),
]


@pytest.mark.parametrize("targets,predictions", TRICKY_TAGGINGS)
def test_entity_f1_matches_seqeval_on_tricky_cases(targets, predictions):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    expected = seqeval_f1(targets, predictions)
  assert metrics.entity_f1(targets, predictions) == expected


def test_entity_f1_hand_computed():
  # Gold: PER(0-1), LOC(3). Predicted: PER(0-1), LOC(2-3) -> 1 of 2 right.
  targets = [["B-PER", "I-PER", "O", "B-LOC"]]
  predictions = [["B-PER", "I-PER", "B-LOC", "I-LOC"]]
  assert metrics.entity_f1(targets, predictions) == pytest.approx(0.5)
  assert metrics.extract_entities(["I-PER", "I-LOC", "O", "B-X"]) == [
      ("PER", 0, 0), ("LOC", 1, 1), ("X", 3, 3)]
  assert metrics.entity_f1_metric(targets, predictions)["f1"] == (
      pytest.approx(50.0))


def test_entity_f1_matches_seqeval_on_random_sequences():
  rng = random.Random(0)
  labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"]
  for _ in range(300):
    targets, predictions = [], []
    for _ in range(rng.randint(1, 4)):
      n = rng.randint(1, 8)
      targets.append([rng.choice(labels) for _ in range(n)])
      predictions.append([rng.choice(labels) for _ in range(n)])
    flat = [x for s in targets for x in s + ["O"]]
    assert metrics.extract_entities(flat) == get_entities(flat)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      expected = seqeval_f1(targets, predictions)
    assert metrics.entity_f1(targets, predictions) == expected


UPOS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
        "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")


def test_pos_f1_is_seqeval_on_plain_upos_tags():
  # XTREME's evaluate.py calls seqeval's f1_score on the UPOS sequences.
  rng = random.Random(1)
  for _ in range(300):
    targets, predictions = [], []
    for _ in range(rng.randint(1, 4)):
      n = rng.randint(1, 10)
      # Few distinct tags, so runs of equal tags (merged chunks) occur.
      tags = rng.sample(UPOS, 4)
      targets.append([rng.choice(tags) for _ in range(n)])
      predictions.append([rng.choice(tags) for _ in range(n)])
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      expected = seqeval_f1(targets, predictions)
    assert metrics.pos_metric(targets, predictions)["f1"] == 100.0 * expected


def test_pos_f1_by_hand():
  # What seqeval does with plain tags (seqeval 1.2.2, installed):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    # a run of equal tags is one chunk; type = the tag minus its first letter
    assert get_entities(["NOUN", "NOUN", "VERB"]) == [("OUN", 0, 1),
                                                      ("ERB", 2, 2)]
    # S-initial tags are single-word chunks
    assert get_entities(["SYM", "SYM"]) == [("YM", 0, 0), ("YM", 1, 1)]
  # So one wrong word in a run of three NOUNs loses the whole run: the
  # gold has 1 chunk, the prediction 3 (NOUN, VERB, NOUN), none equal.
  scores = metrics.pos_metric([["NOUN", "NOUN", "NOUN"]],
                              [["NOUN", "VERB", "NOUN"]])
  assert scores["f1"] == 0.0
  assert scores["accuracy"] == pytest.approx(200 / 3)
  # CCONJ and SCONJ have the same seqeval type ("CONJ").
  assert metrics.pos_metric([["CCONJ"]], [["SCONJ"]]) == {
      "f1": 100.0, "accuracy": 0.0}
  # A word with no prediction (cut by truncation) is wrong in both.
  assert metrics.pos_metric([["DET", "NOUN"]], [["DET", None]]) == {
      "f1": pytest.approx(100 * 2 / 3), "accuracy": 50.0}


def test_entity_f1_rejects_length_mismatch():
  with pytest.raises(ValueError, match="sentence 0 has 2 gold labels"):
    metrics.entity_f1([["O", "O"]], [["O"]])


# ---------------------------------------------------------------------------
# SQuAD v1.1.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("The Panthers' defense!", "panthers defense"),
    ("An apple a  day", "apple day"),
    ("theory of Athena", "theory of athena"),  # articles only as words
    ("«Paris»", "«paris»"),  # non-ASCII punctuation is kept
    ("100 €", "100 €"),
    ("Éclair", "éclair"),  # accents are kept
    ("a-b", "ab"),  # punctuation is deleted, not replaced by a space
    ("the", ""),
])
def test_squad_normalize(text, expected):
  assert metrics.squad_normalize(text) == expected


def test_squad_pair_scores():
  # [cat, sat] vs [cat, sat, on, mat]: P=1, R=1/2, F1=2/3.
  assert metrics.squad_f1("the cat sat", "cat sat on the mat") == (
      pytest.approx(2 / 3))
  assert metrics.squad_exact_match("The Cat.", "cat")
  assert not metrics.squad_exact_match("cafe", "café")
  # Empty vs empty: exact match but F1 0, as in evaluate-v1.1.py.
  assert metrics.squad_exact_match("the", "a")
  assert metrics.squad_f1("the", "a") == 0
  # No whitespace in Chinese: one token each, no partial credit.
  assert metrics.squad_f1("北京", "北京市") == 0


def test_qa_scores_corpus_average_and_missing():
  gold = {"q1": ["Denver Broncos", "the Broncos"], "q2": ["1990"],
          "q3": ["Santa Clara"]}
  missing = []
  scores = metrics.qa_scores(gold, {"q1": "Broncos", "q2": "1990"},
                             on_missing=missing.append)
  # q1: EM 1 ("broncos" == "broncos"), F1 1; q2: 1, 1; q3 missing: 0, 0.
  assert scores == {"exact_match": pytest.approx(200 / 3),
                    "f1": pytest.approx(200 / 3)}
  assert missing == ["q3"]
  # Repeated ids count once per entry, as the official loop does.
  pairs = [("q", ["x b"]), ("q", ["c"])]
  scores = metrics.qa_scores(pairs, {"q": "b"})
  # Entry 1: F1 2*(1*0.5)/1.5 = 2/3; entry 2: 0.
  assert scores["f1"] == pytest.approx(100 * (2 / 3) / 2)


def test_qa_scores_errors():
  with pytest.raises(ValueError, match="no gold answer"):
    metrics.qa_scores({"q": []}, {"q": "x"})
  with pytest.raises(ValueError, match="Unknown normalization"):
    metrics.qa_scores({"q": ["x"]}, {"q": "x"}, normalization="bleu")
  with pytest.raises(ValueError, match="Unknown MLQA language 'fr'"):
    metrics.qa_scores({"q": ["x"]}, {"q": "x"}, normalization="mlqa",
                      lang="fr")


# ---------------------------------------------------------------------------
# MLQA.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("text,lang,expected", [
    ("The «Paris» Agreement!", "en", "paris agreement"),
    ("Der Bundestag.", "de", "bundestag"),
    ("Das Haus des Volkes", "de", "haus volkes"),
    ("¿La Casa Blanca?", "es", "casa blanca"),
    ("Unos días", "es", "días"),
    ("cái bàn của tôi", "vi", "bàn tôi"),
    ("الكتاب", "ar", "كتاب"),
    # The Arabic rule also fires inside words.
    ("جمالال", "ar", "جم"),
    ("the भारत।", "hi", "the भारत"),  # no Hindi articles; danda is P*
    ("2008年北京，奥运会", "zh", "2008 年 北 京 奥 运 会"),
    ("Café", "en", "café"),  # accents are kept
    # ASCII symbols (category S) are deleted too; other symbols are kept.
    ("$5 + 3 €", "en", "5 3 €"),
])
def test_mlqa_normalize(text, lang, expected):
  assert metrics.mlqa_normalize(text, lang) == expected


def test_mlqa_pair_scores():
  # zh: [北, 京] vs [北, 京, 市]: P=1, R=2/3, F1=0.8.
  assert metrics.mlqa_f1("北京", "北京市", "zh") == pytest.approx(0.8)
  assert metrics.mlqa_exact_match("Die Mauer", "Mauer", "de")
  assert not metrics.mlqa_exact_match("Die Mauer", "Mauer", "en")
  # Unicode punctuation matters for MLQA but not for SQuAD.
  assert metrics.mlqa_exact_match("«Paris»", "Paris", "en")
  assert not metrics.squad_exact_match("«Paris»", "Paris")
  with pytest.raises(ValueError, match="Unknown MLQA language"):
    metrics.mlqa_normalize("x", "ja")


# ---------------------------------------------------------------------------
# Tables and seqio metric functions.
# ---------------------------------------------------------------------------


def test_language_table():
  table = metrics.language_table({
      "en": {"exact_match": 80.0, "f1": 90.0},
      "de": {"exact_match": 60.0, "f1": 70.0},
  })
  assert table["en"]["xtreme"] == 85.0
  assert table["avg"] == {"exact_match": 70.0, "f1": 80.0, "xtreme": 75.0}
  text = metrics.format_language_table(table)
  assert text.splitlines()[-1].split() == ["avg", "70.00", "80.00", "75.00"]
  with pytest.raises(ValueError, match="language 'de' has metrics"):
    metrics.language_table({"en": {"f1": 1.0}, "de": {"acc": 1.0}})


def test_qa_metric_takes_best_window_per_question():
  targets = [
      {"example_id": b"q1", "answers": [b"Denver Broncos"]},
      {"example_id": b"q1", "answers": [b"Denver Broncos"]},
      {"example_id": b"q2", "answers": [b"\xe5\x8c\x97\xe4\xba\xac\xe5\xb8\x82"]},
  ]
  predictions = [
      {"example_id": b"q1", "score": 3.0, "text": "Carolina"},
      {"example_id": b"q1", "score": 5.0, "text": "Denver Broncos"},
      {"example_id": b"q2", "score": 1.0, "text": "北京"},
  ]
  squad = metrics.squad_metric(targets, predictions)
  assert squad["exact_match"] == pytest.approx(50.0)
  assert squad["f1"] == pytest.approx(50.0)
  assert squad["xtreme"] == pytest.approx(50.0)
  mlqa = metrics.mlqa_metric_for("zh")(targets, predictions)
  assert mlqa["f1"] == pytest.approx((100 + 80) / 2)
  # A window without a valid span does not beat one with a span.
  predictions[1]["score"] = None
  assert metrics.squad_metric(targets, predictions)["exact_match"] == 0.0
  with pytest.raises(ValueError, match="paired with a prediction for 'q2'"):
    metrics.squad_metric(targets[:1], predictions[2:])
