"""UD-POS: train on English Universal Dependencies, evaluate on 33 languages.

Registered names (prefix "rembert_" by default):

  rembert_udpos_train_en   English UD train (TFDS `xtreme_pos/xtreme_pos_en`).
  rembert_udpos_{lang}     the language's dev ("validation") and test splits,
                           one task per XTREME language, English included.
  rembert_udpos_zeroshot   the training task plus every evaluation task.

Every one of the 33 languages has a test split (a test-set submission
predicts all 33); 29 have a dev set, so dev-set averages (the sweep's) cover
29, and the sweep's `sweep.md` names the four left out.

TFDS facts (tensorflow-datasets 4.9.10, `xtreme_pos:1.0.0`, UD v2.5, the
treebanks XTREME's `download_data.sh` fetches for these 33 languages; its
UD v2.7 download is only for the languages XTREME-R added):
  - configs are named `xtreme_pos_{lang}` and the splits "train", "dev",
    "test";
  - its language table swaps Tagalog and Tamil (`xtreme_pos_ta` reads the
    Tagalog treebanks, `xtreme_pos_tl` the Tamil ones), so the tasks here
    map ta <-> tl to get the right data;
  - Tagalog, Thai and Yoruba have only a test split, Kazakh train and test.
Local-file copies read XTREME's `udpos/{split}-{lang}.tsv` (`word<TAB>UPOS`,
blank line between sentences) under the prefix "rembert_local_", with
validation and test splits (test only for kk, th, tl, yo, which have no dev
file: `local_eval_splits`); registered on import when $REMBERT_XTREME_DIR is
set.

Sentences longer than the sequence length are split into parts that fit,
as XTREME's `udpos_tokenize` preprocessing does (xtreme_preprocessors.
split_long_sentences), so no word is lost; the metrics put the parts back
together. The model predicts one tag id per sub-token position (the first
sub-token of each word is scored). Metrics (metrics.pos_metric, percent):
"f1", seqeval's F1 over the UPOS tag sequences, which is what XTREME's
`evaluate.py` reports for UD-POS, and "accuracy" over words.
"""

import functools
import os
from typing import Dict, List, Optional, Sequence

import seqio

from rembert_t5x.data import xtreme_readers
from rembert_t5x.scoring import metrics
from rembert_tasks import registry

UDPOS_LANGUAGES = (
    "af", "ar", "bg", "de", "el", "en", "es", "et", "eu", "fa", "fi", "fr",
    "he", "hi", "hu", "id", "it", "ja", "kk", "ko", "mr", "nl", "pt", "ru",
    "ta", "te", "th", "tl", "tr", "ur", "vi", "yo", "zh")
# TFDS UPOS ClassLabel order (its last name "_" never occurs: xtreme_pos
# drops such words).
LABELS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
          "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X", "_")
# See the module docstring: TFDS 4.9.10 swaps these two configs.
TFDS_CONFIG_LANGUAGE = {"ta": "tl", "tl": "ta"}
# Our split name -> TFDS split, where a language lacks some.
TFDS_EVAL_SPLITS = {
    "tl": {"test": "test"},
    "th": {"test": "test"},
    "yo": {"test": "test"},
    "kk": {"test": "test"},
}
DEFAULT_EVAL_SPLITS = {"validation": "dev", "test": "test"}
XTREME_DIR_ENV = registry.XTREME_DIR_ENV


def tfds_name(lang: str) -> str:
  """TFDS name holding the UD treebanks of `lang` (ISO 639-1)."""
  config = TFDS_CONFIG_LANGUAGE.get(lang, lang)
  return f"xtreme_pos/xtreme_pos_{config}:1.0.0"


def _register(source_for, vocabulary, prefix, languages,
              extra_preprocessors) -> List[str]:
  return registry.register_tagging(
      "udpos", source_for, languages, prefix=prefix, labels=LABELS,
      vocabulary=vocabulary, metric_fn=metrics.pos_metric,
      extra_preprocessors=extra_preprocessors)


def register_udpos(vocabulary: Optional[seqio.Vocabulary] = None,
                   prefix: str = "rembert_",
                   languages: Sequence[str] = UDPOS_LANGUAGES) -> List[str]:
  """Registers the TFDS-backed UD-POS tasks and mixture; returns names."""

  def source_for(role, lang):
    if role == "train":
      splits = {"train": "train"}
    else:
      splits = TFDS_EVAL_SPLITS.get(lang, DEFAULT_EVAL_SPLITS)
    return seqio.TfdsDataSource(tfds_name(lang), splits=splits)

  rekey = functools.partial(seqio.preprocessors.rekey,
                            key_map={"tokens": "tokens", "tags": "upos"})
  return _register(source_for, vocabulary, prefix, languages, [rekey])


def local_eval_splits(lang: str) -> Dict[str, str]:
  """Our split name -> XTREME file split (`{split}-{lang}.tsv`) of `lang`.

  The UD treebanks of kk, th, tl and yo have no dev set (XTREME writes no
  `dev-{lang}.tsv`), as in TFDS: those tasks have a test split only, and a
  'validation' evaluation skips them instead of failing on a missing file.
  """
  return dict(TFDS_EVAL_SPLITS.get(lang, DEFAULT_EVAL_SPLITS))


def register_udpos_local(data_dir: str,
                         vocabulary: Optional[seqio.Vocabulary] = None,
                         prefix: str = "rembert_local_",
                         languages: Sequence[str] = UDPOS_LANGUAGES
                         ) -> List[str]:
  """Registers UD-POS tasks over XTREME's `{data_dir}/udpos/*.tsv` files."""

  source_for = registry.xtreme_files(
      data_dir, "udpos",
      lambda paths, lang: xtreme_readers.tagging_source(paths, LABELS),
      eval_splits=local_eval_splits)
  return _register(source_for, vocabulary, prefix, languages, [])


register_udpos()
if os.environ.get(XTREME_DIR_ENV):
  register_udpos_local(os.environ[XTREME_DIR_ENV])
