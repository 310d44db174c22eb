"""Loading gin model files and counting parameters.

Gin files live in `gin_configs/` and include each other by paths relative to
its parent (T5X's convention: run from the repository root with
`--gin_search_paths=.`). `parse_gin` adds the current directory and the
directory holding gin_configs/ (`gin_path.find_search_root`: the repository
root in a checkout, the package directory after a regular install) to the
search path, so the files resolve from anywhere.

A `--gin.MACRO=value` binding of a macro no gin file of the run uses is an
error: gin would define the new macro and ignore it, and the run would go on
with the file's value.
"""

import contextlib
import dataclasses
import difflib
import json
import logging
import os
import pathlib
import re
import tokenize
from typing import Any, Optional, Sequence, Union

import flax
import gin
from gin import config_parser
import jax
import jax.numpy as jnp
import numpy as np

from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x import gin_path
from rembert_t5x import network
from rembert_t5x import partitioning


class GinConfigError(errors.UserError, ValueError):
  """A gin file or binding is wrong; the message names the file and binding."""


def gin_search_paths() -> list[str]:
  root = gin_path.find_search_root()
  return [os.getcwd()] + ([str(root)] if root else [])


def parse_gin(
    gin_files: Sequence[str],
    bindings: Sequence[str] = (),
    *,
    search_paths: Optional[Sequence[str]] = None,
    finalize: bool = False,
) -> None:
  """Parses gin files and `KEY=VALUE` bindings, with one clear error.

  Args:
    gin_files: paths, absolute or relative to a search path.
    bindings: gin binding strings, e.g. `"NUM_LAYERS = 4"`.
    search_paths: extra directories for `include`s (the directory holding
      gin_configs/ and the working directory are always searched).
    finalize: lock the config afterwards.

  Raises:
    GinConfigError: naming the file and the offending binding, also for a
      binding of a macro that no gin file uses.
  """
  gin.clear_config()
  prefixes = list(search_paths or []) + gin_search_paths()
  for path in prefixes:
    gin.add_config_file_search_path(path)
  # gin tries every relative path (a file or an `include`) against the
  # working directory first, and then as a Python package on sys.path,
  # which fails with a TypeError when a directory on sys.path holds
  # gin_configs/ (a namespace package). Reading from the directory that
  # holds gin_configs/ finds the includes first; the user's own relative
  # files are made absolute before that.
  gin_files = [os.path.abspath(f) if os.path.isfile(f) else f
               for f in gin_files]
  root = gin_path.find_search_root()
  with _quiet_gin_search(), contextlib.chdir(root or os.getcwd()):
    for f in gin_files:
      try:
        gin.parse_config_file(f)
      except (ValueError, IOError, SyntaxError, KeyError,
              tokenize.TokenError) as e:  # TokenError: an unclosed bracket
        raise GinConfigError(f"gin file {f}: {errors.first_line(e)}") from e
      except TypeError as e:
        raise GinConfigError(
            f"gin file {f}: not found in the working directory or the gin "
            f"search paths ({', '.join(prefixes)})") from e
  for b in bindings:
    try:
      gin.parse_config(b)
    except (ValueError, SyntaxError, KeyError, tokenize.TokenError) as e:
      raise GinConfigError(f"gin binding {b!r}: {_explain_binding(b, e)}"
                           ) from e
  if bindings:
    _check_macros_are_used(gin_files, bindings, prefixes)
  if finalize:
    gin.finalize()


_AMBIGUOUS = re.compile(r"Ambiguous selector '([\w.]+)', matches \[(.*)\]")
_NO_MATCH = re.compile(r"No configurable matching (?:reference )?'@?([\w.]+)'")


def _registered_selectors() -> list[str]:
  """Every configurable's full name (module.name), `__main__` copies left out.

  `python -m <module>` registers a module's configurables twice, under
  `__main__` and under the module's own path; only the second is one a
  binding should name.
  """
  # pylint: disable-next=protected-access
  registry = gin.config._REGISTRY
  return sorted(name for name, _ in registry.items()
                if not name.startswith(("__main__.", "gin.")))


def _shortest(selector: str) -> str:
  """The shortest unambiguous way to write `selector` in a binding."""
  # pylint: disable-next=protected-access
  return gin.config._REGISTRY.minimal_selector(selector)


def _explain_binding(binding: str, e: BaseException) -> str:
  """gin's error for `binding`, with the names that would work.

  An ambiguous or unknown configurable lists the names to write instead; a
  bare word where gin expects a Python literal (`--gin.MODULE=rembert_tasks`)
  says how to quote it.
  """
  message = str(e).strip().strip('"')
  try:
    ambiguous = _AMBIGUOUS.search(message)
    if ambiguous:
      matches = [m.strip(" '") for m in ambiguous.group(2).split(",")]
      names = [f"{_shortest(m)} ({m})" for m in matches
               if not m.startswith("__main__.")]
      return (f"{ambiguous.group(1)!r} names several configurables; write "
              f"one of: {', '.join(names)}")
    missing = _NO_MATCH.search(message)
    if missing:
      wanted = missing.group(1)
      known = _registered_selectors()
      last = wanted.split(".")[-1]
      same_name = [s for s in known if s.split(".")[-1] == last]
      short = {_shortest(s): s for s in known}
      close = same_name or [short[s] for s in difflib.get_close_matches(
          wanted, list(short), n=3, cutoff=0.6)]
      hint = (f"; did you mean {' or '.join(_shortest(s) for s in close)}?"
              if close else "")
      return f"no configurable named {wanted!r}{hint}"
  except Exception:  # pylint: disable=broad-except
    return errors.first_line(e)  # the registry's internals changed
  key, _, value = binding.partition("=")
  key, value = key.strip(), value.strip()
  if isinstance(e, SyntaxError) and "ast.Name" in message:
    return (f"{value!r} is not a Python literal: quote it: "
            f"--gin.{key}=\"'{value}'\"")
  if isinstance(e, SyntaxError) and _UNQUOTED.fullmatch(value):
    # A path such as /tmp/m or ~/m, where gin says only "Unable to parse".
    return (f"{errors.first_line(e)} (gin values are Python literals: quote "
            f"strings, e.g. --gin.{key}=\"'{value}'\")")
  return errors.first_line(e)


# A bare word or path: no quotes, brackets, gin references or separators.
_UNQUOTED = re.compile(r"[^\s'\"\[\](){}@%,=]+")


class _GinSearchMiss(logging.Filter):
  """Drops gin's "Path not found: <prefix>/<file>" error records.

  gin looks for a relative file under each search path in turn and logs an
  ERROR for every path that does not hold it, also when a later one does:
  run from outside the checkout, every model file printed two false
  alarms. A file found nowhere still fails, with gin's message naming the
  paths it searched (`GinConfigError`).
  """

  def filter(self, record: logging.LogRecord) -> bool:
    return not (record.msg == "Path not found: %s" and
                record.pathname.endswith(os.path.join("gin",
                                                      "resource_reader.py")))


@contextlib.contextmanager
def _quiet_gin_search():
  root = logging.getLogger()
  miss = _GinSearchMiss()
  root.addFilter(miss)
  try:
    yield
  finally:
    root.removeFilter(miss)


class _MacroRecorder(config_parser.ParserDelegate):
  """A gin parser delegate that records every `%MACRO` it meets."""

  def __init__(self):
    self.used: set[str] = set()

  def configurable_reference(self, scoped_configurable_name, evaluate):
    return scoped_configurable_name

  def macro(self, macro_name):
    self.used.add(macro_name.split("/")[-1])
    return macro_name


def _parse_statements(text_or_file, recorder: _MacroRecorder) -> list:
  return list(config_parser.ConfigParser(text_or_file, recorder))


def gin_file_macros(path: str) -> dict[str, Any]:
  """The macros a gin file itself binds (`NAME = literal`), its includes not
  followed: e.g. the pre-training schedule of `gin_configs/runs/
  pretrain_mlm.gin`, read by tools that must agree with it (`run_file_macros`).
  """
  with open(path, encoding="utf-8") as f:
    statements = _parse_statements(f, _MacroRecorder())
  return {s.selector: s.value for s in statements
          if isinstance(s, config_parser.BindingStatement)
          and not s.arg_name and "." not in s.selector and not s.scope}


def run_file_macros(name: str) -> dict[str, Any]:
  """`gin_file_macros` of `gin_configs/runs/<name>` of this installation."""
  return gin_file_macros(
      str(gin_path.search_root() / "gin_configs" / "runs" / name))


def _resolve_include(name: str, prefixes: Sequence[str]) -> Optional[str]:
  """The file gin reads for `name` (gin tries '' and then each prefix)."""
  for prefix in [""] + list(prefixes):
    path = os.path.join(prefix, name)
    if os.path.isfile(path):
      return path
  return None


def _check_macros_are_used(gin_files: Sequence[str], bindings: Sequence[str],
                           prefixes: Sequence[str]) -> None:
  """Refuses a binding `NAME = value` of a macro nothing references.

  Re-reads the run's files (following includes) with gin's own parser and
  collects every `%NAME`; gin has already accepted the text, so this only
  decides which macros the run uses.
  """
  recorder = _MacroRecorder()
  seen = set()
  pending = list(gin_files)
  while pending:
    path = _resolve_include(pending.pop(), prefixes)
    if path is None or os.path.realpath(path) in seen:
      continue
    seen.add(os.path.realpath(path))
    with open(path, encoding="utf-8") as f:
      statements = _parse_statements(f, recorder)
    pending.extend(s.filename for s in statements
                   if isinstance(s, config_parser.IncludeStatement))
  assigned = []  # (binding, macro name)
  for b in bindings:
    for statement in _parse_statements(b, recorder):
      if (isinstance(statement, config_parser.BindingStatement)
          and not statement.arg_name and "." not in statement.selector):
        assigned.append((b, statement.selector))
  used = recorder.used
  for b, name in assigned:
    if name in used:
      continue
    known = sorted(m for m in used if m != "gin.REQUIRED")
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
    hint = (f"did you mean {close[0]}?" if close
            else f"its macros: {', '.join(known) or 'none'}")
    raise GinConfigError(
        f"gin binding {b!r}: no gin file of this run uses the macro {name} "
        f"({hint})")


def config_from_gin(
    gin_file: Union[str, Sequence[str]], bindings: Sequence[str] = (),
    search_paths: Optional[Sequence[str]] = None,
) -> network.RemBertConfig:
  """The `RemBertConfig` a model gin file (or files, in order) describes."""
  gin_files = [gin_file] if isinstance(gin_file, str) else list(gin_file)
  parse_gin(gin_files, bindings, search_paths=search_paths)
  configurable = gin.get_configurable(network.RemBertConfig)
  try:
    return configurable()
  except (ValueError, TypeError) as e:  # TypeError: a required macro unset
    raise GinConfigError(
        f"gin file {', '.join(gin_files)}: {errors.first_line(e)}") from e


@contextlib.contextmanager
def model_config_errors(gin_files: Sequence[str], bindings: Sequence[str] = ()):
  """Reports a `RemBertConfig` that gin builds from bad values as one line.

  The run files build the model inside the call of the entry point (gin
  evaluates `@network.RemBertConfig()` then), so a size that does not fit
  (`--gin.EMBED_DIM=128` with 4 heads of 16) raises the config's
  ValueError from deep inside gin. Wrap that call in this.

  Raises:
    GinConfigError: naming the gin files, the bindings and the config's
      message, for a ValueError that `RemBertConfig` raised while gin built
      it; any other error passes through as it is.
  """
  try:
    yield
  except ValueError as e:
    if not _raised_by_gin_config(e):
      raise
    where = ", ".join(str(f) for f in gin_files)
    # As the command line gave them: --gin.KEY=VALUE.
    given = " ".join("--gin.{}={}".format(*(part.strip() for part in
                                             b.partition("=")[::2]))
                     for b in bindings)
    raise GinConfigError(
        f"the model of gin files {where}" + (f" {given}" if given else "")
        + f": {errors.first_line(e)}") from e


def _raised_by_gin_config(e: BaseException) -> bool:
  """Whether `e` comes from `RemBertConfig`'s checks, called by gin."""
  if "In call to configurable 'RemBertConfig'" not in str(e):
    return False
  checks = network.RemBertConfig.__post_init__.__code__
  tb = e.__traceback__
  while tb is not None:
    if tb.tb_frame.f_code is checks:
      return True
    tb = tb.tb_next
  return False


def _param_count(module: flax.linen.Module, length: int = 8) -> int:
  """Counts parameters from the initialised tree without allocating it.

  A padded vocabulary axis (`RemBertConfig.vocab_pad_multiple`) counts with
  its real size: padding rows are not model parameters.
  """
  tokens = jax.ShapeDtypeStruct((1, length), jnp.int32)
  shapes = jax.eval_shape(
      lambda t: module.init(jax.random.PRNGKey(0), t), tokens)
  params = flax.traverse_util.flatten_dict(shapes["params"])
  axes = flax.traverse_util.flatten_dict(shapes["params_axes"])
  total = 0
  for path, leaf in params.items():
    names = axes[path[:-1] + (path[-1] + "_axes",)].names
    total += int(np.prod([
        module.config.vocab_size if name == partitioning.VOCAB else size
        for name, size in zip(names, leaf.shape)]))
  return total


def count_parameters(config: network.RemBertConfig) -> dict[str, int]:
  """Pre-training and fine-tuning parameter counts, as the paper counts them.

  Pre-training counts everything the MLM network has (with the pre-training
  only layers and the output embedding). Fine-tuning counts what is kept
  after pre-training: embeddings, the E_in -> H projection and the kept
  layers; the MLM head, the pre-training-only layers and any task head are
  not counted (paper §3: parameters after the last layer are pre-training
  only).
  """
  return {
      "pretraining_params": _param_count(network.RemBertForMaskedLM(config)),
      "finetuning_params": _param_count(network.RemBertEncoder(config)),
  }


# --- The config beside a checkpoint -------------------------------------------

# Written into every MODEL_DIR (local runner, converters) so that readers
# recover what parameter shapes cannot tell: the number of heads, LayerNorm
# epsilon, dropout, the pad id, the pre-training-only layers.
CHECKPOINT_CONFIG_FILE = "rembert_config.json"


def write_checkpoint_config(out: pathlib.Path,
                            config: network.RemBertConfig) -> None:
  """Writes `config` as `out/rembert_config.json`, atomically."""
  fields = dataclasses.asdict(config)
  fields["dtype"] = str(np.dtype(fields["dtype"]))
  fields["param_dtype"] = str(np.dtype(fields["param_dtype"]))
  io_utils.atomic_write_text(pathlib.Path(out) / CHECKPOINT_CONFIG_FILE,
                             json.dumps(fields, indent=2, sort_keys=True))


def read_checkpoint_config(path: pathlib.Path) -> network.RemBertConfig:
  """The `RemBertConfig` a `rembert_config.json` holds.

  Raises:
    errors.UserError: the file is unreadable or not a RemBertConfig.
  """
  fields = io_utils.read_json(path)
  try:
    return network.RemBertConfig(**fields)
  except (TypeError, ValueError) as e:
    raise errors.UserError(f"{path}: not a RemBertConfig: {e}") from e
