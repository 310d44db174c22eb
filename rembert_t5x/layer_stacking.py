"""Converts parameter trees between scanned (stacked) and per-layer layouts.

`RemBertConfig.scan_layers` changes only how the Transformer layers' weights
are laid out, not what the network computes:

  per layer (default)                    scanned
  encoder/layers_0/<p>        [...]      encoder/layers/<p>                  [L, ...]
  ...                                    (the L = num_layers kept layers)
  encoder/layers_{L-1}/<p>    [...]
  encoder/layers_{L}/<p>      [...]      encoder/pretraining_only_layers/<p> [E, ...]
  ...                                    (the E pre-training-only layers,
  encoder/layers_{L+E-1}/<p>  [...]       paper Table 5)

Everything else (embeddings, projection, MLM head, task heads) is the same in
both. The functions here move weights between the two layouts, so a scanned
pre-training checkpoint can be converted to Hugging Face (always per layer),
fine-tuned with or without scan, and compared with an unscanned network.
"""

from typing import Any, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from rembert_t5x import network

PyTree = Any

ENCODER = "encoder"
STACK = "layers"  # the scanned kept layers
EXTRA_STACK = "pretraining_only_layers"  # the scanned pre-training-only layers
_PREFIX = "layers_"  # per-layer modules: layers_0, layers_1, ...


def is_scanned(params: Mapping[str, Any]) -> bool:
  """True when `params` (a network's params, with an `encoder`) are stacked."""
  return STACK in params.get(ENCODER, {})


def _layer_index(name: str) -> Optional[int]:
  if name.startswith(_PREFIX) and name[len(_PREFIX):].isdigit():
    return int(name[len(_PREFIX):])
  return None


def _stack(trees: list[PyTree]) -> PyTree:
  def stack(*xs):
    return (jnp.stack(xs) if isinstance(xs[0], jax.Array)
            else np.stack([np.asarray(x) for x in xs]))
  return jax.tree_util.tree_map(stack, *trees)


def _unstack(tree: PyTree, count: int) -> list[PyTree]:
  return [jax.tree_util.tree_map(lambda x, i=i: x[i], tree)
          for i in range(count)]


def _stack_size(tree: PyTree) -> int:
  sizes = {np.shape(x)[0] for x in jax.tree_util.tree_leaves(tree)}
  if len(sizes) != 1:
    raise ValueError(f"stacked layer parameters disagree on the number of "
                     f"layers (leading dims {sorted(sizes)})")
  return sizes.pop()


def unstack_layers(params: Mapping[str, Any]) -> dict[str, Any]:
  """Scanned params -> per-layer params (`layers_0`, `layers_1`, ...).

  Pre-training-only layers follow the kept ones in the numbering, as in an
  unscanned network. Per-layer params are returned unchanged.
  """
  params = dict(params)
  if not is_scanned(params):
    return params
  encoder = dict(params[ENCODER])
  layers = _unstack(encoder.pop(STACK), _stack_size(params[ENCODER][STACK]))
  extra = encoder.pop(EXTRA_STACK, None)
  if extra is not None:
    layers += _unstack(extra, _stack_size(extra))
  for i, layer in enumerate(layers):
    encoder[f"{_PREFIX}{i}"] = layer
  params[ENCODER] = encoder
  return params


def stack_layers(params: Mapping[str, Any], num_layers: int) -> dict[str, Any]:
  """Per-layer params -> scanned params.

  Args:
    params: a network's params with `encoder/layers_<i>` subtrees.
    num_layers: how many layers are kept for fine-tuning
      (`RemBertConfig.num_layers`); layers at or above it become the
      `pretraining_only_layers` stack. Scanned params are returned unchanged.

  Raises:
    ValueError: the layers are not numbered 0..n-1, or fewer than
      `num_layers` exist.
  """
  params = dict(params)
  if is_scanned(params):
    return params
  encoder = dict(params[ENCODER])
  ids = sorted(i for k in encoder if (i := _layer_index(k)) is not None)
  if ids != list(range(len(ids))) or len(ids) < num_layers:
    raise ValueError(f"cannot stack layers {ids}: expected layers_0 .. "
                     f"layers_{num_layers - 1} at least")
  layers = [encoder.pop(f"{_PREFIX}{i}") for i in ids]
  encoder[STACK] = _stack(layers[:num_layers])
  if len(layers) > num_layers:
    encoder[EXTRA_STACK] = _stack(layers[num_layers:])
  params[ENCODER] = encoder
  return params


def to_layout(params: Mapping[str, Any],
              config: network.RemBertConfig) -> dict[str, Any]:
  """`params` in the layout `config.scan_layers` asks for."""
  if config.scan_layers:
    return stack_layers(params, config.num_layers)
  return unstack_layers(params)


class UnstackedSource:
  """A flat-name tensor source (`checkpoint_conversion.TensorSource`) that
  shows a scanned checkpoint under per-layer names.

  `encoder/layers/<p>` of shape `[L, ...]` appears as `encoder/layers_<i>/<p>`
  of shape `[...]` (and the pre-training-only stack continues at i = L). A
  tensor is read from the underlying source only when asked for, one layer
  slice at a time; names and shapes come from metadata.
  """

  def __init__(self, source):
    self._source = source
    self._map: dict[str, tuple[str, int]] = {}
    names = source.names()
    kept = {n for n in names if n.startswith(f"{ENCODER}/{STACK}/")}
    counts = {source.shape(n)[0] for n in kept}
    if len(counts) > 1:
      raise ValueError(f"stacked layer parameters disagree on the number of "
                       f"layers (leading dims {sorted(counts)})")
    offset = counts.pop() if counts else 0
    for name in names:
      parts = name.split("/")
      if len(parts) > 2 and parts[0] == ENCODER and parts[1] in (STACK,
                                                                 EXTRA_STACK):
        start = 0 if parts[1] == STACK else offset
        rest = "/".join(parts[2:])
        for i in range(source.shape(name)[0]):
          self._map[f"{ENCODER}/{_PREFIX}{start + i}/{rest}"] = (name, i)
      else:
        self._map[name] = (name, -1)

  def names(self) -> list[str]:
    return list(self._map)

  def shape(self, name: str) -> tuple[int, ...]:
    real, i = self._map[name]
    shape = tuple(self._source.shape(real))
    return shape[1:] if i >= 0 else shape

  def dtype(self, name: str):
    return self._source.dtype(self._map[name][0])

  def get(self, name: str) -> np.ndarray:
    real, i = self._map[name]
    array = self._source.get(real)
    return np.asarray(array[i]) if i >= 0 else array


def per_layer_source(source):
  """`source` itself, or an `UnstackedSource` over it if it is scanned."""
  if any(n.startswith(f"{ENCODER}/{STACK}/") for n in source.names()):
    return UnstackedSource(source)
  return source
