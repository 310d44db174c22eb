"""Logical axis names and partitioning rules for RemBERT.

Every parameter and the main activations carry *logical* axis names; a
partitioner maps them onto mesh axes ("data", "model") with the rules below.
T5X's partitioner and our local runner read the same rules, so a model shards
the same way under `t5x.train` and `python -m rembert_t5x.runner.train`.

The two decoupled widths get names of their own (`input_embed` for E_in and
`output_embed` for E_out) so they can be sharded independently of the hidden
width `embed` (H). The vocabulary dimension (the big one) is split over the
model axis, as T5X does for its embeddings; with 1-D parameter partitioning
(T5X's default) the decoupled widths are replicated, with 2-D partitioning
they go over the data axis like T5X's `embed` (`rembert_additional_axis_rules`).

Attention kernels keep heads and head_dim joined in one `joined_kv` axis
(H x heads*head_dim, as flaxformer does), which T5X splits over the model axis:
RemBERT's 18 heads divide no model-parallel size above 2, 18 * 64 = 1152
divides 2, 4, 8, 16, ... 128. T5X never replicates a dimension its mesh axis
does not divide (it fails in partitioned init), so every partitioned
dimension must divide exactly: see `tests/partitioned_init_test.py`.
"""

import math
from typing import Any, Mapping, Optional, Sequence

import flax
from flax.linen import partitioning as nn_partitioning
import jax

# Parameter and activation axis names. Keep every name used by the network here.
BATCH = "batch"
LENGTH = "length"
VOCAB = "vocab"
INPUT_EMBED = "input_embed"  # E_in, the width of the input embeddings.
EMBED = "embed"  # H, the Transformer's hidden width.
OUTPUT_EMBED = "output_embed"  # E_out, the width of the MLM head (output embedding).
HEADS = "heads"  # Activations only: parameters use JOINED_KV.
KV = "kv"
JOINED_KV = "joined_kv"  # heads * head_dim in one axis (attention kernels).
MLP = "mlp"
POSITIONS = "abspos_buckets"  # Rows of the absolute position table (T5X's name).
TOKEN_TYPES = "token_types"
CLASSES = "classes"  # Output width of task heads (classes, tags, start/end).
# The stacked-layer axis of scanned Transformer layers (T5X's name; its
# standard rules replicate it).
LAYERS = "layers"

# The T5X run files (gin_configs/runs/{pretrain_mlm,finetune_base,eval_base}.gin)
# pad the vocabulary to a multiple of this (`VOCAB_PAD_MULTIPLE`): 128 rows
# divide every model-parallel size up to 128 (RemBERT: 250,300 -> 250,368).
T5X_VOCAB_PAD_MULTIPLE = 128

LogicalAxisRules = Sequence[tuple[str, Optional[str]]]


def standard_logical_axis_rules(
    activation_partitioning_dims: int = 1,
    parameter_partitioning_dims: int = 1,
) -> list[tuple[str, Optional[str]]]:
  """T5X's standard rules, `t5x.partitioning.standard_logical_axis_rules`.

  Restated so the package works without t5x installed;
  `tests/partitioned_init_test.py` checks them against t5x when it is.
  1-D parameter partitioning splits only model-parallel axes (vocab, mlp,
  heads, joined_kv) over "model"; 2-D also splits `embed` over "data"
  (2-D activation partitioning puts `embed` activations on "model").
  """
  rules = [("batch", "data"), ("vocab", "model")]
  if (activation_partitioning_dims, parameter_partitioning_dims) == (1, 1):
    rules.append(("embed", None))
  elif (activation_partitioning_dims, parameter_partitioning_dims) not in (
      (2, 1), (1, 2), (2, 2)):
    raise ValueError(
        f"activation_partitioning_dims={activation_partitioning_dims}, "
        f"parameter_partitioning_dims={parameter_partitioning_dims}: each "
        "must be 1 or 2 (as in T5X)")
  rules += [("mlp", "model"), ("heads", "model"), ("kv", None),
            ("joined_kv", "model")]
  if activation_partitioning_dims == 2:
    rules.append(("embed", "model"))
  if parameter_partitioning_dims == 2:
    rules.append(("embed", "data"))
  return rules + [
      ("relpos_buckets", None),
      ("abspos_buckets", None),
      ("length", None),
      ("layers", None),
      ("stack", None),
      ("mlp_activations", None),
  ]


def rembert_additional_axis_rules(
    parameter_partitioning_dims: int = 1,
) -> list[tuple[str, Optional[str]]]:
  """Rules for the axis names RemBERT adds on top of T5X's standard names.

  Pass these as `additional_rules` to
  `t5x.partitioning.standard_logical_axis_rules` with the same
  `parameter_partitioning_dims` (the run gin files do).

  With 1-D parameter partitioning E_in and E_out are replicated. With 2-D
  they go over "data" like T5X's `embed`: otherwise the largest parameters,
  the word embeddings [vocab, E_in] and the decoder [E_out, vocab], would be
  split only over "model" and be the bulk of each device's memory at
  data 8 x model 2. An activation that already uses
  "data" for its batch leaves these axes unsplit (a mesh axis is used once
  per array).
  """
  if parameter_partitioning_dims not in (1, 2):
    raise ValueError("parameter_partitioning_dims must be 1 or 2, got "
                     f"{parameter_partitioning_dims}")
  decoupled = None if parameter_partitioning_dims == 1 else "data"
  return [
      (INPUT_EMBED, decoupled),
      (OUTPUT_EMBED, decoupled),
      (TOKEN_TYPES, None),
      (CLASSES, None),
  ]


def logical_axis_rules(
    additional_rules: Optional[LogicalAxisRules] = None,
    parameter_partitioning_dims: int = 1,
) -> list[tuple[str, Optional[str]]]:
  """All rules: T5X's standard ones, RemBERT's, then `additional_rules`."""
  rules = (standard_logical_axis_rules(
      parameter_partitioning_dims=parameter_partitioning_dims)
           + rembert_additional_axis_rules(parameter_partitioning_dims))
  if additional_rules:
    rules.extend(additional_rules)
  return rules


def axis_names_without_rule(
    axis_names: Sequence[str],
    rules: Optional[LogicalAxisRules] = None,
) -> list[str]:
  """Returns the axis names that no rule mentions.

  Flax and T5X silently replicate a dimension whose logical name has no rule,
  which hides typos; the tests use this to make that an error.
  """
  known = {name for name, _ in (rules or logical_axis_rules())}
  return sorted({a for a in axis_names if a not in known})


# --- Checks on a layout (what T5X's partitioned init requires) --------------


def mesh_partition_specs(params_axes: Any,
                         rules: LogicalAxisRules) -> dict[str, Any]:
  """`{"a/b/kernel": PartitionSpec}` from the `params_axes` collection.

  The mapping T5X's `PjitPartitioner.get_mesh_axes` applies: flax's
  logical -> mesh resolution, each mesh axis used at most once per array.
  """
  logical = flax.traverse_util.flatten_dict(
      flax.core.unfreeze(nn_partitioning.get_axis_names(params_axes)),
      sep="/")
  return {path: nn_partitioning.logical_to_mesh_axes(spec, rules)
          for path, spec in logical.items()}


def _ways(entry, mesh_shape: Mapping[str, int]) -> int:
  names = entry if isinstance(entry, tuple) else (entry,)
  return math.prod(mesh_shape[n] for n in names if n is not None)


def indivisible_dimensions(shapes: Mapping[str, Any],
                           specs: Mapping[str, Any],
                           mesh_shape: Mapping[str, int]) -> list[str]:
  """Every parameter dimension its mesh axes do not divide, as messages.

  T5X builds the train state under pjit with these specs as out shardings
  and fails (`IndivisibleError`) on any of them: it never replicates
  instead. Empty means the layout partitions.
  """
  problems = []
  for path, shape in shapes.items():
    spec = tuple(specs[path]) + (None,) * (len(shape.shape) - len(specs[path]))
    for dim, (size, entry) in enumerate(zip(shape.shape, spec)):
      ways = _ways(entry, mesh_shape)
      if size % ways:
        problems.append(f"{path} {tuple(shape.shape)}: dimension {dim} "
                        f"({size}) over {entry} ({ways} ways)")
  return problems


def bytes_per_device(shapes: Mapping[str, Any], specs: Mapping[str, Any],
                     mesh_shape: Mapping[str, int],
                     copies: int = 1) -> int:
  """Bytes of the parameters on one device (x `copies`: 3 with Adam)."""
  total = 0
  for path, shape in shapes.items():
    ways = math.prod(_ways(e, mesh_shape) for e in tuple(specs[path]))
    total += math.prod(shape.shape) * jax.numpy.dtype(shape.dtype).itemsize // ways
  return total * copies
