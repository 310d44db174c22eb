r"""Input-pipeline throughput (SeqIO MLM) against the model's consumption rate.

  python benchmarks/input_pipeline.py --json

Raw Tatoeba text (`../shared/data/tatoeba`, one file per language) goes
through the registered MLM task exactly as in training: TextLineDataSource ->
SentencePiece tokenisation -> contiguous packing into [CLS] … [SEP] rows ->
15% masking (80/10/10) -> alpha-sampled mixture -> MLMFeatureConverter
(packing) -> batching. The vocabulary is trained on the same files first
(with a small `max_sentences`, not timed). The model side is our jitted
training step at the same config, batch and sequence length, fed a batch the
pipeline produced. The two are timed in alternating blocks in one process.
"""

import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
from rembert_t5x.data import pieces  # pylint: disable=g-import-not-at-top
from rembert_t5x.data import vocabulary as vocab_lib  # pylint: disable=g-import-not-at-top
from rembert_t5x import feature_converters  # pylint: disable=g-import-not-at-top

DEFAULT_DATA = common.REPO_ROOT.parent / "shared" / "data" / "tatoeba"


def tatoeba_files(data_dir: pathlib.Path, max_languages: int = 0):
  """language -> [file]: the non-English side of every tatoeba.xxx-eng pair."""
  if not data_dir.is_dir():
    raise SystemExit(
        f"input_pipeline benchmark: Tatoeba data not found at {data_dir} "
        "(expected files tatoeba.<lang>-eng.<lang>); pass --data_dir.")
  files = {}
  for path in sorted(data_dir.glob("tatoeba.*-eng.*")):
    lang = path.suffix[1:]
    if lang != "eng":
      files[lang] = [str(path)]
  if not files:
    raise SystemExit(f"input_pipeline benchmark: no tatoeba.<lang>-eng.<lang> "
                     f"files in {data_dir}.")
  if max_languages:
    files = dict(list(files.items())[:max_languages])
  return files


def make_iterator(mixture: str, batch: int, seq_len: int, seed: int = 0):
  import seqio  # pylint: disable=g-import-not-at-top
  lengths = {"input_tokens": seq_len, "token_types": seq_len,
             "targets": seq_len, "weights": seq_len}
  ds = seqio.get_mixture_or_task(mixture).get_dataset(
      sequence_length=lengths, split="train", shuffle=True, seed=seed,
      num_epochs=None, use_cached=False, shard_info=None)
  ds = feature_converters.MLMFeatureConverter(pack=True)(ds, lengths)
  return ds.batch(batch, drop_remainder=True).as_numpy_iterator()


def run(config: str = common.DEFAULT_CONFIG, batch: int = 8, seq_len: int = 128,
        data_dir: str = str(DEFAULT_DATA), vocab_size: int = 8000,
        max_sentences: int = 20_000, max_languages: int = 0,
        pipeline_batches: int = 40, warmup_batches: int = 5,
        model_steps: int = 3, rounds: int = 2) -> dict:
  from rembert_tasks import pretraining  # pylint: disable=g-import-not-at-top
  files = tatoeba_files(pathlib.Path(data_dir), max_languages)
  cfg = common.load_config(config)
  with tempfile.TemporaryDirectory() as tmp:
    tick = time.perf_counter()
    model_file = pieces.train_sentencepiece(
        files, os.path.join(tmp, "spm"), vocab_size,
        max_sentences=max_sentences)
    spm_s = time.perf_counter() - tick
    vocab = vocab_lib.RemBertVocabulary(model_file)
    if vocab.vocab_size > cfg.vocab_size:
      raise ValueError(f"vocabulary ({vocab.vocab_size}) exceeds the model's "
                       f"({cfg.vocab_size}); lower --vocab_size")
    name = pretraining.register_local_text_mlm(
        "bench_mlm_tatoeba", files_by_lang=files, vocabulary=vocab)
    it = make_iterator(name, batch, seq_len)

    tick = time.perf_counter()
    batches = [next(it) for _ in range(warmup_batches)]
    first_s = time.perf_counter() - tick
    step = common.OursStep(cfg, batch, seq_len,
                           common.max_predictions(seq_len))
    model_batch = step.put(batches[-1])
    step(model_batch)  # compile
    step(model_batch)

    pipe_times, model_times = [], []
    real_tokens = max_selected = 0
    for _ in range(rounds):
      tick = time.perf_counter()
      for _ in range(pipeline_batches):
        b = next(it)
        real_tokens += int(np.sum(b["segment_ids"] > 0))
        max_selected = max(max_selected, int(b["weights"].sum(-1).max()))
      pipe_times.append(time.perf_counter() - tick)
      for _ in range(model_steps):
        tick = time.perf_counter()
        step(model_batch)
        model_times.append(time.perf_counter() - tick)
    dropped = step.last_metrics()["mlm/dropped_predictions"]

  slots = batch * seq_len
  pipe_rate = rounds * pipeline_batches * slots / sum(pipe_times)
  model_rate = slots / common.median(model_times)
  return {
      "config": config, "batch": batch, "seq_len": seq_len,
      "pipeline_tokens_per_s": pipe_rate,
      "model_tokens_per_s": model_rate,
      "ratio": pipe_rate / model_rate,
      "pipeline_real_tokens_per_s": real_tokens / sum(pipe_times),
      "fill": real_tokens / (rounds * pipeline_batches * slots),
      "max_selected_per_row": max_selected,
      "max_predictions_per_seq": common.max_predictions(seq_len),
      "dropped_predictions_last_step": dropped,
      "languages": len(files), "vocab_size": vocab.vocab_size,
      "spm_train_s": spm_s, "first_batches_s": first_s,
      "pipeline_batches_timed": rounds * pipeline_batches,
      "model_steps_timed": len(model_times),
      "glibc_tunables": common.malloc_setting(),
  }


def main(argv=None):
  p = common.argument_parser(__doc__)
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--data_dir", default=str(DEFAULT_DATA))
  p.add_argument("--vocab_size", type=int, default=8000)
  p.add_argument("--max_sentences", type=int, default=20_000)
  p.add_argument("--max_languages", type=int, default=0, help="0: all")
  p.add_argument("--pipeline_batches", type=int, default=40,
                 help="timed batches per round")
  p.add_argument("--model_steps", type=int, default=3,
                 help="timed steps per round")
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--json", action="store_true")
  a = p.parse_args(argv)
  r = run(a.config, a.batch, a.seq_len, a.data_dir, a.vocab_size,
          a.max_sentences, a.max_languages, a.pipeline_batches,
          model_steps=a.model_steps, rounds=a.rounds)
  if a.json:
    print(json.dumps(r))
  else:
    print(f"config {r['config']}  batch {r['batch']}  seq_len {r['seq_len']}"
          f"  ({r['languages']} Tatoeba languages, vocab {r['vocab_size']})")
    print(f"pipeline  {r['pipeline_tokens_per_s']:12.0f} tokens/s "
          f"({r['fill']:.1%} of slots hold text)")
    print(f"model     {r['model_tokens_per_s']:12.0f} tokens/s")
    print(f"ratio     {r['ratio']:12.1f}")


if __name__ == "__main__":
  common.reexec_with_hugepage_malloc()
  main()
