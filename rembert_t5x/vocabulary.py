"""The RemBERT SentencePiece vocabulary: special ids, offsets and training.

Every vocabulary this project builds reserves the same five ids (see
docs/DESIGN.md):

  [PAD]=0  [UNK]=1  [CLS]=2  [SEP]=3  [MASK]=4

[CLS] and [SEP] are SentencePiece *control* symbols, so a literal "[CLS]" in
raw text is never turned into the special id; [MASK] is a *user-defined*
symbol so that masked text written by hand ("a [MASK] b") encodes to it.
The model has no BOS/EOS pieces: RemBERT marks sequences with [CLS]/[SEP],
which the preprocessors add explicitly.
"""

import os
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import seqio
import sentencepiece as spm

from rembert_t5x import text_sources

PAD_ID = 0
UNK_ID = 1
CLS_ID = 2
SEP_ID = 3
MASK_ID = 4

PAD_PIECE = "[PAD]"
UNK_PIECE = "[UNK]"
CLS_PIECE = "[CLS]"
SEP_PIECE = "[SEP]"
MASK_PIECE = "[MASK]"

# id -> piece; the order fixes the ids.
SPECIAL_PIECES = (PAD_PIECE, UNK_PIECE, CLS_PIECE, SEP_PIECE, MASK_PIECE)
NUM_SPECIAL_IDS = len(SPECIAL_PIECES)

SPM_PATH_ENV = "REMBERT_SPM_PATH"


class RemBertVocabulary(seqio.SentencePieceVocabulary):
  """A SentencePiece vocabulary with RemBERT's special ids.

  The special ids are checked the first time the model is loaded, so that a
  vocabulary trained without them fails with a message naming the file rather
  than silently masking or padding with ordinary word pieces.
  """

  def __init__(self,
               sentencepiece_model_file: Optional[str] = None,
               extra_ids: int = 0):
    """Creates the vocabulary; the model file is read lazily.

    Args:
      sentencepiece_model_file: path of a SentencePiece `.model` file; None
        reads the path from $REMBERT_SPM_PATH when the vocabulary is first
        used (so tasks can be registered before a model exists).
      extra_ids: number of extra ids appended to the vocabulary (unused by
        RemBERT; kept for seqio compatibility).
    """
    super().__init__(sentencepiece_model_file, extra_ids=extra_ids)
    self._checked = False

  def __setstate__(self, state):
    super().__setstate__(state)
    self._checked = False

  def __eq__(self, other):
    if not isinstance(other, seqio.SentencePieceVocabulary):
      return False
    # A vocabulary from $REMBERT_SPM_PATH equals one built from that path.
    return (_resolved_path(self) == _resolved_path(other) and
            self.extra_ids == other.extra_ids)

  @property
  def sentencepiece_model_file(self) -> str:
    if self._sentencepiece_model_file is None:
      return _model_path_from_env()
    return self._sentencepiece_model_file

  def _model_context(self):
    if self._sentencepiece_model_file is None:
      self._sentencepiece_model_file = _model_path_from_env()
    try:
      context = super()._model_context()
    except Exception as e:  # pylint: disable=broad-except
      # tf NotFoundError, protobuf DecodeError, ... : name the file instead.
      first = (str(e).strip() or type(e).__name__).splitlines()[0]
      if not os.path.exists(self._sentencepiece_model_file):
        raise ValueError(f"{self._sentencepiece_model_file}: no such "
                         "SentencePiece model file.") from e
      raise ValueError(f"{self._sentencepiece_model_file}: cannot load it as "
                       f"a SentencePiece model ({first}).") from e
    if not self._checked:
      _check_special_pieces(context.tokenizer, self.sentencepiece_model_file)
      self._checked = True
    return context

  @property
  def pad_id(self) -> int:
    return PAD_ID

  @property
  def unk_id(self) -> int:
    self._model_context()
    return UNK_ID

  @property
  def cls_id(self) -> int:
    self._model_context()
    return CLS_ID

  @property
  def sep_id(self) -> int:
    self._model_context()
    return SEP_ID

  @property
  def mask_id(self) -> int:
    self._model_context()
    return MASK_ID

  @property
  def bos_id(self) -> Optional[int]:
    # No BOS piece: [CLS] is added by the preprocessors, not by SentencePiece.
    return None

  @property
  def eos_id(self) -> Optional[int]:
    # seqio's `decode` truncates at the first EOS; [SEP] separates segments
    # and must not end decoding, so the vocabulary reports no EOS.
    return None

  def encode_with_offsets(
      self, text: str) -> Tuple[List[int], List[Tuple[int, int]]]:
    """Tokenises `text` and returns each token's character span in it.

    SentencePiece reports spans as UTF-8 *byte* offsets into the original
    (un-normalised) input; they are converted here to Python `str` indices.
    Spans exclude the whitespace a piece absorbs (its leading "▁"), so that
    `text[start:end]` is the visible text of the token; a piece made only of
    whitespace gets an empty span `(start, start)` where it begins.
    When NFKC normalisation expands one character into several pieces (e.g.
    "…" -> ".", ".", "."), the last of them gets the character's span and
    the earlier ones an empty span at its start, as SentencePiece reports.

    Args:
      text: a Python string.

    Returns:
      (ids, offsets): `ids` equals `self.encode(text)`; `offsets[i]` is the
      `(start, end)` character span of token `i`.
    """
    proto = self.tokenizer.encode(text, out_type="proto")
    byte_to_char = _byte_to_char_map(text)
    ids, offsets = [], []
    for piece in proto.pieces:
      start = byte_to_char[piece.begin]
      end = byte_to_char[piece.end]
      while start < end and text[start].isspace():
        start += 1
      while end > start and text[end - 1].isspace():
        end -= 1
      ids.append(piece.id)
      offsets.append((start, end))
    return ids, offsets


def _byte_to_char_map(text: str) -> List[int]:
  """Maps every UTF-8 byte offset of `text` (and its end) to a char index."""
  mapping = []
  for char_index, char in enumerate(text):
    mapping.extend([char_index] * len(char.encode("utf-8")))
  mapping.append(len(text))
  return mapping


def _check_special_pieces(tokenizer: spm.SentencePieceProcessor,
                          path: str) -> None:
  """Raises ValueError unless ids 0..4 hold [PAD] [UNK] [CLS] [SEP] [MASK]."""
  size = tokenizer.GetPieceSize()
  for expected_id, piece in enumerate(SPECIAL_PIECES):
    actual = tokenizer.IdToPiece(expected_id) if expected_id < size else None
    if actual != piece:
      raise ValueError(
          f"{path}: SentencePiece model has piece {actual!r} at id "
          f"{expected_id}, expected {piece!r}. RemBERT vocabularies need "
          f"{', '.join(f'{p}={i}' for i, p in enumerate(SPECIAL_PIECES))}; "
          "train one with rembert_t5x.vocabulary.train_sentencepiece.")


def _model_path_from_env() -> str:
  """Returns $REMBERT_SPM_PATH, or raises a clear error."""
  path = os.environ.get(SPM_PATH_ENV)
  if not path:
    raise ValueError(
        f"Environment variable {SPM_PATH_ENV} is not set: point it at a "
        "RemBERT SentencePiece model (train one with scripts/train_vocab.py).")
  if not os.path.exists(path):
    raise ValueError(
        f"{SPM_PATH_ENV}={path}: no such SentencePiece model file.")
  return path


def _resolved_path(vocab: seqio.SentencePieceVocabulary) -> Optional[str]:
  # Unlike `sentencepiece_model_file`, never raises (equality must not).
  path = vocab._sentencepiece_model_file  # pylint: disable=protected-access
  return path if path is not None else os.environ.get(SPM_PATH_ENV)


def default_vocabulary() -> RemBertVocabulary:
  """Returns the vocabulary whose model path is in $REMBERT_SPM_PATH.

  Nothing is read here: the variable is looked up when the vocabulary is
  first used (encoding, vocab_size, ...), so registering tasks works without
  a model on disk. Using it with the variable unset, or naming a missing
  file, raises ValueError.
  """
  return RemBertVocabulary(None)


def alpha_sampling_rates(counts: Dict[str, float],
                         alpha: float) -> Dict[str, float]:
  """Returns p_l ∝ n_l^alpha over languages, normalised to sum to 1.

  Args:
    counts: language -> n_l (sentences, lines or examples); all > 0.
    alpha: the exponent; 1 keeps the natural distribution, 0 is uniform.

  Returns:
    language -> sampling probability.
  """
  if not counts:
    raise ValueError("alpha_sampling_rates: no languages given.")
  for lang, n in counts.items():
    if not n or n <= 0:
      raise ValueError(
          f"alpha_sampling_rates: language {lang!r} has count {n}; every "
          "language needs a positive count.")
  weights = {lang: float(n) ** alpha for lang, n in counts.items()}
  total = sum(weights.values())
  return {lang: w / total for lang, w in weights.items()}


def sample_sentences(files_by_lang: Dict[str, Sequence[str]],
                     max_sentences: int,
                     alpha: float = 0.5,
                     seed: int = 0) -> Dict[str, List[str]]:
  """Draws lines with language rates p_l ∝ n_l^alpha.

  The total drawn is min(max_sentences, number of lines available): alpha
  re-weights the languages without inflating a small corpus.

  A language whose share exceeds its line count is sampled with replacement
  (that is the point of alpha < 1: low-resource languages are up-weighted);
  the others without replacement.

  Args:
    files_by_lang: language code -> list of UTF-8 text files, one sentence
      (or paragraph) a line.
    max_sentences: cap on the total number of lines drawn.
    alpha: the sampling exponent.
    seed: seed of the draw.

  Returns:
    language -> the sampled lines.
  """
  if max_sentences <= 0:
    raise ValueError(f"max_sentences must be positive, got {max_sentences}.")
  lines_by_lang = {}
  for lang, paths in sorted(files_by_lang.items()):
    if not paths:
      raise ValueError(f"Language {lang!r}: no files given.")
    lines = []
    for path in paths:
      lines.extend(text_sources.read_text_lines(path))
    lines_by_lang[lang] = lines
  rates = alpha_sampling_rates(
      {lang: len(lines) for lang, lines in lines_by_lang.items()}, alpha)
  total = min(max_sentences, sum(len(l) for l in lines_by_lang.values()))
  rng = np.random.RandomState(seed)
  sampled = {}
  for lang, lines in lines_by_lang.items():
    quota = max(1, int(round(rates[lang] * total)))
    replace = quota > len(lines)
    picks = rng.choice(len(lines), size=quota, replace=replace)
    sampled[lang] = [lines[i] for i in picks]
  return sampled


def train_sentencepiece(files_by_lang: Dict[str, Sequence[str]],
                        model_prefix: str,
                        vocab_size: int,
                        alpha: float = 0.5,
                        max_sentences: int = 10_000_000,
                        seed: int = 0,
                        character_coverage: float = 0.9995,
                        num_threads: int = 1) -> str:
  """Trains a SentencePiece unigram model on alpha-sampled multilingual text.

  The training text is drawn with `sample_sentences` (p_l ∝ n_l^alpha), and
  the model reserves [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.

  Args:
    files_by_lang: language code -> list of UTF-8 text files.
    model_prefix: output prefix; writes `<prefix>.model` and `<prefix>.vocab`.
    vocab_size: total number of pieces including the five special ones.
    alpha: language sampling exponent (0.5 in RemBERT).
    max_sentences: cap on the number of lines drawn for training.
    seed: seed of the line sampling (SentencePiece's own training is
      deterministic given its input).
    character_coverage: share of characters covered by single-character
      pieces; the rest map to [UNK]. Keep it high for many scripts.
    num_threads: SentencePiece trainer threads.

  Returns:
    The path of the written `.model` file.
  """
  if vocab_size <= NUM_SPECIAL_IDS:
    raise ValueError(
        f"vocab_size must exceed {NUM_SPECIAL_IDS} (the special ids), got "
        f"{vocab_size}.")
  sampled = sample_sentences(files_by_lang, max_sentences, alpha, seed)
  out_dir = os.path.dirname(os.path.abspath(model_prefix))
  os.makedirs(out_dir, exist_ok=True)
  with tempfile.NamedTemporaryFile(
      "w", encoding="utf-8", suffix=".txt", delete=False) as f:
    corpus_path = f.name
    for lang in sorted(sampled):
      for line in sampled[lang]:
        f.write(line + "\n")
  try:
    spm.SentencePieceTrainer.train(
        input=corpus_path,
        model_prefix=model_prefix,
        model_type="unigram",
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        # Sampling already happened above; let SentencePiece read it all.
        input_sentence_size=0,
        shuffle_input_sentence=False,
        pad_id=PAD_ID,
        pad_piece=PAD_PIECE,
        unk_id=UNK_ID,
        unk_piece=UNK_PIECE,
        bos_id=-1,
        eos_id=-1,
        control_symbols=[CLS_PIECE, SEP_PIECE],
        user_defined_symbols=[MASK_PIECE],
        num_threads=num_threads,
        minloglevel=2,
    )
  except RuntimeError as e:
    raise ValueError(
        f"SentencePiece training for {model_prefix}.model failed: {e}") from e
  finally:
    os.remove(corpus_path)
  model_path = model_prefix + ".model"
  # Fail here, not in a later training run, if the ids came out wrong.
  _check_special_pieces(
      spm.SentencePieceProcessor(model_file=model_path), model_path)
  return model_path
