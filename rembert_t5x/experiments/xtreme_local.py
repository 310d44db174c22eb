"""The sweep's grids over a local XTREME download folder (`--xtreme_dir`).

The paper's grids (`sweep.EXPERIMENTS`) name the TFDS-backed tasks; XTREME's
own download (google-research/xtreme `scripts/download_data.sh`) is a folder
of plain files, over which the task modules register tasks under the prefix
"rembert_local_" (`register_*_local`, file layouts in their docstrings).
`prepare` checks, before anything runs, that the folder holds every file a
grid reads (naming the first missing one), registers the local tasks of the
grids' families and renames the grids' tasks to their local names. The T5X
run files find the same tasks when $REMBERT_XTREME_DIR names the folder
(`sweep.t5x_commands` exports it).
"""

import dataclasses
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from rembert_t5x.common import errors
from rembert_tasks import panx
from rembert_tasks import pawsx
from rembert_tasks import qa
from rembert_tasks import registry
from rembert_tasks import udpos
from rembert_tasks import xnli

TFDS_PREFIX = "rembert_"
LOCAL_PREFIX = "rembert_local_"
XTREME_DIR_ENV = registry.XTREME_DIR_ENV
# Our split name -> the split part of XTREME's `{split}-{lang}.tsv` names.
TSV_SPLITS = {"train": "train", "validation": "dev", "test": "test"}


def local_name(name: str, prefix: str = LOCAL_PREFIX) -> str:
  """`rembert_xnli_en` -> `rembert_local_xnli_en`."""
  if not name.startswith(TFDS_PREFIX) or name.startswith(prefix):
    raise ValueError(f"{name!r} is not a TFDS-backed task name "
                     f"({TFDS_PREFIX}...)")
  return prefix + name[len(TFDS_PREFIX):]


def local_spec(spec, prefix: str = LOCAL_PREFIX):
  """A `sweep.TaskSpec` with every task and mixture name made local."""
  evaluations = tuple(dataclasses.replace(ev, mixture=local_name(ev.mixture,
                                                                 prefix))
                      for ev in spec.evaluations)
  return dataclasses.replace(
      spec, train_task=local_name(spec.train_task, prefix),
      selection_task=local_name(spec.selection_task, prefix),
      evaluations=evaluations)


# --------------------------------------------------------------------------
# Which files a grid reads
# --------------------------------------------------------------------------

def family_languages(family: str) -> Sequence[str]:
  """The languages a family evaluates (its task module's list)."""
  return {"xnli": xnli.XNLI_LANGUAGES, "pawsx": pawsx.PAWSX_LANGUAGES,
          "panx": panx.PANX_LANGUAGES, "udpos": udpos.UDPOS_LANGUAGES,
          "xquad": qa.XQUAD_LANGUAGES, "mlqa": qa.MLQA_LANGUAGES,
          "tydiqa": qa.TYDIQA_LANGUAGES}[family]


def _has_split(family: str, lang: str, split: str) -> bool:
  """UD-POS: some languages have no dev set (kk, th, tl, yo: test only)."""
  return family != "udpos" or split in udpos.local_eval_splits(lang)


def _qa_file(key: str, lang: str = "en") -> Tuple[str, ...]:
  """Candidate paths (relative) of a QA file; the first is the current
  layout, the next an older one XTREME wrote (TyDi)."""
  return tuple(table[key].format(lang=lang)
               for table in (qa.LOCAL_FILES, qa.LOCAL_FILES_OLD)
               if key in table)


def _family_file(family: str, split: str, lang: str) -> Tuple[str, ...]:
  """Candidates for one (family, split, language) file, relative paths."""
  if family in ("xnli", "pawsx", "panx", "udpos"):
    return (f"{family}/{TSV_SPLITS[split]}-{lang}.tsv",)
  key = {("squad", "train"): "squad_train", ("squad", "validation"):
         "squad_dev", ("xquad", "test"): "xquad_test",
         ("mlqa", "validation"): "mlqa_dev", ("mlqa", "test"): "mlqa_test",
         ("tydiqa", "train"): "tydiqa_train",
         ("tydiqa", "validation"): "tydiqa_dev"}.get((family, split))
  if key is None:
    raise ValueError(f"no local file for {family} split {split!r}")
  return _qa_file(key, lang)


def evaluated_languages(family: str,
                        languages: Optional[Sequence[str]] = None
                        ) -> List[str]:
  """A family's languages, or those of them in `languages`."""
  return [l for l in family_languages(family)
          if languages is None or l in languages]


def required_files(spec, languages: Optional[Sequence[str]] = None
                   ) -> List[Tuple[str, Tuple[str, ...]]]:
  """What a grid reads: [(what, candidate relative paths)], in run order.

  The training set (English), the English dev set of the selection task,
  then per evaluated family every language's file of the reported split
  (only those in `languages`, when given).
  """
  train_family = spec.name  # 'squad' and 'tydiqa' train on their own sets
  out = [(f"{spec.name} English training set",
          _family_file(train_family, "train", spec.train_language)),
         (f"{spec.name} English dev set (checkpoint selection)",
          _family_file(train_family, "validation", spec.train_language))]
  for ev in spec.evaluations:
    for lang in evaluated_languages(ev.family, languages):
      if _has_split(ev.family, lang, ev.split):
        out.append((f"{ev.family} {lang} ({ev.split})",
                    _family_file(ev.family, ev.split, lang)))
  return out


def check_files(xtreme_dir: str, specs: Sequence,
                languages: Optional[Sequence[str]] = None) -> None:
  """Raises one UserError naming the first file a grid needs that is absent.

  A file given in two layouts (TyDi) may be present in either.
  """
  if not os.path.isdir(xtreme_dir):
    raise errors.UserError(f"--xtreme_dir {xtreme_dir}: no such directory (an "
                        "XTREME download folder: xnli/, pawsx/, panx/, "
                        "udpos/, squad/, xquad/, mlqa/, tydiqa/)")
  for spec in specs:
    missing = [(what, candidates) for what, candidates in required_files(spec, languages)
               if not any(os.path.isfile(os.path.join(xtreme_dir, c))
                          for c in candidates)]
    if missing:
      what, candidates = missing[0]
      alt = (f" (or {', '.join(candidates[1:])})" if len(candidates) > 1
             else "")
      more = (f"; {len(missing) - 1} more of this grid's files are missing"
              if len(missing) > 1 else "")
      raise errors.UserError(
          f"--xtreme_dir: {os.path.join(xtreme_dir, candidates[0])}: no such "
          f"file{alt}: the {spec.name} grid needs it for the {what}, in "
          f"XTREME's download layout{more}")


def register(xtreme_dir: str, specs: Sequence,
             languages: Optional[Sequence[str]] = None) -> List[str]:
  """Registers the local tasks and mixtures of the grids' families (with
  `languages`, only those languages' evaluation tasks).

  Returns:
    The registered task names.
  """
  registrars: Dict[str, Callable[[str], List[str]]] = {
      "xnli": xnli.register_xnli_local, "pawsx": pawsx.register_pawsx_local,
      "panx": panx.register_panx_local, "udpos": udpos.register_udpos_local,
      "squad": qa.register_qa_local, "tydiqa": qa.register_qa_local}
  if languages is None:
    kwargs = {}
  else:
    langs = {f: evaluated_languages(f, languages) for f in
             ("xnli", "pawsx", "panx", "udpos", "xquad", "mlqa", "tydiqa")}
    kwargs = {"squad": dict(xquad_languages=langs["xquad"],
                            mlqa_languages=langs["mlqa"],
                            tydiqa_languages=langs["tydiqa"])}
    kwargs["tydiqa"] = kwargs["squad"]
    kwargs.update({f: dict(languages=langs[f])
                   for f in ("xnli", "pawsx", "panx", "udpos")})
  names, done = [], set()
  for spec in specs:
    fn = registrars.get(spec.name)
    if fn is None:
      raise errors.UserError(f"grid {spec.name!r} has no local XTREME files "
                          f"(local grids: {sorted(registrars)})")
    if fn not in done:
      names += fn(xtreme_dir, **kwargs.get(spec.name, {}))
      done.add(fn)
  return names


def with_english(languages: Optional[Sequence[str]]
                 ) -> Optional[Tuple[str, ...]]:
  """`languages` (None: all) with English, which is always evaluated (the
  grids train and select on it)."""
  if languages is None or "en" in languages:
    return None if languages is None else tuple(languages)
  return ("en", *languages)


def prepare(xtreme_dir: str, tasks: Mapping[str, object],
            languages: Optional[Sequence[str]] = None) -> Dict[str, object]:
  """Checks the folder, registers its tasks, returns the grids renamed.

  `languages` keeps only those evaluation languages (a quick or partial
  run); the English training and dev sets are always read.
  """
  xtreme_dir = os.path.abspath(xtreme_dir)
  languages = with_english(languages)
  check_files(xtreme_dir, list(tasks.values()), languages)
  register(xtreme_dir, list(tasks.values()), languages)
  return {n: local_spec(t) for n, t in tasks.items()}

