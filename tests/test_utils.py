"""Shared tiny configurations and helpers for the tests."""

import dataclasses
import importlib.util
import os
import pathlib
import stat

import pytest

from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x.data import pieces
from rembert_t5x.data import vocabulary
from rembert_t5x import network
from rembert_tasks import registry
from rembert_tasks import synthetic as synthetic_tasks
from tests import tolerances

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
RELEASED_LAYOUT = pieces.RELEASED_LAYOUT
RELEASED_LAYOUT_IDS = pieces.SpecialIds(
    *(RELEASED_LAYOUT[p] for p in pieces.SPECIAL_PIECES))


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
  shutil.copyfile(model_file, directory / pieces.VOCABULARY_FILENAME)
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
  from rembert_t5x.scoring import metrics  # pylint: disable=g-import-not-at-top
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


def run_python(code: str, timeout: int = 300, **env) -> str:
  """Runs `python -c CODE` in a fresh process from the repository root (the
  environment plus `env`); asserts it succeeds; returns its stdout. For
  checks of what a process imports or registers on its own."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  result = subprocess.run(
      [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
      text=True, timeout=timeout, check=False,
      env=dict(os.environ, PYTHONPATH=str(REPO_ROOT), **env))
  assert result.returncode == 0, result.stderr[-2000:]
  return result.stdout


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


# ----------------------------------------------------------------------------
# Local runs of the tiny model.
# ----------------------------------------------------------------------------


def tiny_run_gin(task: str = "test_random_mlm", *, vocab_size: int = 97,
                 length: int = 16, model: str = "RemBertMLMModel",
                 module: str = "RemBertForMaskedLM", imports=(), bindings=(),
                 **train_arguments) -> str:
  """The gin text of a local run (`python -m rembert_t5x.runner.train`) of
  gin_configs/models/tiny.gin on `task`, MODEL_DIR left to the command line.

  `model` and `module`: the models.* adapter and the network.* module it
  wraps. `imports`: modules the file imports first (a task module);
  `bindings`: more top-level lines. `train_arguments` override or add
  `train.train` arguments (default: 2 steps of batch 8, a checkpoint at 2,
  mesh (1, 1), no progress bar): a string is written as gin text (e.g.
  "%INITIAL_CHECKPOINT_PATH"), anything else with repr; None leaves one out.
  The text ends with a newline, so lines can be appended.
  """
  arguments = dict(train_steps=2, batch_size=8, checkpoint_period=2,
                   mesh_shape=(1, 1), progress_bar=False)
  arguments.update(train_arguments)
  lines = [
      "from __gin__ import dynamic_registration",
      *(f"import {name}" for name in imports),
      "from rembert_t5x import models",
      "from rembert_t5x import network",
      "from rembert_t5x.runner import train",
      "include 'gin_configs/models/tiny.gin'",
      f"VOCAB_SIZE = {vocab_size}",
      "MODEL_DIR = %gin.REQUIRED",
      *bindings,
      f"models.{model}.module = @network.{module}()",
      "train.train:",
      "  model_dir = %MODEL_DIR",
      f"  model = @models.{model}()",
      f"  mixture_or_task_name = {task!r}",
      f"  task_feature_lengths = {{'input_tokens': {length}}}",
      *(f"  {name} = {value if isinstance(value, str) else repr(value)}"
        for name, value in arguments.items() if value is not None),
  ]
  return "\n".join(lines) + "\n"


def write_random_checkpoint(model_dir, kind: str,
                            config: network.RemBertConfig,
                            num_classes=None, vocab_file=None,
                            seed: int = 0) -> pathlib.Path:
  """A MODEL_DIR holding a randomly initialised network; returns its path.

  The params of `models.make_module(kind, config, num_classes)` as step 0
  in the converters' layout (`checkpoint_io.write_orbax_params`), which
  `checkpoints.load_params` and a run's `init_checkpoint` read, beside
  `rembert_config.json` and, given `vocab_file`, the vocabulary as
  `sentencepiece.model`: what a pre-training run leaves, without the run
  (its input pipeline and compiled step cost seconds of CPU) for tests of
  what reads one.
  """
  # Deferred: orbax takes seconds to import, and few test modules write
  # checkpoints.
  import shutil  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from rembert_t5x import configs  # pylint: disable=g-import-not-at-top
  from rembert_t5x import models  # pylint: disable=g-import-not-at-top
  from rembert_t5x.convert import checkpoint_io  # pylint: disable=g-import-not-at-top
  model_dir = pathlib.Path(model_dir)
  module = models.make_module(kind, config, num_classes=num_classes)
  params = module.init(jax.random.PRNGKey(seed),
                       np.zeros((1, 4), np.int32))["params"]
  checkpoint_io.write_orbax_params(
      model_dir, cc.flatten(params).items())
  configs.write_checkpoint_config(model_dir, config)
  if vocab_file:
    shutil.copyfile(vocab_file, model_dir / pieces.VOCABULARY_FILENAME)
  return model_dir


# ----------------------------------------------------------------------------
# A tiny SentencePiece vocabulary (the XTREME task and preprocessor tests).
# ----------------------------------------------------------------------------

TINY_CORPUS = """Angela Merkel spoke in Berlin yesterday .
The cat sat on the mat and looked at the dog .
A dog runs through the park every morning .
Paris is the capital of France .
John Smith works for the United Nations in New York .
Der Hund läuft jeden Morgen durch den Park .
Die Katze sitzt auf der Matte .
Le chat est assis sur le tapis .
Maria sagte , sie wisse nicht , wo Tom sei .
Tom and Mary say they do not want to sing with us anymore .""".splitlines()


def train_tiny_vocab(directory) -> vocabulary.RemBertVocabulary:
  """An 80-piece vocabulary: small enough that words split into pieces."""
  corpus = directory / "corpus.txt"
  corpus.write_text("\n".join(TINY_CORPUS * 3) + "\n", encoding="utf-8")
  path = pieces.train_sentencepiece(
      {"xx": [str(corpus)]}, str(directory / "tiny"), vocab_size=80,
      max_sentences=100, character_coverage=1.0)
  return vocabulary.RemBertVocabulary(path)


# ----------------------------------------------------------------------------
# Model adapters on tiny batches (models_test.py, t5x_trainer_test.py).
# ----------------------------------------------------------------------------

# (rows, length) of `tiny_batch`.
TINY_BATCH_SHAPE = (3, 12)


def tiny_batch(seed: int = 0):
  """(rng, features) of a 3 x 12 batch for TINY_CONFIG, no labels: [CLS]
  first, token types 1 from position 5, row 1 padded from position 9."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  b, l = TINY_BATCH_SHAPE
  rng = np.random.default_rng(seed)
  tokens = rng.integers(5, TINY_CONFIG.vocab_size, (b, l)).astype(np.int32)
  tokens[:, 0] = 2
  segment_ids = np.ones((b, l), np.int32)
  segment_ids[1, 9:] = 0
  tokens[segment_ids == 0] = 0
  token_types = np.zeros((b, l), np.int32)
  token_types[:, 5:] = 1
  positions = np.broadcast_to(np.arange(l, dtype=np.int32), (b, l)).copy()
  return rng, {"input_tokens": tokens, "token_types": token_types,
               "segment_ids": segment_ids, "positions": positions}


def six_row_batch(kind: str):
  """Two `tiny_batch`es stacked, with the labels of `kind`.

  Tagging and MLM rows get very different loss weights (one tagging row has
  none), the case where a mean over one microbatch cannot be right.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  parts = [tiny_batch(seed)[1] for seed in (0, 1)]
  batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
  rng = np.random.default_rng(7)
  b, l = TINY_BATCH_SHAPE
  n = 2 * b
  if kind in ("mlm", "tagging"):
    batch["targets"] = rng.integers(0, 7, (n, l)).astype(np.int32)
    weights = np.zeros((n, l), np.float32)
    for row, count in enumerate([l - 1, 1, 0, 6, 2, 4]):
      weights[row, 1:1 + count] = 1.0
    batch["weights"] = weights * (batch["segment_ids"] > 0)
  elif kind == "pair":
    batch["label"] = rng.integers(0, 3, n).astype(np.int32)
  else:
    batch["start_positions"] = rng.integers(5, 9, n).astype(np.int32)
    batch["end_positions"] = batch["start_positions"] + 1
  return batch


def unpacked_finetune_batch(kind: str, lengths, length: int, seed: int = 0):
  """Fine-tuning examples of `lengths` tokens for TINY_CONFIG, one per row
  of `length`: [CLS] first, token type 1 in the second half, the labels of
  `kind` ("pair", "tagging" with uneven weights, "qa")."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  n = len(lengths)
  batch = {k: np.zeros((n, length), np.int32) for k in
           ("input_tokens", "token_types", "segment_ids", "positions")}
  for i, m in enumerate(lengths):
    batch["input_tokens"][i, :m] = rng.integers(5, TINY_CONFIG.vocab_size, m)
    batch["input_tokens"][i, 0] = 2
    batch["token_types"][i, m // 2:m] = 1
    batch["segment_ids"][i, :m] = 1
    batch["positions"][i, :m] = np.arange(m)
  if kind == "tagging":
    batch["targets"] = rng.integers(0, 7, (n, length)).astype(np.int32)
    batch["weights"] = ((rng.random((n, length)) < 0.6)
                        & (batch["segment_ids"] > 0)).astype(np.float32)
  elif kind == "pair":
    batch["label"] = rng.integers(0, 7, n).astype(np.int32)
  else:
    starts = [int(rng.integers(0, m)) for m in lengths]
    batch["start_positions"] = np.array(starts, np.int32)
    batch["end_positions"] = np.array(
        [min(s + int(rng.integers(0, 3)), m - 1)
         for s, m in zip(starts, lengths)], np.int32)
  return batch


def tiny_model(kind: str):
  """The model adapter of `kind` on TINY_CONFIG (7 classes; MLM with BERT's
  max_predictions_per_seq picking, 5)."""
  from rembert_t5x import models  # pylint: disable=g-import-not-at-top
  if kind == "mlm":
    return models.RemBertMLMModel(network.RemBertForMaskedLM(TINY_CONFIG),
                                  max_predictions_per_seq=5)
  return {"pair": models.RemBertPairClassificationModel,
          "tagging": models.RemBertTaggingModel,
          "qa": models.RemBertQAModel}[kind](
              models.make_module(kind, TINY_CONFIG, num_classes=7))


def jit_loss(model, params, batch):
  """`model.loss_fn(params, batch)` without dropout, as one compiled
  program: run eagerly, each of its ops compiles on its own, seconds a
  call on a CPU for the tiny model (0.4 s jitted)."""
  import jax  # pylint: disable=g-import-not-at-top
  return jax.jit(lambda p, b: model.loss_fn(p, b, None))(params, batch)


def jit_grad(model, params, batch):
  """The gradient of `jit_loss`'s loss with respect to `params`, jitted."""
  import jax  # pylint: disable=g-import-not-at-top
  return jax.jit(jax.grad(lambda p, b: model.loss_fn(p, b, None)[0]))(
      params, batch)


def perturbed(params, scale: float = 0.05, seed: int = 1):
  """`params` plus `scale` times standard normal noise, leaf by leaf, in
  one compiled program: away from the initialiser's zero biases and unit
  scales, so that a mixed-up layer or parameter changes the numbers."""
  import jax  # pylint: disable=g-import-not-at-top

  def add_noise(params):
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    return jax.tree_util.tree_unflatten(treedef, [
        x + scale * jax.random.normal(k, x.shape, x.dtype)
        for x, k in zip(leaves, keys)])
  return jax.jit(add_noise)(params)


# ----------------------------------------------------------------------------
# Weight decay (optimizer_test.py, t5x_trainer_test.py).
# ----------------------------------------------------------------------------


def param_names(tree):
  """{"a/b/c": leaf} of a (frozen or not) parameter tree."""
  import flax  # pylint: disable=g-import-not-at-top
  return {"/".join(k): v for k, v in
          flax.traverse_util.flatten_dict(flax.core.unfreeze(tree)).items()}


def bert_excluded(name: str) -> bool:
  """Whether BERT's optimizer leaves the parameter `name` undecayed."""
  # BERT's optimization.py: a variable is excluded when "LayerNorm",
  # "layer_norm" or "bias" occurs in its name. Ours: every LayerNorm module
  # is named *layer_norm; biases end in bias.
  return name.endswith("bias") or "layer_norm/" in name


def check_only_kernels_decayed(before, after, learning_rate: float,
                               weight_decay: float):
  """`after` is `before` after one zero-gradient step: BERT's excluded
  parameters unchanged, the others decayed (decoupled: p - lr * wd * p)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  before, after = param_names(before), param_names(after)
  for name, value in before.items():
    if bert_excluded(name):
      np.testing.assert_array_equal(after[name], value, err_msg=name)
    else:
      np.testing.assert_allclose(
          after[name], value * (1 - learning_rate * weight_decay),
          rtol=1e-6, err_msg=name)


# ----------------------------------------------------------------------------
# Checkpoint conversion: the recorded TF variables, Hugging Face on random
# weights (network_hf_parity_test.py and the conversion tests).
# ----------------------------------------------------------------------------

TF_VARIABLE_TABLE = (REPO_ROOT / "tests" / "testdata" /
                     "rembert_tf_checkpoint_variables.json")


def recorded_tf_variables(dims=None) -> dict[str, dict[str, tuple[int, ...]]]:
  """The recorded TF variable table at `dims` (default: the real sizes).

  Returns:
    {"encoder": ..., "pooler": ..., "mlm_head": ..., "not_weights": ...}, each
    `{name: shape}`; the encoder includes every layer.
  """
  import json  # pylint: disable=g-import-not-at-top
  table = json.loads(TF_VARIABLE_TABLE.read_text())
  dims = dims or table["dims"]
  shape = lambda symbols: tuple(dims[s] for s in symbols)
  encoder = {n: shape(s) for n, s in table["embeddings"]}
  for i in range(dims["L"]):
    prefix = table["per_layer_prefix"].format(i=i)
    encoder.update({prefix + n: shape(s) for n, s in table["per_layer"]})
  return {
      "encoder": encoder,
      "pooler": {n: shape(s) for n, s in table["pooler"]},
      "mlm_head": {n: shape(s) for n, s in table["mlm_head_assumed"]},
      "not_weights": {n: shape(s) for n, s in table["not_weights"]},
  }


_torch = LazyModule("torch")

# The (batch, length) of `hf_inputs`.
HF_BATCH, HF_LENGTH = 3, 11


def hf_tolerance(theirs) -> float:
  """Absolute tolerance of our float32 outputs against Hugging Face's.

  Two float32 evaluations (XLA's and PyTorch's kernels, in their own
  summation orders) of the same tiny network (TINY_CONFIG and the configs
  derived from it, at HF_LENGTH): each within float32_chain_rtol of the
  exact value over the longest path (the MLM head), so within twice that of
  each other, relative to the outputs' scale (LayerNorm keeps hidden states
  of order one; logits are compared at their own scale). ~1e-4 of the
  scale: a real parity defect (another GELU, a missing projection, a
  transposed kernel) moves outputs by 1e-3 of it or more.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  rtol = tolerances.float32_chain_rtol(tolerances.tiny_network_reductions(
      TINY_CONFIG, HF_LENGTH, ("mlm",), HF_BATCH * HF_LENGTH))
  return rtol * max(float(np.max(np.abs(np.asarray(theirs)))), 1.0)


def hf_config(cfg: network.RemBertConfig, num_labels: int = 2):
  """`cc.hf_config` of `cfg` without dropout, with eager attention."""
  return cc.hf_config(
      dataclasses.replace(cfg, dropout_rate=0.0, classifier_dropout_rate=0.0),
      num_labels=num_labels, attn_implementation="eager")


def randomise_hf(model, seed=0):
  """Draws every parameter at random so biases and LayerNorms matter."""
  gen = _torch.Generator().manual_seed(seed)
  with _torch.no_grad():
    for name, p in model.named_parameters():
      p.copy_(_torch.randn(p.shape, generator=gen) * 0.2)
      if "LayerNorm.weight" in name:
        p.add_(1.0)
  model.eval()
  return model


def hf_inputs(cfg, seed=1):
  """(ids, token types, mask) of HF_BATCH rows of lengths HF_LENGTH, 7, 4."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, cfg.vocab_size, size=(HF_BATCH, HF_LENGTH))
  types = rng.integers(0, 2, size=(HF_BATCH, HF_LENGTH))
  lengths = np.array([HF_LENGTH, 7, 4])
  mask = (np.arange(HF_LENGTH)[None, :] < lengths[:, None]).astype(np.int64)
  ids = ids * mask  # pad id 0 after each sequence's length
  return ids, types, mask


def run_hf(model, ids, types, mask):
  with _torch.no_grad():
    return model(input_ids=_torch.tensor(ids),
                 token_type_ids=_torch.tensor(types),
                 attention_mask=_torch.tensor(mask))


def assert_close_to_hf(ours, theirs, mask=None):
  """Same shape and within `hf_tolerance`, at `mask`'s positions if given."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  ours = np.asarray(ours)
  theirs = np.asarray(theirs)
  assert ours.shape == theirs.shape
  if mask is not None:  # padded positions are not outputs anyone reads
    ours, theirs = ours[mask.astype(bool)], theirs[mask.astype(bool)]
  diff = np.max(np.abs(ours - theirs))
  tol = hf_tolerance(theirs)
  assert diff <= tol, f"max abs difference {diff:.3g} > {tol:.3g}"


# ----------------------------------------------------------------------------
# Gin parses with the real T5X (t5x_runs_test.py, t5x_trainer_test.py,
# xtreme_local_test.py); `clean_gin` in conftest.py clears them after.
# ----------------------------------------------------------------------------

needs_t5x = pytest.mark.skipif(
    importlib.util.find_spec("t5x") is None,
    reason="t5x is not installed (pip install -e '.[t5x]')")


def parse_t5x_gin(monkeypatch, script: str, files, bindings=()):
  """Parses gin files as `python -m t5x.<script>` would (search path '.');
  returns the gin module."""
  import importlib  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  import gin  # pylint: disable=g-import-not-at-top
  import t5x  # pylint: disable=g-import-not-at-top
  main = importlib.import_module(f"t5x.{script}")
  monkeypatch.setitem(sys.modules, "__main__", main)
  monkeypatch.chdir(REPO_ROOT)
  gin.clear_config(clear_constants=True)
  gin.add_config_file_search_path(str(REPO_ROOT))
  gin.add_config_file_search_path(
      os.path.dirname(os.path.dirname(os.path.abspath(t5x.__file__))))
  required = {  # what a user passes on the command line
      "train": ["MODEL_DIR = '/tmp/unused'", "MIXTURE_OR_TASK_NAME = 'unused'",
                "INITIAL_CHECKPOINT_PATH = '/tmp/unused'"],
      "eval": ["CHECKPOINT_PATH = '/tmp/unused'",
               "EVAL_OUTPUT_DIR = '/tmp/unused'"],
      "infer": ["CHECKPOINT_PATH = '/tmp/unused'",
                "INFER_OUTPUT_DIR = '/tmp/unused'"],
  }[script]
  gin.parse_config_files_and_bindings(files, required + list(bindings))
  return gin


def build_gin_model(gin):
  """The model a parsed T5X run binds to its MODEL macro."""
  return gin.query_parameter("MODEL/macro.value").scoped_configurable_fn()


def run_train_process(setup, model_dir, crash_at=None):
  """`python -m rembert_t5x.runner.train` on `setup/run.gin` in a process of
  its own (its task module in `setup`), or with `crash_at` (e.g.
  "save:8", "step:10") tests/crashing_train.py, which kills it there."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [str(setup), str(REPO_ROOT), env.get("PYTHONPATH", "")])
  command = (["-m", "tests.crashing_train", crash_at] if crash_at
             else ["-m", "rembert_t5x.runner.train"])
  return subprocess.run(
      [sys.executable, *command, f"--gin_file={setup / 'run.gin'}",
       f"--gin.MODEL_DIR='{model_dir}'"],
      env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)


def tree_snapshot(root, mtimes: bool = True) -> dict:
  """{relative path: (contents or link target, mtime_ns)} of a whole tree,
  for checking that a failed command changed nothing in it.

  Directories count with their mtime (an entry made and removed again in
  one shows), contents None. `mtimes=False` leaves every mtime out (None):
  what a file holds, not when it was last written.
  """
  tree = {}
  for dirpath, dirnames, filenames in os.walk(root):
    for name in dirnames + filenames:
      path = os.path.join(dirpath, name)
      st = os.lstat(path)
      if stat.S_ISLNK(st.st_mode):
        content = os.readlink(path)
      elif stat.S_ISDIR(st.st_mode):
        content = None
      else:
        content = pathlib.Path(path).read_bytes()
      tree[os.path.relpath(path, root)] = (
          content, st.st_mtime_ns if mtimes else None)
  return tree
