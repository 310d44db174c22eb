r"""XTREME submission folders: predictions as XTREME's `evaluate.py` reads them.

  # The local runner writes them itself, from the checkpoint selected on
  # English dev at the best learning rate, one folder per seed:
  python -m rembert_t5x.experiments.sweep --experiment=table15 --workdir=W \
    --pretrained=M --xtreme_dir=D --submission_dir=OUT [--submission_split=dev]
  # From `t5x.infer` outputs (the last lines `sweep --runner=t5x
  # --submission_dir=OUT` prints run this); --pretrained adds BUCC and
  # Tatoeba from the pre-trained encoder (our MODEL_DIR, as hf-to-t5x wrote):
  python -m rembert_t5x.experiments.submission --xtreme_dir=D --split=test \
    --infer_dirs=W/runs/xnli/lr=1e-05/seed=0/infer_test,... --output_dir=OUT/seed-0 \
    [--pretrained=MODEL_DIR] [--work_dir=OUT/embeddings]
  # Score a dev folder with XTREME's own scorer (labels in the same layout):
  python evaluate.py --prediction_folder=OUT/seed-0 --label_folder=LABELS \
    --output_file=scores.json   # google-research/xtreme

XTREME hides its test labels: Table 16's numbers come from a folder of test
predictions scored by XTREME. `evaluate.py` (google-research/xtreme) opens
`<folder>/<task>/test-<lang>.<suffix>` for every language of every task the
folder holds; the format of each task's file, and the lines of XTREME's
scripts each follows, are in docs/FIDELITY.md ("Submission").

File names say `test-` whichever split was predicted (that is all
`evaluate.py` opens). Split "test" follows XTREME's test files, "dev" its dev
files; XQuAD has one file (its test set, what the sweep reports), TyDiQA-
GoldP's XTREME test set is TyDi's dev set (`tydiqa.goldp.{lang}.dev.json`), so
both splits predict those; Tatoeba has only its test set; BUCC 2018 has dev
and test.

BUCC and Tatoeba need no fine-tuning: each corpus side is embedded by the
pre-trained encoder in a streaming pass that writes its embeddings to disk
in chunks and resumes after an interruption (`runner.embed_corpus`, in
`<submission dir>/embeddings/` unless a work folder is given), and BUCC is
mined in bounded memory (`retrieval_metrics.margin_candidates`), so the test
corpora (~400k sentences a side) are mined whole. The margin threshold of
every BUCC split is the one that is best on the language's dev gold
(docs/FIDELITY.md, "BUCC test predictions"); the manifest records it, the
dev scores, and the split's own scores where it has a gold file (XTREME's
test sets have none: a file, no score).

A folder is complete or not written: every language of every task it holds,
each with as many predictions as its XTREME file has examples (tags: words
per sentence too; QA: every question id), checked before anything is
written into a temporary sibling that is then renamed (`io_utils.
atomic_output_dir`); otherwise one UserError names the task, language and
file. A task the run did not cover (no grid, no retrieval files) is left out
of the folder and listed in its `submission.json` (`evaluate.py` scores the
tasks a folder holds; it reads only subfolders).
"""

import dataclasses
import json
import os
import pathlib
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import flags
import numpy as np
import seqio
import tensorflow as tf

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x.data import qa
from rembert_t5x.data import vocabulary as vocab_lib
from rembert_t5x.data import xtreme_preprocessors as xp
from rembert_t5x.data import xtreme_readers
from rembert_t5x.experiments import xtreme_local
from rembert_t5x import metrics
from rembert_t5x import retrieval_metrics
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import embed_corpus
from rembert_t5x.runner import predict_batches
from rembert_tasks import panx
from rembert_tasks import pawsx
from rembert_tasks import qa as qa_tasks
from rembert_tasks import retrieval
from rembert_tasks import udpos
from rembert_tasks import xnli

PAIR_TASKS = ("xnli", "pawsx")
TAG_TASKS = ("panx", "udpos")
QA_TASKS = ("xquad", "mlqa", "tydiqa")
RETRIEVAL_TASKS = ("bucc2018", "tatoeba")
TASKS = PAIR_TASKS + TAG_TASKS + QA_TASKS + RETRIEVAL_TASKS
SPLITS = ("test", "dev")
MANIFEST = "submission.json"
# Class id -> the label as XTREME's files spell it.
XTREME_LABELS = {
    "xnli": xtreme_readers.XNLI_LABELS,
    "pawsx": tuple(sorted(xtreme_readers.PAWSX_LABEL_IDS,
                          key=xtreme_readers.PAWSX_LABEL_IDS.get)),
}
# Our class / tag names (the tasks' `targets` vocabularies, what t5x.infer
# writes), in id order.
_LABEL_NAMES = {"xnli": xnli.LABELS, "pawsx": pawsx.LABELS,
                "panx": panx.LABELS, "udpos": udpos.LABELS}


def file_name(task: str, lang: str) -> str:
  """`<task>/test-<lang>.<suffix>`, as `evaluate.py` opens it."""
  return f"{task}/test-{lang}.{'json' if task in QA_TASKS else 'tsv'}"


def _check_split(split: str) -> None:
  if split not in SPLITS:
    raise errors.UserError(f"submission split {split!r}: expected one of "
                           f"{list(SPLITS)}")


# Tasks whose submission reads one file whatever the split (module docstring).
_ONE_FILE_SPLIT = {"xquad": "test", "tatoeba": "test", "tydiqa": "validation"}


def seqio_split(task: str, split: str) -> str:
  """The split of our local tasks that reads the file `split` predicts."""
  _check_split(split)
  return _ONE_FILE_SPLIT.get(task, "test" if split == "test" else "validation")


def input_file(xtreme_dir: str, task: str, split: str, lang: str) -> str:
  """The XTREME file whose examples a prediction file follows, line by line.

  BUCC: the source-language sentences; Tatoeba: the English side (XTREME's
  sorted `{lang}-en.en`, else the LASER file `tatoeba.{xxx}-eng.eng`).
  """
  _check_split(split)
  if task in PAIR_TASKS + TAG_TASKS:
    return os.path.join(xtreme_dir, task, f"{split}-{lang}.tsv")
  if task in QA_TASKS:
    key = {"xquad": "xquad_test", "mlqa": f"mlqa_{split}",
           "tydiqa": "tydiqa_dev"}[task]
    candidates = [os.path.join(xtreme_dir, table[key].format(lang=lang))
                  for table in (qa_tasks.LOCAL_FILES, qa_tasks.LOCAL_FILES_OLD)
                  if key in table]
    return qa_tasks.first_existing(candidates)
  if task == "bucc2018":
    return xtreme_readers.bucc_files(xtreme_dir, lang, split)["source"]
  if task == "tatoeba":
    return _tatoeba_files(xtreme_dir, lang)[1]
  raise ValueError(f"unknown XTREME task {task!r}")


def _tatoeba_files(xtreme_dir: str, lang: str) -> Tuple[str, str, bool]:
  """(source file, English file, whether the English side needs XTREME's
  sort): XTREME's `{lang}-en.*` if present, else LASER's files."""
  base = os.path.join(xtreme_dir, "tatoeba", f"{lang}-en")
  if os.path.isfile(f"{base}.en") or lang not in retrieval.TATOEBA_LANGUAGES:
    return f"{base}.{lang}", f"{base}.en", False
  source, english = xtreme_readers.tatoeba_files(
      xtreme_dir, retrieval.TATOEBA_LANGUAGES[lang])
  return source, english, True


# --------------------------------------------------------------------------
# What a file must hold, checking and writing
# --------------------------------------------------------------------------

def expected_examples(xtreme_dir: str, task: str, split: str,
                      lang: str) -> Any:
  """What the prediction file of (task, language) must match.

  Returns:
    pairs: the number of rows; tags: words per sentence; QA: the question
    ids; Tatoeba: the number of English lines; BUCC: (source ids, English
    ids) the pairs may name.

  Raises:
    errors.UserError: the XTREME file is missing or unreadable.
  """
  path = input_file(xtreme_dir, task, split, lang)
  if not os.path.isfile(path):
    raise errors.UserError(f"{task} {lang}: {path}: no such file (the "
                           f"{split} file the predictions follow)")
  try:
    if task in PAIR_TASKS:
      return len(xtreme_readers.read_pair_tsv(
          path, xtreme_readers.XNLI_LABEL_IDS if task == "xnli"
          else xtreme_readers.PAWSX_LABEL_IDS, require_labels=False))
    if task in TAG_TASKS:
      return [len(s["tokens"]) for s in xtreme_readers.read_conll_tags(
          path, _LABEL_NAMES[task], require_labels=False)]
    if task in QA_TASKS:
      return [ex.example_id
              for ex in qa.read_squad_file(path, check_alignment=False)]
    if task == "tatoeba":
      source, english, _ = _tatoeba_files(xtreme_dir, lang)
      return len(xtreme_readers.read_parallel_lines(source, english))
    files = xtreme_readers.bucc_files(xtreme_dir, lang, split)
    return tuple({i for i, _ in xtreme_readers.read_bucc_sentences(
        files[side])} for side in ("source", "target"))
  except ValueError as e:
    raise errors.UserError(f"{task} {lang}: {e}") from e


def check_predictions(task: str, lang: str, predictions: Any,
                      expected: Any, path: str) -> None:
  """Raises a UserError naming task, language and file unless the
  predictions match `expected_examples`."""
  where = f"{task} {lang} ({path})"
  if task in PAIR_TASKS + ("tatoeba",):
    if len(predictions) != expected:
      raise errors.UserError(f"{where}: {len(predictions)} predictions for "
                             f"{expected} examples")
  elif task in TAG_TASKS:
    if len(predictions) != len(expected):
      raise errors.UserError(f"{where}: {len(predictions)} predicted "
                             f"sentences for {len(expected)} sentences")
    for i, (tags, n) in enumerate(zip(predictions, expected)):
      if len(tags) != n:
        raise errors.UserError(f"{where}: sentence {i + 1} has {n} words "
                               f"but {len(tags)} predicted tags")
  elif task in QA_TASKS:
    missing = [i for i in expected if i not in predictions]
    extra = sorted(set(predictions) - set(expected))
    if missing or extra:
      raise errors.UserError(
          f"{where}: {len(missing)} of {len(expected)} questions have no "
          f"answer (first: {missing[:1]}), {len(extra)} answers name no "
          f"question of the file (first: {extra[:1]})")
  else:  # bucc2018
    sources, english = expected
    bad = [p for p in predictions
           if p[0] not in sources or p[1] not in english]
    if bad:
      raise errors.UserError(f"{where}: {len(bad)} mined pairs name ids "
                             f"not in the corpus (first: {bad[0]})")


def render(task: str, predictions: Any) -> str:
  """The file text `evaluate.py`'s reader for `task` reads back."""
  if task in QA_TASKS:
    return json.dumps(dict(predictions), ensure_ascii=False, indent=1) + "\n"
  if task in TAG_TASKS:
    # `read_tag` ends a sentence at each blank line; two in a row would be
    # an empty sentence.
    return "".join("\n".join(tags) + "\n\n" for tags in predictions)
  if task == "bucc2018":
    return "".join(f"{s}\t{t}\n" for s, t in predictions)
  return "".join(f"{p}\n" for p in predictions)


def write_folder(out_dir: str, files: Mapping[Tuple[str, str], str],
                 manifest: Mapping[str, Any], overwrite: bool = True, *,
                 sources: Sequence[io_utils.Source] = (),
                 output_flag: str = "--output_dir") -> None:
  """Writes {(task, language): text} and `submission.json`, atomically.

  Raises:
    errors.UserError: `out_dir` is, contains or lies inside one of `sources`
      (the inputs, as (flag, path)), whatever `overwrite` says.
  """
  with io_utils.atomic_output_dir(out_dir, overwrite=overwrite,
                                  sources=sources,
                                  output_flag=output_flag) as tmp:
    for (task, lang), text in sorted(files.items()):
      path = tmp / file_name(task, lang)
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(text, encoding="utf-8")
    tasks: Dict[str, List[str]] = {}
    for task, lang in sorted(files):
      tasks.setdefault(task, []).append(lang)
    io_utils.atomic_write_json(tmp / MANIFEST, {**manifest, "tasks": tasks},
                               indent=1)


def required_languages(task: str, split: str,
                       languages: Optional[Sequence[str]] = None
                       ) -> List[str]:
  """The languages a complete folder holds for `task` (with `languages`,
  those of them; UD-POS on dev: not kk, th, tl, yo, which have no dev set)."""
  if task == "tatoeba":
    langs = list(retrieval.TATOEBA_LANGUAGES)
  elif task == "bucc2018":
    langs = list(retrieval.BUCC_LANGUAGES)
  else:
    langs = list(xtreme_local.family_languages(task))
    if task == "udpos" and split == "dev":
      langs = [l for l in langs if "validation" in udpos.local_eval_splits(l)]
  return [l for l in langs if languages is None or l in languages]


# --------------------------------------------------------------------------
# Predictions of a model, per example of a file
# --------------------------------------------------------------------------

def _decode(vocabulary: seqio.Vocabulary, output: np.ndarray) -> Any:
  # As seqio's evaluator decodes a prediction before postprocessing it
  # (`LegacyMetric.from_model_output`): per row, or per row of each example.
  if output.ndim <= 1:
    return vocabulary.decode(output.reshape(-1))
  return [vocabulary.decode(row) for row in output]


def predict_examples(model, params, task: seqio.Task, split: str,
                     lengths: Mapping[str, int], batch_size: int = 32
                     ) -> Tuple[List[Mapping[str, Any]], List[Any]]:
  """(task examples, postprocessed predictions), in dataset order.

  The same path as the evaluation (`runner.eval`): the task's dataset, the
  model's feature converter and jitted `predict_batch_with_aux`, seqio's
  decoding through the `targets` vocabulary, the task's postprocessor.
  """
  ds = task.get_dataset(dict(lengths), split=split, shuffle=False,
                        num_epochs=1, use_cached=False)
  examples = list(ds.as_numpy_iterator())
  model_ds = model.FEATURE_CONVERTER_CLS(pack=False)(ds, lengths)
  outputs = dict(predict_batches.make_predict_fn(model, params, batch_size)(
      model_ds.enumerate()))
  vocabulary = task.output_features["targets"].vocabulary
  predictions = [task.postprocess_fn(
      _decode(vocabulary, np.asarray(outputs[i])), example=ex,
      is_target=False) for i, ex in enumerate(examples)]
  return examples, predictions


def _qa_task(template: str, path: str, split: str) -> seqio.Task:
  """A registered QA task's preprocessing over one file whose gold answers
  may be blank (XTREME's hidden sets; `xtreme_readers.squad_source`)."""
  like = seqio.get_mixture_or_task(template)
  return seqio.Task(f"{template}_submission",
                    source=xtreme_readers.squad_source(path, split),
                    output_features=like.output_features,
                    preprocessors=like.preprocessors,
                    postprocess_fn=like.postprocessor, metric_fns=[])


def family_predictions(task: str, predictions: Sequence[Any]) -> Any:
  """Postprocessed per-example predictions -> what `render` writes."""
  if task in PAIR_TASKS:
    return [XTREME_LABELS[task][int(p)] for p in predictions]
  if task in TAG_TASKS:
    return [["O" if t is None else t for t in sentence]
            for sentence in xp.join_sentence_parts(predictions)]
  # QA: per question, its best window's answer (the metric's rule).
  _, answers = metrics.best_window_answers(
      [{"example_id": p["example_id"], "answers": []} for p in predictions],
      predictions)
  return answers


def predict_language(model, params, xtreme_dir: str, task: str, split: str,
                     lang: str, lengths: Mapping[str, int],
                     batch_size: int = 32) -> str:
  """The checked file text of one fine-tuned (task, language)."""
  name = f"{xtreme_local.LOCAL_PREFIX}{task}_{lang}"
  path = input_file(xtreme_dir, task, split, lang)
  expected = expected_examples(xtreme_dir, task, split, lang)
  if task in QA_TASKS:
    seqio_task = _qa_task(name, path, seqio_split(task, split))
  else:
    seqio_task = seqio.get_mixture_or_task(name)
  _, predictions = predict_examples(model, params, seqio_task,
                                    seqio_split(task, split), lengths,
                                    batch_size)
  out = family_predictions(task, predictions)
  check_predictions(task, lang, out, expected, path)
  return render(task, out)


# --------------------------------------------------------------------------
# The local sweep: per run, then per seed
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Request:
  """What `sweep --submission_dir` asks for.

  Attributes:
    out_dir: folders go to `out_dir/seed-<seed>/`.
    xtreme_dir: XTREME's download folder the sweep reads.
    split: "test" or "dev" (files named `test-` either way).
    languages: the sweep's `--languages` (None: all).
    work_dir: the retrieval corpora's embedding passes (`embed_corpus`),
      which a rerun resumes; None: `out_dir/embeddings`.
  """
  out_dir: str
  xtreme_dir: str
  split: str = "test"
  languages: Optional[Tuple[str, ...]] = None
  work_dir: Optional[str] = None

  def __post_init__(self):
    _check_split(self.split)
    if self.languages is not None and "en" not in self.languages:
      # As `xtreme_local.prepare`: English is always evaluated.
      object.__setattr__(self, "languages", ("en", *self.languages))

  @property
  def embeddings_dir(self) -> str:
    return self.work_dir or os.path.join(self.out_dir, "embeddings")


def _run_tasks(spec, request: Request) -> List[Tuple[str, str]]:
  return [(ev.family, lang) for ev in spec.evaluations
          for lang in required_languages(ev.family, request.split,
                                         request.languages)]


def check_inputs(request: Request, specs: Sequence[Any]) -> None:
  """Before any training: every XTREME file the folders will follow exists
  (the grids' families, and BUCC / Tatoeba when their folder is there).

  Raises:
    errors.UserError: naming the first missing file and how many more are.
  """
  wanted = {pair for spec in specs for pair in _run_tasks(spec, request)}
  for task in _retrieval_tasks(request.xtreme_dir):
    wanted.update((task, lang) for lang in required_languages(
        task, request.split, request.languages))
  files = [(task, lang, input_file(request.xtreme_dir, task, request.split,
                                   lang)) for task, lang in sorted(wanted)]
  # BUCC: both sides of the split, and the dev set with its gold (the
  # threshold comes from it).
  for task, lang in sorted(wanted):
    if task == "bucc2018":
      for split in sorted({request.split, "dev"}):
        bucc = xtreme_readers.bucc_files(request.xtreme_dir, lang, split)
        files += [(task, lang, bucc[key]) for key in ("source", "target")
                  + (("gold",) if split == "dev" else ())]
  missing = [(t, l, f) for t, l, f in dict.fromkeys(files)
             if not os.path.isfile(f)]
  if missing:
    task, lang, path = missing[0]
    more = f"; {len(missing) - 1} more are missing" if len(missing) > 1 else ""
    raise errors.UserError(f"{task} {lang}: {path}: no such file (the "
                           f"--submission_split={request.split} folder "
                           f"follows it){more}")


def run_predictions_dir(run_dir: pathlib.Path, split: str) -> pathlib.Path:
  """Where one grid point keeps its checked prediction files."""
  return pathlib.Path(run_dir) / f"submission-{split}"


def write_run_predictions(request: Request, run_dir: pathlib.Path, spec,
                          model, params, lengths: Mapping[str, int],
                          batch_size: int = 32) -> None:
  """Predicts every (family, language) a grid point evaluates on the
  request's split; writes the checked files under `run_predictions_dir`."""
  files = {(task, lang): predict_language(
      model, params, request.xtreme_dir, task, request.split, lang, lengths,
      batch_size) for task, lang in _run_tasks(spec, request)}
  write_folder(str(run_predictions_dir(run_dir, request.split)), files,
               {"split": request.split, "grid": spec.name})


def predict_from_kept(request: Request, run_dir: pathlib.Path, spec, model,
                      record: Mapping[str, Any]) -> None:
  """`write_run_predictions` for a finished grid point from its kept
  checkpoints (`--keep_checkpoints`), at the step selected on English dev.

  Raises:
    errors.UserError: the checkpoints are gone.
  """
  step = record["selection"]["step"]
  model_dir = pathlib.Path(run_dir) / "model"
  step_dirs = (dict(checkpoints.checkpoint_dirs(str(model_dir)))
               if model_dir.is_dir() else {})
  if step not in step_dirs:
    raise errors.UserError(
        f"{run_dir}: finished without {request.split} predictions and its "
        f"selected checkpoint (step {step}) is gone; delete its results.json "
        "to rerun it (--keep_checkpoints keeps checkpoints for later "
        "submissions)")
  # The run's vocabulary (its MODEL_DIR's copy), before any task reads text:
  # a resumed sweep has trained nothing in this process.
  vocab_lib.use_checkpoint_vocabulary(str(model_dir))
  params = checkpoints.load_params_for(model, str(step_dirs[step]))
  write_run_predictions(request, run_dir, spec, model, params,
                        {"input_tokens": spec.length})


def _read_run(request: Request, run_dir: pathlib.Path, spec
              ) -> Dict[Tuple[str, str], str]:
  folder = run_predictions_dir(run_dir, request.split)
  out = {}
  for task, lang in _run_tasks(spec, request):
    path = folder / file_name(task, lang)
    if not path.is_file():
      raise errors.UserError(f"{task} {lang}: {path}: no predictions (rerun "
                             "the sweep with the same --submission_split)")
    out[(task, lang)] = path.read_text(encoding="utf-8")
  return out


def write_sweep_folders(request: Request, runs: Sequence[Tuple], table,
                        config, pretrained: str,
                        log: Callable[[str], None] = print) -> List[str]:
  """One folder per seed: each grid's run at its best learning rate, plus
  BUCC and Tatoeba from the pre-trained encoder (shared by every seed).

  Args:
    request: the submission request.
    runs: per grid point (spec, learning rate, seed, run directory, model,
      results record); a finished point without predictions of the split
      predicts them from its kept checkpoints (`predict_from_kept`).
    table: the sweep's `aggregate` table (its best learning rates).
    config: the network config of `pretrained`.
    pretrained: the pre-trained MODEL_DIR.
    log: progress lines.

  Returns:
    The folders written.
  """
  best = {grid: g["best_learning_rate"] for grid, g in table["grids"].items()}
  by_seed: Dict[int, Dict[Tuple[str, str], str]] = {}
  for spec, lr, seed, run_dir, model, record in runs:
    if float(lr) != best[spec.name]:
      continue
    if not run_predictions_dir(run_dir, request.split).is_dir():
      predict_from_kept(request, run_dir, spec, model, record)
    by_seed.setdefault(seed, {}).update(_read_run(request, run_dir, spec))
  retrieval = retrieval_files(request, pretrained, config, log)
  inputs = [("--xtreme_dir", request.xtreme_dir), ("--pretrained", pretrained),
            *(("run directory", run[3]) for run in runs)]
  written = []
  for seed, files in sorted(by_seed.items()):
    files = {**retrieval.files, **files}
    held = {task for task, _ in files}
    manifest = {
        "split": request.split, "seed": seed, "learning_rates": best,
        "languages": list(request.languages) if request.languages else "all",
        "missing": {t: retrieval.missing.get(t, "not in this sweep's grids")
                    for t in TASKS if t not in held},
        **({"bucc2018": retrieval.bucc} if retrieval.bucc else {})}
    out = os.path.join(request.out_dir, f"seed-{seed}")
    write_folder(out, files, manifest, sources=inputs,
                 output_flag="--submission_dir")
    log(f"{out}: XTREME submission folder ({request.split} predictions; "
        f"tasks {sorted(held)}; not held: {sorted(manifest['missing'])})")
    written.append(out)
  return written


# --------------------------------------------------------------------------
# Retrieval from the pre-trained model (no fine-tuning, as XTREME)
# --------------------------------------------------------------------------

def tatoeba_predictions(encoder: embed_corpus.CorpusEncoder, xtreme_dir: str,
                        lang: str) -> List[int]:
  """Per line of XTREME's sorted English file, the retrieved source line."""
  source_path, english_path, needs_sort = _tatoeba_files(xtreme_dir, lang)
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


def _retrieval_tasks(xtreme_dir: str) -> List[str]:
  """The retrieval tasks whose folder the XTREME download holds."""
  return [t for t in RETRIEVAL_TASKS
          if os.path.isdir(os.path.join(xtreme_dir, t))]


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


def retrieval_files(request: Request, pretrained: str, config=None,
                    log: Callable[[str], None] = print) -> RetrievalFiles:
  """BUCC and Tatoeba files from the pre-trained encoder, as XTREME.

  Each corpus is embedded by the streaming pass (`embed_corpus`) in
  `request.embeddings_dir`, which a rerun resumes; BUCC is mined in bounded
  memory (`retrieval_metrics.margin_candidates`). A task whose folder
  (`bucc2018/`, `tatoeba/`) is absent from the XTREME folder is left out,
  with the reason.

  Args:
    request: the folder's split, languages and embeddings folder.
    pretrained: the pre-trained MODEL_DIR.
    config: its network config (default: its rembert_config.json).
    log: progress lines.
  """
  tasks = _retrieval_tasks(request.xtreme_dir)
  missing = {t: f"no {t}/ folder in {request.xtreme_dir}"
             for t in RETRIEVAL_TASKS if t not in tasks}
  out = RetrievalFiles({}, missing, {})
  if not tasks:
    return out
  encoder = embed_corpus.load_encoder(pretrained, request.embeddings_dir,
                                      config, log)
  for task in tasks:
    for lang in required_languages(task, request.split, request.languages):
      path = input_file(request.xtreme_dir, task, request.split, lang)
      expected = expected_examples(request.xtreme_dir, task, request.split,
                                   lang)
      log(f"{task} {lang}: retrieval with the pre-trained encoder")
      if task == "tatoeba":
        predictions = tatoeba_predictions(encoder, request.xtreme_dir, lang)
      else:
        result = bucc_predictions(encoder, request.xtreme_dir, lang,
                                  request.split)
        predictions = result.pairs
        out.bucc[lang] = result.summary()
        log(f"bucc2018 {lang} {request.split}: {len(result.pairs)} pairs at "
            f"margin threshold {result.threshold:.4f} (the best on dev: F1 "
            f"{result.dev['f1']:.2f}); " + (
                f"F1 {result.scores['f1']:.2f} on its gold"
                if result.scores else "no gold file, no score"))
      check_predictions(task, lang, predictions, expected, path)
      out.files[(task, lang)] = render(task, predictions)
  return out


# --------------------------------------------------------------------------
# T5X: t5x.infer outputs -> a folder
# --------------------------------------------------------------------------

# QA tasks may be the prediction-only ones (`qa_tasks.predict_task_name`).
_INFER_FILE = re.compile(
    r"^(?P<task>rembert_(?:local_)?(?P<family>[a-z]+)_(?:predict_)?"
    r"(?P<lang>[a-z]+))"
    r"-predict(?:_with_aux)?\.jsonl-(?P<shard>\d{5})-of-(?P<shards>\d{5})$")
INFER_GIN = "gin_configs/runs/infer_{family}.gin"


def infer_task(family: str, lang: str) -> str:
  """The local task `t5x.infer` predicts (family, language) with: for QA
  the prediction-only task, which reads XTREME's blanked answers."""
  if family in QA_TASKS:
    return qa_tasks.predict_task_name(xtreme_local.LOCAL_PREFIX, family, lang)
  return f"{xtreme_local.LOCAL_PREFIX}{family}_{lang}"


def _infer_files(infer_dirs: Sequence[str]
                 ) -> Dict[Tuple[str, str], str]:
  """(family, language) -> the one infer output file of that task."""
  found: Dict[Tuple[str, str], str] = {}
  for directory in infer_dirs:
    if not tf.io.gfile.isdir(directory):
      raise errors.UserError(f"--infer_dirs: {directory}: no such directory")
    for name in sorted(tf.io.gfile.listdir(directory)):
      m = _INFER_FILE.match(name)
      if not m or m["family"] not in PAIR_TASKS + TAG_TASKS + QA_TASKS:
        continue
      path = os.path.join(directory, name)
      key = (m["family"], m["lang"])
      if m["shards"] != "00001" or key in found:
        raise errors.UserError(
            f"{m['family']} {m['lang']}: {path}: more than one infer output "
            f"for {m['task']} (also {found.get(key, 'other shards')}); keep "
            "one single-shard run per task")
      found[key] = path
  return found


def _t5x_predictions(task: str, path: str) -> Any:
  """A t5x.infer output (`rembert_t5x.t5x_infer` records) -> `render` input."""
  with tf.io.gfile.GFile(path) as f:
    records = [json.loads(line) for line in f if line.strip()]
  if task in QA_TASKS:
    return {r["id"]: r["prediction"] for r in records}
  if [r.get("index") for r in records] != list(range(len(records))):
    raise errors.UserError(f"{path}: records are not the examples 0..n-1 in "
                           "order (one unsharded t5x.infer run per task)")
  if task in PAIR_TASKS:
    ids = {name: i for i, name in enumerate(_LABEL_NAMES[task])}
    return [XTREME_LABELS[task][ids[r["prediction"]]] for r in records]
  return [["O" if t is None else t for t in r["prediction"]] for r in records]


def from_t5x(infer_dirs: Sequence[str], xtreme_dir: str, split: str,
             output_dir: str, overwrite: bool = False, *,
             pretrained: Optional[str] = None, work_dir: Optional[str] = None,
             log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Writes a folder from `t5x.infer` outputs (gin_configs/runs/infer_*.gin).

  Every family with an output file must have one for each of its languages.
  With `pretrained` (a MODEL_DIR in our layout, e.g. what `hf-to-t5x`
  wrote), BUCC and Tatoeba come from its encoder, as `retrieval_files`.

  Args:
    infer_dirs: t5x.infer INFER_OUTPUT_DIRs.
    xtreme_dir: XTREME's download folder.
    split: "test" or "dev".
    output_dir: the folder to write.
    overwrite: replace an existing folder.
    pretrained: the pre-trained MODEL_DIR for BUCC and Tatoeba, or None.
    work_dir: the retrieval embedding passes (default: `embeddings/` beside
      `output_dir`).
    log: progress lines.

  Returns:
    The manifest written.
  """
  _check_split(split)
  sources = [("--xtreme_dir", xtreme_dir),
             *(("--infer_dirs", d) for d in infer_dirs),
             ("--pretrained", pretrained)]
  io_utils.check_output_dir(output_dir, overwrite, sources=sources)
  request = Request(os.path.dirname(os.path.abspath(output_dir)), xtreme_dir,
                    split, work_dir=work_dir)
  if pretrained:
    check_inputs(request, [])
  found = _infer_files(infer_dirs)
  if not found and not pretrained:
    raise errors.UserError(f"--infer_dirs {list(infer_dirs)}: no t5x.infer "
                           "outputs (<task>-predict.jsonl-00000-of-00001)")
  files = {}
  for task in sorted({t for t, _ in found}):
    for lang in required_languages(task, split):
      if (task, lang) not in found:
        raise errors.UserError(
            f"{task} {lang}: no t5x.infer output "
            f"{infer_task(task, lang)}-predict.jsonl-00000-of-00001 in "
            f"{list(infer_dirs)}: the {task} folder would lack {lang}")
      path = input_file(xtreme_dir, task, split, lang)
      out = _t5x_predictions(task, found[(task, lang)])
      check_predictions(task, lang, out,
                        expected_examples(xtreme_dir, task, split, lang),
                        f"{found[(task, lang)]} vs {path}")
      files[(task, lang)] = render(task, out)
  missing = {t: "no --pretrained (BUCC and Tatoeba embed with the "
             "pre-trained encoder)" for t in RETRIEVAL_TASKS}
  bucc = {}
  if pretrained:
    retrieval = retrieval_files(request, pretrained, log=log)
    files.update(retrieval.files)
    missing, bucc = retrieval.missing, retrieval.bucc
  held = {t for t, _ in files}
  manifest = {"split": split, "infer_dirs": list(infer_dirs),
              "missing": {t: missing.get(t, "no t5x.infer outputs")
                          for t in TASKS if t not in held},
              **({"bucc2018": bucc} if bucc else {})}
  write_folder(output_dir, files, manifest, overwrite=overwrite,
               sources=sources)
  return manifest


def t5x_infer_lines(spec, model_dir: str, model_gin: str, split: str
                    ) -> List[str]:
  """Shell lines: `t5x.infer` of every language a grid evaluates, on
  $BEST (set by the selection line before), into MODEL_DIR/infer_<split>."""
  lines = []
  for ev in spec.evaluations:
    tasks = " ".join(infer_task(ev.family, lang)
                     for lang in required_languages(ev.family, split))
    lines.append(
        f"for t in {tasks}; do python -m t5x.infer --gin_search_paths=. "
        f"--gin_file={model_gin} "
        f"--gin_file={INFER_GIN.format(family=ev.family)} "
        "--gin.CHECKPOINT_PATH=\"'$BEST'\" "
        "--gin.MIXTURE_OR_TASK_NAME=\"'$t'\" "
        f"--gin.INFER_OUTPUT_DIR=\"'{model_dir}/infer_{split}'\" "
        f"--gin.utils.DatasetConfig.split=\"'{seqio_split(ev.family, split)}'\""
        "; done")
  return lines


def t5x_folder_lines(request: Request,
                     runs: Sequence[Tuple[str, float, int, str]]
                     ) -> List[str]:
  """Shell lines: per seed, the `from_t5x` command over its runs' infer
  outputs (`runs`: (grid, learning rate, seed, MODEL_DIR) per grid point).

  Raises:
    errors.UserError: a grid has several learning rates (the best is known
      only from the finished runs: pass it with --learning_rates).
  """
  rates: Dict[str, set] = {}
  for grid, lr, _, _ in runs:
    rates.setdefault(grid, set()).add(lr)
  several = sorted(g for g, r in rates.items() if len(r) > 1)
  if several:
    raise errors.UserError(
        f"--submission_dir with --runner=t5x takes one learning rate per grid "
        f"({several} have several): pass the best (sweep.md) with "
        "--learning_rates")
  by_seed: Dict[int, List[str]] = {}
  for _, _, seed, model_dir in runs:
    by_seed.setdefault(seed, []).append(f"{model_dir}/infer_{request.split}")
  return [" ".join([
      "python", "-m", "rembert_t5x.experiments.submission",
      f"--xtreme_dir={os.path.abspath(request.xtreme_dir)}",
      f"--split={request.split}", "--infer_dirs=" + ",".join(dirs),
      f"--output_dir={request.out_dir.rstrip('/')}/seed-{seed}",
      "--overwrite"]) for seed, dirs in sorted(by_seed.items())]


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_list("infer_dirs", [], "t5x.infer INFER_OUTPUT_DIRs "
                    "(comma-separated)", flag_values=fv)
  flags.DEFINE_string("xtreme_dir", None, "XTREME's download folder",
                      flag_values=fv, required=True)
  flags.DEFINE_enum("split", "test", list(SPLITS), "the split predicted",
                    flag_values=fv)
  flags.DEFINE_string("output_dir", None, "the submission folder",
                      flag_values=fv, required=True)
  flags.DEFINE_bool("overwrite", False, "replace an existing folder",
                    flag_values=fv)
  flags.DEFINE_string("pretrained", None, "BUCC and Tatoeba from this "
                      "pre-trained MODEL_DIR's encoder (our layout, as "
                      "hf-to-t5x writes it)", flag_values=fv)
  flags.DEFINE_string("work_dir", None, "the retrieval corpora's embeddings "
                      "(a rerun resumes; default: embeddings/ beside "
                      "--output_dir)", flag_values=fv)


def _main(fv: flags.FlagValues) -> None:
  manifest = from_t5x(fv.infer_dirs, fv.xtreme_dir, fv.split, fv.output_dir,
                      fv.overwrite, pretrained=fv.pretrained,
                      work_dir=fv.work_dir)
  print(f"{fv.output_dir}: XTREME submission folder ({fv.split}); not held: "
        f"{sorted(manifest['missing'])}")


def main(argv=None) -> None:
  cli.run_main(_main, argv, _define_flags, doc=__doc__)


if __name__ == "__main__":
  main()
