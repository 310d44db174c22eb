"""Logical axis names and partitioning rules for RemBERT.

Every parameter and the main activations carry *logical* axis names; a
partitioner maps them onto mesh axes ("data", "model") with the rules below.
T5X's partitioner and our local runner read the same rules, so a model shards
the same way under `t5x.train` and `python -m rembert_t5x.train`.

The two decoupled widths get names of their own (`input_embed` for E_in and
`output_embed` for E_out) so they can be sharded independently of the hidden
width `embed` (H). They are small next to the vocabulary, so by default they
are replicated; the vocabulary dimension (the big one: 250,300 rows) is split
over the model axis, as T5X does for its embeddings.
"""

from typing import Optional, Sequence

# Parameter and activation axis names. Keep every name used by the network here.
BATCH = "batch"
LENGTH = "length"
VOCAB = "vocab"
INPUT_EMBED = "input_embed"  # E_in, the width of the input embeddings.
EMBED = "embed"  # H, the Transformer's hidden width.
OUTPUT_EMBED = "output_embed"  # E_out, the width of the MLM head (output embedding).
HEADS = "heads"
KV = "kv"
MLP = "mlp"
POSITIONS = "abspos_buckets"  # Rows of the absolute position table (T5X's name).
TOKEN_TYPES = "token_types"
CLASSES = "classes"  # Output width of task heads (classes, tags, start/end).

LogicalAxisRules = Sequence[tuple[str, Optional[str]]]


def standard_logical_axis_rules() -> list[tuple[str, Optional[str]]]:
  """T5X's standard 1-D rules (activation and parameter partitioning dims 1).

  These equal `t5x.partitioning.standard_logical_axis_rules()` with its
  defaults; they are restated so the package works without t5x installed, and
  a test checks them against t5x when it is.
  """
  return [
      ("batch", "data"),
      ("vocab", "model"),
      ("embed", None),
      ("mlp", "model"),
      ("heads", "model"),
      ("kv", None),
      ("joined_kv", "model"),
      ("relpos_buckets", None),
      ("abspos_buckets", None),
      ("length", None),
      ("layers", None),
      ("stack", None),
      ("mlp_activations", None),
  ]


def rembert_additional_axis_rules() -> list[tuple[str, Optional[str]]]:
  """Rules for the axis names RemBERT adds on top of T5X's standard names.

  Pass these as `additional_rules` to
  `t5x.partitioning.standard_logical_axis_rules` (the run gin files do).
  """
  return [
      (INPUT_EMBED, None),
      (OUTPUT_EMBED, None),
      (TOKEN_TYPES, None),
      (CLASSES, None),
  ]


def logical_axis_rules(
    additional_rules: Optional[LogicalAxisRules] = None,
) -> list[tuple[str, Optional[str]]]:
  """All rules: T5X's standard ones, RemBERT's, then `additional_rules`."""
  rules = standard_logical_axis_rules() + rembert_additional_axis_rules()
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
