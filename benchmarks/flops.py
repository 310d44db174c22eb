"""Matmul FLOP counts of the RemBERT MLM step (imports only the network)."""

from rembert_t5x import network

def forward_matmul_flops(cfg: network.RemBertConfig, batch: int, seq_len: int,
                         head_positions: int) -> int:
  """Exact matmul FLOPs (2 per multiply-add) of one MLM forward pass.

  Counts the E_in -> H projection, per layer q/k/v/out, the attention score
  and context matmuls and the MLP, and the MLM head (H -> E_out and the
  decoder E_out -> vocab) at `head_positions` positions per row — what the
  network really computes. Element-wise work (LayerNorm, GELU, softmax, the
  optimizer update) is not counted.
  """
  h, t = cfg.emb_dim, seq_len
  per_token = 0
  if cfg.input_embed_dim != cfg.emb_dim:
    per_token += 2 * cfg.input_embed_dim * h
  per_layer = (4 * 2 * h * h            # q, k, v, out
               + 2 * 2 * t * h          # scores q.k and context p.v
               + 2 * 2 * h * cfg.mlp_dim)
  per_token += cfg.num_pretraining_layers * per_layer
  head = 2 * h * cfg.output_embed_dim + 2 * cfg.output_embed_dim * cfg.vocab_size
  return batch * (t * per_token + head_positions * head)


def train_step_flops(cfg, batch, seq_len, head_positions) -> int:
  """Forward + backward = 3 x forward matmul FLOPs."""
  return 3 * forward_matmul_flops(cfg, batch, seq_len, head_positions)
