"""`rembert_t5x.data.pieces`: importable without TensorFlow, re-exported by
`vocabulary` (its training and layouts are tested in vocabulary_test.py)."""

from rembert_t5x.data import pieces
from rembert_t5x.data import vocabulary
from tests import test_utils


def test_training_a_vocabulary_needs_no_tensorflow(tmp_path):
  """rembert-train-vocab's import path: SentencePiece only (~1 s, not
  the ~10 s of TensorFlow + seqio); it trains a model with the layout."""
  corpus = tmp_path / "sw.txt"
  corpus.write_text("habari ya asubuhi rafiki\n" * 40, "utf-8")
  code = (
      "import sys\n"
      "from rembert_t5x.data import pieces\n"
      f"path = pieces.train_sentencepiece({{'sw': [{str(corpus)!r}]}}, "
      f"{str(tmp_path / 'v')!r}, vocab_size=16)\n"
      "print(path, sorted(m for m in ('tensorflow', 'seqio', 'jax') "
      "if m in sys.modules))\n")
  assert test_utils.run_python(code, timeout=120).split() == [
      f"{tmp_path / 'v'}.model", "[]"]
  assert vocabulary.RemBertVocabulary(
      f"{tmp_path / 'v'}.model").special_ids == pieces.TRAINED_LAYOUT

