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

from rembert_t5x import metrics
from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x.data import xtreme_readers

XNLI_LANGUAGES = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw",
                  "th", "tr", "ur", "vi", "zh")
LABELS = xtreme_readers.XNLI_LABELS
XTREME_DIR_ENV = "REMBERT_XTREME_DIR"


def _register(source_for, vocabulary, prefix, languages,
              train_preprocessors, eval_preprocessors) -> List[str]:
  vocabulary = vocabulary or xp.DefaultVocabulary()
  features = xp.pair_output_features(vocabulary, LABELS)
  encode = functools.partial(xp.encode_sentence_pair, num_classes=len(LABELS))
  common = dict(output_features=features,
                postprocess_fn=xp.pair_label_postprocessor,
                metric_fns=[metrics.accuracy_metric])
  train_name = f"{prefix}xnli_train_en"
  xp.add_task(train_name, source=source_for("train", "en"),
              preprocessors=[*train_preprocessors, xp.add_example_index,
                             encode], **common)
  names = [train_name]
  for lang in languages:
    name = f"{prefix}xnli_{lang}"
    xp.add_task(name, source=source_for("eval", lang),
                preprocessors=[*eval_preprocessors(lang),
                               xp.add_example_index, encode], **common)
    names.append(name)
  xp.add_mixture(f"{prefix}xnli_zeroshot", names)
  return names


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

  def path(split, lang):
    return xtreme_readers.xtreme_split_file(data_dir, "xnli", split, lang)

  def source_for(role, lang):
    if role == "train":
      paths = {"train": path("train", "en")}
    else:
      paths = {"validation": path("dev", lang), "test": path("test", lang)}
    return xtreme_readers.pair_source(paths, xtreme_readers.XNLI_LABEL_IDS)

  return _register(source_for, vocabulary, prefix, languages, [],
                   lambda lang: [])


register_xnli()
if os.environ.get(XTREME_DIR_ENV):
  register_xnli_local(os.environ[XTREME_DIR_ENV])
