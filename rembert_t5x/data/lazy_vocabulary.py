"""The tasks' default vocabulary, resolved on first use.

Task modules register at import time, before a run has said which
SentencePiece model it uses (T5X binds it through
`vocabulary.checkpoint_vocabulary` when it builds the model, after the task
module is imported). This proxy stands in for `vocabulary.default_vocabulary()`
until a method needs the real one. It sits beside vocabulary.py rather than
in it to keep that file under the size budget.
"""

from typing import Optional

import seqio

from rembert_t5x.data import pieces
from rembert_t5x.data import vocabulary as vocab_lib


class DefaultVocabulary(seqio.Vocabulary):
  """Defers to `vocabulary.default_vocabulary()` ($REMBERT_SPM_PATH) on use.

  Lets the default tasks register at import time without a SentencePiece
  model on disk (docs/DESIGN.md). Every method delegates to the real
  vocabulary, loaded the first time one is called.
  """

  def __init__(self):
    self._vocab = None
    super().__init__(extra_ids=0)

  def resolve(self) -> seqio.Vocabulary:
    if self._vocab is None:
      self._vocab = vocab_lib.default_vocabulary()
    return self._vocab

  def __getattr__(self, name):
    # Only reached for attributes not defined here (tokenizer,
    # encode_with_offsets, sentencepiece_model_file, ...).
    if name.startswith("__") or name == "_vocab":
      raise AttributeError(name)
    return getattr(self.resolve(), name)

  @property
  def eos_id(self) -> Optional[int]:
    return self.resolve().eos_id

  @property
  def unk_id(self) -> Optional[int]:
    return self.resolve().unk_id

  @property
  def pad_id(self) -> int:
    return pieces.PAD_ID

  @property
  def _base_vocab_size(self) -> int:
    return self.resolve().vocab_size

  def _encode(self, s):
    return self.resolve().encode(s)

  def _decode(self, ids):
    return self.resolve().decode(ids)

  def _encode_tf(self, s):
    return self.resolve().encode_tf(s)

  def _decode_tf(self, ids):
    return self.resolve().decode_tf(ids)

  def __eq__(self, other):
    if isinstance(other, DefaultVocabulary):
      return True
    return isinstance(other, seqio.Vocabulary) and self.resolve() == other

  def __hash__(self):
    return hash(DefaultVocabulary)
