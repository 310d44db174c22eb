"""RemBERT's special pieces, their layouts, and vocabulary training.

SentencePiece only, no TensorFlow or seqio: `rembert-train-vocab` and the
checkpoint converters start in seconds. `rembert_t5x.data.vocabulary` (the
seqio vocabulary) builds on it; its module docstring describes the layouts.
"""

import dataclasses
import os
import re
import tempfile
from typing import Dict, List, Sequence, Tuple

import numpy as np
import sentencepiece as spm

from rembert_t5x.data import text_sources

PAD_ID = 0  # seqio's padding id; every RemBERT vocabulary has [PAD] here.

PAD_PIECE = "[PAD]"
UNK_PIECE = "[UNK]"
CLS_PIECE = "[CLS]"
SEP_PIECE = "[SEP]"
MASK_PIECE = "[MASK]"
SPECIAL_PIECES = (PAD_PIECE, UNK_PIECE, CLS_PIECE, SEP_PIECE, MASK_PIECE)

# The file name Hugging Face uses; converted checkpoint directories and run
# MODEL_DIRs hold the vocabulary under it.
VOCABULARY_FILENAME = "sentencepiece.model"


@dataclasses.dataclass(frozen=True)
class SpecialIds:
  """The ids of the five special pieces in one vocabulary."""
  pad: int
  unk: int
  cls: int
  sep: int
  mask: int

  def as_tuple(self) -> Tuple[int, ...]:
    return (self.pad, self.unk, self.cls, self.sep, self.mask)


# What `train_sentencepiece` writes (and the benchmarks' synthetic batches,
# which have no vocabulary file, assume).
TRAINED_LAYOUT = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)

# The special pieces' ids in the released RemBERT vocabulary (Hugging Face
# `google/rembert`): [PAD]=0, [CLS]=312, [SEP]=313 are its config.json's
# pad/bos/eos_token_id. [UNK]=2 is what transformers' RemBertTokenizer
# assumes (it builds its Unigram model with unk_id=2; Google's SentencePiece
# models usually put pad 0, eos 1, unk 2). [MASK]'s id could not be looked up
# offline: 336 is our choice, away from 0-4 like the others. Used to build
# "released-like" vocabularies (`move_special_pieces`) for tests and
# scripts/xtreme_road.py.
RELEASED_LAYOUT = {PAD_PIECE: 0, UNK_PIECE: 2, CLS_PIECE: 312, SEP_PIECE: 313,
                   MASK_PIECE: 336}


def read_special_ids(tokenizer: spm.SentencePieceProcessor,
                     path: str) -> SpecialIds:
  """Looks the five special pieces up by name.

  Raises:
    ValueError: a piece is missing (naming it and the file), or [PAD] is
      not id 0.
  """
  ids = {}
  for piece in SPECIAL_PIECES:
    # PieceToId answers the unknown id for a missing piece: check the name.
    i = tokenizer.PieceToId(piece)
    if tokenizer.IdToPiece(i) != piece:
      raise ValueError(
          f"{path}: SentencePiece model has no piece {piece!r}. RemBERT "
          f"vocabularies need the pieces {', '.join(SPECIAL_PIECES)} (at any "
          f"ids, {PAD_PIECE} at 0); train one with "
          "rembert_t5x.data.pieces.train_sentencepiece.")
    ids[piece] = i
  if ids[PAD_PIECE] != PAD_ID:
    raise ValueError(
        f"{path}: {PAD_PIECE} is id {ids[PAD_PIECE]}, but seqio pads with id "
        f"{PAD_ID}; a RemBERT vocabulary needs {PAD_PIECE} at id {PAD_ID} "
        f"(id {PAD_ID} holds {tokenizer.IdToPiece(PAD_ID)!r}).")
  return SpecialIds(*(ids[p] for p in SPECIAL_PIECES))


# --- Text pre-normalisation (Hugging Face / ALBERT compatible) --------------

_PRENORM = re.compile(r"``|''| {2,}")


def _prenorm_replacement(match: str) -> str:
  return '"' if match in ("``", "''") else " "


def prenormalize(text: str) -> Tuple[str, List[Tuple[int, int]]]:
  """Applies the pre-SentencePiece replacements; maps chars back.

  Returns:
    (new_text, spans): spans[i] is the (start, end) range of original
    characters that new character i came from.
  """
  if _PRENORM.search(text) is None:  # the common case: nothing to replace
    return text, [(i, i + 1) for i in range(len(text))]
  out, spans, last = [], [], 0
  for m in _PRENORM.finditer(text):
    for i in range(last, m.start()):
      out.append(text[i])
      spans.append((i, i + 1))
    out.append(_prenorm_replacement(m.group()))
    spans.append((m.start(), m.end()))
    last = m.end()
  for i in range(last, len(text)):
    out.append(text[i])
    spans.append((i, i + 1))
  return "".join(out), spans


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


class VocabularyTooLarge(ValueError):
  """The text holds fewer distinct pieces than the vocabulary size asked for;
  `limit` is the most SentencePiece can make of it."""

  def __init__(self, message: str, limit: int):
    super().__init__(message)
    self.limit = limit


def train_sentencepiece(files_by_lang: Dict[str, Sequence[str]],
                        model_prefix: str,
                        vocab_size: int,
                        alpha: float = 0.5,
                        max_sentences: int = 10_000_000,
                        seed: int = 0,
                        character_coverage: float = 0.9995,
                        num_threads: int = 1) -> str:
  """Trains a SentencePiece unigram model on alpha-sampled multilingual text.

  The training text is drawn with `sample_sentences` (p_l ∝ n_l^alpha) and
  pre-normalised as at encoding time; the model reserves
  [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 (`TRAINED_LAYOUT`).

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
  if vocab_size <= len(SPECIAL_PIECES):
    raise ValueError(
        f"vocab_size must exceed {len(SPECIAL_PIECES)} (the special ids), got "
        f"{vocab_size}.")
  sampled = sample_sentences(files_by_lang, max_sentences, alpha, seed)
  out_dir = os.path.dirname(os.path.abspath(model_prefix))
  os.makedirs(out_dir, exist_ok=True)
  with tempfile.NamedTemporaryFile(
      "w", encoding="utf-8", suffix=".txt", delete=False) as f:
    corpus_path = f.name
    for lang in sorted(sampled):
      for line in sampled[lang]:
        f.write(prenormalize(line)[0] + "\n")
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
        pad_id=TRAINED_LAYOUT.pad,
        pad_piece=PAD_PIECE,
        unk_id=TRAINED_LAYOUT.unk,
        unk_piece=UNK_PIECE,
        bos_id=-1,
        eos_id=-1,
        control_symbols=[CLS_PIECE, SEP_PIECE],
        user_defined_symbols=[MASK_PIECE],
        num_threads=num_threads,
        minloglevel=2,
    )
  except RuntimeError as e:
    too_high = re.search(r"Vocabulary size too high .*<= (\d+)", str(e))
    if too_high:
      limit = int(too_high.group(1))
      raise VocabularyTooLarge(
          f"{model_prefix}.model: vocab_size {vocab_size} is more pieces "
          f"than the training text holds (SentencePiece makes at most "
          f"{limit} of it); use a smaller vocab_size or more text",
          limit) from None
    raise ValueError(
        f"SentencePiece training for {model_prefix}.model failed: {e}") from e
  finally:
    os.remove(corpus_path)
  model_path = model_prefix + ".model"
  # Fail here, not in a later training run, if the ids came out wrong.
  ids = read_special_ids(spm.SentencePieceProcessor(model_file=model_path),
                         model_path)
  if ids != TRAINED_LAYOUT:
    raise ValueError(f"{model_path}: special ids {ids} are not the trained "
                     f"layout {TRAINED_LAYOUT}.")
  return model_path
