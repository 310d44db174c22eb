r"""Sentence embeddings of a whole corpus, streamed to disk and resumable.

  python -m rembert_t5x.runner.embed_corpus --pretrained=MODEL_DIR \
      --sentences=corpus.txt --work_dir=W [--batch_size=32] [--chunk_size=8192]
  # Timing only (random weights of a gin model, the embeddings mean nothing):
  python -m rembert_t5x.runner.embed_corpus \
      --model_gin=gin_configs/models/tiny.gin --vocab=spm.model \
      --sentences=corpus.txt --work_dir=W

XTREME's retrieval tasks embed every sentence of a corpus with the encoder
as it is (`models.RemBertRetrievalModel`). BUCC 2018's test corpora hold
~400k sentences a side, 1.8 GB of float32 embeddings at RemBERT's 1152
dimensions and hours of encoder time on a CPU, so the pass here never holds
the corpus's embeddings in memory and survives an interruption:

  * Sentences are tokenised as the retrieval tasks do
    (`xtreme_preprocessors.encode_single_sentence`, `[CLS] s [SEP]`, cut to
    `max_length`), then sorted longest first; each batch is cut to its
    bucket (`predict_batches.bucket_length`), as the length-sorted
    evaluation does: few compiled shapes, little padding.
  * The sorted corpus is cut into chunks of `chunk_size` sentences. Each
    chunk's embeddings are written as `chunk-NNNNN.npy` through a temporary
    name and a rename (`io_utils.atomic_write_bytes`): a chunk on disk is
    complete. A rerun skips the chunks on disk.
  * `manifest.json` names what the folder embeds: the number of sentences, a
    digest of their token ids (so the corpus, vocabulary and length cut),
    the model's identity (`model_fingerprint`: its parameters and module)
    and the chunk and batch sizes. A rerun with other inputs is refused
    with a message naming what differs, before anything is computed.
  * Once every chunk is there, they are scattered back into corpus order in
    one memory-mapped `embeddings.npy` `[sentences, dim]` float32 (written
    under a temporary name, then renamed) and deleted. A folder holding
    `embeddings.npy` is finished: a rerun only opens it.

Progress: one line per chunk with sentences/s and the time left, estimated
from the padded tokens still to run (the first, longest chunks are the
slowest per sentence).
"""

import dataclasses
import hashlib
import io
import json
import os
import pathlib
import time
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from absl import flags
import jax
import numpy as np

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x import configs
from rembert_t5x import models
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import predict_batches
from rembert_t5x.runner import train_lib

MANIFEST = "manifest.json"
EMBEDDINGS = "embeddings.npy"
# The file format; a folder written by another one is refused.
FORMAT = 1
CHUNK_SIZE = 8192  # sentences per chunk file: 38 MB at 1152 dimensions
BATCH_SIZE = 32
# XTREME caps retrieval sentences at 512 tokens (local_eval_retrieval.gin).
MAX_LENGTH = 512


def _chunk_file(index: int) -> str:
  return f"chunk-{index:05d}.npy"


# --------------------------------------------------------------------------
# The corpus, tokenised
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Tokens:
  """A tokenised corpus, ragged: sentence i is `flat[offsets[i]:offsets[i+1]]`.

  Attributes:
    flat: `[total tokens]` int32 ids, `[CLS] s [SEP]` per sentence.
    offsets: `[sentences + 1]` int64 start of each sentence in `flat`.
    max_length: the row length the sentences were cut to.
  """
  flat: np.ndarray
  offsets: np.ndarray
  max_length: int

  def __len__(self) -> int:
    return len(self.offsets) - 1

  def lengths(self) -> np.ndarray:
    """`[sentences]` tokens per sentence."""
    return np.diff(self.offsets)

  def digest(self) -> str:
    """sha256 of the ids and boundaries: the same corpus, vocabulary and cut
    give the same digest."""
    h = hashlib.sha256()
    h.update(np.asarray(self.offsets, np.int64).tobytes())
    h.update(np.asarray(self.flat, np.int32).tobytes())
    h.update(str(self.max_length).encode())
    return h.hexdigest()


def tokenize(sentences: Sequence[str], vocabulary: "seqio.Vocabulary",
             max_length: int = MAX_LENGTH) -> Tokens:
  """Tokenises `sentences` exactly as the retrieval tasks' preprocessing.

  Args:
    sentences: the corpus, in order.
    vocabulary: the task vocabulary (the checkpoint's SentencePiece model).
    max_length: tokens per sentence at most, [CLS] and [SEP] included.

  Returns:
    The corpus's `Tokens`.
  """
  # The data stack is imported where text is read: embedding tokenised
  # corpora (`embed_corpus`) needs only JAX.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from rembert_t5x.data import xtreme_preprocessors as xp  # pylint: disable=g-import-not-at-top
  ds = tf.data.Dataset.from_tensor_slices(
      {"text": tf.constant(list(sentences), tf.string)})
  ds = xp.encode_single_sentence(
      ds, sequence_length={"input_tokens": max_length},
      output_features=xp.retrieval_output_features(vocabulary))
  ds = ds.map(lambda ex: (ex["input_tokens"], tf.size(ex["input_tokens"])),
              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  flats, lengths = [], []
  for ids, sizes in ds.padded_batch(4096).as_numpy_iterator():
    flats.append(ids[np.arange(ids.shape[1])[None, :] < sizes[:, None]])
    lengths.append(sizes)
  lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
  offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
  flat = (np.concatenate(flats) if flats else np.zeros(0)).astype(np.int32)
  return Tokens(flat, offsets, max_length)


def _batch_features(tokens: Tokens, rows: np.ndarray, length: int,
                    batch_size: int) -> dict[str, np.ndarray]:
  """The model features of `rows`, `[batch_size, length]`, as the unpacked
  `RetrievalFeatureConverter` lays them out (ids 0 past each sentence,
  `segment_ids` 1 on its tokens, `positions` 0, 1, ...); rows past
  `len(rows)` are empty."""
  ids = np.zeros((batch_size, length), np.int32)
  for r, i in enumerate(rows):
    sentence = tokens.flat[tokens.offsets[i]:tokens.offsets[i + 1]]
    ids[r, :len(sentence)] = sentence
  segment_ids = (ids != 0).astype(np.int32)
  positions = np.arange(length, dtype=np.int32)[None, :] * segment_ids
  return {"input_tokens": ids, "token_types": np.zeros_like(ids),
          "segment_ids": segment_ids, "positions": positions}


# --------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------

def model_fingerprint(model, params) -> str:
  """sha256 of a model's module (its config, pooled layer, pooling) and of
  every parameter's name, shape, dtype and values: what the embeddings are a
  function of, besides the tokens. Seconds for RemBERT's 2.3 GB."""
  h = hashlib.sha256(repr(model.module).encode())
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  for path, leaf in sorted(flat, key=lambda kv: jax.tree_util.keystr(kv[0])):
    value = np.asarray(jax.device_get(leaf))
    h.update(f"{jax.tree_util.keystr(path)}:{value.shape}:{value.dtype}"
             .encode())
    h.update(np.ascontiguousarray(value).tobytes())
  return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class _Plan:
  """The sorted corpus cut into chunks, and each chunk's batches' work."""
  order: np.ndarray  # [sentences] corpus row of each sorted position
  lengths: np.ndarray  # [sentences] tokens, corpus order
  chunk_size: int
  batch_size: int

  @property
  def num_chunks(self) -> int:
    return -(-len(self.order) // self.chunk_size)

  def chunk_rows(self, chunk: int) -> np.ndarray:
    return self.order[chunk * self.chunk_size:(chunk + 1) * self.chunk_size]

  def batches(self, chunk: int, max_length: int
              ) -> Iterator[tuple[np.ndarray, int]]:
    """(corpus rows, bucket length) per batch of the chunk."""
    rows = self.chunk_rows(chunk)
    for start in range(0, len(rows), self.batch_size):
      batch = rows[start:start + self.batch_size]
      yield batch, predict_batches.bucket_length(
          int(self.lengths[batch].max()), max_length)

  def work(self, chunk: int, max_length: int) -> int:
    """Padded tokens the chunk runs (rows x bucket length)."""
    return sum(self.batch_size * length
               for _, length in self.batches(chunk, max_length))


def _plan(tokens: Tokens, chunk_size: int, batch_size: int) -> _Plan:
  lengths = tokens.lengths()
  # Longest first (stable: equal lengths keep corpus order): the largest
  # shape compiles, and fails if it does not fit, on the first batch.
  return _Plan(np.argsort(-lengths, kind="stable"), lengths, chunk_size,
               batch_size)


def _check_manifest(work_dir: pathlib.Path, manifest: Mapping[str, Any]
                    ) -> None:
  """Writes the manifest of a new folder; refuses one made for other inputs.

  Raises:
    errors.UserError: naming the folder and every field that differs.
  """
  path = work_dir / MANIFEST
  if not path.is_file():
    if any(work_dir.glob("chunk-*.npy")) or (work_dir / EMBEDDINGS).exists():
      raise errors.UserError(
          f"{work_dir}: embeddings without a {MANIFEST}; delete the folder "
          "or pass another work folder")
    io_utils.atomic_write_json(path, dict(manifest), indent=1)
    return
  found = io_utils.read_json(path)
  differ = [f"{key} {found.get(key)!r} (now {value!r})"
            for key, value in manifest.items() if found.get(key) != value]
  if differ:
    raise errors.UserError(
        f"{work_dir}: an embedding pass of other inputs is there ("
        + "; ".join(differ) + "); delete the folder to start over or pass "
        "another work folder")


def _load_chunk(path: pathlib.Path, rows: int) -> Optional[np.ndarray]:
  """A committed chunk, or None if it is not (yet) on disk."""
  if not path.is_file():
    return None
  chunk = np.load(path, mmap_mode="r")
  if chunk.ndim != 2 or chunk.shape[0] != rows:
    raise errors.UserError(f"{path}: {chunk.shape} embeddings, expected "
                           f"{rows} rows; delete the folder to start over")
  return chunk


def _embed_chunk(predict, params, tokens: Tokens, plan: _Plan,
                 chunk: int) -> np.ndarray:
  """`[rows, dim]` float32 embeddings of one chunk, in sorted order."""
  # Every batch is dispatched before any result is read back, so the host
  # builds the next batch while the device runs the last.
  pending = []
  for rows, length in plan.batches(chunk, tokens.max_length):
    features = _batch_features(tokens, rows, length, plan.batch_size)
    embeddings, _ = predict(params, jax.device_put(features))
    pending.append((len(rows), embeddings))
  return np.concatenate([np.asarray(jax.device_get(e), np.float32)[:n]
                         for n, e in pending])


def _save_chunk(path: pathlib.Path, chunk: np.ndarray) -> None:
  buffer = io.BytesIO()
  np.save(buffer, chunk)
  io_utils.atomic_write_bytes(path, buffer.getvalue())


def _assemble(work_dir: pathlib.Path, plan: _Plan, dim: int) -> None:
  """Scatters the chunks into corpus order: `embeddings.npy`, then deletes
  the chunks."""
  tmp = work_dir / f".{EMBEDDINGS}.tmp"
  out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32,
                                  shape=(len(plan.order), dim))
  for chunk in range(plan.num_chunks):
    rows = plan.chunk_rows(chunk)
    out[rows] = np.load(work_dir / _chunk_file(chunk), mmap_mode="r")
  out.flush()
  del out
  with open(tmp, "rb") as f:
    os.fsync(f.fileno())
  os.replace(tmp, work_dir / EMBEDDINGS)
  for chunk in range(plan.num_chunks):
    (work_dir / _chunk_file(chunk)).unlink()


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds} s"
  if seconds < 3600:
    return f"{seconds // 60} min {seconds % 60:02d} s"
  return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def embed_corpus(model, params, tokens: Tokens, work_dir: str, *,
                 model_id: str, chunk_size: int = CHUNK_SIZE,
                 batch_size: int = BATCH_SIZE,
                 log: Callable[[str], None] = print) -> np.ndarray:
  """Embeds a corpus in length-sorted chunks on disk; resumes a stopped pass.

  Args:
    model: a `models.RemBertRetrievalModel`.
    params: its parameters.
    tokens: the corpus (`tokenize`).
    work_dir: the pass's folder (created); see the module docstring.
    model_id: the model's identity in the manifest (`model_fingerprint`).
    chunk_size: sentences per chunk file.
    batch_size: rows per call of the model.
    log: progress lines.

  Returns:
    `[sentences, dim]` float32, corpus order: a read-only memory map of
    `work_dir/embeddings.npy`.

  Raises:
    errors.UserError: `work_dir` holds a pass of other inputs or a damaged
      chunk; it cannot be written.
    ValueError: an empty corpus, or sizes below 1.
  """
  if not len(tokens):
    raise ValueError("embed_corpus: the corpus has no sentences")
  if chunk_size < 1 or batch_size < 1:
    raise ValueError(f"embed_corpus: chunk_size {chunk_size} and batch_size "
                     f"{batch_size} must be at least 1")
  work = pathlib.Path(work_dir)
  try:
    work.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise errors.UserError(f"cannot create {work}: {e.strerror}") from e
  _check_manifest(work, {
      "format": FORMAT, "sentences": len(tokens), "tokens": tokens.digest(),
      "model": model_id, "chunk_size": chunk_size, "batch_size": batch_size})
  if (work / EMBEDDINGS).is_file():
    log(f"{work}: {len(tokens)} sentences embedded before")
    return np.load(work / EMBEDDINGS, mmap_mode="r")
  plan = _plan(tokens, chunk_size, batch_size)
  todo = [c for c in range(plan.num_chunks)
          if _load_chunk(work / _chunk_file(c),
                         len(plan.chunk_rows(c))) is None]
  work_left = sum(plan.work(c, tokens.max_length) for c in todo)
  log(f"{work}: embedding {len(tokens)} sentences in {plan.num_chunks} "
      f"chunks of {chunk_size} (batches of {batch_size}, longest first); "
      + (f"{plan.num_chunks - len(todo)} chunks on disk, resuming"
         if len(todo) < plan.num_chunks else "starting"))
  predict = predict_batches.jitted_predict(model)
  params = jax.device_put(params)
  start, done_work, done_sentences = time.monotonic(), 0, 0
  for n, chunk in enumerate(todo, start=1):
    embeddings = _embed_chunk(predict, params, tokens, plan, chunk)
    _save_chunk(work / _chunk_file(chunk), embeddings)
    done_work += plan.work(chunk, tokens.max_length)
    done_sentences += len(embeddings)
    elapsed = time.monotonic() - start
    left = elapsed / done_work * (work_left - done_work)
    log(f"{work}: chunk {chunk + 1}/{plan.num_chunks} ({n}/{len(todo)} this "
        f"run): {done_sentences / elapsed:.1f} sentences/s, "
        f"{_duration(left)} left")
  dim = _load_chunk(work / _chunk_file(0), len(plan.chunk_rows(0))).shape[1]
  _assemble(work, plan, dim)
  return np.load(work / EMBEDDINGS, mmap_mode="r")


# --------------------------------------------------------------------------
# An encoder with its work folder
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CorpusEncoder:
  """A retrieval model and the folder its corpus passes go to.

  `embed(name, sentences)` runs `embed_corpus` in `work_dir/name`; the
  model's identity (`model_fingerprint`) is computed once, here.
  """
  model: Any
  params: Any
  vocabulary: Any  # a seqio.Vocabulary
  work_dir: str
  max_length: int = MAX_LENGTH
  chunk_size: int = CHUNK_SIZE
  batch_size: int = BATCH_SIZE
  log: Callable[[str], None] = print
  model_id: str = ""

  def __post_init__(self):
    if not self.model_id:
      object.__setattr__(self, "model_id",
                         model_fingerprint(self.model, self.params))

  def embed(self, name: str, sentences: Sequence[str]) -> np.ndarray:
    """`[len(sentences), dim]` float32 (a read-only memory map)."""
    return self.embed_in(os.path.join(self.work_dir, name), sentences)

  def embed_in(self, work_dir: str, sentences: Sequence[str]) -> np.ndarray:
    """`embed` in the folder `work_dir`."""
    return self.embed_tokens(work_dir, self.tokenize(sentences))

  def tokenize(self, sentences: Sequence[str]) -> Tokens:
    return tokenize(sentences, self.vocabulary, self.max_length)

  def embed_tokens(self, work_dir: str, tokens: Tokens) -> np.ndarray:
    """`embed_corpus` of a tokenised corpus in the folder `work_dir`."""
    return embed_corpus(self.model, self.params, tokens, work_dir,
                        model_id=self.model_id, chunk_size=self.chunk_size,
                        batch_size=self.batch_size, log=self.log)


def load_encoder(pretrained: str, work_dir: str,
                 config=None, log: Callable[[str], None] = print,
                 **settings) -> CorpusEncoder:
  """The pre-trained encoder of a MODEL_DIR (its vocabulary made the
  default), for XTREME's retrieval: no fine-tuning, layer L/2 + 2.

  Args:
    pretrained: a MODEL_DIR in our layout (what `hf-to-t5x` or the local
      pre-training writes).
    work_dir: where the corpus passes go.
    config: the network config (default: MODEL_DIR/rembert_config.json).
    log: progress lines.
    **settings: `CorpusEncoder` fields (chunk_size, batch_size).

  Raises:
    errors.UserError: no config beside the checkpoint, or a checkpoint that
      does not fit it.
  """
  # Deferred: seqio and TensorFlow (seconds); embedding tokens needs neither.
  from rembert_t5x.data import vocabulary as vocab_lib  # pylint: disable=g-import-not-at-top
  if config is None:
    saved = pathlib.Path(pretrained) / configs.CHECKPOINT_CONFIG_FILE
    if not saved.is_file():
      raise errors.UserError(
          f"--pretrained {pretrained}: no {configs.CHECKPOINT_CONFIG_FILE} "
          "(a MODEL_DIR as hf-to-t5x or the pre-training writes it)")
    config = configs.read_checkpoint_config(saved)
  vocab_lib.use_checkpoint_vocabulary(pretrained)
  model = models.RemBertRetrievalModel(models.make_module("retrieval",
                                                          config))
  params = checkpoints.load_params_for(model, pretrained)
  return CorpusEncoder(
      model, params, vocab_lib.default_vocabulary(), work_dir,
      max_length=min(MAX_LENGTH, config.max_position_embeddings), log=log,
      **settings)


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_string("pretrained", None, "MODEL_DIR of the encoder",
                      flag_values=fv)
  flags.DEFINE_string("model_gin", None, "instead of --pretrained: a model "
                      "gin file with random weights (timing only)",
                      flag_values=fv)
  flags.DEFINE_string("vocab", None, "SentencePiece model (with --model_gin)",
                      flag_values=fv)
  flags.DEFINE_string("sentences", None, "the corpus: one sentence a line",
                      flag_values=fv, required=True)
  flags.DEFINE_string("work_dir", None, "the pass's folder (a rerun resumes)",
                      flag_values=fv, required=True)
  flags.DEFINE_integer("chunk_size", CHUNK_SIZE, "sentences per chunk file",
                       flag_values=fv, lower_bound=1)
  flags.DEFINE_integer("batch_size", BATCH_SIZE, "rows per model call",
                       flag_values=fv, lower_bound=1)


def read_corpus(path: str) -> list[str]:
  r"""The sentences of a one-sentence-a-line corpus file, in order.

  Lines end where Python's text-mode iteration ends them (XTREME's
  `text_load_unify` iterates the file): at "\n", "\r\n" and "\r" only.
  `str.splitlines()` would also cut a sentence at U+2028, U+0085 or a form
  feed, one embedding too many and every later row misaligned. Blank lines
  are sentences too (their rows keep the alignment).

  Raises:
    errors.UserError: the file cannot be read, is not UTF-8 or has no line.
  """
  try:
    with open(path, encoding="utf-8", newline=None) as f:
      text = f.read()
  except (OSError, UnicodeDecodeError) as e:
    raise errors.UserError(f"--sentences {path}: {e}") from e
  # Universal newlines left "\n" as the only line end; one at the very end
  # ends the last line rather than starting another.
  sentences = text.split("\n")
  if sentences[-1] == "":
    sentences.pop()
  if not sentences:
    raise errors.UserError(f"--sentences {path}: the file is empty (one "
                           "sentence a line)")
  return sentences


def _random_encoder(model_gin: str, vocab: Optional[str], work_dir: str,
                    settings: Mapping[str, int]) -> CorpusEncoder:
  # Deferred: seqio and TensorFlow (seconds); embedding tokens needs neither.
  from rembert_t5x.data import vocabulary as vocab_lib  # pylint: disable=g-import-not-at-top
  if not vocab:
    raise errors.UserError("--model_gin needs --vocab (a SentencePiece model)")
  try:
    config = configs.config_from_gin(model_gin)
  except configs.GinConfigError as e:
    raise errors.UserError(str(e)) from e
  vocabulary = vocab_lib.RemBertVocabulary(vocab)
  if vocabulary.vocab_size > config.vocab_size:
    raise errors.UserError(
        f"--vocab {vocab}: {vocabulary.vocab_size} pieces, more than the "
        f"{config.vocab_size} rows of {model_gin}'s embedding table")
  model = models.RemBertRetrievalModel(models.make_module("retrieval",
                                                          config))
  params = model.get_initial_variables(
      jax.random.PRNGKey(0), {"input_tokens": (1, 8)})["params"]
  return CorpusEncoder(
      model, params, vocabulary, work_dir,
      max_length=min(MAX_LENGTH, config.max_position_embeddings), **settings)


def _main(fv: flags.FlagValues) -> None:
  if bool(fv.pretrained) == bool(fv.model_gin):
    raise errors.UserError("pass one of --pretrained and --model_gin")
  train_lib.require_one_process("corpus embedding")
  sentences = read_corpus(fv.sentences)
  settings = {"chunk_size": fv.chunk_size, "batch_size": fv.batch_size}
  if fv.pretrained:
    encoder = load_encoder(fv.pretrained, fv.work_dir, **settings)
  else:
    encoder = _random_encoder(fv.model_gin, fv.vocab, fv.work_dir, settings)
  # The pass alone: tokenising, compiling and writing included, loading
  # the checkpoint not.
  start = time.monotonic()
  tokens = encoder.tokenize(sentences)
  embeddings = encoder.embed_tokens(fv.work_dir, tokens)
  seconds = time.monotonic() - start
  print(json.dumps({
      "sentences": len(sentences), "dim": embeddings.shape[1],
      "tokens_per_sentence": round(float(tokens.lengths().mean()), 1),
      "seconds": round(seconds, 2),
      "sentences_per_s": round(len(sentences) / seconds, 1),
      "embeddings": os.path.join(fv.work_dir, EMBEDDINGS)}))


def main(argv=None) -> None:
  cli.run_main(_main, argv, _define_flags, doc=__doc__)


if __name__ == "__main__":
  main()
