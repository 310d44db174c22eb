"""BUCC 2018 and Tatoeba files from the pre-trained encoder, as XTREME.

They need no fine-tuning: each corpus side is embedded by the pre-trained
encoder in a streaming pass that writes its embeddings to disk in chunks and
resumes after an interruption (`runner.embed_corpus`, in
`<submission dir>/embeddings/` unless a work folder is given), and BUCC is
mined in bounded memory (`retrieval_metrics.margin_candidates`), so the test
corpora (~400k sentences a side) are mined whole. The margin threshold of
every BUCC split is the one that is best on the language's dev gold
(docs/FIDELITY.md, "BUCC test predictions"); the manifest records it, the
dev scores, and the split's own scores where it has a gold file (XTREME's
test sets have none: a file, no score).
"""

import dataclasses
import functools
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from rembert_t5x.data import xtreme_readers
from rembert_t5x.experiments.submission import families
from rembert_t5x.experiments.submission import folder
from rembert_t5x.scoring import retrieval_metrics
from rembert_t5x.runner import embed_corpus


def tatoeba_predictions(encoder: embed_corpus.CorpusEncoder, xtreme_dir: str,
                        lang: str) -> List[int]:
  """Per line of XTREME's sorted English file, the retrieved source line."""
  source_path, english_path, needs_sort = families.tatoeba_files(xtreme_dir,
                                                                 lang)
  pairs = xtreme_readers.read_parallel_lines(source_path, english_path)
  source = encoder.embed(f"tatoeba-{lang}-{lang}", [s for s, _ in pairs])
  english = encoder.embed(f"tatoeba-{lang}-en", [e for _, e in pairs])
  order = list(range(len(pairs)))
  if needs_sort:  # LASER's aligned files: XTREME's order of the English side
    order.sort(key=lambda i: pairs[i][1])
  # At most 1,000 sentences a side: the whole similarity matrix is small.
  similarity = retrieval_metrics.cosine_similarity(english[order], source)
  return [int(i) for i in np.argmax(similarity, axis=1)]


def _bucc_side(encoder: embed_corpus.CorpusEncoder, path: str, name: str
               ) -> Tuple[np.ndarray, List[Optional[str]]]:
  """One side of a BUCC corpus as XTREME mines it: every distinct sentence
  embedded once, in order of first occurrence, with its BUCC id (None for a
  sentence under several ids, which XTREME drops)."""
  rows = xtreme_readers.read_bucc_sentences(path)
  # XTREME's unification (`retrieval_metrics.unify`, as the BUCC metric does
  # it) over row numbers: the first row of each distinct sentence.
  first, ids = retrieval_metrics.unify(
      rows, {i: np.array([i]) for i in range(len(rows))}, path)
  return encoder.embed(name, [rows[i][1] for i in first[:, 0]]), ids


def _bucc_candidates(encoder: embed_corpus.CorpusEncoder, xtreme_dir: str,
                     lang: str, split: str) -> List[Tuple[str, str, float]]:
  """[(source id, English id, margin score)] of one BUCC split, best first."""
  files = xtreme_readers.bucc_files(xtreme_dir, lang, split)
  (source, source_ids), (english, english_ids) = [
      _bucc_side(encoder, files[side], f"bucc2018-{lang}-{split}-{side}")
      for side in ("source", "target")]
  # Blocked exact search: memory bounded whatever the corpus size.
  return [(source_ids[i], english_ids[j], score)
          for i, j, score in retrieval_metrics.margin_candidates(source,
                                                                 english)
          if source_ids[i] is not None and english_ids[j] is not None]


@dataclasses.dataclass(frozen=True)
class BuccResult:
  """The mined pairs of one language's split and how they were chosen.

  Attributes:
    pairs: (source id, English id) scoring at least `threshold`, best first.
    threshold: the margin threshold that is best on the language's dev gold
      (XTREME's `bucc_optimize`), applied to whichever split is mined.
    dev: {"precision", "recall", "f1"} on the dev gold at `threshold`.
    scores: the same on the split's own gold; None without a gold file
      (XTREME deletes the test gold): a file and no metric.
  """
  pairs: List[Tuple[str, str]]
  threshold: float
  dev: Dict[str, float]
  scores: Optional[Dict[str, float]]

  def summary(self) -> Dict[str, Any]:
    """What a folder's manifest records."""
    def f1s(s):
      return None if s is None else {k: round(s[k], 2) for k in
                                     ("precision", "recall", "f1")}
    return {"threshold": self.threshold, "pairs": len(self.pairs),
            "dev": f1s(self.dev), "scores": f1s(self.scores)}


def bucc_predictions(encoder: embed_corpus.CorpusEncoder, xtreme_dir: str,
                     lang: str, split: str) -> BuccResult:
  """Mines one BUCC split at the threshold that is best on the dev gold."""
  dev = _bucc_candidates(encoder, xtreme_dir, lang, "dev")
  dev_scores = retrieval_metrics.bucc_f1(dev, xtreme_readers.read_bucc_gold(
      xtreme_readers.bucc_files(xtreme_dir, lang, "dev")["gold"]))
  threshold = dev_scores["threshold"]
  named = (dev if split == "dev"
           else _bucc_candidates(encoder, xtreme_dir, lang, split))
  gold = xtreme_readers.bucc_files(xtreme_dir, lang, split)["gold"]
  scores = (retrieval_metrics.bucc_f1(
      named, xtreme_readers.read_bucc_gold(gold), threshold)
            if os.path.isfile(gold) else None)
  return BuccResult([(s, t) for s, t, score in named if score >= threshold],
                    threshold, dev_scores, scores)


@dataclasses.dataclass(frozen=True)
class RetrievalFiles:
  """BUCC and Tatoeba files of a folder.

  Attributes:
    files: {(task, language): file text}.
    missing: {task: why the folder does not hold it}.
    bucc: {language: `BuccResult.summary()`}.
  """
  files: Dict[Tuple[str, str], str]
  missing: Dict[str, str]
  bucc: Dict[str, Dict[str, Any]]


def retrieval_files(request: folder.Request, pretrained: str, config=None,
                    log: Callable[[str], None] = print) -> RetrievalFiles:
  """BUCC and Tatoeba files of `request` from the encoder of the MODEL_DIR
  `pretrained` (`config`: its network config, default its
  rembert_config.json), embedded in `request.embeddings_dir` (module
  docstring). A task whose folder (`bucc2018/`, `tatoeba/`) is absent from
  the XTREME folder is left out, with the reason."""
  tasks = folder.retrieval_tasks(request.xtreme_dir)
  missing = {t: f"no {t}/ folder in {request.xtreme_dir}"
             for t in families.RETRIEVAL_TASKS if t not in tasks}
  out = RetrievalFiles({}, missing, {})
  if not tasks:
    return out
  encoder = embed_corpus.load_encoder(pretrained, request.embeddings_dir,
                                      config, log)

  def predict(task: str, lang: str, path: str) -> Any:
    del path  # the encoder reads the task's files itself
    log(f"{task} {lang}: retrieval with the pre-trained encoder")
    if task == "tatoeba":
      return tatoeba_predictions(encoder, request.xtreme_dir, lang)
    result = bucc_predictions(encoder, request.xtreme_dir, lang,
                              request.split)
    out.bucc[lang] = result.summary()
    log(f"bucc2018 {lang} {request.split}: {len(result.pairs)} pairs at "
        f"margin threshold {result.threshold:.4f} (the best on dev: F1 "
        f"{result.dev['f1']:.2f}); " + (
            f"F1 {result.scores['f1']:.2f} on its gold"
            if result.scores else "no gold file, no score"))
    return result.pairs

  for task in tasks:
    for lang in families.required_languages(task, request.split,
                                            request.languages):
      out.files[(task, lang)] = families.checked_file(
          request.xtreme_dir, task, request.split, lang,
          functools.partial(predict, task, lang))
  return out
