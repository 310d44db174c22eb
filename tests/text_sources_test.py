"""Tests for rembert_t5x.data.text_sources."""

import pytest

from rembert_t5x.data import text_sources


@pytest.mark.parametrize("name,lang", [
    ("en.txt", "en"), ("wiki.sw.txt", "sw"), ("tatoeba.tha-eng.tha", "tha"),
    ("zh-Hans.text", "zh-Hans"), ("/a/b/de", "de")])
def test_language_from_filename(name, lang):
  assert text_sources.language_from_filename(name) == lang


@pytest.mark.parametrize("name", ["notes.txt", "x.txt", "en1.txt", "a.b.c_"])
def test_language_from_filename_rejects(name):
  with pytest.raises(ValueError, match="is not a language code"):
    text_sources.language_from_filename(name)


def test_find_language_files(tmp_path):
  (tmp_path / "en.txt").write_text("a\n")
  (tmp_path / "wiki.en.txt").write_text("b\n")
  (tmp_path / "sw").mkdir()
  (tmp_path / "sw" / "1.txt").write_text("c\n")
  (tmp_path / "sw" / "0.txt").write_text("d\n")
  (tmp_path / ".hidden").write_text("e\n")
  found = text_sources.find_language_files(input_dir=str(tmp_path))
  assert found == {
      "en": [str(tmp_path / "en.txt"), str(tmp_path / "wiki.en.txt")],
      "sw": [str(tmp_path / "sw" / "0.txt"), str(tmp_path / "sw" / "1.txt")]}
  by_glob = text_sources.find_language_files(
      input_glob=str(tmp_path / "*.txt"))
  assert list(by_glob) == ["en"] and len(by_glob["en"]) == 2


def test_find_language_files_errors(tmp_path):
  with pytest.raises(ValueError, match="exactly one"):
    text_sources.find_language_files()
  with pytest.raises(ValueError, match="not a directory"):
    text_sources.find_language_files(input_dir=str(tmp_path / "nope"))
  with pytest.raises(ValueError, match="no text files"):
    text_sources.find_language_files(input_dir=str(tmp_path))
  (tmp_path / "fr").mkdir()
  with pytest.raises(ValueError, match="holds no files"):
    text_sources.find_language_files(input_dir=str(tmp_path))


def test_read_and_count_lines(tmp_path):
  path = tmp_path / "en.txt"
  path.write_text(" a \n\n b\n", "utf-8")
  assert text_sources.read_text_lines(str(path)) == ["a", "b"]
  assert text_sources.count_text_lines(str(path)) == 2
  path.write_text("\n \n", "utf-8")
  with pytest.raises(ValueError, match="en.txt: file is empty"):
    text_sources.count_text_lines(str(path))
  path.write_bytes(b"ok\n\xff\n")
  with pytest.raises(ValueError, match="en.txt, line 2: not valid UTF-8"):
    text_sources.read_text_lines(str(path))
