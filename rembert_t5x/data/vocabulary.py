"""The RemBERT SentencePiece vocabulary: special ids, tokenisation, training.

(Special pieces, layouts and training are in `rembert_t5x.data.pieces`, which
needs no TensorFlow.)

Special ids are read from the vocabulary by piece name, never assumed
(docs/DESIGN.md). A RemBERT vocabulary holds five pieces:

  [PAD]  [UNK]  [CLS]  [SEP]  [MASK]

at any ids, except that [PAD] must be id 0: seqio pads every feature with 0.
The released RemBERT vocabulary (Hugging Face `google/rembert`) has
[PAD]=0, [CLS]=312, [SEP]=313; the vocabularies `train_sentencepiece` builds
use [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 (`TRAINED_LAYOUT`), with
[CLS]/[SEP] as SentencePiece *control* symbols (a literal "[CLS]" in raw
text never becomes the special id) and [MASK] *user-defined* (typed masks,
"a [MASK] b", encode to it). Preprocessors ask the task's vocabulary for the
ids when a dataset is built (`special_ids`), so one process can use both.

Tokenisation equals Hugging Face's `RemBertTokenizer` on the same `.model`
(tests/vocabulary_parity_test.py): before SentencePiece, "``" and "''"
become '"' and runs of spaces one space (ALBERT's preprocessing, which HF's
converter keeps); SentencePiece then keeps the remaining whitespace as
"▁" pieces instead of stripping it, a leading whitespace gets no extra
"▁" prefix and text the normaliser deletes entirely gives no piece — as HF's
Metaspace pre-tokenizer does. One deliberate difference: HF also splits the
literal strings "[CLS]", "[SEP]", "[PAD]", "[UNK]" out of raw text as special
tokens; here raw text goes to SentencePiece as it is.

Which vocabulary a task uses: registered tasks get a lazy one
(`default_vocabulary()`) that resolves its file on use, in this order:
  1. an explicit choice (`checkpoint_vocabulary(sentencepiece_model=...)`,
     a gin binding);
  2. $REMBERT_SPM_PATH;
  3. the `sentencepiece.model` of the checkpoint a run starts from
     (`use_checkpoint_vocabulary`: the local runner and evaluator call it
     with their checkpoint, T5X runs through the gin hook
     `checkpoint_vocabulary`; the converters put the file there).
"""

import logging
import os
import re
from typing import Dict, List, Mapping, Optional, Tuple

import gin
import numpy as np
import seqio
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2
import tensorflow as tf
import tensorflow_text as tf_text

from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x.data import fast_tokenizer
from rembert_t5x.data import pieces

SPM_PATH_ENV = "REMBERT_SPM_PATH"
ALLOW_OTHER_VOCABULARY_ENV = "REMBERT_ALLOW_OTHER_VOCABULARY"

_SPACE = "\u2581"  # SentencePiece's whitespace marker "▁"


def special_ids(vocabulary: seqio.Vocabulary) -> pieces.SpecialIds:
  """The special ids of a task vocabulary (loads it if needed).

  Works for `RemBertVocabulary` (and the lazy wrappers that delegate to
  one) and for a plain `seqio.SentencePieceVocabulary`.
  """
  ids = getattr(vocabulary, "special_ids", None)
  if isinstance(ids, pieces.SpecialIds):
    return ids
  if isinstance(vocabulary, seqio.SentencePieceVocabulary):
    return pieces.read_special_ids(vocabulary.tokenizer,
                            vocabulary.sentencepiece_model_file)
  raise ValueError(
      f"vocabulary {vocabulary} has no SentencePiece model to read RemBERT's "
      f"special pieces ({', '.join(pieces.SPECIAL_PIECES)}) from.")


def _prenormalize_tf(text: tf.Tensor) -> tf.Tensor:
  text = tf.strings.regex_replace(text, "``|''", '"')
  return tf.strings.regex_replace(text, " {2,}", " ")


def _doubled_prefix(first_piece: str,
                    second_piece: Optional[str]) -> bool:
  # SentencePiece adds "▁" before text that already starts with whitespace
  # ("▁▁x" -> "▁", "▁x"); HF's Metaspace does not. Pieces never span a "▁"
  # boundary, so a lone first "▁" followed by a "▁"-initial piece is that
  # extra prefix.
  return (first_piece == _SPACE and second_piece is not None and
          second_piece.startswith(_SPACE))


def _encode_pieces(tokenizer: spm.SentencePieceProcessor, text: str):
  """SentencePiece proto pieces of prenormalized `text`, HF-compatible."""
  pieces = list(tokenizer.encode(text, out_type="proto").pieces)
  if len(pieces) >= 2 and _doubled_prefix(pieces[0].piece, pieces[1].piece):
    pieces = pieces[1:]
  elif (len(pieces) == 1 and pieces[0].piece == _SPACE and
        tokenizer.normalize(text) == _SPACE):
    # Text the normaliser deletes entirely ("\x01"): SentencePiece still
    # adds its "▁" prefix, HF gives nothing.
    pieces = []
  return pieces


def _byte_to_char_map(text: str) -> List[int]:
  """Maps every UTF-8 byte offset of `text` (and its end) to a char index."""
  mapping = []
  for char_index, char in enumerate(text):
    mapping.extend([char_index] * len(char.encode("utf-8")))
  mapping.append(len(text))
  return mapping


def encode_with_offsets(
    tokenizer: spm.SentencePieceProcessor,
    text: str) -> Tuple[List[int], List[Tuple[int, int]]]:
  """Ids and original-text character spans; see RemBertVocabulary."""
  normalized, spans = pieces.prenormalize(text)
  byte_to_char = _byte_to_char_map(normalized)
  ids, offsets = [], []
  for piece in _encode_pieces(tokenizer, normalized):
    # Byte offsets into `normalized` -> its chars -> original chars.
    start = byte_to_char[piece.begin]
    end = byte_to_char[piece.end]
    start = spans[start][0] if start < len(spans) else len(text)
    end = spans[end - 1][1] if end > 0 else 0
    end = max(end, start)
    while start < end and text[start].isspace():
      start += 1
    while end > start and text[end - 1].isspace():
      end -= 1
    ids.append(piece.id)
    offsets.append((start, end))
  return ids, offsets


# SentencePiece keeps whitespace instead of stripping and collapsing it, as
# HF's tokenizer does (see the module docstring).
_NORMALIZER_OVERRIDES = sentencepiece_model_pb2.NormalizerSpec(
    remove_extra_whitespaces=False)


class RemBertVocabulary(seqio.SentencePieceVocabulary):
  """A SentencePiece vocabulary with RemBERT's special pieces.

  The special pieces are looked up (and checked) the first time the model is
  loaded, so a vocabulary without them fails with a message naming the file
  rather than silently masking or padding with ordinary word pieces.
  """

  def __init__(self,
               sentencepiece_model_file: Optional[str] = None,
               extra_ids: int = 0):
    """Creates the vocabulary; the model file is read lazily.

    Args:
      sentencepiece_model_file: path of a SentencePiece `.model` file; None
        resolves it on every use with `default_model_file()` (so tasks can
        be registered before a model exists, and follow the checkpoint a
        run starts from).
      extra_ids: number of extra ids appended to the vocabulary (unused by
        RemBERT; kept for seqio compatibility).
    """
    super().__init__(sentencepiece_model_file, extra_ids=extra_ids,
                     normalizer_spec_overrides=_NORMALIZER_OVERRIDES,
                     use_fast_tokenizer=True)
    self._lazy = sentencepiece_model_file is None
    self._special_ids = None
    self._space_cache = None
    self._encode_rows_cache = None

  def __getstate__(self):
    state = super().__getstate__()
    state.pop("_space_cache", None)
    state.pop("_encode_rows_cache", None)
    # The override proto does not pickle (its module's import name); it is
    # the same constant for every instance.
    state.pop("_normalizer_spec_overrides", None)
    return state

  def __setstate__(self, state):
    super().__setstate__(state)
    self._normalizer_spec_overrides = _NORMALIZER_OVERRIDES
    self._special_ids = None
    self._space_cache = None
    self._encode_rows_cache = None

  def __eq__(self, other):
    if not isinstance(other, seqio.SentencePieceVocabulary):
      # Lets a wrapper that delegates to a vocabulary (the tasks' lazy
      # lazy_vocabulary.DefaultVocabulary) answer the reflected comparison.
      return NotImplemented
    # A lazy vocabulary equals one built from the file it resolves to.
    return (_resolved_path(self) == _resolved_path(other) and
            self.extra_ids == other.extra_ids)

  def __hash__(self):
    return hash((RemBertVocabulary, self.extra_ids))

  @property
  def sentencepiece_model_file(self) -> str:
    if self._lazy:
      return default_model_file()
    return self._sentencepiece_model_file

  def _model_context(self):
    path = self.sentencepiece_model_file
    if path != self._sentencepiece_model_file:
      # A lazy vocabulary whose default changed (or its first use).
      self._sentencepiece_model_file = path
      self._model = None
      self._special_ids = None
      self._space_cache = None
    try:
      context = super()._model_context()
    except Exception as e:  # pylint: disable=broad-except
      # tf NotFoundError, protobuf DecodeError, ... : name the file instead.
      first = (str(e).strip() or type(e).__name__).splitlines()[0]
      if not tf.io.gfile.exists(path):
        raise ValueError(f"{path}: no such SentencePiece model file.") from e
      raise ValueError(f"{path}: cannot load it as a SentencePiece model "
                       f"({first}).") from e
    if self._special_ids is None:
      self._special_ids = pieces.read_special_ids(context.tokenizer, path)
    return context

  @property
  def special_ids(self) -> pieces.SpecialIds:
    if self._lazy or self._special_ids is None:
      # A lazy vocabulary follows the default model file: look again.
      self._model_context()
    return self._special_ids

  @property
  def pad_id(self) -> int:
    return pieces.PAD_ID  # pieces.read_special_ids refuses any other [PAD] id

  @property
  def unk_id(self) -> int:
    return self.special_ids.unk

  @property
  def cls_id(self) -> int:
    return self.special_ids.cls

  @property
  def sep_id(self) -> int:
    return self.special_ids.sep

  @property
  def mask_id(self) -> int:
    return self.special_ids.mask

  @property
  def bos_id(self) -> Optional[int]:
    # No BOS: [CLS] is added by the preprocessors, not by SentencePiece.
    return None

  @property
  def eos_id(self) -> Optional[int]:
    # seqio's `decode` truncates at the first EOS; [SEP] separates segments
    # and must not end decoding, so the vocabulary reports no EOS.
    return None

  def _encode(self, s: str) -> List[int]:
    normalized, _ = pieces.prenormalize(s)
    return [p.id for p in _encode_pieces(self.tokenizer, normalized)]

  @tf.autograph.experimental.do_not_convert
  def _encode_tf(self, s: tf.Tensor) -> tf.Tensor:
    """Scalar string -> int32 [n]; string [k] -> ragged int32 [k, (n)].

    Uses tf_text's FastSentencepieceTokenizer (`use_fast_tokenizer`): it
    breaks ties between equal-score segmentations ("000" -> "0" "00") as the
    Python SentencePiece library and HF do; the older SentencepieceTokenizer
    op does not always.
    """
    ids = self._encode_rows_function()(tf.reshape(s, [-1]))
    return ids[0] if s.shape.rank == 0 else ids

  def _encode_rows_function(self):
    """`_encode_rows_tf` as one tf.function per model, traced once.

    Every pipeline that tokenises (each task's `get_dataset`, each
    evaluation) calls `encode_tf` while tf.data traces its map functions;
    building the tokenizer and the fix-ups' graph there each time took
    ~0.25 s. Called from a trace, the tf.function adds its one traced graph
    to the pipeline's function library instead. Keyed on the model bytes:
    a lazy vocabulary that moves to another model file gets a new one.
    """
    model = self.sp_model
    cached = self._encode_rows_cache
    if cached is None or cached[0] is not model:
      function = tf.function(
          self._encode_rows_tf, autograph=False, reduce_retracing=True,
          input_signature=[tf.TensorSpec([None], tf.string)])
      cached = self._encode_rows_cache = (model, function)
    return cached[1]

  def _encode_rows_tf(self, s: tf.Tensor) -> tf.RaggedTensor:
    """String [k] -> ragged int32 [k, (n)]: `_encode_tf`'s work."""
    text = _prenormalize_tf(s)
    ids = self.tf_tokenizer.tokenize(text).with_row_splits_dtype(tf.int64)
    # The fix-ups below work on the flat pieces with dense ops: the same
    # logic on ragged tensors (ragged broadcasting) cost ~0.7 s of tracing
    # per pipeline.
    values = tf.cast(ids.flat_values, tf.int32)
    rows = ids.value_rowids()
    starts = ids.row_starts()
    lengths = ids.row_lengths()
    position = tf.range(tf.size(values, out_type=tf.int64)) - tf.gather(
        starts, rows)
    space_id, space_initial = self._space_pieces()
    last = tf.maximum(tf.size(values, out_type=tf.int64) - 1, 0)

    def piece(offset):
      # Each row's piece at `offset` (0 or 1); -1 where the row is shorter.
      index = tf.minimum(starts + offset, last)
      return tf.where(lengths > offset,
                      tf.gather(tf.pad(values, [[0, 1]]), index), -1)

    first_is_space = tf.equal(piece(0), space_id) & (space_id >= 0)
    # Rows whose two first pieces are a doubled "▁" prefix (see
    # `_doubled_prefix`) lose the first one.
    second = piece(1)
    second_initial = tf.gather(tf.constant(space_initial),
                               tf.maximum(second, 0)) & (second >= 0)
    drop = first_is_space & second_initial
    # Rows of one "▁" whose text normalises to nothing (see _encode_pieces)
    # become empty; such rows are rare, so only they are tokenised again,
    # without the "▁" prefix, to tell them from a real single space.
    lone = tf.equal(lengths, 1) & first_is_space
    empty = tf.equal(self._no_prefix_tf_tokenizer().tokenize(
        tf.boolean_mask(text, lone)).row_lengths(), 0)
    drop_all = tf.scatter_nd(tf.where(lone), tf.cast(empty, tf.int32),
                             tf.shape(lone, out_type=tf.int64)) > 0
    keep = ~(((position == 0) & tf.gather(drop, rows)) |
             tf.gather(drop_all, rows))
    return tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(values, keep), tf.boolean_mask(rows, keep),
        nrows=ids.nrows(), validate=False)

  def _space_pieces(self) -> Tuple[int, np.ndarray]:
    """The id of the piece "▁" (-1 if none); which pieces start with "▁"."""
    tokenizer = self.tokenizer  # (re)loads; a new file resets the cache
    if self._space_cache is None:
      space_id = tokenizer.PieceToId(_SPACE)
      if tokenizer.IdToPiece(space_id) != _SPACE:
        space_id = -1
      initial = np.array([tokenizer.IdToPiece(i).startswith(_SPACE)
                          for i in range(tokenizer.GetPieceSize())])
      self._space_cache = (space_id, initial)
    return self._space_cache

  @property
  def tf_tokenizer(self):
    return fast_tokenizer.FastSentencepieceTokenizer(self.sp_model)

  def _no_prefix_tf_tokenizer(self):
    return fast_tokenizer.FastSentencepieceTokenizer(
        fast_tokenizer.without_dummy_prefix(self.sp_model))

  def encode_with_offsets(
      self, text: str) -> Tuple[List[int], List[Tuple[int, int]]]:
    """Tokenises `text` and returns each token's character span in it.

    SentencePiece reports spans as UTF-8 *byte* offsets into its input;
    they are converted here to Python `str` indices of the original text
    (before the pre-normalisation). Spans exclude whitespace, so that
    `text[start:end]` is the visible text of the token; a piece made only of
    whitespace gets an empty span where it begins. When NFKC normalisation
    expands one character into several pieces (e.g. "…" -> ".", ".", "."),
    the last of them gets the character's span and the earlier ones an empty
    span at its start, as SentencePiece reports.

    Args:
      text: a Python string.

    Returns:
      (ids, offsets): `ids` equals `self.encode(text)`; `offsets[i]` is the
      `(start, end)` character span of token `i`.
    """
    return encode_with_offsets(self.tokenizer, text)


def _resolved_path(vocab: seqio.SentencePieceVocabulary) -> Optional[str]:
  # Unlike `sentencepiece_model_file`, never raises (equality must not).
  if getattr(vocab, "_lazy", False):
    return _default_model_file_or_none()
  return vocab._sentencepiece_model_file  # pylint: disable=protected-access


# --- Which file a lazy vocabulary uses --------------------------------------

# Set by `use_checkpoint_vocabulary` / `checkpoint_vocabulary`; see the
# module docstring for the order.
_defaults: Dict[str, Optional[str]] = {"explicit": None, "checkpoint": None}


def _default_model_file_or_none() -> Optional[str]:
  return (_defaults["explicit"] or os.environ.get(SPM_PATH_ENV) or
          _defaults["checkpoint"])


def default_model_file() -> str:
  """The file lazy vocabularies use now; raises if there is none."""
  path = _default_model_file_or_none()
  if not path:
    raise ValueError(
        f"Environment variable {SPM_PATH_ENV} is not set: point it at a "
        "RemBERT SentencePiece model (train one with rembert-train-vocab), "
        f"or start from a checkpoint directory holding {pieces.VOCABULARY_FILENAME} "
        "(the checkpoint converters put it there).")
  if not tf.io.gfile.exists(path):
    from_env = (not _defaults["explicit"] and
                path == os.environ.get(SPM_PATH_ENV))
    raise ValueError(f"{SPM_PATH_ENV + '=' if from_env else ''}{path}: no "
                     "such SentencePiece model file.")
  return path


def default_vocabulary() -> RemBertVocabulary:
  """A vocabulary whose file is `default_model_file()` at each use.

  Nothing is read here, so registering tasks works without a model on disk.
  Using it with no file chosen, or naming a missing file, raises ValueError.
  """
  return RemBertVocabulary(None)


def find_checkpoint_vocabulary(checkpoint_path: str) -> Optional[str]:
  """The `sentencepiece.model` that belongs to a checkpoint, if any.

  Looked up in the path itself and in the MODEL_DIR above a step directory:
  ours (`MODEL_DIR/checkpoints[/<step>]`) and T5X's (`MODEL_DIR/checkpoint_N`).
  """
  path = checkpoint_path.rstrip("/")
  candidates = [path]
  parent, name = os.path.split(path)
  if name == "checkpoints" or re.fullmatch(r"checkpoint_\d+", name):
    candidates.append(parent)
  elif name.isdigit() and os.path.basename(parent) == "checkpoints":
    candidates.append(os.path.dirname(parent))
  for directory in candidates:
    model_file = os.path.join(directory, pieces.VOCABULARY_FILENAME)
    if tf.io.gfile.exists(model_file):
      return model_file
  return None


def use_checkpoint_vocabulary(*checkpoint_paths: Optional[str],
                              sentencepiece_model: Optional[str] = None
                              ) -> Optional[str]:
  """Makes a run's vocabulary the default of lazy vocabularies.

  Call it when a run starts, before a task's vocabulary is first used; each
  call replaces the previous run's choice (a process may run several).
  `sentencepiece_model` (an explicit choice) wins over $REMBERT_SPM_PATH,
  which wins over the first of `checkpoint_paths` (None entries are
  skipped) that holds a `sentencepiece.model`.

  Returns:
    The file lazy vocabularies now use, or None if none is chosen.
  """
  _defaults["explicit"] = sentencepiece_model or None
  _defaults["checkpoint"] = None
  for path in checkpoint_paths:
    found = find_checkpoint_vocabulary(path) if path else None
    if found:
      _defaults["checkpoint"] = found
      break
  _check_same_vocabulary(_defaults["explicit"], _defaults["checkpoint"])
  return _default_model_file_or_none()


def _check_same_vocabulary(explicit: Optional[str],
                           checkpoint: Optional[str]) -> None:
  """Refuses a vocabulary other than the checkpoint's, unless asked for.

  A checkpoint's embedding rows mean the pieces of the vocabulary it was
  trained with; another file (even one of the same size) silently feeds it
  other ids. Setting $REMBERT_ALLOW_OTHER_VOCABULARY=1 allows it (logged).

  Raises:
    errors.UserError: the run's choice (`explicit`, else $REMBERT_SPM_PATH)
      and the checkpoint's `sentencepiece.model` are different files.
  """
  chosen = explicit or os.environ.get(SPM_PATH_ENV)
  if not chosen or not checkpoint:
    return
  try:
    with tf.io.gfile.GFile(chosen, "rb") as a, \
        tf.io.gfile.GFile(checkpoint, "rb") as b:
      if a.read() == b.read():
        return
  except (OSError, tf.errors.OpError):
    return  # a missing file is reported where it is read, naming it
  where = "SENTENCEPIECE_MODEL" if explicit else f"${SPM_PATH_ENV}"
  if os.environ.get(ALLOW_OTHER_VOCABULARY_ENV) == "1":
    logging.warning("using %s (%s), not the checkpoint's vocabulary %s "
                    "($%s=1)", chosen, where, checkpoint,
                    ALLOW_OTHER_VOCABULARY_ENV)
    return
  raise errors.UserError(
      f"the run's vocabulary {chosen} ({where}) differs from the "
      f"checkpoint's {checkpoint}: the checkpoint's ids mean its own pieces. "
      f"Leave {where} unset to use the checkpoint's, or set "
      f"{ALLOW_OTHER_VOCABULARY_ENV}=1 to use the other one anyway")


def save_vocabulary(model_file: str, directory: str) -> str:
  """Copies `model_file` to `directory/sentencepiece.model` (a run's own copy).

  A directory that already holds a different vocabulary is an error: its
  checkpoints' ids would mean other pieces.

  Returns:
    The path written (or already there).
  """
  target = os.path.join(directory, pieces.VOCABULARY_FILENAME)
  with tf.io.gfile.GFile(model_file, "rb") as f:
    data = f.read()
  if tf.io.gfile.exists(target):
    with tf.io.gfile.GFile(target, "rb") as f:
      if f.read() != data:
        raise ValueError(
            f"{target} differs from the vocabulary this run uses "
            f"({model_file}): the directory's checkpoints were made with "
            "another vocabulary; use a new directory, or that vocabulary.")
    return target
  tf.io.gfile.makedirs(directory)
  if "://" in directory:
    with tf.io.gfile.GFile(target, "wb") as f:
      f.write(data)
  else:
    io_utils.atomic_write_bytes(target, data)
  return target


@gin.configurable
def checkpoint_vocabulary(checkpoint_path: Optional[str] = None,
                          model_dir: Optional[str] = None,
                          sentencepiece_model: Optional[str] = None
                          ) -> RemBertVocabulary:
  """Gin hook of T5X runs: the run's vocabulary, from its checkpoint.

  Bound as the model's `input_vocabulary` (gin_configs/runs/*_base.gin), so
  it runs when T5X builds the model, before any dataset. Makes
  `sentencepiece_model`, else $REMBERT_SPM_PATH, else the vocabulary beside
  `checkpoint_path` (INITIAL_CHECKPOINT_PATH / CHECKPOINT_PATH) or in
  `model_dir` (a resumed run) the default of the lazy task vocabularies, and
  copies it into `model_dir` so later runs and evaluations from there find
  it.

  Returns:
    The lazy default vocabulary (equal to the tasks' default vocabulary).
  """
  chosen = use_checkpoint_vocabulary(checkpoint_path, model_dir,
                                     sentencepiece_model=sentencepiece_model)
  if chosen and model_dir:
    save_vocabulary(chosen, model_dir)
  return default_vocabulary()


def move_special_pieces(model_file: str, output_file: str,
                        positions: Mapping[str, int]) -> str:
  """Writes a copy of a SentencePiece model with pieces moved to new ids.

  Tokenisation is unchanged up to the id permutation (a unigram model's
  segmentation depends on piece scores, not positions); the other pieces
  keep their order. Used to build vocabularies with another model's layout,
  e.g. the released RemBERT's [CLS]=312, [SEP]=313, for tests.

  Args:
    model_file: the source `.model`.
    output_file: where to write the result.
    positions: piece -> new id (ids must be distinct and < the piece count).

  Returns:
    `output_file`.
  """
  proto = sentencepiece_model_pb2.ModelProto()
  with tf.io.gfile.GFile(model_file, "rb") as f:
    proto.ParseFromString(f.read())
  pieces = list(proto.pieces)
  by_name = {p.piece: p for p in pieces}
  if len(set(positions.values())) != len(positions) or any(
      not 0 <= i < len(pieces) for i in positions.values()):
    raise ValueError(f"positions {dict(positions)} must be distinct ids in "
                     f"[0, {len(pieces)}).")
  missing = [name for name in positions if name not in by_name]
  if missing:
    raise ValueError(f"{model_file}: no piece {missing[0]!r} to move.")
  rest = iter(p for p in pieces if p.piece not in positions)
  placed = {i: by_name[name] for name, i in positions.items()}
  ordered = [placed[i] if i in placed else next(rest)
             for i in range(len(pieces))]
  new_pieces = [sentencepiece_model_pb2.ModelProto.SentencePiece()
                for _ in ordered]
  for new, old in zip(new_pieces, ordered):
    new.CopyFrom(old)
  del proto.pieces[:]
  proto.pieces.extend(new_pieces)
  names = [p.piece for p in new_pieces]
  spec = proto.trainer_spec
  # Keep the trainer spec's ids consistent with the moved pieces.
  for kind in ("unk", "pad", "bos", "eos"):
    piece = getattr(spec, f"{kind}_piece")
    if getattr(spec, f"{kind}_id") >= 0 and piece in names:
      setattr(spec, f"{kind}_id", names.index(piece))
  with tf.io.gfile.GFile(output_file, "wb") as f:
    f.write(proto.SerializeToString())
  return output_file
