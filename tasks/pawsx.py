"""PAWS-X: train on English PAWS, evaluate zero-shot on 7 languages.

Registered names (prefix "rembert_" by default):

  rembert_pawsx_train_en   PAWS-X English train (TFDS `paws_x_wiki/en:1.0.0`).
  rembert_pawsx_{lang}     validation / test of `paws_x_wiki/{lang}:1.0.0`,
                           one task per language, English included.
  rembert_pawsx_zeroshot   the training task plus every evaluation task.

Local-file copies read XTREME's `pawsx/` folder (`train-en.tsv`,
`dev-{lang}.tsv`, `test-{lang}.tsv`; labels "0" / "1") under the prefix
"rembert_local_"; registered on import when $REMBERT_XTREME_DIR is set.

Metric: accuracy (percent). The model predicts one class id per example
(0 = different meaning, 1 = paraphrase).
"""

import os
from typing import List, Optional, Sequence

import seqio

from rembert_t5x.data import xtreme_readers
from rembert_t5x.scoring import metrics
from rembert_tasks import registry

PAWSX_LANGUAGES = ("de", "en", "es", "fr", "ja", "ko", "zh")
LABELS = xtreme_readers.PAWSX_LABELS
XTREME_DIR_ENV = registry.XTREME_DIR_ENV


def _register(source_for, vocabulary, prefix, languages) -> List[str]:
  return registry.register_pair(
      "pawsx", source_for, languages, prefix=prefix, labels=LABELS,
      vocabulary=vocabulary, metric_fn=metrics.accuracy_metric)


def register_pawsx(vocabulary: Optional[seqio.Vocabulary] = None,
                   prefix: str = "rembert_",
                   languages: Sequence[str] = PAWSX_LANGUAGES) -> List[str]:
  """Registers the TFDS-backed PAWS-X tasks and mixture; returns names."""

  def source_for(role, lang):
    splits = ("train",) if role == "train" else ("validation", "test")
    return seqio.TfdsDataSource(f"paws_x_wiki/{lang}:1.0.0", splits=splits)

  return _register(source_for, vocabulary, prefix, languages)


def register_pawsx_local(data_dir: str,
                         vocabulary: Optional[seqio.Vocabulary] = None,
                         prefix: str = "rembert_local_",
                         languages: Sequence[str] = PAWSX_LANGUAGES
                         ) -> List[str]:
  """Registers PAWS-X tasks over XTREME's `{data_dir}/pawsx/*.tsv` files."""

  source_for = registry.xtreme_files(
      data_dir, "pawsx", lambda paths, lang: xtreme_readers.pair_source(
          paths, xtreme_readers.PAWSX_LABEL_IDS))
  return _register(source_for, vocabulary, prefix, languages)


register_pawsx()
if os.environ.get(XTREME_DIR_ENV):
  register_pawsx_local(os.environ[XTREME_DIR_ENV])
