"""Names of a packed fine-tuning batch's per-example features.

A module of its own, free of SeqIO and TensorFlow, so that the models, the
numpy packer (`runner.finetune_packing`) and the converters share one home
for them and the models import on a machine that has only JAX.
"""

# Features of a packed batch of a head with per-example features (pair
# classification, QA), the layout of `runner.finetune_packing`:
# `[slots]` per row, one slot per example packed into it.
SLOT_OFFSETS = "slot_offsets"  # int32: where the example starts in the row
SLOT_WEIGHTS = "slot_weights"  # float32: 1 for an example, 0 empty slot
# Per-example features that index into the example's tokens: packed, they
# are shifted by the example's offset in its row.
POSITION_FEATURES = ("start_positions", "end_positions")


def max_slots(length: int) -> int:
  """Slots per packed row of `length` tokens: every example has at least
  its [CLS] and one [SEP], so no row holds more than length / 2."""
  return max(1, length // 2)
