r"""A BUCC test submission's compute: embed both sides, then mine them.

  python benchmarks/bucc_corpus.py --write_lengths /tmp/bucc_lengths.json
  python benchmarks/bucc_corpus.py --lengths_file /tmp/bucc_lengths.json \
      --config gin_configs/models/paper/rembert.gin --sentences 400000
  python benchmarks/bucc_corpus.py --config gin_configs/models/tiny.gin \
      --sentences 2000 --lengths_file /tmp/bucc_lengths.json     # CPU smoke

XTREME's BUCC test corpora hold ~400k sentences a side per language. This
times the two passes a submission makes with our code, on one machine:

1. `runner.embed_corpus.embed_corpus` (what `rembert-embed-corpus` and the
   BUCC evaluation run: length-sorted chunks on disk, batches cut to their
   power-of-two bucket) over `--sentences` sentences a side, with a
   randomly initialised retrieval model of `--config` (layer L/2 + 2 as
   XTREME), in `--dtype`;
2. `scoring.retrieval_metrics.margin_candidates` on the two sides' embeddings
   (exact blocked kNN, ratio margin, k = 4).

Speed depends on the sentence lengths, not their content: token ids are
random, lengths are drawn from a pool of real Wikipedia sentence lengths
(`--write_lengths`: the sentences of XQuAD's contexts in BUCC's languages
that XQuAD has, de, en, ru and zh,
tokenised by the SentencePiece model `finetune_lengths.tokenizer` trains on the
shared data, 8,000 pieces). A vocabulary of 8,000 pieces cuts words into
more pieces than RemBERT's 250,300, so these lengths are, if anything, longer
than a real corpus's: the times are upper estimates. The pool file lets the
timed part run where there is no data and no TensorFlow (a lent GPU).

Prints one JSON line (`--json`) or a table: sentences/s of each side's
embedding pass, the mining time, and the whole submission's time.
"""

import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import dataclasses
import json
import pathlib
import re
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import finetune_lengths  # pylint: disable=g-import-not-at-top
from rembert_t5x import models  # pylint: disable=g-import-not-at-top
from rembert_t5x.runner import embed_corpus  # pylint: disable=g-import-not-at-top
from rembert_t5x.scoring import retrieval_metrics  # pylint: disable=g-import-not-at-top

# A sentence boundary in XQuAD's contexts: after ., !, ? or their CJK/Devanagari
# forms, before white space (or at once after the CJK full stop).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？।])\s*")


# BUCC's languages (de, fr, ru, zh, each with en) that XQuAD has.
BUCC_LANGUAGES = ("de", "en", "ru", "zh")


def write_lengths(path: str, data_dir: pathlib.Path, cache_dir: pathlib.Path,
                  languages=BUCC_LANGUAGES) -> np.ndarray:
  """Token counts ([CLS] s [SEP], cut to embed_corpus.MAX_LENGTH) of the
  sentences of XQuAD's contexts in `languages`; written to `path` as a JSON
  list."""
  from rembert_t5x.data import squad_files  # pylint: disable=g-import-not-at-top
  vocab = finetune_lengths.tokenizer(data_dir, cache_dir)
  sentences = set()
  for f in [data_dir / "xquad" / f"xquad.{l}.json" for l in languages]:
    for ex in squad_files.read_squad_file(str(f), check_alignment=False):
      sentences.update(s.strip() for s in _SENTENCE_END.split(ex.context)
                       if s.strip())
  if not sentences:
    raise SystemExit(f"bucc_corpus: no XQuAD contexts under {data_dir}/xquad; "
                     "pass --data_dir (the folder holding xquad/)")
  lengths = np.minimum(
      np.array([len(vocab.encode(s)) for s in sorted(sentences)]) + 2,
      embed_corpus.MAX_LENGTH)
  pathlib.Path(path).write_text(json.dumps(lengths.tolist()),
                                encoding="utf-8")
  return lengths


def random_corpus(lengths: np.ndarray, vocab_size: int, max_length: int,
                  rng: np.random.Generator) -> embed_corpus.Tokens:
  """`embed_corpus.Tokens` of random ids at the given lengths (cut to
  `max_length`)."""
  lengths = np.minimum(lengths, max_length)
  offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
  flat = rng.integers(5, vocab_size, int(offsets[-1]), dtype=np.int32)
  return embed_corpus.Tokens(flat, offsets, max_length)


@dataclasses.dataclass
class Side:
  name: str
  sentences: int
  tokens: int
  seconds: float


def run(config: str, pool: np.ndarray, sentences: int, dtype: str,
        batch_size: int, k: int, work_dir: pathlib.Path, seed: int = 0
        ) -> dict:
  """Embeds two random corpora of `sentences` and mines them; timings."""
  cfg = dataclasses.replace(common.load_config(config), dtype=dtype)
  model = models.RemBertRetrievalModel(models.make_module("retrieval", cfg))
  rng = np.random.default_rng(seed)
  params = model.get_initial_variables(
      jax.random.PRNGKey(seed),
      {"input_tokens": (1, 8)})["params"]
  sides, embeddings = [], []
  for name in ("source", "target"):
    tokens = random_corpus(
        rng.choice(pool, sentences), cfg.vocab_size,
        min(embed_corpus.MAX_LENGTH, cfg.max_position_embeddings), rng)
    start = time.perf_counter()
    out = embed_corpus.embed_corpus(
        model, params, tokens, str(work_dir / name), model_id=f"random-{seed}",
        batch_size=batch_size, log=lambda line: print(line, file=sys.stderr))
    sides.append(Side(name, len(tokens), int(tokens.lengths().sum()),
                      time.perf_counter() - start))
    embeddings.append(np.asarray(out))
  start = time.perf_counter()
  pairs = retrieval_metrics.margin_candidates(*embeddings, k=k)
  mine_s = time.perf_counter() - start
  embed_s = sum(s.seconds for s in sides)
  return {
      "config": config, "dtype": dtype, "batch_size": batch_size, "k": k,
      "sentences_per_side": sentences, "dim": int(embeddings[0].shape[1]),
      "device": jax.devices()[0].device_kind,
      "mean_tokens": float(np.mean([s.tokens / s.sentences for s in sides])),
      "sides": [dataclasses.asdict(s) for s in sides],
      "sentences_per_s": [s.sentences / s.seconds for s in sides],
      "embed_s": embed_s, "mine_s": mine_s, "total_s": embed_s + mine_s,
      "candidates": len(pairs),
      "jax": jax.__version__,
  }


def table(r: dict) -> str:
  rows = ["| pass | sentences | tokens | seconds | sentences/s |",
          "|---|---|---|---|---|"]
  for s, rate in zip(r["sides"], r["sentences_per_s"]):
    rows.append(f"| embed {s['name']} | {s['sentences']:,} | {s['tokens']:,} "
                f"| {s['seconds']:.1f} | {rate:,.0f} |")
  n = r["sentences_per_side"]
  rows.append(f"| mine {n:,} x {n:,} (k={r['k']}, dim {r['dim']}) | | | "
              f"{r['mine_s']:.1f} | |")
  rows.append(f"| **whole submission** | | | **{r['total_s']:.1f}** | |")
  return (f"{r['config']} ({r['dtype']}) on {r['device']}, batch "
          f"{r['batch_size']}, mean {r['mean_tokens']:.1f} tokens a "
          "sentence\n" + "\n".join(rows))


def main(argv=None) -> None:
  p = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--config", default="gin_configs/models/paper/rembert.gin")
  p.add_argument("--sentences", type=int, default=400_000,
                 help="sentences a side (BUCC's test sides: ~400k)")
  p.add_argument("--dtype", default="bfloat16",
                 help="activation dtype of the embedding pass")
  p.add_argument("--batch_size", type=int, default=embed_corpus.BATCH_SIZE)
  p.add_argument("--k", type=int, default=4)
  p.add_argument("--lengths_file", default=None,
                 help="a pool of sentence lengths (--write_lengths)")
  p.add_argument("--write_lengths", default=None,
                 help="measure nothing: write the length pool to this file")
  p.add_argument("--data_dir", default=str(
      common.REPO_ROOT.parent / "shared" / "data"))
  p.add_argument("--cache_dir", default=str(
      pathlib.Path(tempfile.gettempdir()) / "rembert_finetune_throughput"))
  p.add_argument("--work_dir", default=None,
                 help="where the passes write (default: a temporary folder)")
  p.add_argument("--json", action="store_true")
  a = p.parse_args(argv)
  if a.sentences < 1 or a.batch_size < 1:
    p.error("--sentences and --batch_size must be at least 1")
  if a.write_lengths:
    lengths = write_lengths(a.write_lengths, pathlib.Path(a.data_dir),
                            pathlib.Path(a.cache_dir))
    print(f"wrote {a.write_lengths}: {len(lengths)} sentences, mean "
          f"{lengths.mean():.1f} tokens, median {np.median(lengths):.0f}, "
          f"max {lengths.max()}")
    return
  if not a.lengths_file:
    p.error("--lengths_file is required (write one with --write_lengths)")
  pool = np.asarray(json.loads(
      pathlib.Path(a.lengths_file).read_text(encoding="utf-8")))
  with tempfile.TemporaryDirectory() as tmp:
    r = run(a.config, pool, a.sentences, a.dtype, a.batch_size, a.k,
            pathlib.Path(a.work_dir or tmp))
  print(json.dumps(r) if a.json else table(r), flush=True)


if __name__ == "__main__":
  main()
