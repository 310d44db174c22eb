"""PAN-X (WikiANN NER): train on English, evaluate zero-shot on 40 languages.

Registered names (prefix "rembert_" by default):

  rembert_panx_train_en   WikiANN English train (TFDS `wikiann/en:1.0.0`).
  rembert_panx_{lang}     validation / test of `wikiann/{lang}:1.0.0`, one
                          task per XTREME language, English included.
  rembert_panx_zeroshot   the training task plus every evaluation task.

Local-file copies read XTREME's `panx/{split}-{lang}.tsv` (`token<TAB>tag`,
blank line between sentences; a raw "{lang}:" token prefix is stripped)
under the prefix "rembert_local_"; registered on import when
$REMBERT_XTREME_DIR is set.

Sentences longer than the sequence length are split into parts that fit,
as XTREME's `panx_tokenize` preprocessing does (xtreme_preprocessors.
split_long_sentences), so no word is lost. Words are labelled on their first
sub-token (xtreme_preprocessors.align_word_tags). The model predicts one tag
id per sub-token position; the postprocessor reads them back per word, and
the metric puts the parts of a sentence back together before scoring, as
XTREME's `evaluate.py` does. Metric: entity-level F1 (seqeval, IOB2),
percent.
"""

import os
from typing import List, Optional, Sequence

import seqio

from rembert_t5x.data import xtreme_readers
from rembert_t5x.scoring import metrics
from rembert_tasks import registry

PANX_LANGUAGES = (
    "af", "ar", "bg", "bn", "de", "el", "en", "es", "et", "eu", "fa", "fi",
    "fr", "he", "hi", "hu", "id", "it", "ja", "jv", "ka", "kk", "ko", "ml",
    "mr", "ms", "my", "nl", "pt", "ru", "sw", "ta", "te", "th", "tl", "tr",
    "ur", "vi", "yo", "zh")
# TFDS `wikiann` ClassLabel order; local files are mapped to these ids.
LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
XTREME_DIR_ENV = registry.XTREME_DIR_ENV


def _register(source_for, vocabulary, prefix, languages) -> List[str]:
  return registry.register_tagging(
      "panx", source_for, languages, prefix=prefix, labels=LABELS,
      vocabulary=vocabulary, metric_fn=metrics.entity_f1_metric)


def register_panx(vocabulary: Optional[seqio.Vocabulary] = None,
                  prefix: str = "rembert_",
                  languages: Sequence[str] = PANX_LANGUAGES) -> List[str]:
  """Registers the TFDS-backed PAN-X tasks and mixture; returns names."""

  def source_for(role, lang):
    splits = ("train",) if role == "train" else ("validation", "test")
    return seqio.TfdsDataSource(f"wikiann/{lang}:1.0.0", splits=splits)

  return _register(source_for, vocabulary, prefix, languages)


def register_panx_local(data_dir: str,
                        vocabulary: Optional[seqio.Vocabulary] = None,
                        prefix: str = "rembert_local_",
                        languages: Sequence[str] = PANX_LANGUAGES
                        ) -> List[str]:
  """Registers PAN-X tasks over XTREME's `{data_dir}/panx/*.tsv` files."""

  source_for = registry.xtreme_files(
      data_dir, "panx", lambda paths, lang: xtreme_readers.tagging_source(
          paths, LABELS, strip_prefix=f"{lang}:"))
  return _register(source_for, vocabulary, prefix, languages)


register_panx()
if os.environ.get(XTREME_DIR_ENV):
  register_panx_local(os.environ[XTREME_DIR_ENV])
