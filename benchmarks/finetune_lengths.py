"""Real example lengths for `finetune_throughput.py`: pools per head.

The fine-tuning benchmark's speed depends on the examples' lengths, not
their content: its draws sample lengths from pools of real ones. The pools
come from text (`text_pools`: Tatoeba sentences and XQuAD windows under
../shared/data, tokenised by a SentencePiece model trained on them; this
needs seqio and TensorFlow) or from a file `--write_lengths` wrote
(`file_pools`: for a machine with neither, a lent GPU).
"""

import json
import os
import pathlib
import tempfile
from typing import Callable

import numpy as np

from benchmarks import common
from rembert_t5x.data import pieces

SHARED_DATA = common.REPO_ROOT.parent / "shared" / "data"
TOKENIZER_VOCAB = 8000
TOKENIZER_SENTENCES = 4000


def _xquad_files(data_dir: pathlib.Path) -> list[pathlib.Path]:
  files = sorted(data_dir.glob("xquad.*.json"))
  if not files:
    raise SystemExit(f"finetune_throughput: no xquad.<lang>.json files in "
                     f"{data_dir}; pass --data_dir (the folder holding "
                     "tatoeba/ and xquad/).")
  return files


def _tatoeba_files(data_dir: pathlib.Path) -> dict[str, list[str]]:
  """Each Tatoeba language's own side, English from the first pair file."""
  from benchmarks import input_pipeline  # pylint: disable=g-import-not-at-top
  files = input_pipeline.tatoeba_files(data_dir)
  first = sorted(data_dir.glob("tatoeba.*-eng.eng"))[0]
  return dict(files, eng=[str(first)])


def tokenizer(data_dir: pathlib.Path, cache_dir: pathlib.Path,
              vocab_size: int = TOKENIZER_VOCAB,
              max_sentences: int = TOKENIZER_SENTENCES):
  """A SentencePiece vocabulary (`RemBertVocabulary`) trained on Tatoeba
  and XQuAD text.

  Trained once (`pieces.train_sentencepiece`, alpha-sampled lines: Tatoeba
  sentences and XQuAD questions and contexts) and kept in `cache_dir`; an
  existing model with the same settings is reused.
  """
  # The text stack (seqio, TensorFlow) is imported only where text is read:
  # with --lengths_file the timed part runs on a machine with only JAX.
  from rembert_t5x.data import squad_files  # pylint: disable=g-import-not-at-top
  from rembert_t5x.data import vocabulary as vocab_lib  # pylint: disable=g-import-not-at-top
  cache_dir.mkdir(parents=True, exist_ok=True)
  prefix = cache_dir / f"spm_{vocab_size}_{max_sentences}"
  model_file = pathlib.Path(f"{prefix}.model")
  if not model_file.exists():
    files = _tatoeba_files(data_dir / "tatoeba")
    with tempfile.TemporaryDirectory() as tmp:
      for path in _xquad_files(data_dir / "xquad"):
        lines = []
        for ex in squad_files.read_squad_file(str(path), check_alignment=False):
          lines += [ex.question, ex.context]
        text = pathlib.Path(tmp) / f"{path.stem}.txt"
        text.write_text("\n".join(dict.fromkeys(lines)) + "\n",
                        encoding="utf-8")
        files[path.stem] = [str(text)]
      # Another run may train the same model: write aside, then rename.
      own = f"{prefix}.{os.getpid()}"
      pieces.train_sentencepiece(files, own, vocab_size,
                                 max_sentences=max_sentences)
    os.replace(f"{own}.vocab", f"{prefix}.vocab")
    os.replace(f"{own}.model", model_file)
  return vocab_lib.RemBertVocabulary(str(model_file))


def sentence_lengths(vocab, data_dir: pathlib.Path, count: int,
                     rng: np.random.Generator) -> dict[str, np.ndarray]:
  """Token counts of `count` random Tatoeba sentences, per language.

  Returns:
    language -> `[sentences]` int token counts (no special tokens).
  """
  out = {}
  files = _tatoeba_files(data_dir / "tatoeba")
  per_language = max(2, count // len(files))
  for lang, (path,) in sorted(files.items()):
    lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    lines = [l for l in lines if l.strip()]
    picked = rng.choice(len(lines), min(per_language, len(lines)),
                        replace=False)
    out[lang] = np.array([len(vocab.encode(lines[i])) for i in picked])
  return out


def example_lengths(head: str, vocab, data_dir: pathlib.Path, seq_len: int,
                    count: int, rng: np.random.Generator) -> np.ndarray:
  """`[examples]` real token counts of one head's examples, at most seq_len.

  tagging: `[CLS] s [SEP]`; pair: `[CLS] a [SEP] b [SEP]`, two sentences of
  one language (as XNLI's premise and hypothesis); both cut to `seq_len`.
  qa: the windows of `count` random XQuAD questions (all languages).
  """
  from rembert_t5x.data import qa  # pylint: disable=g-import-not-at-top
  from rembert_t5x.data import squad_files  # pylint: disable=g-import-not-at-top
  if head == "qa":
    examples = []
    for path in _xquad_files(data_dir / "xquad"):
      examples += squad_files.read_squad_file(str(path), check_alignment=False)
    lengths = []
    for i in rng.choice(len(examples), count, replace=False):
      windows = qa.make_windows(examples[i], vocab, seq_len,
                                on_misaligned="ignore")
      lengths += [len(w.input_tokens) for w in windows]
    return np.array(lengths)
  by_language = sentence_lengths(vocab, data_dir, count, rng)
  if head == "tagging":
    lengths = np.concatenate(list(by_language.values())) + 2
  else:
    lengths = np.concatenate([n + rng.permutation(n)
                              for n in by_language.values()]) + 3
  return np.minimum(lengths, seq_len)


def text_pools(data_dir: pathlib.Path, cache_dir: pathlib.Path,
               sentences: int, questions: int, seed: int,
               tokenizer_vocab: int = TOKENIZER_VOCAB,
               tokenizer_sentences: int = TOKENIZER_SENTENCES
               ) -> Callable[[str, int], np.ndarray]:
  """Length pools from real text: Tatoeba and XQuAD under `data_dir`,
  tokenised by a SentencePiece model trained on them (cached); per head,
  `sentences` Tatoeba sentences or `questions` XQuAD questions drawn with
  `seed`."""
  for sub in ("tatoeba", "xquad"):
    if not (data_dir / sub).is_dir():
      raise SystemExit(f"finetune_throughput: {data_dir / sub} not found; "
                       "pass --data_dir (the folder holding tatoeba/ and "
                       "xquad/).")
  vocab = tokenizer(data_dir, cache_dir, tokenizer_vocab, tokenizer_sentences)
  return lambda head, seq_len: example_lengths(
      head, vocab, data_dir, seq_len,
      questions if head == "qa" else sentences, np.random.default_rng(seed))


def file_pools(path: str) -> Callable[[str, int], np.ndarray]:
  """Length pools written by `--write_lengths` (read on a machine without
  the data or the text stack): `{head: {seq_len: [lengths]}}`."""
  saved = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))

  def pool(head: str, seq_len: int) -> np.ndarray:
    if head not in saved or str(seq_len) not in saved[head]:
      raise SystemExit(
          f"finetune_throughput: --lengths_file {path} has no pool for "
          f"head {head!r} at {seq_len} tokens (it has "
          f"{ {h: sorted(v) for h, v in saved.items()} }); write one with "
          "--write_lengths and the same --heads/--seq_len/--config")
    return np.asarray(saved[head][str(seq_len)])
  return pool
