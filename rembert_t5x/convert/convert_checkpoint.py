r"""Converts RemBERT checkpoints between Hugging Face, TF1 and our format.

  rembert-convert hf-to-t5x --hf_dir=A --output_dir=B \
      [--gin_file=gin_configs/models/paper/rembert.gin] [--vocab_size=N] \
      [--vocab=A/sentencepiece.model]
  rembert-convert t5x-to-hf --checkpoint_dir=B \
      --output_dir=C [--gin_file=...] [--hf_vocab_size=N] [--vocab=...] \
      [--labels=NAME,NAME,... | --task=SEQIO_TASK]
  rembert-convert tf-to-t5x --tf_checkpoint=CKPT \
      --output_dir=B (--config_json=rembert_config.json | --gin_file=...) \
      [--vocab=sentencepiece.model]
  rembert-convert t5x-native --checkpoint_dir=B \
      --output_dir=C [--gin_file=...]
  rembert-convert t5x-native-to-ours --checkpoint_path=C/checkpoint_N \
      --output_dir=B [--gin_file=...]

t5x-native (needs T5X: pip install -e ".[t5x]") writes a pre-training
checkpoint B as T5X's own checkpoint C/checkpoint_0 (the MLM model's train
state, step 0, fresh pretrain_mlm.gin optimizer state), which t5x.train
restores with --gin.INITIAL_CHECKPOINT_PATH="'C/checkpoint_0'".
t5x-native-to-ours (needs T5X) is its inverse: the params of a T5X
checkpoint (a t5x.train MODEL_DIR's checkpoint_N, or the MODEL_DIR for its
latest) as our MODEL_DIR B, which the local runner and the BUCC/Tatoeba
predictions (--pretrained=B) read; --gin_file is needed unless the T5X
MODEL_DIR holds rembert_config.json (t5x-native writes one, t5x.train not).

The vocabulary travels with the weights: hf-to-t5x and tf-to-t5x write the
SentencePiece model (A's sentencepiece.model, or --vocab) into B as
sentencepiece.model, t5x-native and t5x-to-hf copy it on; runs started from
B (or C) use it unless $REMBERT_SPM_PATH is set.

t5x-to-hf writes what the Hugging Face client code loads: the tokenizer
files (AutoTokenizer), the label names of a classification or tagging head
in config.json (--labels, else --task's, else the run's task's from B's
config.gin) and a model card, README.md (rembert_t5x/convert/hf_export.py).

Each command refuses a non-empty output directory unless --overwrite, and,
even with --overwrite, one that is, contains or lies inside one of its inputs
(--overwrite would delete them: checked before any input is read); it writes
the output atomically and prints one JSON line (tensors, parameters, peak
memory).
Bad input ends with one `error: ...` line and exit code 2.
"""

from absl import flags

from rembert_t5x.common import cli
from rembert_t5x.convert import checkpoint_io
from rembert_t5x.convert import t5x_export


def _string(fv, name, text, required=False):
  flags.DEFINE_string(name, None, text, flag_values=fv, required=required)


def _output(fv: flags.FlagValues) -> None:
  _string(fv, "output_dir", "directory to write (atomically)", required=True)
  flags.DEFINE_bool("overwrite", False, "replace a non-empty --output_dir",
                    flag_values=fv)


def _define_hf_to_t5x(fv: flags.FlagValues) -> None:
  _string(fv, "hf_dir", "Hugging Face RemBERT directory", required=True)
  _string(fv, "gin_file", "model gin file to check the HF config against")
  flags.DEFINE_integer("vocab_size", None, "strip padded vocabulary rows "
                       "down to this size", flag_values=fv)
  _string(fv, "vocab", "SentencePiece model to carry (default: the HF "
          "directory's sentencepiece.model)")
  _output(fv)


def _define_t5x_to_hf(fv: flags.FlagValues) -> None:
  _string(fv, "checkpoint_dir", "our MODEL_DIR or checkpoint", required=True)
  _string(fv, "gin_file", "model gin file (default: its rembert_config.json)")
  flags.DEFINE_integer("hf_vocab_size", None, "pad the vocabulary with zero "
                       "rows to this size", flag_values=fv)
  _string(fv, "vocab", "SentencePiece model to export (default: the "
          "MODEL_DIR's sentencepiece.model)")
  flags.DEFINE_list("labels", None, "class or tag names of the head, in id "
                    "order, comma-separated (default: --task's)",
                    flag_values=fv)
  _string(fv, "task", "SeqIO task or mixture the model was fine-tuned on: "
          "its label names (default: the run's, from the MODEL_DIR's "
          "config.gin)")
  _output(fv)


def _define_tf_to_t5x(fv: flags.FlagValues) -> None:
  _string(fv, "tf_checkpoint", "checkpoint prefix, or a directory with a "
          "'checkpoint' file", required=True)
  _string(fv, "config_json", "the checkpoint's rembert_config.json")
  _string(fv, "gin_file", "model gin file (instead of --config_json)")
  flags.DEFINE_integer("vocab_size", None, "strip padded vocabulary rows "
                       "down to this size", flag_values=fv)
  _string(fv, "vocab", "the checkpoint's SentencePiece model (default: a "
          "sentencepiece.model beside it)")
  _output(fv)


def _define_t5x_native(fv: flags.FlagValues) -> None:
  _string(fv, "checkpoint_dir", "our MODEL_DIR or checkpoint (MLM)",
          required=True)
  _string(fv, "gin_file", "model gin file (default: its rembert_config.json)")
  flags.DEFINE_string("optimizer", "adamw", "optimizer state to write "
                      "(adamw: pretrain_mlm.gin's)", flag_values=fv)
  _output(fv)


def _define_t5x_native_to_ours(fv: flags.FlagValues) -> None:
  _string(fv, "checkpoint_path", "T5X checkpoint_N directory or T5X "
          "MODEL_DIR (its latest)", required=True)
  _string(fv, "gin_file", "model gin file (default: rembert_config.json "
          "beside the checkpoint)")
  _output(fv)


def _hf_to_t5x(fv):
  return checkpoint_io.hf_to_t5x(
      fv.hf_dir, fv.output_dir, gin_file=fv.gin_file,
      vocab_size=fv.vocab_size, vocab=fv.vocab, overwrite=fv.overwrite)


def _t5x_to_hf(fv):
  return checkpoint_io.t5x_to_hf(
      fv.checkpoint_dir, fv.output_dir, gin_file=fv.gin_file,
      hf_vocab_size=fv.hf_vocab_size, vocab=fv.vocab, labels=fv.labels,
      task=fv.task, overwrite=fv.overwrite)


def _tf_to_t5x(fv):
  return checkpoint_io.tf_to_t5x(
      fv.tf_checkpoint, fv.output_dir, config_json=fv.config_json,
      gin_file=fv.gin_file, vocab_size=fv.vocab_size, vocab=fv.vocab,
      overwrite=fv.overwrite)


def _t5x_native(fv):
  return t5x_export.t5x_native(
      fv.checkpoint_dir, fv.output_dir, gin_file=fv.gin_file,
      optimizer=fv.optimizer, overwrite=fv.overwrite)


def _t5x_native_to_ours(fv):
  return t5x_export.from_t5x_native(
      fv.checkpoint_path, fv.output_dir, gin_file=fv.gin_file,
      overwrite=fv.overwrite)


COMMANDS = {
    "hf-to-t5x": ("Hugging Face directory -> ours", _define_hf_to_t5x,
                  _hf_to_t5x),
    "t5x-to-hf": ("ours -> Hugging Face directory", _define_t5x_to_hf,
                  _t5x_to_hf),
    "tf-to-t5x": ("original TF1 checkpoint -> ours", _define_tf_to_t5x,
                  _tf_to_t5x),
    "t5x-native": ("ours (MLM) -> T5X checkpoint OUT/checkpoint_0 that "
                   "t5x.train restores (needs T5X)", _define_t5x_native,
                   _t5x_native),
    "t5x-native-to-ours": ("T5X checkpoint (checkpoint_N, or its MODEL_DIR) "
                           "-> ours (t5x.train's Orbax checkpoints need no "
                           "T5X; the older layout does)",
                           _define_t5x_native_to_ours,
                           _t5x_native_to_ours),
}


def main(argv=None) -> None:
  summary = cli.run_command(COMMANDS, argv, doc=__doc__)
  print(summary.to_json())


if __name__ == "__main__":
  main()
