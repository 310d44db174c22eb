r"""Trains a RemBERT SentencePiece unigram vocabulary on multilingual text.

  rembert-train-vocab --input_dir=corpus/ --vocab_size=32000 \
      --alpha=0.5 --model_prefix=/tmp/rembert_spm

One file (or folder) per language; the language code comes from the name
(see rembert_t5x/data/text_sources.py). Prints the path of the written model.
"""


from absl import flags

from rembert_t5x.common import cli
from rembert_t5x.data import pieces
from rembert_t5x.data import text_sources


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_string("input_dir", None, "Directory with one text file or "
                      "folder per language.", flag_values=fv)
  flags.DEFINE_string("input_glob", None, "Glob of text files, one language "
                      "per file.", flag_values=fv)
  flags.DEFINE_integer("vocab_size", 32000, "Number of pieces, special "
                       "tokens included.", flag_values=fv)
  flags.DEFINE_float("alpha", 0.5, "Language sampling exponent: "
                     "p_l ∝ n_l^alpha.", flag_values=fv)
  flags.DEFINE_string("model_prefix", None, "Output prefix: writes "
                      "<prefix>.model/.vocab.", flag_values=fv, required=True)
  flags.DEFINE_integer("max_sentences", 10_000_000, "Cap on the number of "
                       "lines drawn for training.", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "Seed of the line sampling.",
                       flag_values=fv)
  flags.DEFINE_float("character_coverage", 0.9995, "SentencePiece character "
                     "coverage.", flag_values=fv)
  flags.DEFINE_integer("num_threads", 1, "Trainer threads.", flag_values=fv)


def _main(fv: flags.FlagValues) -> str:
  files_by_lang = text_sources.find_language_files(
      input_dir=fv.input_dir, input_glob=fv.input_glob)
  # `pieces`, not `vocabulary`: training needs SentencePiece only, not the
  # TensorFlow and seqio `vocabulary` imports (~10 s of start-up).
  return pieces.train_sentencepiece(
      files_by_lang,
      model_prefix=fv.model_prefix,
      vocab_size=fv.vocab_size,
      alpha=fv.alpha,
      max_sentences=fv.max_sentences,
      seed=fv.seed,
      character_coverage=fv.character_coverage,
      num_threads=fv.num_threads)


def main(argv=None) -> None:
  # Bad input (ValueError, OSError) from the readers: one line, exit 2.
  print(cli.run_main(_main, argv, _define_flags, doc=__doc__,
                     also=(ValueError, OSError)))


if __name__ == "__main__":
  main()
