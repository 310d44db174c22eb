"""Shared tiny configurations and helpers for the tests."""

import os
import pathlib

import pytest

from rembert_t5x import network
from rembert_t5x.data import vocabulary
from rembert_tasks import registry

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


# The released RemBERT vocabulary's layout (defined, with its sources, in
# rembert_t5x/data/vocabulary.py).
RELEASED_LAYOUT = vocabulary.RELEASED_LAYOUT
RELEASED_LAYOUT_IDS = vocabulary.SpecialIds(
    *(RELEASED_LAYOUT[p] for p in vocabulary.SPECIAL_PIECES))


# Shuffle buffer of the tests' tiny synthetic tasks: with seqio's 1,000, the
# first batch of a 300-sentence, 4-language MLM mixture waited ~5 s for
# ~12 passes over every corpus.
TINY_SHUFFLE_BUFFER = 64


def register_tiny_synthetic(directory, prefix: str, **sizes):
  """Small synthetic data in `directory`, its tasks registered as
  `<prefix>...`; returns the task names (`register_synthetic`).

  Sizes default to a 300-sentence corpus, 64 training examples per task and
  16 dev examples per language; `sizes` overrides them.
  """
  from rembert_tasks import synthetic as synthetic_tasks  # pylint: disable=g-import-not-at-top
  settings = dict(corpus_sentences=300, pair_train=64, tag_train=64,
                  qa_train=64, eval_examples=16)
  settings.update(sizes)
  manifest = synthetic_tasks.prepare(str(directory), **settings)
  return synthetic_tasks.register_synthetic(
      manifest, prefix=prefix, shuffle_buffer_size=TINY_SHUFFLE_BUFFER)


def released_layout_vocabulary(model_file: str, output_file: str) -> str:
  """A copy of a (>= 337-piece) SentencePiece model in the released layout.

  Same tokenisation as `model_file`, special pieces moved to
  RELEASED_LAYOUT's ids (vocabulary.move_special_pieces).
  """
  return vocabulary.move_special_pieces(model_file, output_file,
                                        RELEASED_LAYOUT)


def write_hf_tokenizer_files(model_file: str, directory) -> pathlib.Path:
  """Writes what the hub's `google/rembert` has for its tokenizer.

  `sentencepiece.model`, `tokenizer_config.json` with the released fields,
  and `tokenizer.json` made by transformers' own RemBertConverter (as the
  hub's was). Needed because transformers 5.x builds RemBertTokenizer from a
  bare `.model` without its `[CLS] a [SEP] b [SEP]` template.
  """
  import json  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  from transformers import RemBertTokenizer  # pylint: disable=g-import-not-at-top
  from transformers.convert_slow_tokenizer import RemBertConverter  # pylint: disable=g-import-not-at-top
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  shutil.copyfile(model_file, directory / vocabulary.VOCABULARY_FILENAME)
  (directory / "tokenizer_config.json").write_text(json.dumps({
      "tokenizer_class": "RemBertTokenizer", "do_lower_case": False,
      "keep_accents": True, "remove_space": True, "bos_token": "[CLS]",
      "eos_token": "[SEP]", "cls_token": "[CLS]", "sep_token": "[SEP]",
      "unk_token": "[UNK]", "pad_token": "[PAD]", "mask_token": "[MASK]"}))
  bare = RemBertTokenizer.from_pretrained(str(directory))
  RemBertConverter(bare).converted().save(str(directory / "tokenizer.json"))
  return directory


class LazyModule:
  """A module imported on first attribute use, skipping the test if absent.

  For torch and transformers (~3 s): every xdist worker collects every test
  module, so a module-level import is paid by workers that never run the
  tests needing it.
  """

  def __init__(self, name: str):
    self._name = name

  def __getattr__(self, attribute):
    if attribute.startswith("__"):
      # pytest's collection asks every module-level object for `__test__`
      # and the like: answering must not import.
      raise AttributeError(attribute)
    return getattr(pytest.importorskip(self._name), attribute)


def shared_data_dir(name: str) -> pathlib.Path:
  """Returns ../shared/data/<name>; fails in CI and skips elsewhere if absent."""
  path = SHARED_DATA / name
  if not path.exists():
    message = f"real test data {path} is missing (expected ../shared beside the repo)"
    if os.environ.get("CI") == "true":
      pytest.fail(message)
    pytest.skip(message)
  return path


def register_random_mlm_task(name: str = "test_random_mlm", vocab_size: int = 97,
                             length: int = 16, num_examples: int = 256,
                             first_weight=None):
  """Registers an in-memory MLM task of already-tokenised random examples.

  It needs no vocabulary or data files, so runner tests stay fast and hermetic.
  With `first_weight`, example i's first position gets loss weight
  `first_weight(i)` (e.g. inf, to poison one example).
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import seqio  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def dataset_fn(split, shuffle_files, seed=0):
    del split, shuffle_files, seed
    rng = np.random.default_rng(0)
    tokens = rng.integers(5, vocab_size, (num_examples, length)).astype(np.int32)
    weights = (rng.random((num_examples, length)) < 0.15).astype(np.float32)
    if first_weight is not None:
      weights[:, 0] = [first_weight(i) for i in range(num_examples)]
    inputs = np.where(weights > 0, 4, tokens).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices({
        "input_tokens": inputs, "token_types": np.zeros_like(inputs),
        "targets": tokens, "weights": weights})

  vocab = seqio.PassThroughVocabulary(vocab_size)
  features = {
      k: seqio.Feature(vocab, add_eos=False,
                       dtype=tf.float32 if k == "weights" else tf.int32)
      for k in ("input_tokens", "token_types", "targets", "weights")}
  if name in seqio.TaskRegistry.names():
    seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(
      name, source=seqio.FunctionDataSource(
          dataset_fn, splits=["train"], num_input_examples={"train": num_examples}),
      preprocessors=[], output_features=features)
  return name


def register_constant_pair_task(name: str, label: int, num_examples: int = 8,
                                length: int = 8, vocab_size: int = 97):
  """Registers an in-memory, already-tokenised pair task whose gold label is
  always `label` (validation split), with the real pair postprocessor and
  accuracy metric.

  A classifier that always predicts `label` scores 100 on it, one that never
  does scores 0: checkpoints with known, different dev scores.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import seqio  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from rembert_t5x import metrics  # pylint: disable=g-import-not-at-top
  from rembert_t5x.data import xtreme_preprocessors as xp  # pylint: disable=g-import-not-at-top

  def dataset_fn(split, shuffle_files, seed=0):
    del split, shuffle_files, seed
    rng = np.random.default_rng(0)
    tokens = rng.integers(5, vocab_size, (num_examples, length)).astype(np.int32)
    labels = np.full((num_examples,), label, np.int32)
    return tf.data.Dataset.from_tensor_slices({
        "input_tokens": tokens, "token_types": np.zeros_like(tokens),
        "label": labels, "targets": labels[:, None]})

  return registry.add_task(
      name, source=seqio.FunctionDataSource(dataset_fn,
                                            splits=["validation"]),
      output_features=xp.pair_output_features(
          seqio.PassThroughVocabulary(vocab_size), 2),
      postprocess_fn=xp.pair_label_postprocessor,
      metric_fns=[metrics.accuracy_metric])


def run_script_user_error(args) -> str:
  """Runs `python ARGS` from the repository root as a user would; asserts
  exit code 2 and exactly one `error: ` line (no traceback); returns it."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
  result = subprocess.run([sys.executable, *map(str, args)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
  lines = [l for l in result.stderr.splitlines()
           if l.startswith("error: ") or "Traceback" in l]
  assert result.returncode == 2, result.stderr[-2000:]
  assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
  return lines[0]
