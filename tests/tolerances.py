"""Float32 tolerances that follow from the computation, not from one
machine's output, and the tree comparisons that use them.

XLA's CPU code (vector width, fusion, reduction order and blocking) differs
between processors, so two float32 evaluations of one formula agree only to
within the rounding error bound of the computation; these helpers compute
that bound, which is the same on every IEEE-754 machine.
"""

import jax
import numpy as np

def assert_trees_close(a, b, **tol):
  """np.testing.assert_allclose on every pair of leaves."""
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(x, y, **tol)


U32 = 2.0 ** -24


def float32_sum_rtol(num_terms: int, condition: float = 1.0,
                     evaluations: int = 2) -> float:
  """Relative tolerance of float32 sums of `num_terms` terms, in any order.

  The standard forward error bound of floating-point summation (Higham,
  "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2):
  however the additions are ordered or blocked (sequential, pairwise, across
  SIMD lanes or threads, fused or not),

      |fl(sum x_i) - sum x_i| <= (n - 1) u sum |x_i|   (to first order in u),

  a relative error of at most (n - 1) u * condition, where condition =
  sum |x_i| / |sum x_i| (1 when the terms share a sign). A processor decides
  where inside the bound a result lands, never the bound. Two float32
  evaluations of one sum (evaluations=2: micro-batched vs full batch, packed
  vs alone) each lie within it of the exact value, so within twice it of
  each other; against a float64 reference, evaluations=1. Worst case: real
  errors are usually far smaller (~sqrt(n) u).
  """
  return evaluations * max(num_terms - 1, 1) * U32 * condition


def float32_chain_rtol(reduction_lengths, condition: float = 1.0,
                       evaluations: int = 2) -> float:
  """Relative tolerance of a float32 computation made of successive steps.

  First-order error analysis: the relative errors of successive operations
  add (each multiplied by how much the later steps amplify it, `condition`).
  A reduction (dot product, sum, mean) of n terms contributes at most n u
  (float32_sum_rtol's (n - 1) u, plus one rounding for the elementwise op
  that follows it), so the bound is evaluations * condition * u * sum(n_i)
  over the reductions on the path from the inputs to the compared value.
  """
  return evaluations * condition * U32 * sum(reduction_lengths)


def tiny_network_reductions(cfg, length: int, head=("mlm",),
                            loss_positions: int = 0) -> list[int]:
  """Lengths of the reductions on one output's path through the encoder of
  `cfg` at sequence `length`, its head and the loss (for float32_chain_rtol).

  Embeddings: word + position + type (3), LayerNorm over E_in (mean and
  variance: 2 E_in), projection to H (E_in). Each layer: query/key/value (H),
  logits (head_dim), softmax denominator and context (length each), output
  projection (H), LayerNorm (2 H), MLP in (H) and out (mlp_dim), LayerNorm
  (2 H). Heads: "mlm" (dense H, LayerNorm 2 E_out, decoder E_out, log-sum-exp
  over the vocabulary), ("classes", k) (dense H, log-sum-exp over k); the
  loss's mean over `loss_positions` terms. LayerNorm keeps every activation
  of order one, so no step amplifies the relative error much (condition ~1).
  """
  e_in = cfg.input_embed_dim
  h = cfg.emb_dim
  out = [3, 2 * e_in, e_in]
  for _ in range(cfg.num_layers):
    out += [h, cfg.head_dim, length, length, h, 2 * h, h, cfg.mlp_dim, 2 * h]
  if head[0] == "mlm":
    out += [h, 2 * cfg.output_embed_dim, cfg.output_embed_dim,
            cfg.padded_vocab_size]
  elif head[0] == "classes":
    out += [h, head[1]]
  if loss_positions:
    out.append(loss_positions)
  return out


def tiny_gradient_rtol(cfg, length: int, head, loss_positions: int) -> float:
  """float32_chain_rtol of a parameter gradient of a tiny model's loss: the
  forward path, the backward pass through the same reductions (transposed)
  and the sum of each weight gradient over the batch's positions."""
  forward = tiny_network_reductions(cfg, length, head, loss_positions)
  return float32_chain_rtol(forward + forward + [loss_positions])


def tiny_head(kind: str, length: int):
  """tiny_network_reductions' `head` of `test_utils.tiny_model(kind)`."""
  return {"mlm": ("mlm",), "pair": ("classes", 7), "tagging": ("classes", 7),
          "qa": ("classes", length), "retrieval": (None,)}[kind]


def assert_trees_close_normwise(got, want, rtol: float, num_terms: int):
  """Float32 parameter gradients (or updates) `got` within `rtol` of `want`.

  Per leaf: max |got - want| <= rtol * max |want leaf|
                                + float32_sum_rtol(num_terms) * max |want tree|.
  The leaf term is a normwise relative bound (the error of a gradient entry
  scales with the magnitude of the terms summed into it, which the leaf's
  largest entry stands for; an elementwise rtol fails on entries that
  cancel to near zero). The tree term is for leaves whose exact gradient is
  zero (e.g. the attention key bias: softmax ignores a constant added to a
  query's logits), where both sides are the rounding error of a sum of
  `num_terms` terms of the tree's scale.
  """
  want_leaves = jax.tree_util.tree_flatten_with_path(want)[0]
  got_leaves = jax.tree_util.tree_leaves(got)
  assert len(got_leaves) == len(want_leaves)
  tree_scale = max(float(np.max(np.abs(b))) for _, b in want_leaves)
  floor = float32_sum_rtol(num_terms) * tree_scale
  for (path, b), a in zip(want_leaves, got_leaves):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, jax.tree_util.keystr(path)
    err = float(np.max(np.abs(a - b)))
    tol = rtol * float(np.max(np.abs(b))) + floor
    assert err <= tol, (f"{jax.tree_util.keystr(path)}: max |diff| {err:.3g}"
                        f" > {tol:.3g}")


def assert_same_sums(got_grads, want_grads, got_loss, want_loss, kind: str,
                     batch, cfg):
  """The same gradient and loss, summed in another order (microbatches,
  hosts): the tiny model's float32 bounds, the gradient normwise
  (`tiny_gradient_rtol`), the loss over the encoder, head and mean
  (`float32_chain_rtol`). A loss normalised per part is off by factors."""
  rows, length = batch["input_tokens"].shape
  head = tiny_head(kind, length)
  positions = rows * length
  assert_trees_close_normwise(
      got_grads, want_grads,
      tiny_gradient_rtol(cfg, length, head, positions), positions)
  np.testing.assert_allclose(
      got_loss, want_loss, rtol=float32_chain_rtol(tiny_network_reductions(
          cfg, length, head, positions)))
