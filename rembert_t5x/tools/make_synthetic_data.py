r"""Writes the synthetic multilingual corpus and XTREME-format tasks.

  rembert-make-synthetic-data --workdir=/tmp/rembert_synthetic

Takes a few seconds with the defaults. The file layout and formats are
described in rembert_t5x/data/synthetic.py; prints the path of manifest.json and
the trivial-baseline (chance) scores of the dev sets as JSON.
"""

import json
import os

from absl import flags

from rembert_t5x.common import cli
from rembert_t5x.data import synthetic
from rembert_t5x.data import synthetic_files
from rembert_t5x.experiments import synthetic_baselines


def _define_flags(fv: flags.FlagValues) -> None:
  def integer(name, default, text):
    flags.DEFINE_integer(name, default, text, flag_values=fv)

  flags.DEFINE_string("workdir", None, "Output directory.", flag_values=fv,
                      required=True)
  integer("seed", 0, "Data seed.")
  integer("num_languages", synthetic.DEFAULT_NUM_LANGUAGES,
          f"Use the first N of {[s.code for s in synthetic.LANGUAGES]}.")
  flags.DEFINE_list("languages", None, "Explicit language codes (overrides "
                    "--num_languages).", flag_values=fv)
  integer("corpus_sentences", synthetic_files.CORPUS_SENTENCES,
          "Corpus sentences per language.")
  integer("pair_train", 2000, "Training pairs.")
  integer("tag_train", 1000, "Training sentences for tagging.")
  integer("qa_train", 1500, "Training questions.")
  integer("qa_sentences_per_context", 2, "Sentences per QA context.")
  integer("eval_examples", 200,
          "Examples per dev and per test file and language.")


def _main(fv: flags.FlagValues) -> None:
  synthetic_files.generate(
      fv.workdir, seed=fv.seed, num_languages=fv.num_languages,
      languages=fv.languages, corpus_sentences=fv.corpus_sentences,
      pair_train=fv.pair_train, tag_train=fv.tag_train,
      qa_train=fv.qa_train, eval_examples=fv.eval_examples,
      qa_sentences_per_context=fv.qa_sentences_per_context)
  print(os.path.join(os.path.abspath(fv.workdir), "manifest.json"))
  print(json.dumps(synthetic_baselines.chance_levels(fv.workdir),
                   sort_keys=True))


def main(argv=None) -> None:
  cli.run_main(_main, argv, _define_flags, doc=__doc__)


if __name__ == "__main__":
  main()
