"""Finding users' plain-text corpora: one language per file or per folder.

Layouts understood (the language code comes from the name):

  corpus/en.txt, corpus/sw.txt                one file per language
  corpus/wiki.en.txt, tatoeba.tha-eng.tha     code = last dot-separated part
                                              (after dropping .txt/.text)
  corpus/en/part-0.txt, corpus/en/part-1.txt  one folder per language

Codes must look like ISO 639 codes (2-3 letters, optionally followed by
`-`/`_` subtags such as `zh-Hans`), because they become part of task names;
anything else is rejected with the offending path in the message.
"""

import glob
import os
import re
from typing import Dict, Iterator, List, Optional

_TEXT_EXTENSIONS = (".txt", ".text")
_LANG_RE = re.compile(r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*$")


def check_language_code(code: str, where: str) -> str:
  """Returns `code` if it looks like a language code, else raises.

  Args:
    code: candidate code, e.g. "en", "tha", "zh-Hans".
    where: the file or field it came from, for the error message.

  Raises:
    ValueError: naming `where` and the code.
  """
  if not isinstance(code, str) or not _LANG_RE.match(code):
    raise ValueError(
        f"{where}: {code!r} is not a language code (expected 2-3 letters, "
        "optionally with -subtags, e.g. 'en', 'tha', 'zh-Hans').")
  return code


def language_from_filename(path: str) -> str:
  """Derives the language code from a file name (see the module docstring)."""
  name = os.path.basename(path)
  for ext in _TEXT_EXTENSIONS:
    if name.lower().endswith(ext):
      name = name[:-len(ext)]
      break
  code = name.rsplit(".", 1)[-1]
  return check_language_code(code, path)


def find_language_files(input_dir: Optional[str] = None,
                        input_glob: Optional[str] = None
                        ) -> Dict[str, List[str]]:
  """Lists text files by language from a directory or a glob.

  Args:
    input_dir: a directory holding one file per language and/or one
      sub-directory per language (all regular files inside are used).
    input_glob: a glob of files, one language per file (several files may
      share a language).

  Returns:
    language code -> sorted list of file paths.

  Raises:
    ValueError: neither or both arguments given, nothing found, or a name
      that does not give a language code.
  """
  if (input_dir is None) == (input_glob is None):
    raise ValueError("Give exactly one of input_dir or input_glob.")
  files_by_lang: Dict[str, List[str]] = {}
  if input_glob is not None:
    paths = sorted(p for p in glob.glob(input_glob) if os.path.isfile(p))
    if not paths:
      raise ValueError(f"input_glob {input_glob!r}: no files match.")
    for path in paths:
      files_by_lang.setdefault(language_from_filename(path), []).append(path)
    return files_by_lang
  if not os.path.isdir(input_dir):
    raise ValueError(f"input_dir {input_dir!r}: not a directory.")
  for entry in sorted(os.listdir(input_dir)):
    path = os.path.join(input_dir, entry)
    if entry.startswith("."):
      continue
    if os.path.isdir(path):
      lang = check_language_code(entry, path)
      inner = sorted(
          os.path.join(path, f) for f in os.listdir(path)
          if not f.startswith(".") and os.path.isfile(os.path.join(path, f)))
      if not inner:
        raise ValueError(f"{path}: language folder holds no files.")
      files_by_lang.setdefault(lang, []).extend(inner)
    elif os.path.isfile(path):
      files_by_lang.setdefault(language_from_filename(path), []).append(path)
  if not files_by_lang:
    raise ValueError(f"input_dir {input_dir!r}: no text files found.")
  return files_by_lang


def iter_text_lines(path: str) -> Iterator[str]:
  """Yields the stripped non-blank lines of a UTF-8 text file, streaming.

  Raises:
    ValueError: naming the file (and line) when it cannot be read or is not
      UTF-8.
  """
  try:
    with open(path, "rb") as f:
      for line_number, raw in enumerate(f, start=1):
        try:
          line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as e:
          raise ValueError(
              f"{path}, line {line_number}: not valid UTF-8 ({e}).") from e
        if line:
          yield line
  except OSError as e:
    raise ValueError(f"{path}: cannot read file ({e}).") from e


def read_text_lines(path: str) -> List[str]:
  """Returns the stripped non-blank lines of a file; errors as above.

  Raises:
    ValueError: also when the file has no non-blank line.
  """
  lines = list(iter_text_lines(path))
  if not lines:
    raise ValueError(f"{path}: file is empty (no non-empty lines).")
  return lines


def count_text_lines(path: str) -> int:
  """Counts the non-blank lines of a file without holding them in memory.

  Raises:
    ValueError: as `read_text_lines`.
  """
  count = sum(1 for _ in iter_text_lines(path))
  if not count:
    raise ValueError(f"{path}: file is empty (no non-empty lines).")
  return count
