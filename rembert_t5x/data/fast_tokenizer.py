"""tf_text's fast SentencePiece tokenizer, cheap to build inside a tf.data trace.

`RemBertVocabulary.encode_tf` builds its tokenizers while tf.data traces a
task's pipeline; see `FastSentencepieceTokenizer` for why tf_text's own
constructor is not used as is.
"""

import functools
from typing import Tuple

import numpy as np
from sentencepiece import sentencepiece_model_pb2
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.core.pybinds import pywrap_model_converter


class FastSentencepieceTokenizer(tf_text.FastSentencepieceTokenizer):
  """tf_text's fast tokenizer, built from a model converted once.

  tf_text's own constructor converts the model again every time and turns
  the converted bytes into a tensor through a Python list, one element at a
  time; inside a tf.data trace that took ~0.8 s per tokenizer for a
  400-piece model (and grows with the model: the released one is ~4.7 MB).
  A uint8 array gives the same constant at once; tokenize/detokenize are
  tf_text's, unchanged.
  """

  def __init__(self, model: bytes):  # pylint: disable=super-init-not-called
    converted, detokenizer, size = _converted_model(model)
    self._converted_model = tf.constant(converted)
    self._converted_model_detokenizer = tf.constant(detokenizer)
    self._vocab_size = size
    self._reverse = False
    self._add_bos = False
    self._add_eos = False


@functools.lru_cache(maxsize=8)
def _converted_model(model: bytes) -> Tuple[np.ndarray, np.ndarray, int]:
  """tf_text's FST form of a SentencePiece model (tokenizer, decoder, size)."""
  converted = pywrap_model_converter.convert_sentencepiece_model(model)
  detokenizer = (
      pywrap_model_converter.convert_sentencepiece_model_for_decoder(model))
  return (np.frombuffer(converted, dtype=np.uint8),
          np.frombuffer(detokenizer, dtype=np.uint8),
          pywrap_model_converter.get_vocabulary_size(converted))


@functools.lru_cache(maxsize=8)
def without_dummy_prefix(model: bytes) -> bytes:
  """The same model with SentencePiece's "▁" prefix turned off."""
  proto = sentencepiece_model_pb2.ModelProto.FromString(model)
  proto.normalizer_spec.add_dummy_prefix = False
  return proto.SerializeToString()
