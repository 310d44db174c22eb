r"""Converts RemBERT checkpoints between Hugging Face, TF1 and our format.

  python scripts/convert_checkpoint.py hf-to-t5x --hf_dir=A --output_dir=B \
      [--gin_file=gin_configs/models/paper/rembert.gin] [--vocab_size=N] \
      [--vocab=A/sentencepiece.model]
  python scripts/convert_checkpoint.py t5x-to-hf --checkpoint_dir=B \
      --output_dir=C [--gin_file=...] [--hf_vocab_size=N]
  python scripts/convert_checkpoint.py tf-to-t5x --tf_checkpoint=CKPT \
      --output_dir=B (--config_json=rembert_config.json | --gin_file=...) \
      [--vocab=sentencepiece.model]
  python scripts/convert_checkpoint.py t5x-native --checkpoint_dir=B \
      --output_dir=C [--gin_file=...]

t5x-native (needs T5X: pip install -e ".[t5x]") writes a pre-training
checkpoint B as T5X's own checkpoint C/checkpoint_0 (the MLM model's train
state, step 0, fresh pretrain_mlm.gin optimizer state), which t5x.train
restores with --gin.INITIAL_CHECKPOINT_PATH="'C/checkpoint_0'".

The vocabulary travels with the weights: hf-to-t5x and tf-to-t5x write the
SentencePiece model (A's sentencepiece.model, or --vocab) into B as
sentencepiece.model, t5x-native and t5x-to-hf copy it on; runs started from
B (or C) use it unless $REMBERT_SPM_PATH is set.

Each command refuses a non-empty output directory unless --overwrite, writes
it atomically and prints one JSON line (tensors, parameters, peak memory).
Bad input ends with one `error: ...` line and exit code 2.
"""

import argparse

from rembert_t5x.convert import checkpoint_io
from rembert_t5x.runner import cli


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  hf = sub.add_parser("hf-to-t5x", help="Hugging Face directory -> ours")
  hf.add_argument("--hf_dir", required=True)
  hf.add_argument("--gin_file")
  hf.add_argument("--vocab_size", type=int,
                  help="strip padded vocabulary rows down to this size")
  hf.add_argument("--vocab", help="SentencePiece model to carry (default: "
                  "the HF directory's sentencepiece.model)")
  back = sub.add_parser("t5x-to-hf", help="ours -> Hugging Face directory")
  back.add_argument("--checkpoint_dir", required=True)
  back.add_argument("--gin_file")
  back.add_argument("--hf_vocab_size", type=int,
                    help="pad the vocabulary with zero rows to this size")
  tf = sub.add_parser("tf-to-t5x", help="original TF1 checkpoint -> ours")
  tf.add_argument("--tf_checkpoint", required=True,
                  help="checkpoint prefix, or a directory with a "
                  "'checkpoint' file")
  tf.add_argument("--config_json")
  tf.add_argument("--gin_file")
  tf.add_argument("--vocab_size", type=int)
  tf.add_argument("--vocab", help="the checkpoint's SentencePiece model "
                  "(default: a sentencepiece.model beside it)")
  native = sub.add_parser(
      "t5x-native", help="ours (MLM) -> T5X checkpoint OUT/checkpoint_0 "
      "that t5x.train restores (needs T5X)")
  native.add_argument("--checkpoint_dir", required=True)
  native.add_argument("--gin_file")
  native.add_argument("--optimizer", default="adamw",
                      help="optimizer state to write (adamw: pretrain_mlm.gin's)")
  for p in (hf, back, tf, native):
    p.add_argument("--output_dir", required=True)
    p.add_argument("--overwrite", action="store_true")
  return parser


def main(argv=None) -> None:
  args = _parser().parse_args(argv)
  with cli.user_errors():
    if args.command == "hf-to-t5x":
      summary = checkpoint_io.hf_to_t5x(
          args.hf_dir, args.output_dir, gin_file=args.gin_file,
          vocab_size=args.vocab_size, vocab=args.vocab,
          overwrite=args.overwrite)
    elif args.command == "t5x-to-hf":
      summary = checkpoint_io.t5x_to_hf(
          args.checkpoint_dir, args.output_dir, gin_file=args.gin_file,
          hf_vocab_size=args.hf_vocab_size, overwrite=args.overwrite)
    elif args.command == "t5x-native":
      from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
      summary = t5x_export.t5x_native(
          args.checkpoint_dir, args.output_dir, gin_file=args.gin_file,
          optimizer=args.optimizer, overwrite=args.overwrite)
    else:
      summary = checkpoint_io.tf_to_t5x(
          args.tf_checkpoint, args.output_dir, config_json=args.config_json,
          gin_file=args.gin_file, vocab_size=args.vocab_size,
          vocab=args.vocab, overwrite=args.overwrite)
  print(summary.to_json())


if __name__ == "__main__":
  main()
