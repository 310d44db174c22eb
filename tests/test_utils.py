"""Shared tiny configurations and helpers for the tests."""

import os
import pathlib

import pytest

from rembert_t5x import network

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

# E_in != H != E_out, and a pre-training-only layer, so every decoupled
# component of the architecture is exercised.
TINY_CONFIG = network.RemBertConfig(
    vocab_size=97,
    input_embed_dim=16,
    emb_dim=32,
    output_embed_dim=24,
    num_layers=2,
    num_heads=4,
    head_dim=8,
    mlp_dim=64,
    max_position_embeddings=40,
    type_vocab_size=2,
    dropout_rate=0.0,
)

# The coupled (mBERT) baseline: E_in == E_out == H and a tied decoder.
TINY_COUPLED_CONFIG = network.RemBertConfig(
    vocab_size=97,
    input_embed_dim=32,
    emb_dim=32,
    output_embed_dim=32,
    num_layers=2,
    num_heads=4,
    head_dim=8,
    mlp_dim=64,
    max_position_embeddings=40,
    tie_embeddings=True,
)


def shared_data_dir(name: str) -> pathlib.Path:
  """Returns ../shared/data/<name>; fails in CI and skips elsewhere if absent."""
  path = SHARED_DATA / name
  if not path.exists():
    message = f"real test data {path} is missing (expected ../shared beside the repo)"
    if os.environ.get("CI") == "true":
      pytest.fail(message)
    pytest.skip(message)
  return path
