"""Loading gin model files and counting parameters.

Gin files live in `gin_configs/` at the repository root and include each
other by paths relative to it (T5X's convention: run from the repository root
with `--gin_search_paths=.`). `parse_gin` adds the repository root and the
current directory to the search path, so the files also resolve from elsewhere
in a checkout.
"""

import os
import pathlib
from typing import Optional, Sequence

import flax
import gin
import jax
import jax.numpy as jnp
import numpy as np

from rembert_t5x import network
from rembert_t5x import partitioning

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


class GinConfigError(ValueError):
  """A gin file or binding is wrong; the message names the file and binding."""


def gin_search_paths() -> list[str]:
  return [os.getcwd(), str(REPO_ROOT)]


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
    search_paths: extra directories for `include`s (the repository root and
      the working directory are always searched).
    finalize: lock the config afterwards.

  Raises:
    GinConfigError: naming the file and the offending binding.
  """
  gin.clear_config()
  for path in list(search_paths or []) + gin_search_paths():
    gin.add_config_file_search_path(path)
  for f in gin_files:
    try:
      gin.parse_config_file(f)
    except (ValueError, IOError, SyntaxError, KeyError) as e:
      raise GinConfigError(f"gin file {f}: {_first_line(e)}") from e
  for b in bindings:
    try:
      gin.parse_config(b)
    except (ValueError, SyntaxError, KeyError) as e:
      raise GinConfigError(f"gin binding {b!r}: {_first_line(e)}") from e
  if finalize:
    gin.finalize()


def _first_line(e: BaseException) -> str:
  text = str(e).strip() or type(e).__name__
  return text.splitlines()[0] if "\n" in text else text


def config_from_gin(
    gin_file: str, bindings: Sequence[str] = ()
) -> network.RemBertConfig:
  """The `RemBertConfig` a model gin file describes."""
  parse_gin([gin_file], bindings)
  configurable = gin.get_configurable(network.RemBertConfig)
  try:
    return configurable()
  except ValueError as e:
    raise GinConfigError(f"gin file {gin_file}: {_first_line(e)}") from e
  except TypeError as e:  # e.g. a required macro left unset
    raise GinConfigError(f"gin file {gin_file}: {_first_line(e)}") from e


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
