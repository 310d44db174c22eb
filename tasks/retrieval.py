"""Sentence retrieval (Tatoeba, BUCC 2018): no fine-tuning, pooled encodings.

Each task yields one example per sentence, `[CLS] sentence [SEP]`, with
`targets = [side, index]` (side 0 = the non-English sentence, 1 = English;
index = the pair / row number). The model (models.RemBertRetrievalModel)
returns one embedding per example, the mean of the hidden states after
layer L/2 + 2 as XTREME does (network.RemBertForRetrieval), and the metric
(rembert_t5x.scoring.retrieval_metrics) compares the two sides by cosine. Run with
gin_configs/runs/eval_tatoeba.gin / eval_bucc.gin (t5x.eval) or
local_eval_retrieval.gin (python -m rembert_t5x.runner.eval).

Registered names (prefix "rembert_" by default):

  rembert_tatoeba_{lang}     TFDS `tatoeba/tatoeba_{lang}:1.0.0` (its only
                             split, "train", is the Tatoeba test set; exposed
                             here as "test"), 36 XTREME languages.
  rembert_tatoeba_zeroshot   all Tatoeba tasks.
  Metric: accuracy (percent) of cosine nearest neighbour, English queries
  against the other language, as XTREME (one direction).

Local-file copies (prefix "rembert_local_"; registered on import when
$REMBERT_XTREME_DIR is set):

  rembert_local_tatoeba_{lang}   LASER files `tatoeba/tatoeba.{xxx}-eng.*`.
  rembert_local_bucc_{lang}      XTREME's `bucc2018/{lang}-en.dev.*` files,
                                 split "validation" (de fr ru zh); metric:
                                 ratio-margin mining (k = 4) and F1 at the
                                 threshold that is best on the gold, as
                                 XTREME does on BUCC dev. XTREME deletes the
                                 test gold, so test scoring needs a threshold
                                 from dev and the official gold files.

BUCC is not registered from TFDS: `bucc:1.0.0` keeps only the gold pairs,
without the distractor sentences mining is about.
"""

import os
from typing import Dict, List, Mapping, Optional

import seqio

from rembert_t5x.data import lazy_vocabulary
from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x.data import xtreme_readers
from rembert_t5x.scoring import retrieval_metrics
from rembert_tasks import registry

# XTREME's 36 Tatoeba languages: ISO 639-1 -> LASER's ISO 639-3 file code.
TATOEBA_LANGUAGES = {
    "af": "afr", "ar": "ara", "bg": "bul", "bn": "ben", "de": "deu",
    "el": "ell", "es": "spa", "et": "est", "eu": "eus", "fa": "pes",
    "fi": "fin", "fr": "fra", "he": "heb", "hi": "hin", "hu": "hun",
    "id": "ind", "it": "ita", "ja": "jpn", "jv": "jav", "ka": "kat",
    "kk": "kaz", "ko": "kor", "ml": "mal", "mr": "mar", "nl": "nld",
    "pt": "por", "ru": "rus", "sw": "swh", "ta": "tam", "te": "tel",
    "th": "tha", "tl": "tgl", "tr": "tur", "ur": "urd", "vi": "vie",
    "zh": "cmn",
}
BUCC_LANGUAGES = ("de", "fr", "ru", "zh")
XTREME_DIR_ENV = registry.XTREME_DIR_ENV


def _add(name, source, vocabulary, preprocessors, metric) -> str:
  registry.add_task(
      name, source=source,
      output_features=xp.retrieval_output_features(vocabulary),
      preprocessors=[*preprocessors, xp.encode_single_sentence],
      postprocess_fn=xp.retrieval_postprocessor,
      metric_fns=[metric])
  return name


def register_tatoeba(vocabulary: Optional[seqio.Vocabulary] = None,
                     prefix: str = "rembert_",
                     languages: Mapping[str, str] = TATOEBA_LANGUAGES
                     ) -> List[str]:
  """Registers the TFDS-backed Tatoeba tasks and mixture; returns names."""
  vocabulary = vocabulary or lazy_vocabulary.DefaultVocabulary()
  names = []
  for lang in languages:
    source = seqio.TfdsDataSource(f"tatoeba/tatoeba_{lang}:1.0.0",
                                  splits={"test": "train"})
    names.append(_add(f"{prefix}tatoeba_{lang}", source, vocabulary,
                      [xp.split_parallel_pairs], retrieval_metrics.tatoeba_metric))
  registry.add_mixture(f"{prefix}tatoeba_zeroshot", names)
  return names


def register_tatoeba_local(data_dir: str,
                           vocabulary: Optional[seqio.Vocabulary] = None,
                           prefix: str = "rembert_local_",
                           languages: Mapping[str, str] = TATOEBA_LANGUAGES
                           ) -> List[str]:
  """Registers Tatoeba tasks over LASER files in `{data_dir}/tatoeba/`.

  `languages` maps each task's language code to the file code, e.g.
  {"de": "deu"}; any code the files use works.
  """
  vocabulary = vocabulary or lazy_vocabulary.DefaultVocabulary()
  names = []
  for lang, lang3 in languages.items():
    source = xtreme_readers.parallel_source(
        *xtreme_readers.tatoeba_files(data_dir, lang3), split="test")
    names.append(_add(f"{prefix}tatoeba_{lang}", source, vocabulary, [],
                      retrieval_metrics.tatoeba_metric))
  registry.add_mixture(f"{prefix}tatoeba_zeroshot", names)
  return names



class BuccMetric:
  """seqio metric fn for BUCC: reads the corpus's files, then scores.

  A task-level adapter: the scoring itself is `retrieval_metrics.bucc_metric`
  (`scoring/`, which sits below the data readers it would need here).

  Targets are (side, index) with index the row of the sentence in its BUCC
  file; the files are read when the metric is computed, to map rows back to
  BUCC ids and to load the gold pairs (`retrieval_metrics.bucc_metric`).
  """

  def __init__(self, source_path: str, english_path: str, gold_path: str,
               k: int = 4, threshold: Optional[float] = None):
    self.paths = (source_path, english_path)
    self.gold_path = gold_path
    self.k = k
    self.threshold = threshold

  def __call__(self, targets, predictions) -> Dict[str, float]:
    rows = [xtreme_readers.read_bucc_sentences(path) for path in self.paths]
    gold = xtreme_readers.read_bucc_gold(self.gold_path)
    return retrieval_metrics.bucc_metric(targets, predictions, rows, gold,
                                         self.paths, self.k, self.threshold)


def register_bucc_local(data_dir: str,
                        vocabulary: Optional[seqio.Vocabulary] = None,
                        prefix: str = "rembert_local_",
                        languages=BUCC_LANGUAGES) -> List[str]:
  """Registers BUCC 2018 dev tasks over `{data_dir}/bucc2018/` files."""
  vocabulary = vocabulary or lazy_vocabulary.DefaultVocabulary()
  names = []
  for lang in languages:
    files = xtreme_readers.bucc_files(data_dir, lang, "dev")
    source = xtreme_readers.bucc_source(files["source"], files["target"],
                                        split="validation")
    metric = BuccMetric(files["source"], files["target"],
                                       files["gold"])
    names.append(_add(f"{prefix}bucc_{lang}", source, vocabulary, [],
                      metric))
  registry.add_mixture(f"{prefix}bucc_zeroshot", names)
  return names


register_tatoeba()
if os.environ.get(XTREME_DIR_ENV):
  register_tatoeba_local(os.environ[XTREME_DIR_ENV])
  register_bucc_local(os.environ[XTREME_DIR_ENV])
