"""End-to-end checkpoint conversion on tiny random models and fake checkpoints.

HF models with random weights are saved with `save_pretrained` (the hub is
not reachable); the TF1 checkpoint is written with TF's own saver from the
recorded name/shape table (`tests/testdata/rembert_tf_checkpoint_variables.json`)
at tiny sizes, Adam slots and the step included.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x import configs
from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x.convert import checkpoint_io
from rembert_t5x.convert import convert_checkpoint
from rembert_t5x.data import pieces
from rembert_t5x.data import vocabulary
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x.runner import checkpoints
from tests import test_utils

torch = test_utils.LazyModule("torch")
transformers = test_utils.LazyModule("transformers")

jax.config.update("jax_default_matmul_precision", "highest")
CFG = test_utils.TINY_CONFIG
SCRIPT = test_utils.REPO_ROOT / "scripts" / "convert_checkpoint.py"


def _state(model):
  return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _jax_params(params):
  return {"params": jax.tree_util.tree_map(jnp.asarray, params)}


def _assert_encoder_matches_hf(params, hf):
  """Our encoder with the converted `params` gives HF's hidden states."""
  ids, types, mask = test_utils.hf_inputs(CFG)
  hidden = network.RemBertEncoder(CFG).apply(
      _jax_params(params["encoder"]), jnp.asarray(ids), jnp.asarray(types),
      jnp.asarray(mask, jnp.int32))
  test_utils.assert_close_to_hf(
      hidden, test_utils.run_hf(hf, ids, types, mask).last_hidden_state, mask)


def test_hf_mlm_to_ours_and_back(tmp_path):
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(CFG)))
  hf.save_pretrained(tmp_path / "hf")
  summary = checkpoint_io.hf_to_t5x(str(tmp_path / "hf"), str(tmp_path / "ours"))
  assert summary.head == "masked_lm" and summary.tensors == 45

  # Our runner's loader reads it; our forward pass equals HF's.
  params = checkpoints.load_params(str(tmp_path / "ours"))
  ids, types, mask = test_utils.hf_inputs(CFG)
  ours = network.RemBertForMaskedLM(CFG).apply(
      _jax_params(params), jnp.asarray(ids), jnp.asarray(types),
      jnp.asarray(mask, jnp.int32))
  test_utils.assert_close_to_hf(
      ours, test_utils.run_hf(hf, ids, types, mask).logits, mask)

  checkpoint_io.t5x_to_hf(str(tmp_path / "ours"), str(tmp_path / "back"))
  # No vocabulary travelled with this checkpoint: no tokenizer files.
  assert sorted(os.listdir(tmp_path / "back")) == [
      "README.md", "config.json", "model.safetensors"]
  loaded, info = transformers.RemBertForMaskedLM.from_pretrained(
      tmp_path / "back", output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"]
  assert not info["mismatched_keys"]
  before, after = _state(hf), _state(loaded)
  assert set(before) == set(after)
  for name in before:  # bit-identical
    assert torch.equal(before[name], after[name]), name
  # The HF config survives the trip.
  for key in ("vocab_size", "hidden_size", "input_embedding_size",
              "output_embedding_size", "num_hidden_layers", "intermediate_size",
              "num_attention_heads", "layer_norm_eps", "max_position_embeddings"):
    assert getattr(loaded.config, key) == getattr(hf.config, key), key


def test_bare_rembert_model_sharded_initialises_fine_tuning(tmp_path):
  hf = test_utils.randomise_hf(
      transformers.RemBertModel(test_utils.hf_config(CFG)))
  hf.save_pretrained(tmp_path / "hf", max_shard_size="20KB")
  assert (tmp_path / "hf" / "model.safetensors.index.json").exists()
  summary = checkpoint_io.hf_to_t5x(str(tmp_path / "hf"), str(tmp_path / "ours"))
  assert summary.head == "encoder" and summary.skipped == {"pooler": 2}

  params = checkpoints.load_params(str(tmp_path / "ours"))
  _assert_encoder_matches_hf(params, hf)

  # What train(init_checkpoint=...) does with it.
  fresh = models.make_module("pair", CFG, 3).init(
      jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
  merged = models.finetuning_params_from_pretraining(params, fresh, CFG.num_layers)
  np.testing.assert_array_equal(
      merged["encoder"]["layers_1"]["mlp"]["wo"]["kernel"],
      hf.state_dict()["encoder.layer.1.output.dense.weight"].numpy().T)

  checkpoint_io.t5x_to_hf(str(tmp_path / "ours"), str(tmp_path / "back"))
  loaded, info = transformers.RemBertModel.from_pretrained(
      tmp_path / "back", output_loading_info=True)
  assert not info["unexpected_keys"]
  assert info["missing_keys"] == {"pooler.dense.weight", "pooler.dense.bias"}
  for name, value in hf.state_dict().items():
    if not name.startswith("pooler."):
      assert torch.equal(value, loaded.state_dict()[name]), name


def test_pytorch_model_bin_equals_safetensors(tmp_path):
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(CFG)))
  hf.save_pretrained(tmp_path / "st")
  (tmp_path / "bin").mkdir()
  (tmp_path / "bin" / "config.json").write_text(
      (tmp_path / "st" / "config.json").read_text())
  torch.save(hf.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
  checkpoint_io.hf_to_t5x(str(tmp_path / "st"), str(tmp_path / "a"))
  checkpoint_io.hf_to_t5x(str(tmp_path / "bin"), str(tmp_path / "b"))
  a = cc.flatten(checkpoints.load_params(str(tmp_path / "a")))
  b = cc.flatten(checkpoints.load_params(str(tmp_path / "b")))
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])


def test_padded_vocabulary_is_stripped_and_restored(tmp_path):
  hf_cfg = test_utils.hf_config(CFG)
  hf_cfg.vocab_size = 128  # rows 97.. are padding
  hf = test_utils.randomise_hf(transformers.RemBertForMaskedLM(hf_cfg))
  hf.save_pretrained(tmp_path / "hf")
  summary = checkpoint_io.hf_to_t5x(str(tmp_path / "hf"), str(tmp_path / "ours"),
                                    vocab_size=97)
  assert summary.vocab_rows_changed == 31
  params = checkpoints.load_params(str(tmp_path / "ours"))
  assert params["encoder"]["embeddings"]["word_embeddings"]["embedding"].shape == (97, 16)
  assert params["mlm_head"]["decoder"]["kernel"].shape == (24, 97)
  # Logits of the real tokens are unchanged by the stripping.
  ids, types, mask = test_utils.hf_inputs(CFG)
  ours = network.RemBertForMaskedLM(CFG).apply(
      _jax_params(params), jnp.asarray(ids), jnp.asarray(types),
      jnp.asarray(mask, jnp.int32))
  theirs = test_utils.run_hf(hf, ids, types, mask).logits[..., :97]
  test_utils.assert_close_to_hf(ours, theirs, mask)

  checkpoint_io.t5x_to_hf(str(tmp_path / "ours"), str(tmp_path / "back"),
                          hf_vocab_size=128)
  loaded = transformers.RemBertForMaskedLM.from_pretrained(tmp_path / "back")
  assert loaded.config.vocab_size == 128
  for name, value in hf.state_dict().items():
    got = loaded.state_dict()[name]
    if got.shape[:1] == (128,):
      assert torch.equal(got[:97], value[:97]) and not got[97:].any(), name
    else:
      assert torch.equal(got, value), name


def _write_fake_tf_checkpoint(path, hf_model):
  """Writes the recorded TF variables at tiny size, valued from `hf_model`.

  The TF -> HF correspondence used here is the one HF's TF loader applied
  (kernels are HF weights transposed), written out independently of the
  converter's map.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  dims = {"V": CFG.vocab_size, "E_in": CFG.input_embed_dim, "H": CFG.emb_dim,
          "F": CFG.mlp_dim, "P": CFG.max_position_embeddings,
          "T": CFG.type_vocab_size, "E_out": CFG.output_embed_dim,
          "L": CFG.num_layers}
  tables = test_utils.recorded_tf_variables(dims)
  sd = {k: v.numpy() for k, v in hf_model.state_dict().items()}
  rng = np.random.default_rng(3)

  def hf_value(tf_name):
    hf_name = tf_name.replace("bert/", "", 1)
    for tf_part, hf_part in (("/layer_", ".layer."), ("/", ".")):
      hf_name = hf_name.replace(tf_part, hf_part)
    if hf_name.endswith(".gamma"):
      return sd[hf_name[:-len("gamma")] + "weight"]
    if hf_name.endswith(".beta"):
      return sd[hf_name[:-len("beta")] + "bias"]
    if hf_name.endswith(".kernel"):
      return sd[hf_name[:-len("kernel")] + "weight"].T
    if hf_name.endswith("_embeddings"):
      return sd[hf_name + ".weight"]
    return sd[hf_name]

  values = {n: hf_value(n) for n in tables["encoder"]}
  others = {**tables["pooler"], **tables["mlm_head"]}
  values.update({n: rng.normal(size=s).astype(np.float32)
                 for n, s in others.items()})
  for name, value in list(values.items()):
    values[f"{name}/adam_m"] = np.zeros_like(value)
    values[f"{name}/adam_v"] = np.ones_like(value)
  with tf.Graph().as_default():
    variables = [tf.compat.v1.get_variable(n, initializer=v)
                 for n, v in values.items()]
    step = tf.compat.v1.train.get_or_create_global_step()
    saver = tf.compat.v1.train.Saver(variables + [step])
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      saver.save(sess, str(path / "model.ckpt"))
  return len(values) + 1


def test_tf_checkpoint_to_ours(tmp_path):
  hf = test_utils.randomise_hf(
      transformers.RemBertModel(test_utils.hf_config(CFG)))
  (tmp_path / "tf").mkdir()
  count = _write_fake_tf_checkpoint(tmp_path / "tf", hf)
  config_json = tmp_path / "rembert_config.json"
  config_json.write_text(json.dumps(  # the release's config has no model_type
      {k: v for k, v in cc.hf_config_dict(CFG, cc.Head.ENCODER).items()
       if k not in ("model_type", "architectures")}))
  # The release's vocabulary, given with --vocab (special pieces away from
  # 0-4, as in the released layout), travels into the MODEL_DIR.
  corpus = tmp_path / "en.txt"
  corpus.write_text("the cat sat on a mat\nthe dog ran far away\n" * 40)
  vocab = vocabulary.move_special_pieces(
      pieces.train_sentencepiece({"en": [str(corpus)]},
                                     str(tmp_path / "spm"), 24,
                                     character_coverage=1.0),
      str(tmp_path / "released.model"), {"[CLS]": 20, "[SEP]": 21})
  summary = checkpoint_io.tf_to_t5x(str(tmp_path / "tf"), str(tmp_path / "ours"),
                                    config_json=str(config_json), vocab=vocab)
  copied = tmp_path / "ours" / pieces.VOCABULARY_FILENAME
  assert summary.vocabulary == str(copied)
  assert copied.read_bytes() == open(vocab, "rb").read()
  assert summary.tensors == 7 + 16 * CFG.num_layers
  assert summary.skipped == {"optimizer state": 2 * (count - 1) // 3 + 1,
                             "MLM head (output embedding)": 6, "pooler": 2}
  params = checkpoints.load_params(str(tmp_path / "ours"))
  assert set(params) == {"encoder"}
  _assert_encoder_matches_hf(params, hf)


def test_tf_checkpoint_errors(tmp_path):
  # Inputs under in/: an output inside a prefix's directory is refused.
  (tmp_path / "in").mkdir()
  with pytest.raises(errors.UserError, match="needs --config_json"):
    checkpoint_io.tf_to_t5x(str(tmp_path / "in"), str(tmp_path / "o"))
  with pytest.raises(errors.UserError, match=r"TF checkpoint .*: cannot read"):
    checkpoint_io.tf_to_t5x(str(tmp_path / "in" / "nope"), str(tmp_path / "o"),
                            gin_file="gin_configs/models/tiny.gin")
  hf = test_utils.randomise_hf(
      transformers.RemBertModel(test_utils.hf_config(CFG)))
  (tmp_path / "tf").mkdir()
  _write_fake_tf_checkpoint(tmp_path / "tf", hf)
  # tiny.gin is another architecture: the first differing tensor is named.
  with pytest.raises(errors.UserError, match=r"'bert/embeddings/word_embeddings' has shape \(97, 16\), expected \(2000, 32\)"):
    checkpoint_io.tf_to_t5x(str(tmp_path / "tf"), str(tmp_path / "o"),
                            gin_file="gin_configs/models/tiny.gin")
  assert not (tmp_path / "o").exists()


def test_bad_hf_inputs_name_the_file_or_tensor(tmp_path):
  with pytest.raises(errors.UserError, match="no such directory"):
    checkpoint_io.hf_to_t5x(str(tmp_path / "nope"), str(tmp_path / "o"))
  (tmp_path / "empty").mkdir()
  with pytest.raises(errors.UserError, match="no config.json: not a Hugging Face"):
    checkpoint_io.hf_to_t5x(str(tmp_path / "empty"), str(tmp_path / "o"))
  bert = transformers.BertForMaskedLM(transformers.BertConfig(
      vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
      intermediate_size=32))
  bert.save_pretrained(tmp_path / "bert")
  with pytest.raises(errors.UserError, match=r"model_type is 'bert', not 'rembert'"):
    checkpoint_io.hf_to_t5x(str(tmp_path / "bert"), str(tmp_path / "o"))

  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(CFG)))
  hf.save_pretrained(tmp_path / "hf")
  sd = {k: v.numpy() for k, v in hf.state_dict().items()}
  del sd["rembert.encoder.layer.1.attention.self.key.bias"]
  save_file(sd, str(tmp_path / "hf" / "model.safetensors"), {"format": "pt"})
  with pytest.raises(errors.UserError, match=r"missing tensor 'rembert\.encoder\.layer\.1\.attention\.self\.key\.bias'"):
    checkpoint_io.hf_to_t5x(str(tmp_path / "hf"), str(tmp_path / "o"))
  sd["rembert.encoder.layer.1.attention.self.key.bias"] = np.zeros(7, np.float32)
  save_file(sd, str(tmp_path / "hf" / "model.safetensors"), {"format": "pt"})
  with pytest.raises(errors.UserError, match=r"'rembert\.encoder\.layer\.1\.attention\.self\.key\.bias' has shape \(7,\), expected \(32,\)"):
    checkpoint_io.hf_to_t5x(str(tmp_path / "hf"), str(tmp_path / "o"))
  with pytest.raises(errors.UserError, match=r"does not match --gin_file=gin_configs/models/tiny\.gin: input_embed_dim"):
    checkpoint_io.hf_to_t5x(str(tmp_path / "hf"), str(tmp_path / "o"),
                            gin_file="gin_configs/models/tiny.gin")
  (tmp_path / "hf" / "model.safetensors").write_bytes(b"not safetensors")
  with pytest.raises(errors.UserError, match=r"model\.safetensors: not a readable safetensors file"):
    checkpoint_io.hf_to_t5x(str(tmp_path / "hf"), str(tmp_path / "o"))
  assert not (tmp_path / "o").exists()
  assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_output_directory_is_atomic_and_not_overwritten(tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "keep.txt").write_text("mine")
  with pytest.raises(errors.UserError, match="exists and is not empty.*--overwrite"):
    with io_utils.atomic_output_dir(str(out)):
      pass
  # A failure half-way leaves the old directory and no temporary one.
  with pytest.raises(RuntimeError):
    with io_utils.atomic_output_dir(str(out), overwrite=True) as tmp:
      (tmp / "half.bin").write_bytes(b"x")
      raise RuntimeError("killed")
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
  assert (out / "keep.txt").read_text() == "mine"
  with io_utils.atomic_output_dir(str(out), overwrite=True) as tmp:
    (tmp / "new.txt").write_text("new")
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
  assert sorted(os.listdir(out)) == ["new.txt"]


# --- No command writes over its own input -----------------------------------


@pytest.fixture(scope="module")
def inputs_tree(tmp_path_factory):
  """Real tiny inputs, converted once: `hf` (HF), `m` (our MODEL_DIR, from
  hf), links `hflink` -> hf and `mlink` -> m, and stand-ins that are never
  read (the overlap check comes first): a TF prefix `tf/model.ckpt`,
  `cfg/rembert_config.json`, `v/sentencepiece.model`."""
  root = tmp_path_factory.mktemp("inputs")
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(CFG)))
  hf.save_pretrained(root / "hf")
  checkpoint_io.hf_to_t5x(str(root / "hf"), str(root / "m"))
  for name in ("tf/model.ckpt.index", "tf/model.ckpt.data-00000-of-00001",
               "cfg/rembert_config.json", "v/sentencepiece.model"):
    (root / name).parent.mkdir(exist_ok=True)
    (root / name).write_bytes(b"stand-in")
  os.symlink("hf", root / "hflink")  # relative: still valid in a copy
  os.symlink("m", root / "mlink")
  return root


# (command and flags; the error after "error: " and before ": write the
# output to another directory"). Relative paths are from the copied tree,
# the cwd; {W} is its real path.
SELF_OVERWRITES = [
    (["t5x-to-hf", "--checkpoint_dir={W}/m", "--output_dir={W}/m"],
     "--output_dir {W}/m is the input --checkpoint_dir {W}/m"),
    (["t5x-to-hf", "--checkpoint_dir={W}/m", "--output_dir={W}/m",
      "--overwrite"],
     "--output_dir {W}/m is the input --checkpoint_dir {W}/m"),
    (["t5x-to-hf", "--checkpoint_dir=m", "--output_dir=m/checkpoints/0",
      "--overwrite"],
     "--output_dir m/checkpoints/0 lies inside the input --checkpoint_dir m"),
    (["t5x-to-hf", "--checkpoint_dir=m", "--output_dir=m/export",
      "--overwrite"],
     "--output_dir m/export lies inside the input --checkpoint_dir m"),
    (["t5x-to-hf", "--checkpoint_dir={W}/m/checkpoints/0",
      "--output_dir={W}/m", "--overwrite"],
     "--output_dir {W}/m contains the input --checkpoint_dir "
     "{W}/m/checkpoints/0"),
    (["t5x-to-hf", "--checkpoint_dir=mlink", "--output_dir=m", "--overwrite"],
     "--output_dir m is the input --checkpoint_dir mlink (= {W}/m)"),
    (["t5x-to-hf", "--checkpoint_dir=m/", "--output_dir=hf/../m",
      "--overwrite"],
     "--output_dir hf/../m is the input --checkpoint_dir m/"),
    (["t5x-to-hf", "--checkpoint_dir=m", "--vocab=v/sentencepiece.model",
      "--output_dir=v", "--overwrite"],
     "--output_dir v contains the input --vocab v/sentencepiece.model"),
    (["hf-to-t5x", "--hf_dir=hf", "--output_dir=hf", "--overwrite"],
     "--output_dir hf is the input --hf_dir hf"),
    (["hf-to-t5x", "--hf_dir=hf", "--output_dir=hf/ours", "--overwrite"],
     "--output_dir hf/ours lies inside the input --hf_dir hf"),
    (["hf-to-t5x", "--hf_dir={W}/hf", "--output_dir={W}", "--overwrite"],
     "--output_dir {W} contains the input --hf_dir {W}/hf"),
    (["hf-to-t5x", "--hf_dir=hf", "--output_dir=hflink/", "--overwrite"],
     "--output_dir hflink/ (= {W}/hf) is the input --hf_dir hf"),
    (["tf-to-t5x", "--tf_checkpoint=tf/model.ckpt",
      "--config_json=cfg/rembert_config.json", "--output_dir=tf",
      "--overwrite"],
     "--output_dir tf contains the input --tf_checkpoint tf/model.ckpt"),
    (["tf-to-t5x", "--tf_checkpoint=tf/model.ckpt",
      "--config_json=cfg/rembert_config.json", "--output_dir=cfg",
      "--overwrite"],
     "--output_dir cfg contains the input --config_json "
     "cfg/rembert_config.json"),
    # Refused before T5X is needed.
    (["t5x-native", "--checkpoint_dir=m", "--output_dir=m", "--overwrite"],
     "--output_dir m is the input --checkpoint_dir m"),
]


@pytest.mark.parametrize("argv,error", SELF_OVERWRITES)
def test_no_command_writes_over_its_input(inputs_tree, tmp_path, monkeypatch,
                                          capsys, argv, error):
  """The fault probe's `--output_dir=D --overwrite` over the training
  directory D: one error line, exit 2, every input file as it was."""
  work = pathlib.Path(os.path.realpath(tmp_path)) / "w"
  shutil.copytree(inputs_tree, work, symlinks=True)
  monkeypatch.chdir(work)
  before = test_utils.tree_snapshot(work)
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:
    convert_checkpoint.main([a.format(W=work) for a in argv])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip()
  assert err == (f"error: {error.format(W=work)}: write the output to "
                 "another directory")
  assert test_utils.tree_snapshot(work) == before


def test_converter_starts_without_tensorflow():
  """The converter imports the (seqio/TensorFlow) vocabulary module only to
  read a vocabulary: its start-up is ~2 s, not ~10 s."""
  assert pieces.VOCABULARY_FILENAME == pieces.VOCABULARY_FILENAME
  code = ("import sys; import rembert_t5x.convert.checkpoint_io; "
          "print(sorted(m for m in ('tensorflow', 'seqio') if m in sys.modules))")
  assert test_utils.run_python(code, timeout=120).strip() == "[]"


def test_cli_round_trip_and_one_line_errors(tmp_path):
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(CFG)))
  hf.save_pretrained(tmp_path / "hf")
  env = {**os.environ, "PYTHONPATH": str(test_utils.REPO_ROOT)}

  def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env,
                          capture_output=True, text=True, timeout=300,
                          cwd=test_utils.REPO_ROOT)

  ok = run("hf-to-t5x", f"--hf_dir={tmp_path / 'hf'}",
           f"--output_dir={tmp_path / 'ours'}")
  assert ok.returncode == 0, ok.stderr
  summary = json.loads(ok.stdout.strip().splitlines()[-1])
  assert summary["parameters"] == sum(v.numel() for v in hf.state_dict().values())
  again = run("hf-to-t5x", f"--hf_dir={tmp_path / 'hf'}",
              f"--output_dir={tmp_path / 'ours'}")
  assert again.returncode == 2
  assert again.stderr.strip().splitlines()[-1].startswith(
      f"error: output directory {tmp_path / 'ours'} exists and is not empty")
  assert "Traceback" not in again.stderr
  bad = run("t5x-to-hf", f"--checkpoint_dir={tmp_path / 'hf'}",
            f"--output_dir={tmp_path / 'back'}")
  assert bad.returncode == 2 and "Traceback" not in bad.stderr
  assert bad.stderr.strip().splitlines()[-1].startswith(
      f"error: checkpoint {tmp_path / 'hf'}: no checkpoint found")


def test_padded_config_round_trips_hf_exactly(tmp_path):
  """HF (97 tokens) -> ours with VOCAB_PAD_MULTIPLE = 128 (zero rows added,
  same logits) -> HF: bit-identical, and the config file is required."""
  gin_file = tmp_path / "tiny_padded.gin"
  fields = dict(VOCAB_SIZE=97, INPUT_EMBED_DIM=16, EMBED_DIM=32,
                OUTPUT_EMBED_DIM=24, NUM_LAYERS=2, NUM_HEADS=4, HEAD_DIM=8,
                MLP_DIM=64, MAX_POSITION_EMBEDDINGS=40, VOCAB_PAD_MULTIPLE=128)
  gin_file.write_text("include 'gin_configs/architectures/rembert.gin'\n" + "".join(
      f"{k} = {v}\n" for k, v in fields.items()))
  hf = test_utils.randomise_hf(
      transformers.RemBertForMaskedLM(test_utils.hf_config(CFG)))
  hf.save_pretrained(tmp_path / "hf")
  checkpoint_io.hf_to_t5x(str(tmp_path / "hf"), str(tmp_path / "ours"),
                          gin_file=str(gin_file))
  params = checkpoints.load_params(str(tmp_path / "ours"))
  emb = params["encoder"]["embeddings"]["word_embeddings"]["embedding"]
  assert emb.shape == (128, 16) and not np.any(emb[97:])
  padded = network.RemBertConfig(**{**CFG.__dict__, "vocab_pad_multiple": 128})
  ids, types, mask = test_utils.hf_inputs(CFG)
  ours = network.RemBertForMaskedLM(padded).apply(
      _jax_params(params), jnp.asarray(ids), jnp.asarray(types),
      jnp.asarray(mask, jnp.int32))
  test_utils.assert_close_to_hf(
      np.asarray(ours)[..., :97],
      test_utils.run_hf(hf, ids, types, mask).logits, mask)

  checkpoint_io.t5x_to_hf(str(tmp_path / "ours"), str(tmp_path / "back"))
  loaded = transformers.RemBertForMaskedLM.from_pretrained(tmp_path / "back")
  assert loaded.config.vocab_size == 97
  for name, value in hf.state_dict().items():
    np.testing.assert_array_equal(loaded.state_dict()[name].numpy(),
                                  value.numpy(), err_msg=name)

  (tmp_path / "ours" / configs.CHECKPOINT_CONFIG_FILE).unlink()
  with pytest.raises(errors.UserError, match=r"no rembert_config\.json in its MODEL_DIR; pass --gin_file="):
    checkpoint_io.t5x_to_hf(str(tmp_path / "ours"), str(tmp_path / "back2"))
  checkpoint_io.t5x_to_hf(str(tmp_path / "ours"), str(tmp_path / "back2"),
                          gin_file=str(gin_file))


def test_safetensors_reader_matches_safe_open(tmp_path):
  """The streaming reader kept beside `safetensors.safe_open` (which maps
  the file: see checkpoint_io._SafetensorsFile) reads the same tensors."""
  torch = pytest.importorskip("torch")
  from safetensors import safe_open  # pylint: disable=g-import-not-at-top
  from safetensors.torch import save_file  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  tensors = {
      "f32": torch.from_numpy(rng.normal(size=(3, 5)).astype(np.float32)),
      "f16": torch.from_numpy(rng.normal(size=(7,)).astype(np.float16)),
      "bf16": torch.from_numpy(rng.normal(size=(2, 3, 4)).astype(
          np.float32)).to(torch.bfloat16),
      "i64": torch.arange(6, dtype=torch.int64).reshape(2, 3),
      "i32": torch.arange(4, dtype=torch.int32)}
  path = tmp_path / "model.safetensors"
  save_file(tensors, str(path), {"format": "pt"})
  ours = checkpoint_io._SafetensorsFile(path)  # pylint: disable=protected-access
  with safe_open(str(path), framework="pt") as ref:
    assert sorted(ours.names) == sorted(ref.keys())
    for name in ref.keys():
      want = ref.get_tensor(name)
      if want.dtype == torch.bfloat16:  # numpy has none: both upcast exactly
        want = want.float()
      got = ours.get(name)
      assert got.dtype == want.numpy().dtype and got.shape == tuple(want.shape)
      np.testing.assert_array_equal(got, want.numpy())
