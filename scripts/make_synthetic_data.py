r"""Writes the synthetic multilingual corpus and XTREME-format tasks.

  python scripts/make_synthetic_data.py --workdir=/tmp/rembert_synthetic

Takes about a second with the defaults. The file layout and formats are
described in rembert_t5x/data/synthetic.py; prints the path of manifest.json and
the trivial-baseline (chance) scores of the dev sets as JSON.
"""

import json
import os

from absl import app
from absl import flags

from rembert_t5x.data import synthetic
from rembert_t5x.experiments import synthetic_baselines

_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.",
                               required=True)
_SEED = flags.DEFINE_integer("seed", 0, "Data seed.")
_NUM_LANGUAGES = flags.DEFINE_integer(
    "num_languages", synthetic.DEFAULT_NUM_LANGUAGES,
    f"Use the first N of {[s.code for s in synthetic.LANGUAGES]}.")
_LANGUAGES = flags.DEFINE_list(
    "languages", None, "Explicit language codes (overrides --num_languages).")
_CORPUS_SENTENCES = flags.DEFINE_integer(
    "corpus_sentences", 3000, "Corpus sentences per language.")
_PAIR_TRAIN = flags.DEFINE_integer("pair_train", 2000, "Training pairs.")
_TAG_TRAIN = flags.DEFINE_integer("tag_train", 1000,
                                  "Training sentences for tagging.")
_QA_TRAIN = flags.DEFINE_integer("qa_train", 1500, "Training questions.")
_QA_SENTENCES = flags.DEFINE_integer(
    "qa_sentences_per_context", 2, "Sentences per QA context.")
_EVAL_EXAMPLES = flags.DEFINE_integer(
    "eval_examples", 200, "Examples per dev and per test file and language.")


def main(argv):
  del argv
  synthetic.generate(
      _WORKDIR.value, seed=_SEED.value, num_languages=_NUM_LANGUAGES.value,
      languages=_LANGUAGES.value, corpus_sentences=_CORPUS_SENTENCES.value,
      pair_train=_PAIR_TRAIN.value, tag_train=_TAG_TRAIN.value,
      qa_train=_QA_TRAIN.value, eval_examples=_EVAL_EXAMPLES.value,
      qa_sentences_per_context=_QA_SENTENCES.value)
  print(os.path.join(os.path.abspath(_WORKDIR.value), "manifest.json"))
  print(json.dumps(synthetic_baselines.chance_levels(_WORKDIR.value), sort_keys=True))


if __name__ == "__main__":
  app.run(main)
