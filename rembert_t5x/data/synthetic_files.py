"""The synthetic benchmark on disk: `generate` writes the corpus and the
three tasks of `synthetic` in XTREME's file layouts, with a manifest.

Files written by `generate(workdir, ...)` (all UTF-8, "\\n" line ends):

  corpus/<lang>.txt
      One sentence per line, no header; mostly declarative sentences and
      some questions. Plain monolingual text for SentencePiece and MLM.
  pair/{train,dev,test}-<lang>.tsv  (train only for the training language)
      PAWS-X-like paraphrase identification, XTREME's processed layout:
      `sentence1<TAB>sentence2<TAB>label` per line, **no header**, label "1"
      (same meaning: only the position of the place phrase may differ) or
      "0" (one latent slot changed, for half of them a second one too:
      subject, verb, count, noun, adjective, place or object, or subject and
      object swapped). Exactly balanced.
  tag/{train,dev,test}-<lang>.tsv
      PAN-X-like NER in CoNLL layout: `<lang>:<token><TAB><tag>` per token,
      one blank line after every sentence (the file ends with one). Tags are
      IOB2 over PER, LOC, ORG: O, B-PER, I-PER, B-LOC, I-LOC, B-ORG, I-ORG.
      Tokens are whitespace-free; the sentence-final punctuation is its own
      token tagged O.
  qa/{train,dev,test}-<lang>.json
      SQuAD v1.1 JSON: {"version": "synthetic-1.1", "data": [{"title",
      "paragraphs": [{"context", "qas": [{"id", "question", "answers":
      [{"text", "answer_start"}]}]}]}]}. One article per file; a context is
      2 sentences by default; each question has one answer, a span of the
      context with `context[answer_start:answer_start + len(text)] == text`.
      Question ids are shared across languages (parallel, like XQuAD).
  manifest.json
      {"seed", "languages", "train_language", "sizes", "files"}, where
      "files" mirrors the dict `generate` returns with paths relative to the
      work directory.
"""

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

from rembert_t5x.data import synthetic

def write_corpus(path: str, sentences: Sequence[str]) -> None:
  """Writes one sentence per line."""
  _write_lines(path, sentences)


def write_pair_tsv(path: str, examples: Sequence[Tuple[str, str, int]]):
  """Writes `sentence1<TAB>sentence2<TAB>label` lines, no header."""
  _write_lines(path, [f"{a}\t{b}\t{label}" for a, b, label in examples])


def write_conll(path: str, code: str,
                sentences: Sequence[Sequence[Tuple[str, str]]]) -> None:
  """Writes `<lang>:<token><TAB><tag>` lines, a blank line after sentences."""
  lines = []
  for sentence in sentences:
    lines += [f"{code}:{token}\t{tag}" for token, tag in sentence] + [""]
  _write_lines(path, lines)


def write_squad_json(path: str, squad: Dict) -> None:
  """Writes a SQuAD v1.1 dict as JSON (UTF-8, not ASCII-escaped)."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(squad, f, ensure_ascii=False, indent=1)


def _write_lines(path: str, lines: Sequence[str]) -> None:
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="\n") as f:
    f.writelines(line + "\n" for line in lines)


SPLITS = ("train", "dev", "test")


# `generate`'s default corpus size: sentences (= lines) per language.
CORPUS_SENTENCES = 3000
_EXTENSIONS = {"pair": "tsv", "tag": "tsv", "qa": "json"}


def language_codes(num_languages: int = synthetic.DEFAULT_NUM_LANGUAGES,
                   languages: Optional[Sequence[str]] = None,
                   train_language: str = synthetic.TRAIN_LANGUAGE) -> List[str]:
  """The codes `generate` writes (checked: known, training one included)."""
  codes = list(languages or
               [s.code for s in synthetic.LANGUAGES[:num_languages]])
  unknown = [c for c in codes if c not in synthetic.LANGUAGE_BY_CODE]
  if unknown or train_language not in codes:
    raise ValueError(f"languages {codes} (unknown: {unknown}) must be codes of"
                     f" LANGUAGES and include train_language={train_language}")
  return codes


def file_layout(codes: Sequence[str],
                train_language: str = synthetic.TRAIN_LANGUAGE) -> Dict:
  """Where `generate` writes each file, relative to its workdir.

  Returns:
    {"corpus": {lang: path}, "pair" | "tag" | "qa": {split: {lang: path}}};
    "train" holds only the training language.
  """
  files = {"corpus": {code: f"corpus/{code}.txt" for code in codes}}
  for task, extension in _EXTENSIONS.items():
    files[task] = {
        split: {code: f"{task}/{split}-{code}.{extension}"
                for code in ([train_language] if split == "train" else codes)}
        for split in SPLITS}
  return files


def generate(workdir: str, seed: int = 0,
             num_languages: int = synthetic.DEFAULT_NUM_LANGUAGES,
             languages: Optional[Sequence[str]] = None,
             train_language: str = synthetic.TRAIN_LANGUAGE,
             corpus_sentences: int = CORPUS_SENTENCES,
             pair_train: int = 2000, tag_train: int = 1000,
             qa_train: int = 1500, eval_examples: int = 200,
             qa_sentences_per_context: int = 2) -> Dict:
  """Writes the corpus, the three tasks and manifest.json under `workdir`.

  Args:
    workdir: output directory (created).
    seed: data seed; lexicons do not depend on it.
    num_languages: use the first `num_languages` of `synthetic.LANGUAGES`.
    languages: explicit language codes (overrides `num_languages`).
    train_language: the only language with training splits.
    corpus_sentences: corpus sentences per language.
    pair_train: training pairs.
    tag_train: training sentences for tagging.
    qa_train: training questions.
    eval_examples: examples (pairs, sentences, questions) per dev and per test
      file of every language.
    qa_sentences_per_context: sentences per QA context (2 keeps a context
      plus its question within ~64 pieces of a ~330-piece vocabulary).

  Returns:
    {"corpus": {lang: path}, "pair" | "tag" | "qa": {split: {lang: path}}}
    with absolute paths; "train" holds only the training language.
  """
  codes = language_codes(num_languages, languages, train_language)
  workdir = os.path.abspath(workdir)
  sizes = {"corpus": corpus_sentences, "pair_train": pair_train,
           "tag_train": tag_train, "qa_train": qa_train,
           "eval_examples": eval_examples,
           "qa_sentences_per_context": qa_sentences_per_context,
           "pair_unrelated_fraction": synthetic.PAIR_UNRELATED_FRACTION}
  # Relative paths first: they go into the manifest as they are.
  files = file_layout(codes, train_language)
  for code in codes:
    write_corpus(os.path.join(workdir, files["corpus"][code]),
                 synthetic.make_corpus(code, corpus_sentences, seed))
  writers = {
      "pair": (pair_train, lambda path, code, split, n: write_pair_tsv(
          path, synthetic.make_pair_examples(code, split, n, seed))),
      "tag": (tag_train, lambda path, code, split, n: write_conll(
          path, code, synthetic.make_tag_examples(code, split, n, seed))),
      "qa": (qa_train, lambda path, code, split, n: write_squad_json(
          path, synthetic.make_qa_examples(code, split, n, seed,
                                 qa_sentences_per_context))),
  }
  for task, (train_size, write) in writers.items():
    for split, by_code in files[task].items():
      for code, name in by_code.items():
        write(os.path.join(workdir, name), code, split,
              train_size if split == "train" else eval_examples)
  manifest = {"seed": seed, "languages": codes,
              "train_language": train_language, "sizes": sizes,
              "files": files}
  with open(os.path.join(workdir, "manifest.json"), "w",
            encoding="utf-8") as f:
    json.dump(manifest, f, ensure_ascii=False, indent=1, sort_keys=True)
  return _join_tree(workdir, files)


def _join_tree(root: str, tree):
  if isinstance(tree, dict):
    return {k: _join_tree(root, v) for k, v in tree.items()}
  return os.path.join(root, tree)
