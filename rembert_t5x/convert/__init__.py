"""Checkpoint conversion: name maps, file formats (HF, TF, ours), T5X-native export."""
