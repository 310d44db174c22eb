"""Tests for rembert_t5x.data.xtreme_readers (XTREME file formats, bad input)."""

import pytest

from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x.data import xtreme_readers as readers


def _write(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text, encoding="utf-8")
  return str(path)


def test_read_pair_tsv_reads_quotes_as_written_like_xtreme(tmp_path):
  # XTREME writes with csv.writer (a field holding '"' is quoted, '"'
  # doubled) and reads with quoting off: its models see the quotes as
  # written, and so do ours. A BOM (utf-8-sig) is dropped, as XTREME's.
  path = _write(tmp_path, "dev-de.tsv",
                '\ufeffEr kam .\tEr ging .\tcontradiction\r\n'
                '"Sie sagte ""ja"" ."\tSie stimmte zu .\tentailment\r\n'
                '\n'
                'A\tB\tcontradictory\n')
  rows = readers.read_pair_tsv(path, readers.XNLI_LABEL_IDS)
  assert rows == [
      {"sentence1": "Er kam .", "sentence2": "Er ging .", "label": 2},
      {"sentence1": '"Sie sagte ""ja"" ."', "sentence2": "Sie stimmte zu .",
       "label": 0},
      {"sentence1": "A", "sentence2": "B", "label": 2},
  ]


def test_read_pair_tsv_a_stray_quote_merges_no_rows(tmp_path):
  # A sentence opening with '"' in a file not written by csv.writer: with
  # csv's default quoting it swallowed the rows up to the next quote.
  rows = [f"s{i}\tt{i}\t{i % 2}" for i in range(16)]
  rows[3] = '"Quoted start\tt3\t1'
  rows[7] = 'end quote"\tt7\t1'
  path = _write(tmp_path, "train-en.tsv", "\n".join(rows) + "\n")
  examples = readers.read_pair_tsv(path, readers.PAWSX_LABEL_IDS)
  assert len(examples) == 16
  assert examples[3]["sentence1"] == '"Quoted start'
  assert examples[7]["sentence1"] == 'end quote"'
  # A row whose quote once hid a tab is now its own line's error.
  rows[5] = '"a\tb"\tc\t0'
  path = _write(tmp_path, "dev-en.tsv", "\n".join(rows) + "\n")
  with pytest.raises(ValueError, match=r"dev-en.tsv, line 6: expected 3 "
                     r"tab-separated fields .* found 4"):
    readers.read_pair_tsv(path, readers.PAWSX_LABEL_IDS)


def test_read_pair_tsv_long_fields_and_line_ends_as_text_mode(tmp_path):
  # Past csv's 131,072-character field limit; U+2028, U+0085, form feed and
  # \x1c are inside a sentence, not line ends (text mode ends lines at
  # \n, \r\n and \r only).
  long = "x" * 200_000
  inner = "a\u2028b\u0085c\x0cd\x1ce"
  path = _write(tmp_path, "dev-en.tsv",
                f"{long}\tshort\t1\r{inner}\tz\t0\r\nlast\tone\t1")
  rows = readers.read_pair_tsv(path, readers.PAWSX_LABEL_IDS)
  assert [(len(r["sentence1"]), r["label"]) for r in rows] == [
      (200_000, 1), (len(inner), 0), (4, 1)]
  assert rows[1]["sentence1"] == inner


def test_read_pair_tsv_pawsx_unlabelled_test_file(tmp_path):
  path = _write(tmp_path, "test-fr.tsv", "un\tdeux\ntrois\tquatre\n")
  with pytest.raises(ValueError, match=r"test-fr.tsv, line 1: field 'label' "
                     r"is missing"):
    readers.read_pair_tsv(path, readers.PAWSX_LABEL_IDS)
  rows = readers.read_pair_tsv(path, readers.PAWSX_LABEL_IDS,
                               require_labels=False)
  assert [r["label"] for r in rows] == [-1, -1]


@pytest.mark.parametrize("text, message", [
    ("a\tb\t1\nc\td\t2\n", r"line 2: field 'label' has value '2'"),
    ("a\tb\t1\nc\n", r"line 2: expected 3 tab-separated fields .* found 1"),
    ("a\tb\t1\tx\n", r"line 1: expected 3 tab-separated fields .* found 4"),
    ("a\t \t1\n", r"line 1: field 'sentence2' is empty"),
    ("", r"file is empty"),
    ("\n  \n", r"file is empty"),
])
def test_read_pair_tsv_errors_name_file_line_field(tmp_path, text, message):
  path = _write(tmp_path, "dev-en.tsv", text)
  with pytest.raises(ValueError, match=message) as info:
    readers.read_pair_tsv(path, readers.PAWSX_LABEL_IDS)
  assert "dev-en.tsv" in str(info.value)


def test_read_pair_tsv_missing_file(tmp_path):
  with pytest.raises(ValueError, match="nope.tsv: cannot read file"):
    readers.read_pair_tsv(str(tmp_path / "nope.tsv"), readers.XNLI_LABEL_IDS)


PANX = ("en:Angela\tB-PER\nen:Merkel\tI-PER\nen:spoke\tO\n\n"
        "en:in\tO\nen:Berlin\tB-LOC\n\n\n")


def test_read_conll_tags_strips_prefix_and_splits_sentences(tmp_path):
  path = _write(tmp_path, "dev-en.tsv", PANX)
  labels = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
  sentences = readers.read_conll_tags(path, labels, strip_prefix="en:")
  assert sentences == [
      {"tokens": ["Angela", "Merkel", "spoke"], "tags": [1, 2, 0]},
      {"tokens": ["in", "Berlin"], "tags": [0, 5]},
  ]
  # Without stripping, the prefix stays (XTREME's preprocessed files have
  # none, so stripping is only asked for on raw PAN-X files).
  raw = readers.read_conll_tags(path, labels)
  assert raw[1]["tokens"] == ["en:in", "en:Berlin"]


def test_read_conll_tags_last_sentence_without_blank_line(tmp_path):
  path = _write(tmp_path, "dev-en.tsv", "The\tDET\ncat\tNOUN")
  assert readers.read_conll_tags(path, ("DET", "NOUN")) == [
      {"tokens": ["The", "cat"], "tags": [0, 1]}]


@pytest.mark.parametrize("text, message", [
    ("The\tDET\ncat\tCAT\n", r"line 2: field 'tag' has value 'CAT'"),
    ("The\tDET\tx\n", r"line 1: expected 'token<TAB>tag', found 3 fields"),
    ("The\tDET\ncat\n", r"line 2: field 'tag' is missing"),
    ("\tDET\n", r"line 1: field 'token' is empty"),
    ("\n\n", r"file is empty"),
])
def test_read_conll_tags_errors(tmp_path, text, message):
  path = _write(tmp_path, "train-en.tsv", text)
  with pytest.raises(ValueError, match=message) as info:
    readers.read_conll_tags(path, ("DET", "NOUN"))
  assert "train-en.tsv" in str(info.value)


def test_read_conll_tags_unlabelled_allowed(tmp_path):
  path = _write(tmp_path, "test-de.tsv", "Der\nHund\n")
  assert readers.read_conll_tags(path, ("DET",), require_labels=False) == [
      {"tokens": ["Der", "Hund"], "tags": [-1, -1]}]


def test_read_parallel_lines(tmp_path):
  src = _write(tmp_path, "tatoeba.deu-eng.deu", "Hallo .\nDanke .\n")
  eng = _write(tmp_path, "tatoeba.deu-eng.eng", "Hello .\nThanks .\n")
  assert readers.read_parallel_lines(src, eng) == [
      ("Hallo .", "Hello ."), ("Danke .", "Thanks .")]
  short = _write(tmp_path, "short.eng", "Hello .\n")
  with pytest.raises(ValueError, match=r"has 2 lines but .*short.eng has 1"):
    readers.read_parallel_lines(src, short)
  gap = _write(tmp_path, "gap.eng", "Hello .\n\nThanks .\n")
  gap_src = _write(tmp_path, "gap.deu", "a\nb\nc\n")
  with pytest.raises(ValueError, match=r"gap.eng, line 2: field 'sentence'"):
    readers.read_parallel_lines(gap_src, gap)
  empty = _write(tmp_path, "empty.eng", "")
  with pytest.raises(ValueError, match=r"empty.eng: file is empty"):
    readers.read_parallel_lines(src, empty)


def test_bucc_readers(tmp_path):
  sents = _write(tmp_path, "de-en.dev.de",
                 "de-000001\tHallo Welt\nde-000002\tGuten Tag\n")
  assert readers.read_bucc_sentences(sents) == [
      ("de-000001", "Hallo Welt"), ("de-000002", "Guten Tag")]
  gold = _write(tmp_path, "de-en.dev.gold", "de-000002\ten-000009\n")
  assert readers.read_bucc_gold(gold) == [("de-000002", "en-000009")]
  dup = _write(tmp_path, "dup.de", "x-1\ta\nx-1\tb\n")
  with pytest.raises(ValueError, match=r"dup.de, line 2: field 'id' repeats"):
    readers.read_bucc_sentences(dup)
  bad = _write(tmp_path, "bad.de", "x-1 a\n")
  with pytest.raises(ValueError, match=r"bad.de, line 1: expected"):
    readers.read_bucc_sentences(bad)
  bad_gold = _write(tmp_path, "bad.gold", "x-1\n")
  with pytest.raises(ValueError, match=r"bad.gold, line 1"):
    readers.read_bucc_gold(bad_gold)


def test_layout_paths():
  assert readers.xtreme_split_file("/d", "pawsx", "dev", "de") == (
      "/d/pawsx/dev-de.tsv")
  assert readers.tatoeba_files("/d", "deu") == (
      "/d/tatoeba/tatoeba.deu-eng.deu", "/d/tatoeba/tatoeba.deu-eng.eng")
  assert readers.bucc_files("/d", "fr", "dev")["gold"] == (
      "/d/bucc2018/fr-en.dev.gold")


def test_sources_yield_tf_examples(tmp_path):
  pairs = _write(tmp_path, "dev-en.tsv", "a b\tc\t1\nd\te f\t0\n")
  source = readers.pair_source({"validation": pairs},
                               readers.PAWSX_LABEL_IDS)
  assert list(source.splits) == ["validation"]
  rows = list(source.get_dataset("validation").as_numpy_iterator())
  assert [(r["sentence1"], r["label"]) for r in rows] == [(b"a b", 1),
                                                          (b"d", 0)]

  tags = _write(tmp_path, "dev-de.tsv", "de:Berlin\tB-LOC\n\nde:ja\tO\n")
  source = readers.tagging_source({"validation": tags}, ("O", "B-LOC"),
                                  strip_prefix="de:")
  rows = list(source.get_dataset("validation").as_numpy_iterator())
  assert [list(r["tokens"]) for r in rows] == [[b"Berlin"], [b"ja"]]
  assert [list(r["tags"]) for r in rows] == [[1], [0]]

  src = _write(tmp_path, "p.x", "s0\ns1\n")
  eng = _write(tmp_path, "p.en", "e0\ne1\n")
  rows = list(readers.parallel_source(src, eng).get_dataset(
      "test").as_numpy_iterator())
  assert [(r["text"], list(r["targets"])) for r in rows] == [
      (b"s0", [0, 0]), (b"e0", [1, 0]), (b"s1", [0, 1]), (b"e1", [1, 1])]

  # A bad file surfaces its reader error when the split is read.
  bad = _write(tmp_path, "bad.tsv", "a\tb\tmaybe\n")
  source = readers.pair_source({"validation": bad}, readers.PAWSX_LABEL_IDS)
  with pytest.raises(ValueError, match=r"bad.tsv, line 1: field 'label'"):
    source.get_dataset("validation")


def test_sources_read_xtremes_label_less_test_files(tmp_path):
  # XTREME's test rows: no label column, words without tags.
  pairs = _write(tmp_path, "test-de.tsv", "a\tb\nc\td\n")
  source = readers.pair_source({"test": pairs, "validation": pairs},
                               readers.XNLI_LABEL_IDS)
  rows = list(source.get_dataset("test").as_numpy_iterator())
  assert [r["label"] for r in rows] == [readers.NO_LABEL] * 2
  # No gold: a metric over the split is refused, not a made-up score.
  with pytest.raises(ValueError, match="no gold label"):
    xp.pair_label_postprocessor(None, rows[0], is_target=True)
  # Only the test split: any other needs its labels.
  with pytest.raises(ValueError, match="field 'label' is missing"):
    source.get_dataset("validation")
  tags = _write(tmp_path, "tags.tsv", "de:Berlin\n\nde:ja\nde:nein\n")
  source = readers.tagging_source({"test": tags}, ("O", "B-LOC"),
                                  strip_prefix="de:")
  rows = list(source.get_dataset("test").as_numpy_iterator())
  assert [list(r["tokens"]) for r in rows] == [[b"Berlin"], [b"ja", b"nein"]]
  assert [list(r["tags"]) for r in rows] == [[-1], [-1, -1]]
  # A file with some labels missing is damaged, not XTREME's test file.
  mixed = _write(tmp_path, "mixed.tsv", "Berlin\tB-LOC\nja\n")
  source = readers.tagging_source({"test": mixed}, ("O", "B-LOC"))
  with pytest.raises(ValueError, match="mixed.tsv: 1 of 1 examples lack"):
    source.get_dataset("test")


def test_squad_source_reads_blanked_answers(tmp_path):
  path = _write(tmp_path, "q.json", (
      '{"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context":'
      ' "Hello.", "qas": [{"id": "q1", "question": "?", "answers": '
      '[{"answer_start": 0, "text": ""}]}]}]}]}'))
  rows = list(readers.squad_source(path, "test").get_dataset(
      "test").as_numpy_iterator())
  assert [(r["id"], list(r["answers"]["text"])) for r in rows] == [
      (b"q1", [b""])]
