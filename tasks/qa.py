"""Extractive QA: XQuAD, MLQA and TyDiQA-GoldP (zero-shot from English).

Registered names (prefix "rembert_" by default):

  rembert_squad_train_en     SQuAD v1.1 train (TFDS `squad/v1.1:3.0.0`).
  rembert_squad_en           SQuAD v1.1 validation: the English dev set for
                             checkpoint selection (XQuAD, MLQA).
  rembert_xquad_{lang}       XQuAD test (TFDS `xquad/{lang}:3.0.0`).
  rembert_mlqa_{lang}        MLQA validation / test (TFDS `mlqa/{lang}:1.0.0`,
                             context and question in `lang`).
  rembert_tydiqa_train_en    TyDiQA-GoldP train, English questions only
                             (TFDS `tydi_qa/goldp:3.0.0`, whose train split
                             mixes all languages; ids start with the
                             language name). The source itself keeps only
                             English, so its size is the English count that
                             the fine-tuning steps derive from.
  rembert_tydiqa_{lang}      TyDiQA-GoldP `validation-{lang}`, as "validation".
  rembert_{xquad,mlqa}_zeroshot   SQuAD train + English dev + every
                                  evaluation task; rembert_tydiqa_zeroshot
                                  likewise with the TyDi English train.

Local copies of XTREME's download (`squad/`, `xquad/`, `mlqa/MLQA_V1/`,
`tydiqa/`, see `LOCAL_FILES`) register under "rembert_local_" on import when
$REMBERT_XTREME_DIR is set. TyDi files are accepted in both of XTREME's
layouts: the current `tydiqa.goldp.<iso>.{train,dev}.json` and the older
`tydiqa.en.train.json` / `tydiqa.<iso>.dev.json` (the first that exists is
read). XTREME blanks the gold answers of what it keeps hidden (XQuAD/MLQA
test, the current TyDi dev files): an evaluation task reading a file whose
answers are all blank is an error naming the file (`squad_files.check_gold_answers`),
never a silent score of 0. For predictions on those files (`t5x.infer`, the
submission folders) the same files also register as prediction-only tasks,
which read blank answers and have no metric:

  rembert_local_{xquad,mlqa,tydiqa}_predict_{lang}   the splits of
      rembert_local_{xquad,mlqa,tydiqa}_{lang}; in no mixture.

Each dataset element is one window of a question's context
(`rembert_t5x.data.qa.qa_windows_preprocessor`). The model predicts, per window,
start and end logits `[2, length]`; the postprocessor
(`rembert_t5x.data.qa.postprocess_window`) picks the window's best span from the
n-best start/end candidates and maps it to context characters, and the
metric keeps each question's best window. Metrics: SQuAD v1.1 EM/F1 for
SQuAD, XQuAD and TyDiQA; MLQA EM/F1 with the answer language's rules for
MLQA; plus "xtreme" = (EM + F1) / 2.
"""

import functools
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

import seqio
import tensorflow as tf

from rembert_t5x.data import lazy_vocabulary
from rembert_t5x.data import qa
from rembert_t5x.data import squad_files
from rembert_t5x.scoring import metrics
from rembert_tasks import registry

XQUAD_LANGUAGES = ("ar", "de", "el", "en", "es", "hi", "ru", "th", "tr", "vi",
                   "zh")
MLQA_LANGUAGES = metrics.MLQA_LANGUAGES
TYDIQA_LANGUAGES = ("ar", "bn", "en", "fi", "id", "ko", "ru", "sw", "te")
# TyDi ids are "{language name}-{number}-{number}".
TYDIQA_LANGUAGE_NAMES = {
    "ar": "arabic", "bn": "bengali", "en": "english", "fi": "finnish",
    "id": "indonesian", "ko": "korean", "ru": "russian", "sw": "swahili",
    "te": "telugu",
}
XTREME_DIR_ENV = registry.XTREME_DIR_ENV

# Paths inside XTREME's download folder (google-research/xtreme
# `scripts/download_data.sh`).
LOCAL_FILES = {
    "squad_train": "squad/train-v1.1.json",
    "squad_dev": "squad/dev-v1.1.json",
    "xquad_test": "xquad/xquad.{lang}.json",
    "mlqa_dev": "mlqa/MLQA_V1/dev/dev-context-{lang}-question-{lang}.json",
    "mlqa_test": "mlqa/MLQA_V1/test/test-context-{lang}-question-{lang}.json",
    "tydiqa_train": "tydiqa/tydiqa-goldp-v1.1-train/tydiqa.goldp.en.train.json",
    "tydiqa_dev": "tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.{lang}.dev.json",
}
# Older XTREME downloads name the TyDi files without "goldp" (and the train
# file only for English); read when the current name is absent.
LOCAL_FILES_OLD = {
    "tydiqa_train": "tydiqa/tydiqa-goldp-v1.1-train/tydiqa.en.train.json",
    "tydiqa_dev": "tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.{lang}.dev.json",
}


def keep_tydiqa_language(dataset: tf.data.Dataset,
                         lang: str) -> tf.data.Dataset:
  """Keeps TyDi examples whose id names `lang` ("english-123-0" for en).

  Input/output: SQuAD-like examples {"id", "question", "context", "answers"}.
  """
  prefix = TYDIQA_LANGUAGE_NAMES[lang] + "-"
  return dataset.filter(
      lambda ex: tf.strings.regex_full_match(ex["id"], prefix + ".*"))


def predict_task_name(prefix: str, family: str, lang: str) -> str:
  """The prediction-only task over `<prefix><family>_<lang>`'s files."""
  return f"{prefix}{family}_predict_{lang}"


def _register_task(name: str, source: seqio.DataSource,
                   vocabulary: seqio.Vocabulary,
                   metric_fns: Sequence[Callable],
                   settings: Mapping[str, int], label: str,
                   on_misaligned: str,
                   filters: Sequence[Callable] = ()) -> str:
  windows = functools.partial(
      qa.qa_windows_preprocessor,
      max_seq_length=settings["max_seq_length"],
      doc_stride=settings["doc_stride"],
      max_query_length=settings["max_query_length"],
      source=label, on_misaligned=on_misaligned)
  registry.add_task(
      name, source=source,
      preprocessors=[*filters, windows],
      output_features=qa.output_features(vocabulary,
                                         settings["max_seq_length"]),
      postprocess_fn=functools.partial(
          qa.postprocess_window, n_best=settings["n_best"],
          max_answer_length=settings["max_answer_length"]),
      metric_fns=list(metric_fns))
  return name


def _settings(max_seq_length, doc_stride, max_query_length, max_answer_length,
              n_best) -> Dict[str, int]:
  return dict(max_seq_length=max_seq_length, doc_stride=doc_stride,
              max_query_length=max_query_length,
              max_answer_length=max_answer_length, n_best=n_best)


def _register_family(sources: Mapping[str, Callable[..., seqio.DataSource]],
                     vocabulary, prefix, languages, settings,
                     tydiqa_filter: bool) -> List[str]:
  """Registers the tasks and mixtures of all three benchmarks.

  Args:
    sources: "squad_train", "squad_dev", "xquad", "mlqa", "tydiqa_train",
      "tydiqa" -> function of the language returning (source, label).
    vocabulary: the input vocabulary.
    prefix: task name prefix.
    languages: {"xquad": [...], "mlqa": [...], "tydiqa": [...]}.
    settings: window and decoding lengths.
    tydiqa_filter: keep only the task language's TyDi ids (TFDS mixes them).

  Returns:
    The registered task names.
  """
  vocabulary = vocabulary or lazy_vocabulary.DefaultVocabulary()
  names = []

  def add(name, key, lang, metric_fn, on_misaligned, filters=()):
    source, label = sources[key](lang)
    names.append(_register_task(name, source, vocabulary, [metric_fn],
                                settings, label, on_misaligned, filters))
    return name

  # Training data must be exact; evaluation keeps every question (its score
  # uses only the answer texts) and logs misaligned spans.
  squad_train = add(f"{prefix}squad_train_en", "squad_train", "en",
                    metrics.squad_metric, "raise")
  squad_dev = add(f"{prefix}squad_en", "squad_dev", "en",
                  metrics.squad_metric, "ignore")
  xquad = [add(f"{prefix}xquad_{lang}", "xquad", lang, metrics.squad_metric,
               "ignore") for lang in languages["xquad"]]
  mlqa = [add(f"{prefix}mlqa_{lang}", "mlqa", lang,
              metrics.mlqa_metric_for(lang), "ignore")
          for lang in languages["mlqa"]]

  def tydi_filters(lang):
    if not tydiqa_filter:
      return ()
    return (functools.partial(keep_tydiqa_language, lang=lang),)

  # The English-only train source needs no filter (see
  # `tydiqa_english_train_source`).
  tydi_train = add(f"{prefix}tydiqa_train_en", "tydiqa_train", "en",
                   metrics.squad_metric, "raise")
  tydi = [add(f"{prefix}tydiqa_{lang}", "tydiqa", lang, metrics.squad_metric,
              "ignore", tydi_filters(lang)) for lang in languages["tydiqa"]]

  registry.add_mixture(f"{prefix}xquad_zeroshot", [squad_train, squad_dev, *xquad])
  registry.add_mixture(f"{prefix}mlqa_zeroshot", [squad_train, squad_dev, *mlqa])
  registry.add_mixture(f"{prefix}tydiqa_zeroshot", [tydi_train, *tydi])
  return names


def register_qa(vocabulary: Optional[seqio.Vocabulary] = None,
                prefix: str = "rembert_",
                xquad_languages: Sequence[str] = XQUAD_LANGUAGES,
                mlqa_languages: Sequence[str] = MLQA_LANGUAGES,
                tydiqa_languages: Sequence[str] = TYDIQA_LANGUAGES,
                max_seq_length: int = qa.MAX_SEQ_LENGTH,
                doc_stride: int = qa.DOC_STRIDE,
                max_query_length: int = qa.MAX_QUERY_LENGTH,
                max_answer_length: int = qa.MAX_ANSWER_LENGTH,
                n_best: int = qa.N_BEST) -> List[str]:
  """Registers the TFDS-backed QA tasks and mixtures; returns task names."""

  def tfds(name, splits):
    return lambda lang: (seqio.TfdsDataSource(name.format(lang=lang),
                                              splits=splits),
                         "tfds:" + name.format(lang=lang))

  sources = {
      "squad_train": tfds("squad/v1.1:3.0.0", ("train",)),
      "squad_dev": tfds("squad/v1.1:3.0.0", ("validation",)),
      "xquad": tfds("xquad/{lang}:3.0.0", ("test",)),
      "mlqa": tfds("mlqa/{lang}:1.0.0", ("validation", "test")),
      "tydiqa_train": lambda lang: (
          tydiqa_english_train_source(),
          "tfds:tydi_qa/goldp:3.0.0[train, english]"),
      "tydiqa": lambda lang: (
          seqio.TfdsDataSource("tydi_qa/goldp:3.0.0",
                               splits={"validation": f"validation-{lang}"}),
          f"tfds:tydi_qa/goldp:3.0.0[validation-{lang}]"),
  }
  languages = {"xquad": xquad_languages, "mlqa": mlqa_languages,
               "tydiqa": tydiqa_languages}
  return _register_family(
      sources, vocabulary, prefix, languages,
      _settings(max_seq_length, doc_stride, max_query_length,
                max_answer_length, n_best), tydiqa_filter=True)


def first_existing(candidates: Sequence[str]) -> str:
  """The first of `candidates` that exists (else the first, which then
  fails to read with its name)."""
  for path in candidates:
    if tf.io.gfile.exists(path):
      return path
  return candidates[0]


def squad_file_source(paths: Mapping[str, Union[str, Sequence[str]]],
                      require_gold: bool = True) -> seqio.DataSource:
  """A seqio source over SQuAD-format JSON files, one per split.

  Each split names its file, or candidate files (see `first_existing`).
  Files are read (and validated) when a split's dataset is built, so
  registering never touches the disk. `require_gold=False` (prediction-only
  tasks) reads files whose answers are all blank (`squad_files.squad_file_dataset`).
  """
  candidates = {split: [p] if isinstance(p, str) else list(p)
                for split, p in paths.items()}

  def dataset_fn(split, shuffle_files, seed=None):
    del shuffle_files, seed  # One file per split: nothing to shuffle.
    return squad_files.squad_file_dataset(first_existing(candidates[split]),
                                 require_gold=require_gold)

  return seqio.FunctionDataSource(dataset_fn, splits=tuple(paths))


def tydiqa_english_train_source(name: str = "tydi_qa/goldp:3.0.0"
                                ) -> seqio.DataSource:
  """TFDS TyDiQA-GoldP train, English questions only, as a source.

  The filter lives in the source (not in a preprocessor) so that the
  source's example count, which the fine-tuning steps derive from
  (`protocol.train_steps`), is the English count.
  """
  tfds_source = seqio.TfdsDataSource(name, splits=("train",))

  def dataset_fn(split, shuffle_files, seed=None):
    ds = tfds_source.get_dataset(split=split, shuffle=shuffle_files,
                                 seed=seed)
    return keep_tydiqa_language(ds, "en")

  return seqio.FunctionDataSource(dataset_fn, splits=("train",))


def register_qa_local(data_dir: str,
                      vocabulary: Optional[seqio.Vocabulary] = None,
                      prefix: str = "rembert_local_",
                      xquad_languages: Sequence[str] = XQUAD_LANGUAGES,
                      mlqa_languages: Sequence[str] = MLQA_LANGUAGES,
                      tydiqa_languages: Sequence[str] = TYDIQA_LANGUAGES,
                      max_seq_length: int = qa.MAX_SEQ_LENGTH,
                      doc_stride: int = qa.DOC_STRIDE,
                      max_query_length: int = qa.MAX_QUERY_LENGTH,
                      max_answer_length: int = qa.MAX_ANSWER_LENGTH,
                      n_best: int = qa.N_BEST) -> List[str]:
  """Registers QA tasks over XTREME's download folder (see LOCAL_FILES),
  and the prediction-only tasks (module docstring); returns task names."""

  def files(require_gold=True, **split_keys):
    def source(lang):
      paths = {split: [os.path.join(data_dir, table[key].format(lang=lang))
                       for table in (LOCAL_FILES, LOCAL_FILES_OLD)
                       if key in table]
               for split, key in split_keys.items()}
      return squad_file_source(paths, require_gold), " | ".join(
          p for candidates in paths.values() for p in candidates)
    return source

  sources = {
      "squad_train": files(train="squad_train"),
      "squad_dev": files(validation="squad_dev"),
      "xquad": files(test="xquad_test"),
      "mlqa": files(validation="mlqa_dev", test="mlqa_test"),
      "tydiqa_train": files(train="tydiqa_train"),
      "tydiqa": files(validation="tydiqa_dev"),
  }
  languages = {"xquad": xquad_languages, "mlqa": mlqa_languages,
               "tydiqa": tydiqa_languages}
  settings = _settings(max_seq_length, doc_stride, max_query_length,
                       max_answer_length, n_best)
  # XTREME's TyDi files are already split by language.
  names = _register_family(sources, vocabulary, prefix, languages, settings,
                           tydiqa_filter=False)
  # The evaluation files again, blank answers allowed and no metric: what
  # t5x.infer predicts on XTREME's hidden sets (nothing can score them).
  predict_sources = {
      "xquad": files(False, test="xquad_test"),
      "mlqa": files(False, validation="mlqa_dev", test="mlqa_test"),
      "tydiqa": files(False, validation="tydiqa_dev"),
  }
  for family, langs in languages.items():
    for lang in langs:
      source, label = predict_sources[family](lang)
      names.append(_register_task(
          predict_task_name(prefix, family, lang), source,
          vocabulary or lazy_vocabulary.DefaultVocabulary(), [], settings,
          label, "ignore"))
  return names


register_qa()
if os.environ.get(XTREME_DIR_ENV):
  register_qa_local(os.environ[XTREME_DIR_ENV])
