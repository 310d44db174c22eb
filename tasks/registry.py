"""The one registration body every task family shares.

XTREME's zero-shot protocol (paper §4.2) gives each family the same shape:

  <prefix><family>_train_en   the English training task,
  <prefix><family>_<lang>     one evaluation task per language,
  <prefix><family>_zeroshot   a mixture of all of them (T5X trains on the
                              first and evaluates every task of a mixture).

`register_zero_shot` writes that shape once for XNLI, PAWS-X, PAN-X, UD-POS
and the synthetic tasks (`register_pair` / `register_tagging`: the shared
features, preprocessing and postprocessing of the two task kinds); QA (two training sets feeding three mixtures),
retrieval (no training task) and MLM pre-training (rate-weighted mixtures)
register through `add_task` / `add_mixture` directly. Registering a name
again replaces the old entry, so a family can be re-registered with another
vocabulary or data directory in one process.
"""

import functools
from typing import Callable, List, Optional, Sequence, Tuple, Union

import seqio

from rembert_t5x.data import lazy_vocabulary
from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x.data import xtreme_readers

# The environment variable naming XTREME's download folder: where it is set,
# importing a task module also registers that family's `rembert_local_*` tasks.
XTREME_DIR_ENV = "REMBERT_XTREME_DIR"
# (role, language) -> the task's source; role is "train" or "eval".
SourceFor = Callable[[str, str], seqio.DataSource]
# A mixture member: a task name, or (name, rate) for a weighted mixture.
MixtureMember = Union[str, Tuple[str, float]]


def add_task(name: str, **kwargs) -> seqio.Task:
  """seqio.TaskRegistry.add that replaces an existing task of that name."""
  if name in seqio.TaskRegistry.names():
    seqio.TaskRegistry.remove(name)
  return seqio.TaskRegistry.add(name, **kwargs)


def add_mixture(name: str, tasks: Sequence[MixtureMember],
                default_rate: float = 1.0) -> seqio.Mixture:
  """seqio.MixtureRegistry.add that replaces an existing mixture."""
  if name in seqio.MixtureRegistry.names():
    seqio.MixtureRegistry.remove(name)
  return seqio.MixtureRegistry.add(name, list(tasks),
                                   default_rate=default_rate)


def xtreme_files(data_dir: str, folder: str,
                 make_source: Callable[[dict, str], seqio.DataSource],
                 eval_splits: Callable[[str], dict] = lambda lang: {
                     "validation": "dev", "test": "test"}) -> SourceFor:
  """`source_for` over XTREME's `{data_dir}/{folder}/{split}-{lang}.tsv`.

  Args:
    data_dir: XTREME's download folder.
    folder: the task's folder, e.g. "pawsx".
    make_source: (our split -> file path, language) -> the source.
    eval_splits: language -> {our split: XTREME's file split} of the
      evaluation tasks (UD-POS: some languages have no dev file).
  """
  def source_for(role, lang):
    splits = {"train": "train"} if role == "train" else eval_splits(lang)
    return make_source(
        {split: xtreme_readers.xtreme_split_file(data_dir, folder, name, lang)
         for split, name in splits.items()}, lang)
  return source_for


def register_zero_shot(
    family: str,
    source_for: SourceFor,
    languages: Sequence[str],
    *,
    prefix: str,
    preprocessors: Union[Sequence[Callable],
                         Callable[[str, str], Sequence[Callable]]],
    train_task: str = "train_en",
    train_language: str = "en",
    **task_kwargs,
) -> List[str]:
  """Registers a family's training task, per-language tasks and mixture.

  Args:
    family: the middle of every name, e.g. "xnli".
    source_for: `source_for("train", train_language)` is the training
      task's source, `source_for("eval", lang)` each evaluation task's.
    languages: the evaluation languages, in registration order.
    prefix: e.g. "rembert_" (TFDS) or "rembert_local_" (XTREME's files).
    preprocessors: the same list for every task, or a function of
      (role, language) when training and evaluation differ (XNLI selects
      one language of a multilingual TFDS dataset for evaluation).
    train_task: the training task's suffix (`<prefix><family>_<train_task>`).
    train_language: the language passed to `source_for("train", ...)`.
    **task_kwargs: the rest of seqio.Task's arguments (output_features,
      postprocess_fn, metric_fns), shared by every task of the family.

  Returns:
    The task names: the training task first, then one per language. The
    mixture is `<prefix><family>_zeroshot`.
  """
  def preprocessors_for(role, lang):
    if callable(preprocessors):
      return list(preprocessors(role, lang))
    return list(preprocessors)

  train_name = f"{prefix}{family}_{train_task}"
  add_task(train_name, source=source_for("train", train_language),
           preprocessors=preprocessors_for("train", train_language),
           **task_kwargs)
  names = [train_name]
  for lang in languages:
    name = f"{prefix}{family}_{lang}"
    add_task(name, source=source_for("eval", lang),
             preprocessors=preprocessors_for("eval", lang), **task_kwargs)
    names.append(name)
  add_mixture(f"{prefix}{family}_zeroshot", names)
  return names


def register_pair(family: str, source_for: SourceFor, languages: Sequence[str],
                  *, prefix: str, labels: Sequence[str],
                  vocabulary: Optional[seqio.Vocabulary],
                  metric_fn: Callable,
                  preprocessors_for: Optional[
                      Callable[[str, str], Sequence[Callable]]] = None,
                  **kwargs) -> List[str]:
  """A sentence-pair classification family (XNLI, PAWS-X, synthetic pair).

  Args:
    family, source_for, languages, prefix: as `register_zero_shot`.
    labels: the class names in id order.
    vocabulary: the input vocabulary (None: the lazy default).
    metric_fn: the seqio metric.
    preprocessors_for: (role, language) -> preprocessors that run before
      the pair encoding (e.g. rekeying TFDS features), if any.
    **kwargs: `train_task` / `train_language` of `register_zero_shot`.

  Returns:
    The task names (`register_zero_shot`).
  """
  encode = functools.partial(xp.encode_sentence_pair, num_classes=len(labels))

  def preprocessors(role, lang):
    first = preprocessors_for(role, lang) if preprocessors_for else ()
    return [*first, xp.add_example_index, encode]

  return register_zero_shot(
      family, source_for, languages, prefix=prefix,
      preprocessors=preprocessors,
      output_features=xp.pair_output_features(
          vocabulary or lazy_vocabulary.DefaultVocabulary(), labels),
      postprocess_fn=xp.pair_label_postprocessor,
      metric_fns=[metric_fn], **kwargs)


def register_tagging(family: str, source_for: SourceFor,
                     languages: Sequence[str], *, prefix: str,
                     labels: Sequence[str],
                     vocabulary: Optional[seqio.Vocabulary],
                     metric_fn: Callable,
                     extra_preprocessors: Sequence[Callable] = (),
                     split_long: bool = True, **kwargs) -> List[str]:
  """A token tagging family (PAN-X, UD-POS, synthetic tag).

  Args:
    family, source_for, languages, prefix: as `register_zero_shot`.
    labels: the tag names in id order ("O" is the fill tag of positions the
      model does not tag).
    vocabulary: the input vocabulary (None: the lazy default).
    metric_fn: the seqio metric over whole sentences.
    extra_preprocessors: run first (e.g. rekeying TFDS features).
    split_long: split sentences longer than the input into several
      examples (XTREME's sliding split); the metric sees them joined back.
    **kwargs: `train_task` / `train_language` of `register_zero_shot`.

  Returns:
    The task names (`register_zero_shot`).
  """
  split = [xp.split_long_sentences] if split_long else []
  return register_zero_shot(
      family, source_for, languages, prefix=prefix,
      output_features=xp.tagging_output_features(
          vocabulary or lazy_vocabulary.DefaultVocabulary(), labels),
      preprocessors=[*extra_preprocessors, xp.add_example_index, *split,
                     functools.partial(xp.align_word_tags,
                                       num_tags=len(labels))],
      postprocess_fn=xp.TaggingPostprocessor(labels, fill_tag="O"),
      metric_fns=[xp.WholeSentences(metric_fn) if split_long
                  else metric_fn], **kwargs)
