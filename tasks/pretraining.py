"""Masked-LM pre-training tasks and alpha-sampled mixtures.

Registered on import (idempotently, so re-imports and re-registration work):

  rembert_mlm_mc4_<lang>        mC4, TFDS `c4/multilingual:3.1.0`, splits
                                `<lang>` / `<lang>-validation`
  rembert_mlm_mc4               mixture over MC4_LANGUAGES
  rembert_mlm_wikipedia_<lang>  TFDS `wikipedia/20230601.<wiki code>:1.0.0`,
                                train split only
  rembert_mlm_wikipedia         mixture over WIKIPEDIA_LANGUAGES

Mixture rates are p_l ∝ n_l^alpha (alpha = 0.5 in RemBERT) with n_l the
number of documents of language l. For TFDS corpora n_l is read lazily from
the TFDS metadata (which needs the prepared dataset or its dataset_info);
pass `example_counts` to the register functions where it is absent. Users'
own text files are registered with `register_local_text_mlm`.

Every task uses `rembert_t5x.data.vocabulary.default_vocabulary()` unless given
one; it resolves its file when used ($REMBERT_SPM_PATH, else the vocabulary of
the checkpoint the run starts from; see rembert_t5x/data/vocabulary.py).

Task names use `_` for `-` in language codes (seqio names allow no `-`).
"""

import functools
import os
import zlib
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import seqio
import tensorflow as tf

from rembert_t5x.data import pieces
from rembert_t5x.data import preprocessors
from rembert_t5x.data import text_sources
from rembert_t5x.data import vocabulary as vocab_lib
from rembert_tasks import registry

MC4_TFDS_NAME = "c4/multilingual:3.1.0"
WIKIPEDIA_TFDS_NAME = "wikipedia/20230601.{lang}:1.0.0"

# The 101 languages of mC4 as TFDS 4.9.10 names them (tfds.text.c4.
# MC4_LANGUAGES without its romanised `-Latn` variants). The paper pre-trains
# RemBERT on 110 languages but does not list them; these 101 are the part we
# can name with confidence, so they are what "all RemBERT languages" means
# here.
MC4_LANGUAGES = (
    "af", "am", "ar", "az", "be", "bg", "bn", "ca", "ceb", "co", "cs", "cy",
    "da", "de", "el", "en", "eo", "es", "et", "eu", "fa", "fi", "fil", "fr",
    "fy", "ga", "gd", "gl", "gu", "ha", "haw", "hi", "hmn", "ht", "hu", "hy",
    "id", "ig", "is", "it", "iw", "ja", "jv", "ka", "kk", "km", "kn", "ko",
    "ku", "ky", "la", "lb", "lo", "lt", "lv", "mg", "mi", "mk", "ml", "mn",
    "mr", "ms", "mt", "my", "ne", "nl", "no", "ny", "pa", "pl", "ps", "pt",
    "ro", "ru", "sd", "si", "sk", "sl", "sm", "sn", "so", "sq", "sr", "st",
    "su", "sv", "sw", "ta", "te", "tg", "th", "tr", "uk", "ur", "uz", "vi",
    "xh", "yi", "yo", "zh", "zu")
REMBERT_LANGUAGES = MC4_LANGUAGES

# mC4 codes whose Wikipedia edition has another code.
_WIKIPEDIA_CODES = {"iw": "he", "fil": "tl"}
# All mC4 languages but Hmong have a 20230601 Wikipedia dump in TFDS 4.9.10.
WIKIPEDIA_LANGUAGES = tuple(l for l in MC4_LANGUAGES if l != "hmn")

MLM_PREFIX = "rembert_mlm"


def task_language_suffix(lang: str) -> str:
  """Makes a language code usable in a seqio name ("zh-Hans" -> "zh_hans")."""
  return lang.replace("-", "_").lower()


def mlm_output_features(
    vocabulary: seqio.Vocabulary) -> Dict[str, seqio.Feature]:
  """The MLM task features of docs/DESIGN.md."""
  return {
      "input_tokens": seqio.Feature(vocabulary, add_eos=False),
      "token_types": seqio.Feature(
          seqio.PassThroughVocabulary(2), add_eos=False),
      "targets": seqio.Feature(vocabulary, add_eos=False),
      "weights": seqio.Feature(
          seqio.PassThroughVocabulary(1), add_eos=False, dtype=tf.float32),
  }


def mlm_task_seed_key(task_name: str) -> int:
  """A task's own masking seed key (`preprocessors.mask_tokens`' `seed_key`):
  a non-zero 31-bit hash of its name, the same in every process."""
  return zlib.crc32(task_name.encode("utf-8")) % (2**31 - 1) + 1


def mlm_preprocessors(text_key: str = "text",
                      from_lines: bool = False,
                      sequence_length: Optional[int] = None,
                      task_name: Optional[str] = None) -> List:
  """The preprocessing steps of an MLM task.

  Args:
    text_key: field of the source examples holding the text.
    from_lines: the source yields plain strings (seqio.TextLineDataSource).
    sequence_length: fixed packed length; None uses the length seqio is
      given (`task_feature_lengths["input_tokens"]`).
    task_name: the task's name, which keys its masks
      (`mlm_task_seed_key`): seqio seeds every task of a mixture alike, so
      without it the tasks' k-th rows would be masked at the same positions.
      None: masks from seqio's seed alone.

  Returns:
    A list of seqio preprocessors.
  """
  pack = preprocessors.pack_contiguous_tokens
  if sequence_length is not None:
    pack = functools.partial(
        pack, sequence_length={"input_tokens": sequence_length})
  steps = [preprocessors.line_to_text] if from_lines else []
  mask = preprocessors.mask_tokens
  if task_name is not None:
    mask = functools.partial(mask, seed_key=mlm_task_seed_key(task_name))
  steps += [
      functools.partial(preprocessors.tokenize_text, text_key=text_key),
      pack,
      mask,
  ]
  return steps


def _add_task(name: str, **kwargs) -> str:
  return registry.add_task(name, **kwargs).name


def _add_mixture(name: str, tasks_and_rates) -> str:
  return registry.add_mixture(name, tasks_and_rates).name


def _check_languages(languages: Sequence[str], known: Sequence[str],
                     corpus: str) -> None:
  unknown = [l for l in languages if l not in known]
  if unknown:
    raise ValueError(
        f"Unknown {corpus} language code(s) {unknown}; known codes: "
        f"{', '.join(known)}.")
  if not languages:
    raise ValueError(f"No {corpus} languages given.")


def _mixture_rates(task_names: Mapping[str, str], alpha: float,
                   example_counts: Optional[Mapping[str, int]]):
  """(task, rate) pairs: explicit counts, else counts from TFDS metadata."""
  if example_counts is not None:
    missing = sorted(set(task_names) - set(example_counts))
    if missing:
      raise ValueError(f"example_counts has no count for languages {missing}.")
    rates = pieces.alpha_sampling_rates(
        {lang: example_counts[lang] for lang in task_names}, alpha)
    return [(task_names[lang], rates[lang]) for lang in task_names]
  if alpha == 0:
    return [(name, 1.0) for name in task_names.values()]
  # n_l^alpha == n_l^(1/T) with seqio's temperature T = 1/alpha.
  rate = functools.partial(
      seqio.mixing_rate_num_examples, temperature=1.0 / alpha)
  return [(name, rate) for name in task_names.values()]


def register_mc4_mlm(languages: Sequence[str] = MC4_LANGUAGES,
                     vocabulary: Optional[seqio.Vocabulary] = None,
                     prefix: str = MLM_PREFIX,
                     alpha: float = 0.5,
                     example_counts: Optional[Mapping[str, int]] = None,
                     tfds_data_dir: Optional[str] = None) -> str:
  """Registers `<prefix>_mc4_<lang>` tasks and the `<prefix>_mc4` mixture.

  Args:
    languages: mC4 language codes (see MC4_LANGUAGES).
    vocabulary: defaults to `default_vocabulary()`.
    prefix: name prefix.
    alpha: language sampling exponent.
    example_counts: language -> number of documents, where TFDS metadata is
      unavailable.
    tfds_data_dir: optional TFDS data directory.

  Returns:
    The mixture name.
  """
  _check_languages(languages, MC4_LANGUAGES, "mC4")
  vocabulary = vocabulary or vocab_lib.default_vocabulary()
  task_names = {}
  for lang in languages:
    task_name = f"{prefix}_mc4_{task_language_suffix(lang)}"
    task_names[lang] = _add_task(
        task_name,
        source=seqio.TfdsDataSource(
            tfds_name=MC4_TFDS_NAME,
            tfds_data_dir=tfds_data_dir,
            splits={"train": lang, "validation": f"{lang}-validation"}),
        preprocessors=mlm_preprocessors(task_name=task_name),
        output_features=mlm_output_features(vocabulary),
        metric_fns=[])
  return _add_mixture(f"{prefix}_mc4",
                      _mixture_rates(task_names, alpha, example_counts))


def register_wikipedia_mlm(languages: Sequence[str] = WIKIPEDIA_LANGUAGES,
                           vocabulary: Optional[seqio.Vocabulary] = None,
                           prefix: str = MLM_PREFIX,
                           alpha: float = 0.5,
                           example_counts: Optional[Mapping[str, int]] = None,
                           tfds_data_dir: Optional[str] = None) -> str:
  """Registers `<prefix>_wikipedia_<lang>` tasks and their mixture.

  Languages use mC4 codes (e.g. "iw"); the Wikipedia edition code ("he") is
  mapped internally. Arguments as in `register_mc4_mlm`.

  Returns:
    The mixture name, `<prefix>_wikipedia`.
  """
  _check_languages(languages, WIKIPEDIA_LANGUAGES, "Wikipedia")
  vocabulary = vocabulary or vocab_lib.default_vocabulary()
  task_names = {}
  for lang in languages:
    wiki = _WIKIPEDIA_CODES.get(lang, lang)
    task_name = f"{prefix}_wikipedia_{task_language_suffix(lang)}"
    task_names[lang] = _add_task(
        task_name,
        source=seqio.TfdsDataSource(
            tfds_name=WIKIPEDIA_TFDS_NAME.format(lang=wiki),
            tfds_data_dir=tfds_data_dir,
            splits={"train": "train"}),
        preprocessors=mlm_preprocessors(task_name=task_name),
        output_features=mlm_output_features(vocabulary),
        metric_fns=[])
  return _add_mixture(f"{prefix}_wikipedia",
                      _mixture_rates(task_names, alpha, example_counts))


def register_local_text_mlm(
    name: str,
    files_by_lang: Optional[Mapping[str, Sequence[str]]] = None,
    directory: Optional[str] = None,
    vocabulary: Optional[seqio.Vocabulary] = None,
    sequence_length: Optional[int] = None,
    alpha: float = 0.5,
    example_counts: Optional[Mapping[str, int]] = None,
    shuffle_buffer_size: Optional[int] = None,
    source_wrapper: Optional[Callable[[seqio.DataSource],
                                      seqio.DataSource]] = None) -> str:
  """Registers MLM tasks over plain-text files, one task per language.

  Each line is a sentence or paragraph; a language's lines are read file by
  file in order and cut into contiguous `[CLS] … [SEP]` sequences. Tasks are
  named `<name>_<lang>` and the alpha-sampled mixture `<name>` (use names
  like "rembert_mlm_<corpus>"). Calling it again with the same name replaces
  the earlier registration.

  Args:
    name: mixture name and task-name prefix.
    files_by_lang: language code -> text files. Exactly one of this and
      `directory`.
    directory: a folder with one file or sub-folder per language (see
      rembert_t5x/data/text_sources.py).
    vocabulary: defaults to `default_vocabulary()`.
    sequence_length: fixed packed length; None takes seqio's
      `input_tokens` length.
    alpha: language sampling exponent; n_l is the number of non-blank lines.
    example_counts: language -> line count, to skip counting big files.
    shuffle_buffer_size: each task's shuffle buffer (None: seqio's 1,000).
      The first batch waits until every buffer is full, so a corpus much
      smaller than the buffer is read (and tokenised and masked) many times
      over first: ~5 s for four 300-line languages.
    source_wrapper: wraps each language's source (the synthetic tasks make
      their files on first read); with it and `example_counts`, the files
      are not looked at here.

  Returns:
    The mixture name.

  Raises:
    ValueError: bad arguments, a bad language code, or a file that is
      missing, unreadable, not UTF-8 or empty (naming the file).
  """
  if (files_by_lang is None) == (directory is None):
    raise ValueError(
        f"register_local_text_mlm({name!r}): give exactly one of "
        "files_by_lang or directory.")
  if directory is not None:
    files_by_lang = text_sources.find_language_files(input_dir=directory)
  if not files_by_lang:
    raise ValueError(f"register_local_text_mlm({name!r}): no languages.")
  vocabulary = vocabulary or vocab_lib.default_vocabulary()
  counts = {}
  task_names = {}
  for lang, files in sorted(files_by_lang.items()):
    text_sources.check_language_code(lang, f"files_by_lang key {lang!r}")
    if isinstance(files, str) or not files:
      raise ValueError(
          f"files_by_lang[{lang!r}]: expected a non-empty list of files, "
          f"got {files!r}.")
    files = [os.fspath(f) for f in files]
    if example_counts is not None and lang in example_counts:
      for path in files:
        if source_wrapper is None and not os.path.isfile(path):
          raise ValueError(f"{path}: no such file.")
      counts[lang] = example_counts[lang]
    else:
      counts[lang] = sum(text_sources.count_text_lines(f) for f in files)
    task_name = f"{name}_{task_language_suffix(lang)}"
    task_names[lang] = _add_task(
        task_name,
        # cycle_length=1 reads a language's files one after the other, so
        # sequences hold contiguous text rather than interleaved blocks.
        source=(source_wrapper or (lambda source: source))(
            seqio.TextLineDataSource(
                {"train": files}, num_input_examples={"train": counts[lang]},
                cycle_length=1)),
        preprocessors=mlm_preprocessors(
            from_lines=True, sequence_length=sequence_length,
            task_name=task_name),
        output_features=mlm_output_features(vocabulary),
        metric_fns=[], **_shuffle_buffer(shuffle_buffer_size))
  return _add_mixture(name, _mixture_rates(task_names, alpha, counts))


def _shuffle_buffer(size: Optional[int]) -> Dict[str, int]:
  """seqio.Task's keyword for a buffer size; none for seqio's default."""
  return {} if size is None else {"shuffle_buffer_size": size}


register_mc4_mlm()
register_wikipedia_mlm()
