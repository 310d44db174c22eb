"""Tests for scripts/train_vocab.py, run as a user would run it."""

import os
import subprocess
import sys

import pytest

from rembert_t5x.data import vocabulary
from tests import test_utils

REPO = test_utils.REPO_ROOT
SCRIPT = REPO / "scripts" / "train_vocab.py"
TATOEBA = test_utils.SHARED_DATA / "tatoeba"


def _run(*flags):
  return subprocess.run([sys.executable, str(SCRIPT), *flags],
                        capture_output=True, text=True, timeout=300,
                        check=False)


def test_train_vocab_on_tatoeba_glob(tmp_path):
  if not TATOEBA.is_dir():
    if os.environ.get("CI") == "true":
      pytest.fail(f"Real test data missing: {TATOEBA} (CI=true).")
    pytest.skip(f"Real test data not found at {TATOEBA}.")
  # kor (Hangul), kat (Georgian), kaz (Cyrillic), khm (Khmer), kab (Latin)...
  result = _run(f"--input_glob={TATOEBA}/tatoeba.k*-eng.k*",
                "--vocab_size=3000", "--alpha=0.3",
                f"--model_prefix={tmp_path}/spm")
  assert result.returncode == 0, result.stderr[-2000:]
  model = result.stdout.strip().splitlines()[-1]
  assert model == f"{tmp_path}/spm.model"
  vocab = vocabulary.RemBertVocabulary(model)
  assert vocab.vocab_size == 3000
  assert vocab.mask_id == 4
  for lang in ("kor", "kat", "khm"):
    line = (TATOEBA / f"tatoeba.{lang}-eng.{lang}").read_text(
        "utf-8").splitlines()[0]
    ids, offsets = vocab.encode_with_offsets(line)
    assert vocab.unk_id not in ids
    assert "".join(line[s:e] for s, e in offsets) == "".join(line.split())


def test_train_vocab_on_directory(tmp_path):
  corpus = tmp_path / "corpus"
  (corpus / "sw").mkdir(parents=True)
  (corpus / "sw" / "a.txt").write_text("habari ya asubuhi\n" * 50, "utf-8")
  (corpus / "el.txt").write_text("καλημέρα κόσμε\n" * 50, "utf-8")
  result = _run(f"--input_dir={corpus}", "--vocab_size=24",
                f"--model_prefix={tmp_path}/out/v")
  assert result.returncode == 0, result.stderr[-2000:]
  vocab = vocabulary.RemBertVocabulary(f"{tmp_path}/out/v.model")
  assert vocab.decode(vocab.encode("habari καλημέρα")) == "habari καλημέρα"


def test_train_vocab_bad_input(tmp_path):
  (tmp_path / "english.txt").write_text("hello\n", "utf-8")
  result = _run(f"--input_dir={tmp_path}", f"--model_prefix={tmp_path}/v")
  assert result.returncode != 0
  assert "english.txt: 'english' is not a language code" in result.stderr
