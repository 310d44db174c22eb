"""A submission request, the check of its inputs, and the folder's writing.

A folder is complete or not written: its files are checked before anything
is written into a temporary sibling that is then renamed
(`io_utils.atomic_output_dir`). Its `submission.json` lists the tasks it
holds and, for each task it does not hold, why.
"""

import dataclasses
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x.experiments import xtreme_local
from rembert_t5x.experiments.submission import families

MANIFEST = "submission.json"


@dataclasses.dataclass(frozen=True)
class Request:
  """What `sweep --submission_dir` (or the T5X folder command) asks for.

  Attributes:
    out_dir: folders go to `out_dir/seed-<seed>/`.
    xtreme_dir: XTREME's download folder the sweep reads.
    split: "test" or "dev" (files named `test-` either way).
    languages: the sweep's `--languages` (None: all).
    work_dir: the retrieval corpora's embedding passes (`embed_corpus`),
      which a rerun resumes; None: `out_dir/embeddings`.
  """
  out_dir: str
  xtreme_dir: str
  split: str = "test"
  languages: Optional[Tuple[str, ...]] = None
  work_dir: Optional[str] = None

  def __post_init__(self):
    families.check_split(self.split)
    object.__setattr__(self, "languages",
                       xtreme_local.with_english(self.languages))

  @property
  def embeddings_dir(self) -> str:
    return self.work_dir or os.path.join(self.out_dir, "embeddings")


def grid_tasks(spec, request: Request) -> List[Tuple[str, str]]:
  """(task, language) of every file a grid's evaluations predict."""
  return [(ev.family, lang) for ev in spec.evaluations
          for lang in families.required_languages(ev.family, request.split,
                                                  request.languages)]


def retrieval_tasks(xtreme_dir: str) -> List[str]:
  """The retrieval tasks whose folder the XTREME download holds."""
  return [t for t in families.RETRIEVAL_TASKS
          if os.path.isdir(os.path.join(xtreme_dir, t))]


def check_inputs(request: Request, specs: Sequence[Any]) -> None:
  """Before any training: every XTREME file the folders will follow exists
  (the grids' families, and BUCC / Tatoeba when their folder is there).

  Raises:
    errors.UserError: naming the first missing file and how many more are.
  """
  wanted = {pair for spec in specs for pair in grid_tasks(spec, request)}
  for task in retrieval_tasks(request.xtreme_dir):
    wanted.update((task, lang) for lang in families.required_languages(
        task, request.split, request.languages))
  files = [(task, lang, families.input_file(request.xtreme_dir, task,
                                            request.split, lang))
           for task, lang in sorted(wanted)]
  files += [(task, lang, path) for task, lang in sorted(wanted)
            for path in families.family(task).extra_inputs(
                request.xtreme_dir, request.split, lang)]
  missing = [(t, l, f) for t, l, f in dict.fromkeys(files)
             if not os.path.isfile(f)]
  if missing:
    task, lang, path = missing[0]
    more = f"; {len(missing) - 1} more are missing" if len(missing) > 1 else ""
    raise errors.UserError(f"{task} {lang}: {path}: no such file (the "
                           f"--submission_split={request.split} folder "
                           f"follows it){more}")


def missing_tasks(files: Mapping[Tuple[str, str], str],
                  reasons: Mapping[str, str], default: str) -> Dict[str, str]:
  """{task: why the folder does not hold it} for every task `files` lacks:
  its entry of `reasons`, else `default`."""
  held = {task for task, _ in files}
  return {t: reasons.get(t, default) for t in families.TASKS
          if t not in held}


def write_folder(out_dir: str, files: Mapping[Tuple[str, str], str],
                 manifest: Mapping[str, Any], overwrite: bool = True, *,
                 sources: Sequence[io_utils.Source] = (),
                 output_flag: str = "--output_dir") -> None:
  """Writes {(task, language): text} and `submission.json`, atomically.

  Raises:
    errors.UserError: `out_dir` is, contains or lies inside one of `sources`
      (the inputs, as (flag, path)), whatever `overwrite` says.
  """
  with io_utils.atomic_output_dir(out_dir, overwrite=overwrite,
                                  sources=sources,
                                  output_flag=output_flag) as tmp:
    for (task, lang), text in sorted(files.items()):
      path = tmp / families.file_name(task, lang)
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(text, encoding="utf-8")
    tasks: Dict[str, List[str]] = {}
    for task, lang in sorted(files):
      tasks.setdefault(task, []).append(lang)
    io_utils.atomic_write_json(tmp / MANIFEST, {**manifest, "tasks": tasks},
                               indent=1)
