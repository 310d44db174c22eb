r"""Trains a RemBERT SentencePiece unigram vocabulary on multilingual text.

  python scripts/train_vocab.py --input_dir=corpus/ --vocab_size=32000 \
      --alpha=0.5 --model_prefix=/tmp/rembert_spm

One file (or folder) per language; the language code comes from the name
(see rembert_t5x/data/text_sources.py). Prints the path of the written model.
"""


from absl import app
from absl import flags

from rembert_t5x.data import text_sources
from rembert_t5x.data import vocabulary
from rembert_t5x.runner import cli

_INPUT_DIR = flags.DEFINE_string(
    "input_dir", None, "Directory with one text file or folder per language.")
_INPUT_GLOB = flags.DEFINE_string(
    "input_glob", None, "Glob of text files, one language per file.")
_VOCAB_SIZE = flags.DEFINE_integer(
    "vocab_size", 32000, "Number of pieces, special tokens included.")
_ALPHA = flags.DEFINE_float(
    "alpha", 0.5, "Language sampling exponent: p_l ∝ n_l^alpha.")
_MODEL_PREFIX = flags.DEFINE_string(
    "model_prefix", None, "Output prefix: writes <prefix>.model/.vocab.")
_MAX_SENTENCES = flags.DEFINE_integer(
    "max_sentences", 10_000_000, "Cap on the number of lines drawn for training.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the line sampling.")
_CHARACTER_COVERAGE = flags.DEFINE_float(
    "character_coverage", 0.9995, "SentencePiece character coverage.")
_NUM_THREADS = flags.DEFINE_integer("num_threads", 1, "Trainer threads.")

flags.mark_flag_as_required("model_prefix")


def main(argv):
  del argv
  # Bad input (ValueError, OSError): one line, no traceback.
  with cli.user_errors(ValueError, OSError):
    files_by_lang = text_sources.find_language_files(
        input_dir=_INPUT_DIR.value, input_glob=_INPUT_GLOB.value)
    path = vocabulary.train_sentencepiece(
        files_by_lang,
        model_prefix=_MODEL_PREFIX.value,
        vocab_size=_VOCAB_SIZE.value,
        alpha=_ALPHA.value,
        max_sentences=_MAX_SENTENCES.value,
        seed=_SEED.value,
        character_coverage=_CHARACTER_COVERAGE.value,
        num_threads=_NUM_THREADS.value)
  print(path)


if __name__ == "__main__":
  app.run(main)
