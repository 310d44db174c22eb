"""Explicit name/shape maps between Hugging Face RemBERT/BERT and our params.

A conversion is a pure function from one flat `{name: array}` table to
another. Every expected key must be present, every shape must match, and
every transpose or reshape is named (`Transform`), so a checkpoint of another
architecture fails loudly instead of loading half-way.

Hugging Face stores `nn.Linear` weights as `[out, in]`; we store kernels as
`[in, out]` (and attention kernels split per head). `hf_name_map` lists, for a
config and a head, each of our parameter paths with its HF name and the
transform between them.
"""

import dataclasses
import enum
from typing import Mapping, Optional

import numpy as np

from rembert_t5x import network


class Transform(enum.Enum):
  """How an HF tensor becomes ours (and back)."""

  IDENTITY = "identity"  # embeddings, LayerNorm weight -> scale, biases
  LINEAR = "linear"  # [out, in] -> [in, out]
  QKV_KERNEL = "qkv_kernel"  # [heads*head_dim, H] -> [H, heads, head_dim]
  QKV_BIAS = "qkv_bias"  # [heads*head_dim] -> [heads, head_dim]
  ATTN_OUT_KERNEL = "attn_out_kernel"  # [H, heads*head_dim] -> [heads, head_dim, H]


class Head(enum.Enum):
  """Which top-level network the parameters belong to."""

  MASKED_LM = "masked_lm"
  ENCODER = "encoder"  # the bare encoder (HF `RemBertModel` without pooler)
  SEQUENCE_CLASSIFICATION = "sequence_classification"
  TOKEN_CLASSIFICATION = "token_classification"
  QUESTION_ANSWERING = "question_answering"


@dataclasses.dataclass(frozen=True)
class Entry:
  ours: str  # "/"-joined path in our params tree
  hf: str  # Hugging Face state-dict key
  transform: Transform
  shape: tuple[int, ...]  # our shape


def _linear(ours, hf, in_dim, out_dim):
  return [Entry(f"{ours}/kernel", f"{hf}.weight", Transform.LINEAR,
                (in_dim, out_dim)),
          Entry(f"{ours}/bias", f"{hf}.bias", Transform.IDENTITY, (out_dim,))]


def _layer_norm(ours, hf, dim):
  return [Entry(f"{ours}/scale", f"{hf}.weight", Transform.IDENTITY, (dim,)),
          Entry(f"{ours}/bias", f"{hf}.bias", Transform.IDENTITY, (dim,))]


def hf_name_map(
    config: network.RemBertConfig,
    head: Head = Head.MASKED_LM,
    num_classes: Optional[int] = None,
    flavour: str = "rembert",
) -> list[Entry]:
  """The full parameter map for `config` and `head`.

  Args:
    config: our network config.
    head: which network's parameters to list.
    num_classes: output width of a classification/tagging head.
    flavour: "rembert" (HF `RemBert*`, decoupled) or "bert" (HF `Bert*`, the
      coupled mBERT baseline: no E_in -> H projection, tied decoder).

  Returns:
    One `Entry` per parameter of our network.
  """
  c = config
  if flavour not in ("rembert", "bert"):
    raise ValueError(f"flavour must be 'rembert' or 'bert', got {flavour!r}")
  if flavour == "rembert" and c.input_embed_dim == c.emb_dim:
    # HF RemBERT always has `embedding_hidden_mapping_in`; we drop it when
    # E_in == H, so such a pair cannot be converted one to one.
    raise ValueError(
        "HF RemBERT always has an E_in -> H projection; our config has "
        f"input_embed_dim == emb_dim == {c.emb_dim} and none")
  if flavour == "bert" and c.input_embed_dim != c.emb_dim:
    raise ValueError("HF BERT has no E_in -> H projection: input_embed_dim "
                     f"{c.input_embed_dim} must equal emb_dim {c.emb_dim}")
  base = flavour
  enc = "encoder"
  entries = [
      Entry(f"{enc}/embeddings/word_embeddings/embedding",
            f"{base}.embeddings.word_embeddings.weight", Transform.IDENTITY,
            (c.vocab_size, c.input_embed_dim)),
      Entry(f"{enc}/embeddings/position_embeddings/embedding",
            f"{base}.embeddings.position_embeddings.weight",
            Transform.IDENTITY, (c.max_position_embeddings, c.input_embed_dim)),
      Entry(f"{enc}/embeddings/token_type_embeddings/embedding",
            f"{base}.embeddings.token_type_embeddings.weight",
            Transform.IDENTITY, (c.type_vocab_size, c.input_embed_dim)),
  ]
  entries += _layer_norm(f"{enc}/embeddings/layer_norm",
                         f"{base}.embeddings.LayerNorm", c.input_embed_dim)
  if c.input_embed_dim != c.emb_dim:
    entries += _linear(f"{enc}/embedding_projection",
                       f"{base}.encoder.embedding_hidden_mapping_in",
                       c.input_embed_dim, c.emb_dim)
  num_layers = (c.num_pretraining_layers if head == Head.MASKED_LM
                else c.num_layers)
  h, n, d = c.emb_dim, c.num_heads, c.head_dim
  for i in range(num_layers):
    ours, hf = f"{enc}/layers_{i}", f"{base}.encoder.layer.{i}"
    for name in ("query", "key", "value"):
      entries += [
          Entry(f"{ours}/attention/{name}/kernel",
                f"{hf}.attention.self.{name}.weight", Transform.QKV_KERNEL,
                (h, n, d)),
          Entry(f"{ours}/attention/{name}/bias",
                f"{hf}.attention.self.{name}.bias", Transform.QKV_BIAS, (n, d)),
      ]
    entries += [
        Entry(f"{ours}/attention/out/kernel",
              f"{hf}.attention.output.dense.weight",
              Transform.ATTN_OUT_KERNEL, (n, d, h)),
        Entry(f"{ours}/attention/out/bias", f"{hf}.attention.output.dense.bias",
              Transform.IDENTITY, (h,)),
    ]
    entries += _layer_norm(f"{ours}/attention_layer_norm",
                           f"{hf}.attention.output.LayerNorm", h)
    entries += _linear(f"{ours}/mlp/wi", f"{hf}.intermediate.dense", h,
                       c.mlp_dim)
    entries += _linear(f"{ours}/mlp/wo", f"{hf}.output.dense", c.mlp_dim, h)
    entries += _layer_norm(f"{ours}/mlp_layer_norm", f"{hf}.output.LayerNorm",
                           h)

  if head == Head.MASKED_LM:
    if flavour == "rembert":
      entries += _linear("mlm_head/dense", "cls.predictions.dense", h,
                         c.output_embed_dim)
      entries += _layer_norm("mlm_head/layer_norm", "cls.predictions.LayerNorm",
                             c.output_embed_dim)
    else:
      entries += _linear("mlm_head/dense", "cls.predictions.transform.dense",
                         h, c.output_embed_dim)
      entries += _layer_norm("mlm_head/layer_norm",
                             "cls.predictions.transform.LayerNorm",
                             c.output_embed_dim)
    if c.tie_embeddings:
      entries.append(Entry("mlm_head/decoder_bias", "cls.predictions.bias",
                           Transform.IDENTITY, (c.vocab_size,)))
    else:
      entries += _linear("mlm_head/decoder", "cls.predictions.decoder",
                         c.output_embed_dim, c.vocab_size)
  elif head == Head.SEQUENCE_CLASSIFICATION:
    entries += _linear("pooler", f"{base}.pooler.dense", h, h)
    entries += _linear("classifier", "classifier", h, num_classes)
  elif head == Head.TOKEN_CLASSIFICATION:
    entries += _linear("classifier", "classifier", h, num_classes)
  elif head == Head.QUESTION_ANSWERING:
    entries += _linear("qa_outputs", "qa_outputs", h, 2)
  return entries


def _to_ours(array: np.ndarray, entry: Entry) -> np.ndarray:
  t = entry.transform
  if t == Transform.IDENTITY:
    out = array
  elif t == Transform.LINEAR:
    out = array.T
  elif t == Transform.QKV_KERNEL:
    out = array.T.reshape(entry.shape)
  elif t == Transform.QKV_BIAS:
    out = array.reshape(entry.shape)
  elif t == Transform.ATTN_OUT_KERNEL:
    out = array.T.reshape(entry.shape)
  else:  # pragma: no cover - the enum is closed
    raise AssertionError(t)
  return np.ascontiguousarray(out)


def _to_hf(array: np.ndarray, entry: Entry) -> np.ndarray:
  t = entry.transform
  if t == Transform.IDENTITY:
    out = array
  elif t == Transform.LINEAR:
    out = array.T
  elif t == Transform.QKV_KERNEL:
    out = array.reshape(array.shape[0], -1).T
  elif t == Transform.QKV_BIAS:
    out = array.reshape(-1)
  elif t == Transform.ATTN_OUT_KERNEL:
    out = array.reshape(-1, array.shape[-1]).T
  else:  # pragma: no cover
    raise AssertionError(t)
  return np.ascontiguousarray(out)


def _hf_shape(entry: Entry) -> tuple[int, ...]:
  return _to_hf(np.empty(entry.shape, np.int8), entry).shape


def hf_to_flat_params(
    state_dict: Mapping[str, np.ndarray],
    entries: list[Entry],
    *,
    source: str = "Hugging Face state dict",
    ignore_unused: tuple[str, ...] = (),
) -> dict[str, np.ndarray]:
  """Maps an HF state dict to our flat `{"a/b/c": array}` params.

  Args:
    state_dict: HF tensor names to numpy arrays.
    entries: the map from `hf_name_map`.
    source: a name for error messages (e.g. the checkpoint path).
    ignore_unused: HF key prefixes that may be present but are not converted
      (e.g. `"rembert.pooler."` when loading only the encoder).

  Returns:
    Flat params keyed by "/"-joined paths.

  Raises:
    ValueError: naming the tensor, when a key is missing, a shape differs, or
      the state dict has tensors the map does not use.
  """
  out = {}
  for e in entries:
    if e.hf not in state_dict:
      raise ValueError(f"{source}: missing tensor {e.hf!r} (for {e.ours})")
    array = np.asarray(state_dict[e.hf])
    if tuple(array.shape) != _hf_shape(e):
      raise ValueError(
          f"{source}: tensor {e.hf!r} has shape {tuple(array.shape)}, "
          f"expected {_hf_shape(e)} for {e.ours}")
    out[e.ours] = _to_ours(array, e)
  used = {e.hf for e in entries}
  unused = sorted(k for k in state_dict if k not in used
                  and not k.startswith(ignore_unused)
                  # Buffers HF keeps in some state dicts; they are not weights.
                  and not k.endswith("position_ids"))
  if unused:
    raise ValueError(f"{source}: tensors not in the {len(entries)}-entry map "
                     f"(another architecture?): {unused[:5]}")
  return out


def flat_params_to_hf(
    flat_params: Mapping[str, np.ndarray],
    entries: list[Entry],
    *,
    source: str = "params",
) -> dict[str, np.ndarray]:
  """Inverse of `hf_to_flat_params`, with the same checks."""
  out = {}
  for e in entries:
    if e.ours not in flat_params:
      raise ValueError(f"{source}: missing parameter {e.ours!r}")
    array = np.asarray(flat_params[e.ours])
    if tuple(array.shape) != e.shape:
      raise ValueError(f"{source}: parameter {e.ours!r} has shape "
                       f"{tuple(array.shape)}, expected {e.shape}")
    out[e.hf] = _to_hf(array, e)
  return out


def unflatten(flat: Mapping[str, np.ndarray]) -> dict:
  """`{"a/b": x}` -> `{"a": {"b": x}}`."""
  tree: dict = {}
  for path, value in flat.items():
    node = tree
    *parents, leaf = path.split("/")
    for p in parents:
      node = node.setdefault(p, {})
    node[leaf] = value
  return tree


def flatten(tree: Mapping, prefix: str = "") -> dict[str, np.ndarray]:
  """`{"a": {"b": x}}` -> `{"a/b": x}`."""
  out = {}
  for k, v in tree.items():
    path = f"{prefix}/{k}" if prefix else str(k)
    if isinstance(v, Mapping):
      out.update(flatten(v, path))
    else:
      out[path] = v
  return out
