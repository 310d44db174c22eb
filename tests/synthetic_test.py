"""Tests for rembert_t5x.data.synthetic: formats, determinism, languages, labels."""

import collections
import filecmp
import json
import os
import unicodedata

import pytest

from rembert_t5x.data import squad_files
from rembert_t5x.data import synthetic
from rembert_t5x.data import synthetic_files
from rembert_t5x.data import text_sources
from rembert_t5x.data import xtreme_readers
from rembert_t5x.experiments import synthetic_baselines

ALL_CODES = [spec.code for spec in synthetic.LANGUAGES]
SIZES = dict(corpus_sentences=300, pair_train=200, tag_train=100,
             qa_train=100, eval_examples=40)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("synthetic"))
  synthetic_files.generate(root, seed=3, languages=ALL_CODES, **SIZES)
  return root


def _files(root):
  with open(os.path.join(root, "manifest.json"), encoding="utf-8") as f:
    return json.load(f)["files"]


def _lines(path):
  with open(path, encoding="utf-8") as f:
    return f.read().split("\n")


def test_generate_returns_and_writes_the_documented_layout(tmp_path):
  files = synthetic_files.generate(str(tmp_path), seed=0, num_languages=2, **SIZES)
  expected = {"corpus/qla.txt", "corpus/qcy.txt", "manifest.json"}
  for task, extension in (("pair", "tsv"), ("tag", "tsv"), ("qa", "json")):
    expected.add(f"{task}/train-qla.{extension}")
    for split in ("dev", "test"):
      expected |= {f"{task}/{split}-{c}.{extension}"
                   for c in ("qla", "qcy")}
  written = {os.path.relpath(os.path.join(d, n), tmp_path)
             for d, _, names in os.walk(tmp_path) for n in names}
  assert written == expected
  assert files["corpus"]["qcy"] == str(tmp_path / "corpus" / "qcy.txt")
  assert set(files["qa"]["train"]) == {"qla"}
  assert set(files["tag"]["dev"]) == {"qla", "qcy"}
  with open(tmp_path / "manifest.json", encoding="utf-8") as f:
    manifest = json.load(f)
  assert manifest["languages"] == ["qla", "qcy"]
  assert manifest["train_language"] == "qla"
  assert manifest["files"]["pair"]["dev"]["qcy"] == "pair/dev-qcy.tsv"
  assert len(_lines(files["corpus"]["qla"])) == SIZES["corpus_sentences"] + 1


def test_generate_is_deterministic(tmp_path):
  paths = []
  for name, seed in (("a", 7), ("b", 7), ("c", 8)):
    synthetic_files.generate(str(tmp_path / name), seed=seed, num_languages=2,
                       **SIZES)
    paths.append(tmp_path / name)
  for relative in ("corpus/qcy.txt", "pair/train-qla.tsv",
                   "tag/dev-qcy.tsv", "qa/test-qla.json", "manifest.json"):
    assert filecmp.cmp(paths[0] / relative, paths[1] / relative,
                       shallow=False), relative
  for relative in ("corpus/qcy.txt", "pair/train-qla.tsv",
                   "qa/test-qla.json"):
    assert not filecmp.cmp(paths[0] / relative, paths[2] / relative,
                           shallow=False), relative
  # Lexicons do not depend on the data seed.
  assert synthetic.lexicon("qgr") == synthetic.lexicon("qgr")


def test_unknown_or_missing_train_language_raises(tmp_path):
  with pytest.raises(ValueError, match="unknown"):
    synthetic_files.generate(str(tmp_path), languages=["qla", "xx"])
  with pytest.raises(ValueError, match="train_language"):
    synthetic_files.generate(str(tmp_path), languages=["qcy", "qgr"])


def test_pair_files_are_headerless_balanced_and_meaningful(workdir):
  files = _files(workdir)["pair"]
  paths = [files["train"]["qla"]] + [files[s][c] for s in ("dev", "test")
                                      for c in ALL_CODES]
  for relative in paths:
    path = os.path.join(workdir, relative)
    lines = _lines(path)
    assert lines[-1] == ""  # A final newline, no trailing blank record.
    rows = [line.split("\t") for line in lines[:-1]]
    assert all(len(row) == 3 for row in rows), relative
    labels = [row[2] for row in rows]
    assert set(labels) == {"0", "1"}, relative  # No header row.
    assert labels.count("1") == len(labels) // 2
    bag_differs = 0
    code = os.path.basename(relative).split("-")[1].split(".")[0]
    period = synthetic.LANGUAGE_BY_CODE[code].period
    for first, second, label in rows:
      same_bag = (sorted(first.rstrip(period).split()) ==
                  sorted(second.rstrip(period).split()))
      if label == "1":
        # A paraphrase only moves the place phrase.
        assert same_bag, (first, second)
      else:
        assert first != second
        bag_differs += not same_bag
    # Swapped subject/object pairs keep the words; the rest change one.
    assert bag_differs >= 0.7 * labels.count("0")
    read = xtreme_readers.read_pair_tsv(path, xtreme_readers.PAWSX_LABEL_IDS)
    assert [str(e["label"]) for e in read] == labels


def test_pair_eval_sets_are_parallel(workdir):
  files = _files(workdir)["pair"]
  labels = {}
  for code in ALL_CODES:
    rows = _lines(os.path.join(workdir, files["dev"][code]))[:-1]
    labels[code] = [row.split("\t")[2] for row in rows]
  assert all(labels[code] == labels["qla"] for code in ALL_CODES)


def _check_iob2(tags):
  previous = "O"
  for tag in tags:
    if tag.startswith("I-"):
      assert previous in ("B-" + tag[2:], tag), (previous, tag)
    previous = tag


def test_tag_files_are_conll_with_iob2(workdir):
  files = _files(workdir)["tag"]
  all_tags = collections.Counter()
  for split, by_code in files.items():
    for code, relative in by_code.items():
      path = os.path.join(workdir, relative)
      lines = _lines(path)
      assert lines[-2:] == ["", ""]  # Every sentence ends with a blank line.
      sentences, current = [], []
      for line in lines[:-1]:
        if not line:
          sentences.append(current)
          current = []
          continue
        token, tag = line.split("\t")
        assert token.startswith(code + ":") and len(token) > len(code) + 1
        assert not any(ch.isspace() for ch in token)
        assert tag in synthetic.TAGS
        current.append((token[len(code) + 1:], tag))
      assert all(sentences)
      expected = SIZES["tag_train"] if split == "train" else SIZES[
          "eval_examples"]
      assert len(sentences) == expected
      for sentence in sentences:
        _check_iob2([tag for _, tag in sentence])
        all_tags.update(tag for _, tag in sentence)
      read = xtreme_readers.read_conll_tags(path, synthetic.TAGS,
                                            strip_prefix=code + ":")
      assert [s["tokens"] for s in read] == [[t for t, _ in s]
                                             for s in sentences]
  assert set(all_tags) == set(synthetic.TAGS)  # Multi-word entities occur.


def test_qa_files_are_squad_with_exact_offsets(workdir):
  files = _files(workdir)["qa"]
  ids = {}
  for split, by_code in files.items():
    for code, relative in by_code.items():
      path = os.path.join(workdir, relative)
      with open(path, encoding="utf-8") as f:
        squad = json.load(f)
      assert set(squad) == {"version", "data"}
      questions = []
      for article in squad["data"]:
        assert isinstance(article["title"], str)
        for paragraph in article["paragraphs"]:
          context = paragraph["context"]
          for qa in paragraph["qas"]:
            assert qa["question"] and len(qa["answers"]) == 1
            for answer in qa["answers"]:
              start, text = answer["answer_start"], answer["text"]
              assert isinstance(start, int) and text.strip() == text != ""
              assert context[start:start + len(text)] == text
            questions.append(qa["id"])
      assert len(set(questions)) == len(questions)
      expected = SIZES["qa_train"] if split == "train" else SIZES[
          "eval_examples"]
      assert len(questions) == expected
      ids[(split, code)] = questions
      # The project's SQuAD reader accepts the file (it checks offsets too).
      assert [e.example_id for e in squad_files.read_squad_file(path)] == questions
  # Parallel like XQuAD: the same question ids in every language.
  assert all(ids[("dev", c)] == ids[("dev", "qla")] for c in ALL_CODES)


def test_qa_answers_every_question_type():
  squad = synthetic.make_qa_examples("qdv", "dev", 200, seed=0)
  lexicon = synthetic.lexicon("qdv")
  seen = collections.Counter()
  for paragraph in squad["data"][0]["paragraphs"]:
    for qa in paragraph["qas"]:
      qword = qa["question"].split()[0]
      qtype = next(q for q in ("who", "whom", "where", "how_many")
                   if lexicon["q:" + q] == qword)
      seen[qtype] += 1
      if qtype == "how_many":
        assert qa["answers"][0]["text"].isdigit()
  assert set(seen) == {"who", "whom", "where", "how_many"}


def _script(word):
  scripts = {unicodedata.name(ch).split()[0] for ch in word if ch.isalpha()}
  assert len(scripts) == 1, word
  return scripts.pop()


def _strip_loan(word):
  for loan in synthetic.LOAN_WORDS.values():
    if word.startswith(loan) and word != loan:
      return word[len(loan):]
  return word


def test_languages_use_their_own_scripts_and_share_only_anchors(workdir):
  expected = {spec.code: spec.script.upper() for spec in synthetic.LANGUAGES}
  vocabularies = {}
  for code, relative in _files(workdir)["corpus"].items():
    words = set()
    for line in _lines(os.path.join(workdir, relative))[:-1]:
      words.update(line.split())
    spec = synthetic.LANGUAGE_BY_CODE[code]
    # Strip sentence-final punctuation attached to the last word.
    words = {w.rstrip(spec.period + spec.question_mark) for w in words}
    own = {w for w in words if w not in synthetic.ANCHOR_WORDS}
    # A borrowed noun's plural is the loan with the language's own suffix:
    # the suffix is in the language's script.
    own = {_strip_loan(w) for w in own}
    assert {_script(w) for w in own if not w.isdigit()} == {expected[code]}
    vocabularies[code] = words
  shared = set.intersection(*vocabularies.values())
  assert shared <= synthetic.ANCHOR_WORDS
  # Every anchor name and most counts occur in every language.
  assert set(synthetic.ANCHOR_NAMES) <= shared
  assert len([w for w in shared if w.isdigit()]) >= 8
  pairwise = [vocabularies[a] & vocabularies[b] - synthetic.ANCHOR_WORDS
              for a in ALL_CODES for b in ALL_CODES if a != b]
  assert not any(pairwise)


def test_codes_are_private_use_language_codes():
  for code in ALL_CODES:
    # ISO 639-3 reserves qaa-qtz for local use: no clash with real languages.
    assert text_sources.check_language_code(code, "test") == code
    assert "qaa" <= code <= "qtz"
    assert text_sources.language_from_filename(f"corpus/{code}.txt") == code


def test_lexicons_are_unique_and_cover_every_concept():
  for code in ALL_CODES:
    lexicon = synthetic.lexicon(code)
    own = [w for w in lexicon.values() if w not in synthetic.ANCHOR_WORDS]
    assert len(own) == len(set(own))
    anchors = {k: w for k, w in lexicon.items()
               if w in synthetic.ANCHOR_WORDS}
    assert sorted(anchors.values()) == sorted(
        synthetic.ANCHOR_NAMES + tuple(synthetic.LOAN_WORDS.values()))
    assert {k for k, w in anchors.items() if w in
            synthetic.LOAN_WORDS.values()} == set(synthetic.LOAN_WORDS)
    # A plural noun must not spell another word (it would get two tags).
    plurals = {lexicon[n] + lexicon["fn:plural"] for n in synthetic.NOUNS}
    assert len(plurals) == len(synthetic.NOUNS)
    assert not plurals & set(lexicon.values())


def test_word_order_and_agreement_follow_the_language():
  event = synthetic.Event(
      subject=synthetic.Entity("PER", ("given:Alma", "family:Berg")),
      verb="verb:buy",
      obj=synthetic.Thing(3, "adj:red", "noun:apple"),
      place=synthetic.Entity("LOC", ("place:Rome", "ptype:river")))
  words = {}
  for code in ("qla", "qcy", "qdv", "qka"):
    lex = synthetic.lexicon(code)
    spec = synthetic.LANGUAGE_BY_CODE[code]
    tokens = synthetic.realize_event(event, spec, lex)
    words[code] = [t.text for t in tokens]
    noun = lex["noun:apple"] + lex["fn:plural"]  # Plural after a count > 1.
    assert noun in words[code]
    verb_index = words[code].index(lex["verb:buy"])
    assert tokens[-1].text == spec.period
    assert [t.tag for t in tokens if t.tag != "O"] == [
        "B-PER", "I-PER", "B-LOC", "I-LOC"]
    fronted = synthetic.realize_event(event, spec, lex, front_place=True)
    assert sorted(t.text for t in fronted) == sorted(words[code])
    assert fronted[0].role in ("adp", "place")
    if code == "qdv":
      assert verb_index == len(tokens) - 2  # SOV: the verb ends the clause.
    elif code == "qka":
      assert verb_index == 0  # VSO.
  latin, cyrillic = synthetic.lexicon("qla"), synthetic.lexicon("qcy")
  assert words["qla"][words["qla"].index(latin["adj:red"]) + 1] == (
      latin["noun:apple"] + latin["fn:plural"])
  assert words["qcy"][words["qcy"].index(cyrillic["adj:red"]) - 1] == (
      cyrillic["noun:apple"] + cyrillic["fn:plural"])
  # Cyrillic puts the type word before the place name.
  assert words["qcy"].index(cyrillic["ptype:river"]) + 1 == words[
      "qcy"].index(cyrillic["place:Rome"])


def test_chance_levels(workdir):
  levels = synthetic_baselines.chance_levels(workdir)
  assert set(levels) == set(synthetic_baselines.CHANCE_METRICS)
  for task in levels:
    assert set(levels[task]) == set(ALL_CODES)
  assert all(v == 50.0 for v in levels["pair"].values())
  # Subject-first languages give the positional tagger and the first-token
  # QA answer some hits, far from all; VSO languages start with the verb.
  for code in ALL_CODES:
    if synthetic.LANGUAGE_BY_CODE[code].clause_order == "VSO":
      assert levels["tag"][code] == levels["qa"][code] == 0.0
    else:
      assert 0.0 < levels["tag"][code] < 60.0
      assert 0.0 < levels["qa"][code] < 40.0
  test_levels = synthetic_baselines.chance_levels(workdir, split="test")
  assert set(test_levels["qa"]) == set(ALL_CODES)
