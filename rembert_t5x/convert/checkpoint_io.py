"""Reading and writing checkpoints for conversion, one tensor at a time.

Formats:
  * Hugging Face directories (`save_pretrained`): `config.json` plus
    `model.safetensors` or `pytorch_model.bin`, either possibly sharded with
    an `*.index.json`; `RemBertForMaskedLM` (keys `rembert.*`, `cls.*`) or a
    bare `RemBertModel` (keys without the `rembert.` prefix).
  * The original TF1 RemBERT checkpoint (`bert/...` variables; Adam slots,
    the step, the MLM head and the pooler are skipped by name).
  * Our local runner's orbax checkpoints: `MODEL_DIR/checkpoints/<step>/default`
    holding `{"step", "params"}` (`checkpoints.load_params` reads them;
    `train.train(init_checkpoint=MODEL_DIR)` fine-tunes from them).

The vocabulary travels with the weights: `hf-to-t5x` copies the HF
directory's `sentencepiece.model` (or `--vocab`), `tf-to-t5x` takes `--vocab`
(or a `sentencepiece.model` beside the TF checkpoint), into the output
MODEL_DIR, after checking its special pieces and that every id has an
embedding row; runs started from that MODEL_DIR use it
(`vocabulary.use_checkpoint_vocabulary`). `t5x-to-hf` copies it back, with
the tokenizer files, label names and model card of `hf_export`.

Every conversion first checks all names and shapes (reading no tensor), then
moves tensors one by one: safetensors and TF checkpoints are read lazily, and
HF output is written by a streaming safetensors writer. The output directory
appears atomically: it is built as `<out>.tmp-XXXX` beside it and renamed when
complete, so a failed or killed conversion never leaves a half-written `<out>`.
"""

import dataclasses
import json
import math
import pathlib
import resource
import shutil
import struct
import sys
from typing import Any, Iterator, Optional, Sequence

from absl import logging
import jax
import numpy as np
import orbax.checkpoint as ocp

from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x import configs
from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x.convert import hf_export
from rembert_t5x.data import pieces
from rembert_t5x import layer_stacking
from rembert_t5x import network
from rembert_t5x.runner import checkpoints

def _vocabulary_module():
  # Deferred: the vocabulary module imports seqio and TensorFlow (~8 s of
  # CPU), which `--help`, the error paths and the conversions without a
  # vocabulary do not need (`pieces` needs neither).
  from rembert_t5x.data import vocabulary  # pylint: disable=g-import-not-at-top
  return vocabulary

_SAFETENSORS_INDEX = "model.safetensors.index.json"
_BIN_INDEX = "pytorch_model.bin.index.json"


def peak_rss_bytes() -> int:
  """This process's peak resident set size so far (Linux: ru_maxrss in KiB)."""
  kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return kib if sys.platform == "darwin" else kib * 1024


# --- Hugging Face directories --------------------------------------------------


def _torch_to_numpy(tensor) -> np.ndarray:
  # Deferred: only pytorch_model.bin files need torch.
  import torch  # pylint: disable=g-import-not-at-top
  if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: exact upcast
    tensor = tensor.float()
  return tensor.numpy()


_SAFETENSORS_NUMPY = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                      "I64": np.int64, "I32": np.int32, "BF16": np.uint16}


class _SafetensorsFile:
  """One safetensors file, read tensor by tensor with plain reads.

  The format is an 8-byte little-endian header length, a JSON header
  `{name: {"dtype", "shape", "data_offsets"}}` and the raw bytes. We read
  each tensor with `np.fromfile` instead of memory-mapping the file:
  mapped pages of a 4 GB file would count towards this process's resident
  memory until the file is closed.
  Kept beside `safetensors.safe_open`, which maps the file: reading a 768 MiB
  file of 12 x 64 MiB tensors one at a time peaked at +64 MiB RSS here, +832
  MiB with safe_open(framework="numpy") (safetensors 0.8.0, this machine);
  tests/convert_checkpoint_test.py checks both read the same tensors.
  """

  def __init__(self, path: pathlib.Path):
    self.path = path
    try:
      with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > 100 * 2**20:
          raise ValueError(f"header length {length} is implausible")
        header = json.loads(f.read(length))
      size = path.stat().st_size
      self._start = 8 + length
      header.pop("__metadata__", None)
      self.shapes, self._spans, self.dtypes = {}, {}, {}
      for name, info in header.items():
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        dtype = info["dtype"]
        if dtype not in _SAFETENSORS_NUMPY:
          raise ValueError(f"tensor {name!r} has unsupported dtype {dtype}")
        itemsize = np.dtype(_SAFETENSORS_NUMPY[dtype]).itemsize
        if (end - begin != math.prod(shape) * itemsize
            or self._start + end > size):
          raise ValueError(f"tensor {name!r} has inconsistent offsets")
        self.shapes[name], self._spans[name] = shape, (begin, end)
        self.dtypes[name] = dtype
    except (OSError, struct.error, ValueError, KeyError, TypeError,
            AttributeError) as e:
      raise errors.UserError(f"{path}: not a readable safetensors file: "
                      f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
                      ) from e
    self.names = list(self.shapes)

  def get(self, name: str) -> np.ndarray:
    begin, _ = self._spans[name]
    dtype = np.dtype(_SAFETENSORS_NUMPY[self.dtypes[name]]).newbyteorder("<")
    array = np.fromfile(self.path, dtype=dtype,
                        count=math.prod(self.shapes[name]),
                        offset=self._start + begin).reshape(self.shapes[name])
    if self.dtypes[name] == "BF16":  # numpy has no bfloat16: exact upcast
      array = (array.astype(np.uint32) << 16).view(np.float32)
    return array


class _TorchBinFile:
  """A `pytorch_model.bin`, memory-mapped (tensors load when touched)."""

  def __init__(self, path: pathlib.Path):
    try:
      # Deferred and optional: only pytorch_model.bin files need torch.
      import torch  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise errors.UserError(f"{path}: reading pytorch_model.bin needs torch "
                      "(pip install torch), or convert a model.safetensors"
                      ) from e
    try:
      self._sd = torch.load(str(path), map_location="cpu", mmap=True,
                            weights_only=True)
    except Exception as e:  # torch raises many types for a bad file
      raise errors.UserError(f"{path}: not a readable PyTorch state dict: "
                      f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
                      ) from e
    if not isinstance(self._sd, dict):
      raise errors.UserError(f"{path}: holds a {type(self._sd).__name__}, not a "
                      "state dict")
    self.path = path
    self.names = list(self._sd)
    self.shapes = {n: tuple(t.shape) for n, t in self._sd.items()}

  def get(self, name: str) -> np.ndarray:
    return _torch_to_numpy(self._sd[name])


class HfCheckpoint:
  """A Hugging Face RemBERT directory as a `cc.TensorSource`.

  Names are HF keys with the `rembert.` prefix (added when the directory is a
  bare `RemBertModel`, whose keys lack it).
  """

  def __init__(self, path: str):
    root = pathlib.Path(path)
    if not root.is_dir():
      raise errors.UserError(f"Hugging Face checkpoint {path}: no such directory")
    self.root = root
    if not (root / "config.json").is_file():
      raise errors.UserError(f"{root}: no config.json: not a Hugging Face "
                      "checkpoint directory")
    self.config_json = io_utils.read_json(root / "config.json")
    if not isinstance(self.config_json, dict):
      raise errors.UserError(f"{root / 'config.json'}: not a JSON object")
    self._files = self._open_weights()
    self._where: dict[str, Any] = {}
    raw = [n for f in self._files for n in f.names]
    bare = (not any(n.startswith("rembert.") for n in raw)
            and "embeddings.word_embeddings.weight" in raw)
    self._raw_name = {}
    for f in self._files:
      for n in f.names:
        name = f"rembert.{n}" if bare else n
        self._raw_name[name] = n
        self._where[name] = f

  def _open_weights(self):
    root = self.root
    for index, opener in ((_SAFETENSORS_INDEX, _SafetensorsFile),
                          (_BIN_INDEX, _TorchBinFile)):
      if (root / index).is_file():
        weight_map = io_utils.read_json(root / index).get("weight_map")
        if not isinstance(weight_map, dict):
          raise errors.UserError(f"{root / index}: no 'weight_map'")
        files = []
        for shard in sorted(set(weight_map.values())):
          if not (root / shard).is_file():
            raise errors.UserError(f"{root / index} names shard {shard}, which is "
                            "missing")
          files.append(opener(root / shard))
        return files
    if (root / "model.safetensors").is_file():
      return [_SafetensorsFile(root / "model.safetensors")]
    if (root / "pytorch_model.bin").is_file():
      return [_TorchBinFile(root / "pytorch_model.bin")]
    raise errors.UserError(f"{root}: no model.safetensors, {_SAFETENSORS_INDEX}, "
                    f"pytorch_model.bin or {_BIN_INDEX}: not a Hugging Face "
                    "checkpoint directory")

  def names(self) -> list[str]:
    return list(self._where)

  def shape(self, name: str) -> tuple[int, ...]:
    return self._where[name].shapes[self._raw_name[name]]

  def get(self, name: str) -> np.ndarray:
    return self._where[name].get(self._raw_name[name])


def _safetensors_dtype(dtype: np.dtype) -> str:
  names = {"float32": "F32", "float16": "F16", "float64": "F64",
           "bfloat16": "BF16", "int32": "I32", "int64": "I64"}
  if np.dtype(dtype).name not in names:
    raise ValueError(f"no safetensors dtype for {dtype}")
  return names[np.dtype(dtype).name]


def write_safetensors(path: pathlib.Path,
                      specs: list[tuple[str, tuple[int, ...], np.dtype]],
                      tensors: Iterator[tuple[str, np.ndarray]]) -> int:
  """Writes a safetensors file tensor by tensor; returns its size in bytes.

  The header (names, dtypes, shapes, byte offsets) is computed from `specs`
  up front, so only one tensor is in memory at a time. `tensors` must yield
  exactly `specs`, in order.
  """
  header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
  offset = 0
  for name, shape, dtype in specs:
    size = math.prod(shape) * np.dtype(dtype).itemsize
    header[name] = {"dtype": _safetensors_dtype(dtype), "shape": list(shape),
                    "data_offsets": [offset, offset + size]}
    offset += size
  blob = json.dumps(header, separators=(",", ":")).encode()
  blob += b" " * (-len(blob) % 8)  # the format aligns the data to 8 bytes
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(blob)))
    f.write(blob)
    for (want, shape, dtype), (name, array) in zip(specs, tensors, strict=True):
      array = np.ascontiguousarray(array)
      if name != want or array.shape != tuple(shape) or array.dtype != dtype:
        raise AssertionError(f"tensor {name} {array.shape} {array.dtype} does "
                             f"not match the header {want} {shape} {dtype}")
      f.write(memoryview(array).cast("B"))
  return 8 + len(blob) + offset


# --- The original TF1 checkpoint ------------------------------------------------


class TfCheckpoint:
  """A TF1 checkpoint (prefix, or directory with a `checkpoint` file)."""

  def __init__(self, path: str):
    # Deferred: only TF1 checkpoints need TensorFlow (seconds to import).
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self.path = path
    try:
      self._reader = tf.train.load_checkpoint(path)
    except (tf.errors.OpError, ValueError) as e:
      message = getattr(e, "message", None) or str(e)
      raise errors.UserError(f"TF checkpoint {path}: cannot read: "
                      f"{message.strip().splitlines()[0]}") from e
    self._shapes = {n: tuple(s) for n, s in
                    self._reader.get_variable_to_shape_map().items()}

  def names(self) -> list[str]:
    return list(self._shapes)

  def shape(self, name: str) -> tuple[int, ...]:
    return self._shapes[name]

  def get(self, name: str) -> np.ndarray:
    return np.asarray(self._reader.get_tensor(name))


# --- Our orbax checkpoints --------------------------------------------------------


class OrbaxParams:
  """Our checkpoint's params as a `cc.TensorSource` with flat "a/b" names.

  Reads one subtree at a time (an encoder layer, the embeddings, the MLM
  head) with orbax's partial restore, so at most one subtree is in memory.
  """

  def __init__(self, checkpoint_dir: str):
    self.step_dir = checkpoints.latest_checkpoint_dir(checkpoint_dir)
    self.step = int(self.step_dir.name)
    self.model_dir = (self.step_dir.parent.parent
                      if self.step_dir.parent.name == "checkpoints" else None)
    tree = checkpoints.tree_metadata(str(self.step_dir))
    if "params" not in tree:
      raise errors.UserError(f"checkpoint {self.step_dir} has no 'params'")
    self._meta = cc.flatten(tree["params"])
    self._group_name: Optional[str] = None
    self._group: dict[str, np.ndarray] = {}

  def names(self) -> list[str]:
    return list(self._meta)

  def shape(self, name: str) -> tuple[int, ...]:
    return tuple(self._meta[name].shape)

  def dtype(self, name: str) -> np.dtype:
    return np.dtype(self._meta[name].dtype)

  @staticmethod
  def _group_of(name: str) -> str:
    parts = name.split("/")
    return "/".join(parts[:2]) if parts[0] == "encoder" else parts[0]

  def get(self, name: str) -> np.ndarray:
    group = self._group_of(name)
    if group != self._group_name:
      self._group = {}  # drop the previous subtree before reading the next
      self._group_name = group
      self._group = self._restore(group)
    return self._group[name]

  def _restore(self, group: str) -> dict[str, np.ndarray]:
    wanted = [tuple(k.split("/")) for k in self._meta
              if self._group_of(k) == group]
    return cc.flatten(checkpoints.load_param_subset(
        str(self.step_dir), self.step, wanted))


def _largest_first(entries: list[cc.Entry]) -> list[cc.Entry]:
  """Converts big tensors (those that need a transposed copy) while little
  else is held, so the transient copy does not add to a full set of params."""
  return sorted(entries, key=lambda e: -math.prod(e.shape))


def write_orbax_params(model_dir: pathlib.Path,
                       flat: Iterator[tuple[str, np.ndarray]],
                       step: int = 0) -> int:
  """Writes `{"step", "params"}` as `model_dir/checkpoints/<step>/default`.

  The layout of the local runner's checkpoints, without optimizer state:
  `checkpoints.load_params` and `init_checkpoint` read it. Returns the number of
  parameters.
  """
  params = {}
  count = largest = 0
  for name, array in flat:
    # Our params are float32 (network.RemBertConfig.param_dtype); a bf16/fp16
    # source upcasts exactly. As jax arrays, orbax's host-transfer limit
    # below applies to them (it does not to numpy leaves).
    params[name] = jax.device_put(array.astype(np.float32, copy=False))
    del array
    count += params[name].size
    largest = max(largest, params[name].nbytes)
  tree = {"step": np.asarray(step, np.int32), "params": cc.unflatten(params)}
  del params
  # Orbax's defaults copy every array for writing at once and compress it
  # (measured: 2.6x the params at RemBERT's size). Bounding the bytes in
  # flight to the largest array, uncompressed, keeps the peak near 1.1x.
  limit_gb = max(1, math.ceil(largest / 1e9))
  handler = ocp.PyTreeCheckpointHandler(
      save_concurrent_gb=limit_gb, save_device_host_concurrent_gb=limit_gb,
      use_compression=False)
  options = ocp.CheckpointManagerOptions(enable_async_checkpointing=False,
                                         create=True)
  with ocp.CheckpointManager(model_dir / "checkpoints", options=options,
                             item_handlers=handler) as mngr:
    mngr.save(step, args=ocp.args.PyTreeSave(tree), force=True)
    mngr.wait_until_finished()
  return count


# --- Conversions ------------------------------------------------------------------


@dataclasses.dataclass
class Summary:
  """What a conversion did (printed as one JSON line by the script)."""

  output_dir: str
  head: str
  tensors: int
  parameters: int
  vocab_rows_changed: int = 0
  skipped: dict[str, int] = dataclasses.field(default_factory=dict)
  peak_rss_mb: float = 0.0
  vocabulary: Optional[str] = None  # the sentencepiece.model written

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), sort_keys=True)


def _gin_config(gin_file: str) -> network.RemBertConfig:
  try:
    return configs.config_from_gin(gin_file)
  except configs.GinConfigError as e:
    raise errors.UserError(str(e).strip().splitlines()[0]) from e


def _reconcile(found: network.RemBertConfig, gin_file: Optional[str],
               vocab_size: Optional[int], source: str, head: cc.Head
               ) -> tuple[network.RemBertConfig, Optional[int]]:
  """The target config, and the source vocab size when rows are stripped.

  With a gin file its config is used after checking the architecture (the
  vocabulary may be smaller: padded rows are stripped); `vocab_size` strips
  to that size without a gin file.
  """
  target = found
  if gin_file:
    target = _gin_config(gin_file)
    fields = [f for f in cc.ARCHITECTURE_FIELDS if f != "vocab_size"]
    if head != cc.Head.MASKED_LM:
      fields.remove("output_embed_dim")  # unused without the MLM head
    mismatch = cc.config_mismatch(found, target, fields)
    layers = (target.num_pretraining_layers if head == cc.Head.MASKED_LM
              else target.num_layers)
    if mismatch is None and found.num_layers != layers:
      mismatch = f"{source} has {found.num_layers} layers, expected {layers}"
    if mismatch:
      raise errors.UserError(f"{source} does not match --gin_file={gin_file}: "
                      f"{mismatch}")
    if vocab_size is not None and vocab_size != target.vocab_size:
      raise errors.UserError(f"--vocab_size={vocab_size} contradicts {gin_file} "
                      f"(vocab_size {target.vocab_size})")
  elif vocab_size is not None:
    target = dataclasses.replace(found, vocab_size=vocab_size)
  if target.vocab_size > found.vocab_size:
    raise errors.UserError(f"{source} has {found.vocab_size} vocabulary rows, fewer "
                    f"than the {target.vocab_size} wanted")
  if target.vocab_size < found.vocab_size:
    logging.warning("%s: stripping %d padded vocabulary rows (%d -> %d)",
                    source, found.vocab_size - target.vocab_size,
                    found.vocab_size, target.vocab_size)
    return target, found.vocab_size
  return target, None


def copy_vocabulary(vocab_file: Optional[pathlib.Path],
                     out: pathlib.Path) -> None:
  if vocab_file is not None:
    shutil.copyfile(vocab_file, out / pieces.VOCABULARY_FILENAME)


def written_vocabulary(vocab_file: Optional[pathlib.Path],
                       output_dir: str) -> Optional[str]:
  if vocab_file is None:
    return None
  return str(pathlib.Path(output_dir) / pieces.VOCABULARY_FILENAME)


def checkpoint_vocabulary(checkpoint: pathlib.Path) -> Optional[pathlib.Path]:
  """The `sentencepiece.model` of a checkpoint's MODEL_DIR (ours or T5X's),
  if any."""
  found = _vocabulary_module().find_checkpoint_vocabulary(str(checkpoint))
  return pathlib.Path(found) if found else None


def _source_vocabulary(explicit: Optional[str], beside: pathlib.Path,
                       rows: int, source: str,
                       hf_config: Optional[dict] = None
                       ) -> Optional[pathlib.Path]:
  """The vocabulary a conversion carries: `explicit`, else `beside/`'s.

  Checked before anything is written: the five special pieces, [PAD] at 0,
  and no more pieces than the checkpoint has embedding rows (fewer is fine:
  padded rows). None, with a warning, when there is none.
  """
  path = pathlib.Path(explicit) if explicit else (
      beside / pieces.VOCABULARY_FILENAME)
  if not explicit and not path.is_file():
    logging.warning(
        "%s has no %s: the converted checkpoint carries no vocabulary, so "
        "runs from it need $REMBERT_SPM_PATH (or pass --vocab)", source,
        pieces.VOCABULARY_FILENAME)
    return None
  vocab = _vocabulary_module().RemBertVocabulary(str(path))
  try:
    ids = vocab.special_ids
    num_pieces = vocab.vocab_size
  except ValueError as e:
    raise errors.UserError(f"--vocab: {e}" if explicit else str(e)) from e
  if num_pieces > rows:
    raise errors.UserError(
        f"{path}: {num_pieces} pieces, but {source} has {rows} vocabulary "
        "rows (ids past them would have no embedding)")
  for key, want in (("pad_token_id", ids.pad), ("bos_token_id", ids.cls),
                    ("eos_token_id", ids.sep)):
    have = (hf_config or {}).get(key)
    if have is not None and have != want:
      # We read ids by piece name, so this is only worth a word.
      logging.warning("%s: config.json has %s %s, the vocabulary %s has %d",
                      source, key, have, path, want)
  return path


def checkpoint_config(source: "OrbaxParams",
                      gin_file: Optional[str]) -> network.RemBertConfig:
  """The config of our checkpoint: `gin_file`, else `rembert_config.json`.

  The local runner and the converters write `rembert_config.json` into the
  MODEL_DIR. The parameter shapes alone do not determine the config: the
  attention kernels join heads x head_dim.
  """
  return config_beside(source.model_dir, gin_file, str(source.step_dir))


def config_beside(model_dir: Optional[pathlib.Path], gin_file: Optional[str],
                  checkpoint: str) -> network.RemBertConfig:
  """`gin_file`'s config, else `model_dir/rembert_config.json`'s.

  Raises:
    errors.UserError: a bad gin file, or neither a gin file nor a saved
      config (naming `checkpoint`).
  """
  if gin_file:
    return _gin_config(gin_file)
  saved = model_dir and (model_dir / configs.CHECKPOINT_CONFIG_FILE)
  if saved and saved.is_file():
    return configs.read_checkpoint_config(saved)
  raise errors.UserError(
      f"checkpoint {checkpoint}: no {configs.CHECKPOINT_CONFIG_FILE} in "
      "its MODEL_DIR; "
      "pass --gin_file=<the model gin file> (the number of attention heads "
      "is not in the parameter shapes)")


def hf_to_t5x(hf_dir: str, output_dir: str, *, gin_file: Optional[str] = None,
              vocab_size: Optional[int] = None,
              vocab: Optional[str] = None,
              overwrite: bool = False) -> Summary:
  """Converts a Hugging Face RemBERT directory to our orbax checkpoint.

  Args:
    hf_dir: a `save_pretrained` directory.
    output_dir: the MODEL_DIR to write (`checkpoints/0/default`,
      `rembert_config.json` and the vocabulary, `sentencepiece.model`).
    gin_file: a model gin file to check the HF config against (its config,
      including epsilon and pre-training-only layers, is then the one used).
    vocab_size: strip padded vocabulary rows down to this size.
    vocab: the SentencePiece model to carry (default: the HF directory's
      `sentencepiece.model`).
    overwrite: replace a non-empty `output_dir`.

  Returns:
    A `Summary`.

  Raises:
    errors.UserError: `output_dir` is, contains or lies inside an input
      (checked first, even with `overwrite`); a bad HF directory, gin file or
      vocabulary.
  """
  inputs = [("--hf_dir", hf_dir), ("--gin_file", gin_file), ("--vocab", vocab)]
  io_utils.check_output_dir(output_dir, overwrite, sources=inputs)
  source = HfCheckpoint(hf_dir)
  try:
    found = cc.config_from_hf(source.config_json,
                              str(source.root / "config.json"))
  except ValueError as e:
    raise errors.UserError(str(e)) from e
  head, ignore = cc.head_from_hf_names(source.names())
  config, source_vocab = _reconcile(found, gin_file, vocab_size, hf_dir, head)
  num_classes = None
  if head in (cc.Head.SEQUENCE_CLASSIFICATION, cc.Head.TOKEN_CLASSIFICATION):
    num_classes = source.shape("classifier.weight")[0]
  try:
    entries = cc.hf_name_map(config, head, num_classes=num_classes)
    cc.check_source(source, entries, source_name=hf_dir, ignore_unused=ignore,
                    source_vocab_size=source_vocab)
  except ValueError as e:
    raise errors.UserError(str(e)) from e
  vocab_file = _source_vocabulary(vocab, source.root, config.vocab_size,
                                  hf_dir, source.config_json)
  with io_utils.atomic_output_dir(output_dir, overwrite,
                                  sources=inputs) as tmp:
    count = write_orbax_params(tmp, cc.iter_to_ours(
        source, _largest_first(entries), source_name=hf_dir,
        ignore_unused=ignore,
        source_vocab_size=source_vocab))
    configs.write_checkpoint_config(tmp, config)
    copy_vocabulary(vocab_file, tmp)
  skipped = sum(1 for n in source.names() if n.startswith(ignore)) if ignore else 0
  return Summary(str(output_dir), head.value, len(entries), count,
                 (source_vocab or config.vocab_size) - config.vocab_size,
                 {"pooler": skipped} if skipped else {},
                 peak_rss_bytes() / 2**20,
                 written_vocabulary(vocab_file, output_dir))


def tf_to_t5x(tf_checkpoint: str, output_dir: str, *,
              config_json: Optional[str] = None,
              gin_file: Optional[str] = None,
              vocab_size: Optional[int] = None,
              vocab: Optional[str] = None,
              overwrite: bool = False) -> Summary:
  """Converts the original TF1 RemBERT checkpoint's encoder to ours.

  The config comes from `config_json` (the release's JSON, HF field names)
  and/or `gin_file`. Adam slots, the step, the MLM head and the pooler are
  skipped by name (`cc.tf_variable_skip_reason`); every other variable must
  be in `cc.tf_name_map`. `vocab` (default: a `sentencepiece.model` beside
  the checkpoint) is copied into the output MODEL_DIR.

  Raises:
    errors.UserError: `output_dir` is, contains or lies inside an input
      (checked first, even with `overwrite`); a bad checkpoint, config or
      vocabulary.
  """
  # A prefix names files (`prefix.index`, `prefix.data-*`): an output that
  # is or contains the prefix's path would replace them; a sibling folder
  # beside them (e.g. /ckpt/ours for /ckpt/model.ckpt) leaves them alone.
  inputs = [("--tf_checkpoint", tf_checkpoint),
            ("--config_json", config_json),
            ("--gin_file", gin_file), ("--vocab", vocab)]
  io_utils.check_output_dir(output_dir, overwrite, sources=inputs)
  if not config_json and not gin_file:
    raise errors.UserError("tf-to-t5x needs --config_json (the checkpoint's JSON "
                    "config) or --gin_file (a model gin file)")
  source = TfCheckpoint(tf_checkpoint)
  if config_json:
    try:
      found = cc.config_from_hf(io_utils.read_json(pathlib.Path(config_json)),
                                config_json, require_model_type=False)
    except ValueError as e:
      raise errors.UserError(str(e)) from e
    config, source_vocab = _reconcile(found, gin_file, vocab_size,
                                      tf_checkpoint, cc.Head.ENCODER)
  else:
    config, source_vocab = _gin_config(gin_file), None
    word = "bert/embeddings/word_embeddings"
    if word in source.names() and source.shape(word)[0] > config.vocab_size:
      source_vocab = source.shape(word)[0]
  skip = lambda n: cc.tf_variable_skip_reason(n) is not None
  try:
    entries = cc.tf_name_map(config)
    cc.check_source(source, entries, source_name=tf_checkpoint, skip=skip,
                    source_vocab_size=source_vocab)
  except ValueError as e:
    raise errors.UserError(str(e)) from e
  beside = pathlib.Path(tf_checkpoint)
  vocab_file = _source_vocabulary(
      vocab, beside if beside.is_dir() else beside.parent, config.vocab_size,
      tf_checkpoint,
      io_utils.read_json(pathlib.Path(config_json)) if config_json else None)
  skipped: dict[str, int] = {}
  for n in source.names():
    reason = cc.tf_variable_skip_reason(n)
    if reason:
      skipped[reason] = skipped.get(reason, 0) + 1
  with io_utils.atomic_output_dir(output_dir, overwrite,
                                  sources=inputs) as tmp:
    count = write_orbax_params(tmp, cc.iter_to_ours(
        source, _largest_first(entries), source_name=tf_checkpoint, skip=skip,
        source_vocab_size=source_vocab))
    configs.write_checkpoint_config(tmp, config)
    copy_vocabulary(vocab_file, tmp)
  return Summary(str(output_dir), cc.Head.ENCODER.value, len(entries), count,
                 (source_vocab or config.vocab_size) - config.vocab_size,
                 skipped, peak_rss_bytes() / 2**20,
                 written_vocabulary(vocab_file, output_dir))


def t5x_to_hf(checkpoint_dir: str, output_dir: str, *,
              gin_file: Optional[str] = None,
              hf_vocab_size: Optional[int] = None,
              vocab: Optional[str] = None,
              labels: Optional[Sequence[str]] = None,
              task: Optional[str] = None,
              overwrite: bool = False) -> Summary:
  """Converts our checkpoint to a Hugging Face directory.

  Writes `config.json` and `model.safetensors` for `RemBertForMaskedLM`
  (a pre-training checkpoint), `RemBertModel` (encoder only) or the task
  model whose head the params have; the vocabulary with the tokenizer files
  `AutoTokenizer` reads; and a model card, `README.md` (see `hf_export`).

  Args:
    checkpoint_dir: a MODEL_DIR, its `checkpoints/` or one step directory.
    output_dir: the HF directory to write.
    gin_file: the model gin file (otherwise `rembert_config.json` beside the
      checkpoint).
    hf_vocab_size: pad the vocabulary with zero rows to this size (default:
      the real vocabulary; padding of a padded config is stripped).
    vocab: the SentencePiece model to export (default: the MODEL_DIR's
      `sentencepiece.model`).
    labels: the class (tag) names of a classification (tagging) head, in id
      order (default: `task`'s, else those of the task the run trained on).
    task: the SeqIO task or mixture the model was fine-tuned on.
    overwrite: replace a non-empty `output_dir`.

  Raises:
    errors.UserError: `output_dir` is, contains or lies inside an input
      (checked first, even with `overwrite`); a bad checkpoint or gin file;
      a vocabulary without one of the special pieces or with more pieces
      than vocabulary rows; labels that do not name the head's classes.
  """
  command = hf_export.command_line(
      "t5x-to-hf", checkpoint_dir=checkpoint_dir, output_dir=output_dir,
      gin_file=gin_file, hf_vocab_size=hf_vocab_size, vocab=vocab,
      labels=labels, task=task, overwrite=overwrite)
  inputs = [("--checkpoint_dir", checkpoint_dir), ("--gin_file", gin_file),
            ("--vocab", vocab)]
  io_utils.check_output_dir(output_dir, overwrite, sources=inputs)
  source = OrbaxParams(checkpoint_dir)
  # A scanned checkpoint (RemBertConfig.scan_layers) is read under per-layer
  # names, one layer slice at a time: HF has one module per layer.
  per_layer = layer_stacking.per_layer_source(source)
  shapes = {n: per_layer.shape(n) for n in per_layer.names()}
  head, num_classes = cc.head_from_params(shapes)
  config = checkpoint_config(source, gin_file)
  if head != cc.Head.MASKED_LM and config.num_pretraining_only_layers:
    config = dataclasses.replace(config, num_pretraining_only_layers=0)
  if hf_vocab_size is not None and hf_vocab_size < config.vocab_size:
    raise errors.UserError(f"--hf_vocab_size={hf_vocab_size} is smaller than the "
                    f"checkpoint's vocabulary ({config.vocab_size})")
  vocab_file = pathlib.Path(vocab) if vocab else checkpoint_vocabulary(
      source.step_dir)
  exported_vocab = None
  if vocab_file:
    exported_vocab = hf_export.read_vocabulary(
        vocab_file, config.vocab_size, f"checkpoint {source.step_dir}")
  else:
    logging.warning("checkpoint %s has no %s: the export has no tokenizer "
                    "(pass --vocab)", source.step_dir,
                    pieces.VOCABULARY_FILENAME)
  run = hf_export.read_run(source.model_dir)
  label_names = hf_export.resolve_labels(head, num_classes, labels, task, run)
  if task:  # what the model card names as the task trained on
    run = dataclasses.replace(run, task=task)
  try:
    entries = cc.hf_name_map(config, head, num_classes=num_classes)
    hf_config = cc.hf_config_dict(
        config, head, num_classes,
        labels=label_names.names if label_names else None)
  except ValueError as e:
    raise errors.UserError(f"checkpoint {source.step_dir}: {e}") from e
  if hf_vocab_size is not None:
    hf_config["vocab_size"] = hf_vocab_size
  if exported_vocab:
    ids = exported_vocab.ids
    # What HF reads for generation/padding defaults; the tokenizer files
    # name the special tokens themselves.
    hf_config.update(pad_token_id=ids.pad, bos_token_id=ids.cls,
                     eos_token_id=ids.sep)
  specs = [(name, shape, per_layer.dtype(e.ours)) for (name, shape), e in
           zip(cc.external_specs(entries, hf_vocab_size), entries)]
  tensors = cc.iter_from_ours(per_layer, entries,
                              source_name=f"checkpoint {source.step_dir}",
                              target_vocab_size=hf_vocab_size)
  try:
    first = next(tensors)  # runs every name/shape check before any writing
  except ValueError as e:
    raise errors.UserError(str(e)) from e

  def all_tensors():
    yield first
    yield from tensors

  count = sum(math.prod(s) for _, s, _ in specs)
  card = hf_export.model_card(
      config=config, hf_config=hf_config, head=head, parameters=count,
      labels=label_names, vocab=exported_vocab, step=source.step, run=run,
      checkpoint=str(source.step_dir), command=command,
      directory=str(output_dir))
  with io_utils.atomic_output_dir(output_dir, overwrite,
                                  sources=inputs) as tmp:
    (tmp / "config.json").write_text(json.dumps(hf_config, indent=2,
                                                sort_keys=True))
    write_safetensors(tmp / "model.safetensors", specs, all_tensors())
    copy_vocabulary(vocab_file, tmp)
    if exported_vocab:
      hf_export.write_tokenizer(exported_vocab, tmp,
                                config.max_position_embeddings)
    (tmp / hf_export.MODEL_CARD).write_text(card, encoding="utf-8")
  return Summary(str(output_dir), head.value, len(entries), count,
                 (hf_vocab_size or config.vocab_size) - config.vocab_size, {},
                 peak_rss_bytes() / 2**20,
                 written_vocabulary(vocab_file, output_dir))
