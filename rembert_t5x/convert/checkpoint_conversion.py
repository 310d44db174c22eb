"""Explicit name/shape maps between HF / TF RemBERT checkpoints and our params.

A conversion is a pure function from one flat `{name: array}` table to
another. Every expected key must be present, every shape must match, and
every transpose or reshape is named (`Transform`), so a checkpoint of another
architecture fails loudly instead of loading half-way.

Hugging Face stores `nn.Linear` weights as `[out, in]`; we store kernels as
`[in, out]` (attention kernels too, with heads x head_dim joined in one axis,
heads major, as HF's). `hf_name_map` lists, for a config and a head, each of
our parameter paths with its HF name and the transform between them;
`tf_name_map` does the same for the original TF1 BERT-style RemBERT
checkpoint (kernels already `[in, out]`).

A config with `vocab_pad_multiple > 1` stores the vocabulary tensors (word
embeddings, MLM decoder) with padded rows; external checkpoints hold the
real vocabulary. Conversion appends zero rows on the way in and strips them
on the way out, so HF -> ours -> HF is exact.

The conversions are streaming-friendly: `iter_to_ours` / `iter_from_ours`
check every name and shape against a `TensorSource` (names and shapes known
before any tensor is read) and then convert one tensor at a time, so a
995M-parameter checkpoint never needs two full copies in memory.
"""

import dataclasses
import enum
import re
from typing import (Any, Callable, Iterator, Mapping, Optional, Protocol,
                    Sequence)

from flax import traverse_util
import numpy as np

from rembert_t5x import network


class Transform(enum.Enum):
  """How an HF tensor becomes ours (and back)."""

  IDENTITY = "identity"  # embeddings, LayerNorm weight -> scale, biases
  LINEAR = "linear"  # [out, in] -> [in, out], attention kernels included


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
  hf: str  # the external name: HF state-dict key (TF variable in `tf_name_map`)
  transform: Transform
  shape: tuple[int, ...]  # our shape (vocabulary rows padded, if configured)
  # For a vocabulary tensor: the external checkpoint's rows (the real
  # vocabulary), which `shape` may exceed by the padding. None otherwise.
  vocab_rows: Optional[int] = None


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
  vocab = c.padded_vocab_size
  entries = [
      Entry(f"{enc}/embeddings/word_embeddings/embedding",
            f"{base}.embeddings.word_embeddings.weight", Transform.IDENTITY,
            (vocab, c.input_embed_dim), c.vocab_size),
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
  h, joined = c.emb_dim, c.num_heads * c.head_dim
  for i in range(num_layers):
    ours, hf = f"{enc}/layers_{i}", f"{base}.encoder.layer.{i}"
    # Both sides join heads x head_dim heads-major: a plain transpose.
    for name in ("query", "key", "value"):
      entries += _linear(f"{ours}/attention/{name}",
                         f"{hf}.attention.self.{name}", h, joined)
    entries += _linear(f"{ours}/attention/out",
                       f"{hf}.attention.output.dense", joined, h)
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
                           Transform.IDENTITY, (vocab,), c.vocab_size))
    else:
      entries += [
          dataclasses.replace(e, vocab_rows=c.vocab_size)
          for e in _linear("mlm_head/decoder", "cls.predictions.decoder",
                           c.output_embed_dim, vocab)]
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
  else:  # pragma: no cover - the enum is closed
    raise AssertionError(t)
  return np.ascontiguousarray(out)


def _to_hf(array: np.ndarray, entry: Entry) -> np.ndarray:
  # Both transforms are their own inverse.
  return _to_ours(array, entry)


def external_shape(entry: Entry,
                   vocab_size: Optional[int] = None) -> tuple[int, ...]:
  """The shape of `entry`'s tensor in the external (HF or TF) checkpoint.

  A vocabulary tensor has `vocab_size` rows there (default: the real
  vocabulary, `entry.vocab_rows`).
  """
  return _to_hf(np.empty(_with_vocab(entry, vocab_size).shape, np.int8),
                entry).shape


# --- Sources: names and shapes first, tensors on demand -----------------------


class TensorSource(Protocol):
  """A checkpoint whose names and shapes are known before reading tensors."""

  def names(self) -> list[str]:
    ...

  def shape(self, name: str) -> tuple[int, ...]:
    ...

  def get(self, name: str) -> np.ndarray:
    ...


class DictSource:
  """A `TensorSource` over an in-memory `{name: array}` mapping."""

  def __init__(self, tensors: Mapping[str, Any]):
    self._tensors = tensors

  def names(self) -> list[str]:
    return list(self._tensors)

  def shape(self, name: str) -> tuple[int, ...]:
    return tuple(np.shape(self._tensors[name]))

  def get(self, name: str) -> np.ndarray:
    return np.asarray(self._tensors[name])


# --- Vocabulary padding -------------------------------------------------------

# Our parameters with a vocabulary dimension, and which of our axes it is.
# Our side may hold padded rows (`RemBertConfig.vocab_pad_multiple`), an
# external checkpoint the real vocabulary (`Entry.vocab_rows`) or, when it was
# padded by someone else, `source_vocab_size` / `target_vocab_size` rows:
# extra rows are stripped, missing ones appended as zeros, on our side.
_VOCAB_AXES = {
    "encoder/embeddings/word_embeddings/embedding": 0,
    "mlm_head/decoder/kernel": 1,  # [E_out, vocab]
    "mlm_head/decoder/bias": 0,
    "mlm_head/decoder_bias": 0,
}


def vocab_axis(entry: Entry) -> Optional[int]:
  """Our axis of the vocabulary dimension of `entry`, or None."""
  return _VOCAB_AXES.get(entry.ours)


def _with_vocab(entry: Entry, vocab_size: Optional[int]) -> Entry:
  """`entry` with `vocab_size` (default `entry.vocab_rows`) vocabulary rows."""
  axis = vocab_axis(entry)
  rows = vocab_size if vocab_size is not None else entry.vocab_rows
  if rows is None or axis is None or entry.shape[axis] == rows:
    return entry
  shape = list(entry.shape)
  shape[axis] = rows
  return dataclasses.replace(entry, shape=tuple(shape))


def _resize_vocab(array: np.ndarray, entry: Entry, size: int) -> np.ndarray:
  """Strips trailing vocabulary rows, or appends zero rows, on our side."""
  axis = vocab_axis(entry)
  have = array.shape[axis]
  if have == size:
    return array
  if have > size:
    return np.ascontiguousarray(np.take(array, np.arange(size), axis=axis))
  pad = [(0, 0)] * array.ndim
  pad[axis] = (0, size - have)
  return np.pad(array, pad)


def resize_vocab_params(flat_params: Mapping[str, np.ndarray],
                        rows: int) -> dict[str, np.ndarray]:
  """Our flat params with every vocabulary tensor resized to `rows` rows.

  Rows are stripped from the end or appended as zeros (e.g. to move a
  checkpoint between configs that differ only in `vocab_pad_multiple`).
  """
  out = {}
  for path, value in flat_params.items():
    axis = _VOCAB_AXES.get(path)
    if axis is not None:
      value = _resize_vocab(np.asarray(value),
                            Entry(path, "", Transform.IDENTITY, ()), rows)
    out[path] = value
  return out


# --- Checked, streaming conversion -------------------------------------------


def check_source(
    source: TensorSource,
    entries: list[Entry],
    *,
    source_name: str,
    ignore_unused: tuple[str, ...] = (),
    skip: Callable[[str], bool] = lambda name: False,
    source_vocab_size: Optional[int] = None,
) -> None:
  """Checks every name and shape of `source` against the map, reading nothing.

  Args:
    source: the external checkpoint.
    entries: the map (`hf_name_map` or `tf_name_map`).
    source_name: names the checkpoint in errors (a path).
    ignore_unused: name prefixes that may be present and are not converted.
    skip: names that may be present and are not converted (e.g. optimizer
      slots of a TF checkpoint).
    source_vocab_size: the source's (possibly padded) vocabulary size, when
      it differs from the config's `vocab_size`.

  Raises:
    ValueError: naming the first missing tensor, wrong shape, or the tensors
      the map does not know.
  """
  names = set(source.names())
  for e in entries:
    if e.hf not in names:
      raise ValueError(f"{source_name}: missing tensor {e.hf!r} (for {e.ours})")
    want = external_shape(e, source_vocab_size)
    got = tuple(source.shape(e.hf))
    if got != want:
      raise ValueError(f"{source_name}: tensor {e.hf!r} has shape {got}, "
                       f"expected {want} for {e.ours}")
  used = {e.hf for e in entries}
  unused = sorted(k for k in names if k not in used
                  and not k.startswith(ignore_unused) and not skip(k)
                  # Buffers HF keeps in some state dicts; they are not weights.
                  and not k.endswith("position_ids"))
  if unused:
    raise ValueError(f"{source_name}: tensors not in the {len(entries)}-entry "
                     f"map (another architecture?): {unused[:5]}")


def iter_to_ours(
    source: TensorSource,
    entries: list[Entry],
    *,
    source_name: str,
    ignore_unused: tuple[str, ...] = (),
    skip: Callable[[str], bool] = lambda name: False,
    source_vocab_size: Optional[int] = None,
) -> Iterator[tuple[str, np.ndarray]]:
  """Checks the whole source, then yields `(our path, array)` one at a time.

  Vocabulary tensors are resized from the source's rows (`source_vocab_size`,
  default the real vocabulary) to ours (stripped, or zero rows appended for
  a padded config). Arguments are as in `check_source`.
  """
  check_source(source, entries, source_name=source_name,
               ignore_unused=ignore_unused, skip=skip,
               source_vocab_size=source_vocab_size)
  for e in entries:
    external = _with_vocab(e, source_vocab_size)
    array = _to_ours(np.asarray(source.get(e.hf)), external)
    if external is not e:
      array = _resize_vocab(array, e, e.shape[vocab_axis(e)])
    yield e.ours, array


def iter_from_ours(
    source: TensorSource,
    entries: list[Entry],
    *,
    source_name: str = "params",
    target_vocab_size: Optional[int] = None,
) -> Iterator[tuple[str, np.ndarray]]:
  """Checks our flat params in `source`, then yields `(external name, array)`.

  Vocabulary tensors are resized from our rows to `target_vocab_size`
  (default: the real vocabulary, stripping our padding; larger: zero rows
  appended, restoring someone else's padded layout).
  """
  names = set(source.names())
  for e in entries:
    if e.ours not in names:
      raise ValueError(f"{source_name}: missing parameter {e.ours!r}")
    got = tuple(source.shape(e.ours))
    if got != e.shape:
      raise ValueError(f"{source_name}: parameter {e.ours!r} has shape "
                       f"{got}, expected {e.shape}")
  for e in entries:
    external = _with_vocab(e, target_vocab_size)
    array = np.asarray(source.get(e.ours))
    if external is not e:
      array = _resize_vocab(array, e, external.shape[vocab_axis(e)])
    yield e.hf, _to_hf(array, external)


def external_specs(entries: list[Entry],
                   target_vocab_size: Optional[int] = None
                   ) -> list[tuple[str, tuple[int, ...]]]:
  """`(external name, external shape)` of every entry, in order."""
  return [(e.hf, external_shape(e, target_vocab_size)) for e in entries]


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
  return dict(iter_to_ours(DictSource(state_dict), entries, source_name=source,
                           ignore_unused=ignore_unused))


def flat_params_to_hf(
    flat_params: Mapping[str, np.ndarray],
    entries: list[Entry],
    *,
    source: str = "params",
) -> dict[str, np.ndarray]:
  """Inverse of `hf_to_flat_params`, with the same checks."""
  return dict(iter_from_ours(DictSource(flat_params), entries,
                             source_name=source))


# --- The original TF1 checkpoint ----------------------------------------------

# Path components of TF variables that are not weights: Adam slots, the step.
_TF_NOT_WEIGHTS = ("adam_m", "adam_v", "AdamWeightDecayOptimizer",
                   "AdamWeightDecayOptimizer_1", "global_step")


def tf_variable_skip_reason(name: str) -> Optional[str]:
  """Why a TF variable is not converted, or None if it must be in the map.

  Hugging Face's `load_tf_weights_in_rembert` (transformers <= 4.x) loads only
  the encoder: it drops optimizer slots and the step, every variable whose
  name contains "cls" or "output_embedding" (the MLM head, i.e. the output
  embedding, discarded after pre-training) and does not need the pooler for
  `RemBertModel`'s encoder. We do the same, by name.
  """
  parts = name.split("/")
  if any(p in _TF_NOT_WEIGHTS for p in parts):
    return "optimizer state"
  if parts[0] == "cls" or "output_embedding" in name:
    return "MLM head (output embedding)"
  if name.startswith("bert/pooler/"):
    return "pooler"
  return None


def _tf_name(hf: str) -> str:
  """HF key -> TF1 variable name, the inverse of HF's TF loader's rules.

  `rembert.` -> `bert/`, `.layer.<i>.` -> `/layer_<i>/`, `*_embeddings.weight`
  -> `*_embeddings`, LayerNorm `weight`/`bias` -> `gamma`/`beta`, other
  `weight` -> `kernel`.
  """
  if not hf.startswith("rembert."):
    raise ValueError(f"no TF name for {hf!r}: only the encoder is mapped")
  name = "bert/" + hf[len("rembert."):]
  name = re.sub(r"\.layer\.(\d+)\.", r".layer_\1.", name)
  if name.endswith("_embeddings.weight"):
    name = name[:-len(".weight")]
  elif name.endswith("LayerNorm.weight"):
    name = name[:-len("weight")] + "gamma"
  elif name.endswith("LayerNorm.bias"):
    name = name[:-len("bias")] + "beta"
  elif name.endswith(".weight"):
    name = name[:-len("weight")] + "kernel"
  return name.replace(".", "/")


# TF stores dense kernels [in, out] (attention heads joined), as we do.
_TF_TRANSFORM = {
    Transform.IDENTITY: Transform.IDENTITY,
    Transform.LINEAR: Transform.IDENTITY,
}


def tf_name_map(config: network.RemBertConfig) -> list[Entry]:
  """The map between the original TF1 RemBERT checkpoint and our encoder.

  One `Entry` per parameter of our encoder (`Head.ENCODER`); `Entry.hf`
  holds the TF variable name, e.g.
  `bert/encoder/layer_0/attention/self/query/kernel`.
  """
  return [dataclasses.replace(e, hf=_tf_name(e.hf),
                              transform=_TF_TRANSFORM[e.transform])
          for e in hf_name_map(config, Head.ENCODER)]


# --- Configs ------------------------------------------------------------------

# HF `RemBertConfig` field -> our `RemBertConfig` field.
_HF_CONFIG_FIELDS = (
    ("vocab_size", "vocab_size"),
    ("input_embedding_size", "input_embed_dim"),
    ("hidden_size", "emb_dim"),
    ("output_embedding_size", "output_embed_dim"),
    ("num_hidden_layers", "num_layers"),
    ("num_attention_heads", "num_heads"),
    ("intermediate_size", "mlp_dim"),
    ("max_position_embeddings", "max_position_embeddings"),
    ("type_vocab_size", "type_vocab_size"),
    ("layer_norm_eps", "layer_norm_epsilon"),
    ("pad_token_id", "pad_id"),
    ("hidden_dropout_prob", "dropout_rate"),
    ("classifier_dropout_prob", "classifier_dropout_rate"),
    ("initializer_range", "initializer_range"),
)
# Fields a checkpoint's architecture is made of (what a gin file must match).
ARCHITECTURE_FIELDS = ("vocab_size", "input_embed_dim", "emb_dim",
                       "output_embed_dim", "num_heads", "head_dim", "mlp_dim",
                       "max_position_embeddings", "type_vocab_size",
                       "tie_embeddings")


def config_from_hf(hf_config: Mapping[str, Any], source: str,
                   require_model_type: bool = True) -> network.RemBertConfig:
  """Our config from an HF `config.json` dict (or the TF release's JSON).

  Raises:
    ValueError: naming the file and field, for another model type, a missing
      field, an activation other than exact GELU, or inconsistent sizes.
  """
  model_type = hf_config.get("model_type")
  if model_type != "rembert" and (require_model_type or model_type):
    raise ValueError(f"{source}: model_type is {model_type!r}, not 'rembert': "
                     "not a RemBERT checkpoint")
  act = hf_config.get("hidden_act", "gelu")
  if act != "gelu":
    raise ValueError(f"{source}: hidden_act {act!r} is not supported (RemBERT "
                     "uses exact 'gelu')")
  kwargs = {}
  for hf_key, ours in _HF_CONFIG_FIELDS:
    if hf_key in hf_config and hf_config[hf_key] is not None:
      kwargs[ours] = hf_config[hf_key]
    elif hf_key in ("layer_norm_eps", "pad_token_id", "hidden_dropout_prob",
                    "classifier_dropout_prob", "initializer_range"):
      continue  # our defaults are RemBERT's
    else:
      raise ValueError(f"{source}: missing field {hf_key!r}")
  hidden, heads = kwargs["emb_dim"], kwargs["num_heads"]
  if hidden % heads:
    raise ValueError(f"{source}: hidden_size {hidden} is not divisible by "
                     f"num_attention_heads {heads}")
  kwargs["head_dim"] = hidden // heads
  for key in ("dropout_rate", "classifier_dropout_rate", "layer_norm_epsilon",
              "initializer_range"):
    if key in kwargs:
      kwargs[key] = float(kwargs[key])
  try:
    return network.RemBertConfig(**kwargs)
  except ValueError as e:
    raise ValueError(f"{source}: {e}") from e


_HF_ARCHITECTURES = {
    Head.MASKED_LM: "RemBertForMaskedLM",
    Head.ENCODER: "RemBertModel",
    Head.SEQUENCE_CLASSIFICATION: "RemBertForSequenceClassification",
    Head.TOKEN_CLASSIFICATION: "RemBertForTokenClassification",
    Head.QUESTION_ANSWERING: "RemBertForQuestionAnswering",
}


def hf_config_dict(config: network.RemBertConfig, head: Head,
                   num_classes: Optional[int] = None,
                   labels: Optional[Sequence[str]] = None) -> dict[str, Any]:
  """The HF `config.json` contents for our `config` and `head`.

  `labels` names the classes of a classification or tagging head in id order
  (`id2label` / `label2id`); without them they are `LABEL_<i>`, as Hugging
  Face names unnamed classes.
  """
  c = config
  if c.tie_embeddings:
    raise ValueError("coupled (tied) configs have no HF RemBERT equivalent")
  layers = c.num_pretraining_layers if head == Head.MASKED_LM else c.num_layers
  out = {
      "architectures": [_HF_ARCHITECTURES[head]],
      "model_type": "rembert",
      "vocab_size": c.vocab_size,
      "input_embedding_size": c.input_embed_dim,
      "hidden_size": c.emb_dim,
      "output_embedding_size": c.output_embed_dim,
      "num_hidden_layers": layers,
      "num_attention_heads": c.num_heads,
      "intermediate_size": c.mlp_dim,
      "hidden_act": "gelu",
      "hidden_dropout_prob": c.dropout_rate,
      "attention_probs_dropout_prob": c.dropout_rate,
      "classifier_dropout_prob": c.classifier_dropout_rate,
      "max_position_embeddings": c.max_position_embeddings,
      "type_vocab_size": c.type_vocab_size,
      "layer_norm_eps": c.layer_norm_epsilon,
      "initializer_range": c.initializer_range,
      "pad_token_id": c.pad_id,
      "tie_word_embeddings": False,
  }
  if num_classes is not None and head in (Head.SEQUENCE_CLASSIFICATION,
                                          Head.TOKEN_CLASSIFICATION):
    names = list(labels or (f"LABEL_{i}" for i in range(num_classes)))
    if len(names) != num_classes or len(set(names)) != num_classes:
      raise ValueError(f"{num_classes} classes need as many distinct names, "
                       f"got {names}")
    out["id2label"] = {str(i): name for i, name in enumerate(names)}
    out["label2id"] = {name: i for i, name in enumerate(names)}
  return out


def hf_config(config: network.RemBertConfig, head: Head = Head.MASKED_LM,
              **overrides):
  """`transformers.RemBertConfig` of `hf_config_dict(config, head)`.

  The one builder of Hugging Face's config from ours, for the code that
  builds HF models in Python (the benchmarks' peers, the parity tests); it
  imports only transformers, so a bare accelerator machine without seqio or
  TensorFlow can call it.

  Args:
    config: our network config (decoupled: HF RemBERT has no tied one).
    head: which network's layers (`num_pretraining_layers` for the MLM
      head, `num_layers` otherwise) and `architectures` entry.
    **overrides: HF settings of the caller's own, e.g. `num_labels`,
      `attn_implementation`, `bos_token_id=None`.

  Raises:
    ValueError: `config` is coupled.
  """
  # Deferred: transformers (with torch) is needed only by its HF callers.
  import transformers  # pylint: disable=g-import-not-at-top
  return transformers.RemBertConfig(**{**hf_config_dict(config, head),
                                       **overrides})


def head_from_hf_names(names: list[str]) -> tuple[Head, tuple[str, ...]]:
  """Which head an HF checkpoint (keys with `rembert.` prefix) has.

  Returns:
    The head, and the key prefixes present but not converted (the pooler of a
    bare `RemBertModel` or of a token/QA model: our encoder has none).
  """
  names = set(names)
  if "cls.predictions.decoder.weight" in names:
    return Head.MASKED_LM, ()
  if "qa_outputs.weight" in names:
    return Head.QUESTION_ANSWERING, ("rembert.pooler.",)
  if "classifier.weight" in names:
    if "rembert.pooler.dense.weight" in names:
      return Head.SEQUENCE_CLASSIFICATION, ()
    return Head.TOKEN_CLASSIFICATION, ()
  return Head.ENCODER, ("rembert.pooler.",)


def head_from_params(shapes: Mapping[str, tuple[int, ...]]
                     ) -> tuple[Head, Optional[int]]:
  """Which head our flat params have, and its number of classes."""
  if any(k.startswith("mlm_head/") for k in shapes):
    return Head.MASKED_LM, None
  if "qa_outputs/kernel" in shapes:
    return Head.QUESTION_ANSWERING, None
  if "classifier/kernel" in shapes:
    classes = shapes["classifier/kernel"][1]
    if "pooler/kernel" in shapes:
      return Head.SEQUENCE_CLASSIFICATION, classes
    return Head.TOKEN_CLASSIFICATION, classes
  return Head.ENCODER, None


def config_mismatch(a: network.RemBertConfig, b: network.RemBertConfig,
                    fields=ARCHITECTURE_FIELDS) -> Optional[str]:
  """The first architecture field where `a` and `b` differ, as a message."""
  for f in fields:
    if getattr(a, f) != getattr(b, f):
      return f"{f} is {getattr(a, f)!r} in one and {getattr(b, f)!r} in the other"
  return None


def unflatten(flat: Mapping[str, np.ndarray]) -> dict:
  """`{"a/b": x}` -> `{"a": {"b": x}}` (flax.traverse_util, "/"-joined)."""
  return traverse_util.unflatten_dict(dict(flat), sep="/")


def flatten(tree: Mapping) -> dict[str, np.ndarray]:
  """`{"a": {"b": x}}` -> `{"a/b": x}` (flax.traverse_util, "/"-joined)."""
  return traverse_util.flatten_dict(tree, sep="/")
