"""XNLI: train on English MultiNLI, evaluate zero-shot on 15 languages.

Registered names (prefix "rembert_" by default):

  rembert_xnli_train_en   MultiNLI train (TFDS `multi_nli:1.1.0`), English.
  rembert_xnli_{lang}     XNLI validation / test (TFDS `xnli:1.1.0`), one
                          task per language, English included.
  rembert_xnli_zeroshot   the training task plus every evaluation task.

Local-file copies read XTREME's `xnli/` folder (`train-en.tsv`,
`dev-{lang}.tsv`, `test-{lang}.tsv`) under the prefix "rembert_local_";
they are registered on import when $REMBERT_XTREME_DIR is set.

Metric: accuracy (percent). The model predicts one class id per example.
"""

import functools
import os
from typing import List, Optional, Sequence

import seqio

from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x.data import xtreme_readers
from rembert_t5x.scoring import metrics
from rembert_tasks import registry

XNLI_LANGUAGES = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw",
                  "th", "tr", "ur", "vi", "zh")
LABELS = xtreme_readers.XNLI_LABELS
XTREME_DIR_ENV = registry.XTREME_DIR_ENV


def _register(source_for, vocabulary, prefix, languages,
              train_preprocessors, eval_preprocessors) -> List[str]:
  return registry.register_pair(
      "xnli", source_for, languages, prefix=prefix, labels=LABELS,
      vocabulary=vocabulary, metric_fn=metrics.accuracy_metric,
      preprocessors_for=lambda role, lang: (
          train_preprocessors if role == "train"
          else eval_preprocessors(lang)))


def register_xnli(vocabulary: Optional[seqio.Vocabulary] = None,
                  prefix: str = "rembert_",
                  languages: Sequence[str] = XNLI_LANGUAGES) -> List[str]:
  """Registers the TFDS-backed XNLI tasks and mixture; returns task names."""

  def source_for(role, lang):
    if role == "train":
      return seqio.TfdsDataSource("multi_nli:1.1.0", splits=("train",))
    del lang  # One TFDS dataset holds every language.
    return seqio.TfdsDataSource("xnli:1.1.0", splits=("validation", "test"))

  rekey = functools.partial(
      seqio.preprocessors.rekey,
      key_map={"sentence1": "premise", "sentence2": "hypothesis",
               "label": "label"})
  return _register(
      source_for, vocabulary, prefix, languages, [rekey],
      lambda lang: [functools.partial(xp.select_xnli_language,
                                      language=lang)])


def register_xnli_local(data_dir: str,
                        vocabulary: Optional[seqio.Vocabulary] = None,
                        prefix: str = "rembert_local_",
                        languages: Sequence[str] = XNLI_LANGUAGES
                        ) -> List[str]:
  """Registers XNLI tasks over XTREME's `{data_dir}/xnli/*.tsv` files."""

  source_for = registry.xtreme_files(
      data_dir, "xnli", lambda paths, lang: xtreme_readers.pair_source(
          paths, xtreme_readers.XNLI_LABEL_IDS))
  return _register(source_for, vocabulary, prefix, languages, [],
                   lambda lang: [])


register_xnli()
if os.environ.get(XTREME_DIR_ENV):
  register_xnli_local(os.environ[XTREME_DIR_ENV])
