"""Synthetic multilingual tasks: the offline default.

A corpus in several made-up languages that share one latent grammar, a
SentencePiece vocabulary trained on it, and three fine-tuning tasks in the
XTREME file formats (pair classification, entity tagging, extractive QA) with
training data in one language only (`rembert_t5x.data.synthetic`). Everything is
generated locally in seconds, so pre-training, fine-tuning and zero-shot
evaluation run with no download.

Importing this module reads and writes nothing: it registers the tasks over
`$REMBERT_SYNTHETIC_DIR` (default `~/.cache/rembert_t5x/synthetic-v2`), whose
data and vocabulary are made the first time a task is read (~20 s, mostly
training the vocabulary; later reads reuse them; `prepare()` makes them
ahead). It registers:

  rembert_synthetic_mlm                  alpha-sampled MLM mixture (all languages)
  rembert_synthetic_mlm_<lang>           one MLM task per language
  rembert_synthetic_{pair,tag,qa}_train  training task (training language)
  rembert_synthetic_{pair,tag,qa}_<lang> evaluation task per language
                                         (splits "validation" and "test")
  rembert_synthetic_{pair,tag,qa}_zeroshot  the above, as a mixture

Every metric comes with its evaluation-set standard error (`<metric>_se`,
a bootstrap over examples, sentences or questions;
`rembert_t5x.scoring.standard_errors`).

`prepare` and `register_synthetic` let the demo and tests use their own
directory and name prefix.
"""

import fcntl
import functools
import json
import os
import pathlib
import shutil
import tempfile
from typing import Any, Dict, Optional

import seqio

from rembert_t5x.common import errors
from rembert_t5x.data import pieces
from rembert_t5x.data import qa
from rembert_t5x.data import synthetic
from rembert_t5x.data import synthetic_files
from rembert_t5x.data import vocabulary as vocabulary_lib
from rembert_t5x.data import xtreme_readers
from rembert_t5x.scoring import standard_errors
from rembert_tasks import pretraining
from rembert_tasks import qa as qa_tasks
from rembert_tasks import registry

DATA_DIR_ENV = "REMBERT_SYNTHETIC_DIR"
DEFAULT_DATA_DIR = os.path.join(
    os.path.expanduser("~"), ".cache", "rembert_t5x", "synthetic-v2")
PREFIX = "rembert_synthetic_"
PAIR_LABEL_IDS = {"0": 0, "1": 1}


def prepare(data_dir: Optional[str] = None, seed: int = 0,
            vocab_size: int = synthetic.VOCAB_SIZE,
            **sizes) -> Dict[str, Any]:
  """Generates the data and vocabulary in `data_dir` unless already there.

  The directory is built under a temporary name and renamed when complete,
  so an interrupted preparation is redone rather than half-used.

  Args:
    data_dir: target directory (default `$REMBERT_SYNTHETIC_DIR` or
      ~/.cache/rembert_t5x/synthetic-v2).
    seed: data seed.
    vocab_size: SentencePiece vocabulary size.
    **sizes: passed to `synthetic_files.generate` (e.g. corpus_sentences).

  Returns:
    The manifest: {"dir", "vocab", "languages", "train_language", "files"}.

  Raises:
    errors.UserError: the directory holds data made with another pair task
      (`synthetic.PAIR_UNRELATED_FRACTION`), or the vocabulary does not fit
      the corpus.
  """
  root = pathlib.Path(data_dir or os.environ.get(DATA_DIR_ENV)
                      or DEFAULT_DATA_DIR)
  manifest_path = root / "manifest.json"
  root.parent.mkdir(parents=True, exist_ok=True)
  # One preparer at a time (parallel test workers, two runs starting
  # together): the others wait and then find the directory complete.
  with open(root.parent / f".{root.name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not manifest_path.exists() or not (root / "spm.model").exists():
      _generate(root, seed, vocab_size, sizes)
  manifest = json.loads(manifest_path.read_text())
  # Data made before the pair task's design was recorded had 0.5.
  made = manifest["sizes"].get("pair_unrelated_fraction", 0.5)
  if made != synthetic.PAIR_UNRELATED_FRACTION:
    raise errors.UserError(
        f"{manifest_path}: sizes.pair_unrelated_fraction={made}: these data "
        "were made with another pair task than this version's "
        f"(pair_unrelated_fraction={synthetic.PAIR_UNRELATED_FRACTION}); "
        "generate them in a new directory")
  manifest["dir"] = str(root)
  manifest["vocab"] = str(root / "spm.model")
  return manifest


def _generate(root: pathlib.Path, seed: int, vocab_size: int, sizes) -> None:
  """Writes the data and vocabulary under a temporary name, then renames."""
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
  try:
    files = synthetic_files.generate(str(tmp), seed=seed, **sizes)
    try:
      pieces.train_sentencepiece(
          {lang: [path] for lang, path in files["corpus"].items()},
          str(tmp / "spm"), vocab_size=vocab_size, max_sentences=20_000,
          seed=seed, character_coverage=1.0)
    except pieces.VocabularyTooLarge as e:
      # The made-up languages have a few hundred words each, so the corpus
      # caps how many pieces SentencePiece can make (fewer sentences,
      # fewer distinct pieces).
      sentences = sizes.get("corpus_sentences",
                            synthetic_files.CORPUS_SENTENCES)
      raise errors.UserError(
          f"{root}: a {vocab_size}-piece vocabulary does not fit the "
          f"synthetic corpus of {sentences} sentences per language "
          f"(SentencePiece makes at most {e.limit} pieces of it); "
          "use more corpus sentences (--corpus_sentences)") from None
    if root.exists():  # an earlier, interrupted or partial preparation
      shutil.rmtree(root)
    os.replace(tmp, root)
  finally:
    if tmp.exists():
      shutil.rmtree(tmp, ignore_errors=True)


def _path(manifest, *parts) -> str:
  node = manifest["files"]
  for p in parts:
    node = node[p]
  return os.path.join(manifest["dir"], node)


def register_synthetic(manifest: Dict[str, Any], prefix: str = PREFIX,
                       vocabulary=None, qa_max_seq_length: int =
                       synthetic.QA_SETTINGS["max_seq_length"],
                       shuffle_buffer_size: Optional[int] = None,
                       prepare_on_read: bool = False) -> Dict[str, str]:
  """Registers the MLM, pair, tag and QA tasks over a prepared directory.

  `qa_max_seq_length` is the QA windows' length (the QA tasks refuse a
  shorter `input_tokens` length). `shuffle_buffer_size` is every task's
  shuffle buffer (None: seqio's 1,000); the tests' tiny data use a small
  one, so a first batch does not wait for many passes over them.
  `prepare_on_read`: `manifest` is a `layout()` whose files may not exist
  yet; every source and the vocabulary run `prepare(manifest["dir"])` before
  their first read, and nothing is read here (the corpus line counts are the
  manifest's sizes).

  Returns:
    {"mlm", "pair", "tag", "qa"}: the mixture names (the fine-tuning ones are
    the zero-shot evaluation mixtures; training tasks are
    `<prefix><family>_train`).
  """
  langs = manifest["languages"]
  train_lang = manifest["train_language"]
  if prepare_on_read:
    data_dir = manifest["dir"]
    vocabulary = vocabulary or _PreparedVocabulary(data_dir)
    on_read = lambda source: _PreparedOnRead(source, data_dir)
    mlm_settings = dict(
        source_wrapper=on_read,
        example_counts={l: manifest["sizes"]["corpus"] for l in langs})
  else:
    vocabulary = vocabulary or vocabulary_lib.RemBertVocabulary(
        manifest["vocab"])
    on_read = lambda source: source
    mlm_settings = {}
  names = {"mlm": pretraining.register_local_text_mlm(
      f"{prefix}mlm",
      files_by_lang={l: [_path(manifest, "corpus", l)] for l in langs},
      vocabulary=vocabulary, shuffle_buffer_size=shuffle_buffer_size,
      **mlm_settings)}

  def sources(name, make_source):
    def source_for(role, lang):
      if role == "train":
        return on_read(make_source(
            {"train": _path(manifest, name, "train", lang)}, lang))
      return on_read(make_source(
          {"validation": _path(manifest, name, "dev", lang),
           "test": _path(manifest, name, "test", lang)}, lang))
    return source_for

  # Training tasks are `<prefix><family>_train` (one training language).
  family = dict(languages=langs, prefix=prefix, train_task="train",
                train_language=train_lang)
  if shuffle_buffer_size is not None:
    family["shuffle_buffer_size"] = shuffle_buffer_size
  registry.register_pair(
      "pair", sources("pair", lambda paths, lang: xtreme_readers.pair_source(
          paths, PAIR_LABEL_IDS)),
      labels=xtreme_readers.PAWSX_LABELS, vocabulary=vocabulary,
      metric_fn=standard_errors.accuracy_with_se, **family)
  # Synthetic sentences fit the input: no long-sentence split.
  registry.register_tagging(
      "tag", sources("tag", lambda paths, lang: xtreme_readers.tagging_source(
          paths, synthetic.TAGS, strip_prefix=f"{lang}:")),
      labels=synthetic.TAGS, vocabulary=vocabulary,
      metric_fn=standard_errors.entity_f1_with_se, split_long=False, **family)

  windows = functools.partial(
      qa.qa_windows_preprocessor,
      max_seq_length=qa_max_seq_length,
      doc_stride=synthetic.QA_SETTINGS["doc_stride"],
      max_query_length=synthetic.QA_SETTINGS["max_query_length"],
      source="synthetic", on_misaligned="raise")
  registry.register_zero_shot(
      "qa", sources("qa", lambda paths, lang: _squad_source(paths)),
      output_features=qa.output_features(vocabulary, qa_max_seq_length),
      preprocessors=[windows],
      postprocess_fn=functools.partial(
          qa.postprocess_window, n_best=synthetic.QA_SETTINGS["n_best"],
          max_answer_length=synthetic.QA_SETTINGS["max_answer_length"]),
      metric_fns=[standard_errors.squad_with_se], **family)
  names.update({f: f"{prefix}{f}_zeroshot" for f in ("pair", "tag", "qa")})
  return names


def _squad_source(paths):
  return qa_tasks.squad_file_source(paths)


def layout(data_dir: Optional[str] = None) -> Dict[str, Any]:
  """The manifest `prepare(data_dir)` returns with the default sizes, without
  reading or writing anything (the files may not exist yet)."""
  root = str(data_dir or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)
  codes = synthetic_files.language_codes()
  return {"dir": root, "vocab": os.path.join(root, "spm.model"),
          "languages": codes, "train_language": synthetic.TRAIN_LANGUAGE,
          "sizes": {"corpus": synthetic_files.CORPUS_SENTENCES},
          "files": synthetic_files.file_layout(codes)}


# Directories this process has prepared (or found prepared): `prepare` takes
# a file lock, once per directory is enough.
_PREPARED = set()


def _ensure_prepared(data_dir: str) -> None:
  if data_dir not in _PREPARED:
    prepare(data_dir)
    _PREPARED.add(data_dir)


class _PreparedOnRead(seqio.DataSource):
  """A source whose files `prepare(data_dir)` makes before the first read."""

  def __init__(self, inner: seqio.DataSource, data_dir: str):
    super().__init__(splits=inner.splits,
                     caching_permitted=inner.caching_permitted,
                     performs_internal_shuffling=(
                         inner.performs_internal_shuffling))
    self._inner = inner
    self._data_dir = data_dir

  @property
  def supports_arbitrary_sharding(self) -> bool:
    return self._inner.supports_arbitrary_sharding

  @property
  def output_features(self):
    return self._inner.output_features

  def num_input_examples(self, split: str) -> Optional[int]:
    return self._inner.num_input_examples(split)

  def list_shards(self, split: str):
    _ensure_prepared(self._data_dir)
    return self._inner.list_shards(split)

  def get_dataset(self, *args, **kwargs):
    _ensure_prepared(self._data_dir)
    return self._inner.get_dataset(*args, **kwargs)


class _PreparedVocabulary(vocabulary_lib.RemBertVocabulary):
  """The directory's vocabulary, made by `prepare` when first loaded."""

  def __init__(self, data_dir: str):
    super().__init__(os.path.join(data_dir, "spm.model"))
    self._data_dir = data_dir

  def _model_context(self):
    _ensure_prepared(self._data_dir)
    return super()._model_context()


def register_default() -> Dict[str, str]:
  """Registers the tasks over the default directory (what importing this
  module does); nothing is read or written until a task is read."""
  manifest = layout()
  return register_synthetic(manifest, prepare_on_read=True)


NAMES = register_default()
