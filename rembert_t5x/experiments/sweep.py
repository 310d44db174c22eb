r"""Fine-tuning sweeps with the paper's protocol, aggregated into one table.

  # The offline demo tasks with a pre-trained tiny model (local runner):
  python -m rembert_t5x.experiments.sweep --experiment=demo --workdir=/tmp/sweep \
    --pretrained=/tmp/m --learning_rates=5e-4,1e-3 --seeds=0,1
  # RemBERT (Table 15) over XTREME's download folder instead of TFDS, from a
  # converted checkpoint (README "From the released RemBERT to Table 16"):
  python -m rembert_t5x.experiments.sweep --experiment=table15 --workdir=/tmp/t16 \
    --pretrained=/tmp/rembert --xtreme_dir=xtreme/download
  # The paper's ablation grid (Table 10), as T5X commands for a cluster:
  python -m rembert_t5x.experiments.sweep --experiment=table10 --workdir=gs://b/sweep \
    --runner=t5x --pretrained=gs://b/pretrain/checkpoint_N \
    --model_gin=gin_configs/models/paper/table3_ein128_eout768.gin

Experiments (the grids are data, `EXPERIMENTS` below; every one trains on
English and runs 3 seeds unless --seeds says otherwise): table10, the
ablation models' grids (paper Table 10); table15, RemBERT's (Table 15);
demo, the synthetic pair / tag / qa tasks of the offline demo.

Each grid point fine-tunes for 3 epochs of the training set (steps derived
from its size, `protocol.train_steps`), keeps a checkpoint per epoch,
selects the one with the best English dev score and evaluates every
language on the family's split; the learning rate with the best English dev
score (mean over seeds) is reported, per family and language, as mean ± std
over seeds (docs/FIDELITY.md has the protocol, docs/EXPERIMENTS.md the
tables). `--runner=local` trains here, writes
`DIR/runs/<grid>/lr=<lr>/seed=<seed>/results.json` (a point with one is not
rerun) and DIR/sweep.{json,md,png}; `--runner=t5x` prints the `t5x.train`,
`protocol select` and `t5x.eval` commands of every point instead.
`--xtreme_dir` runs the grids on the `rembert_local_*` tasks over XTREME's
download folder (`xtreme_local`); `--submission_dir` writes XTREME
submission folders (`submission`).
"""

import dataclasses
import json
import math
import os
import pathlib
import shlex
import shutil
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from absl import flags

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x import configs
from rembert_t5x.data import synthetic
from rembert_t5x.experiments import paper_reference
from rembert_t5x.experiments import sweep_report
from rembert_t5x import models
from rembert_t5x import protocol
from rembert_t5x.runner import checkpoints

SEEDS = (0, 1, 2)
REMBERT_GIN = "gin_configs/models/paper/rembert.gin"
# The tiny model the synthetic experiments pre-train (demo, reproduce).
TINY_GIN = "gin_configs/models/tiny.gin"


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """One reported task family of a fine-tuned model.

  Attributes:
    family: short family name ('xquad'); its tasks are named
      `<prefix><family>_<lang>`.
    mixture: SeqIO mixture holding the family's per-language tasks.
    split: the split the paper reports for the family.
    eval_file: T5X run file (None: no T5X run file).
  """
  family: str
  mixture: str
  split: str
  eval_file: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One fine-tuning grid of an experiment.

  Attributes:
    name: short name used in directories ('xnli', 'squad', 'pair', ...).
    kind: model objective: 'pair', 'tagging' or 'qa'.
    num_classes: classes (pair) or tags (tagging); None for QA.
    train_task: SeqIO task trained on (the training language only).
    selection_task: the training language's dev task ('validation' split)
      that checkpoints and learning rates are selected on.
    evaluations: the families reported from this model.
    learning_rates: the grid.
    length: input length (`input_tokens`).
    batch_size: fine-tuning batch size.
    train_steps: fine-tuning steps; None derives them from the training
      set's size: `epochs` at `batch_size` (`protocol.train_steps`).
    epochs: passes over the training set; one checkpoint per epoch is a
      selection candidate.
    train_language: the language trained on and selected on.
    run_file: T5X fine-tuning run file (None: none).
    max_answer_length: QA decoding limit.
  """
  name: str
  kind: str
  num_classes: Optional[int]
  train_task: str
  selection_task: str
  evaluations: tuple
  learning_rates: tuple
  length: int = 128
  batch_size: int = 32
  train_steps: Optional[int] = None
  epochs: int = protocol.EPOCHS
  train_language: str = "en"
  run_file: Optional[str] = None
  max_answer_length: int = 30


def _runs(name: str) -> str:
  return f"gin_configs/runs/{name}.gin"


def _family(family: str, split: str) -> Evaluation:
  return Evaluation(family, f"rembert_{family}_zeroshot", split,
                    _runs(f"eval_{family}"))


def _paper_grids(batch: Callable[[str], int], lrs: Mapping[str, tuple],
                 names: Sequence[str]) -> Dict[str, TaskSpec]:
  """The XTREME fine-tuning grids, one per training set.

  XNLI, PAWS-X, PAN-X, UD-POS and MLQA report their dev sets, XQuAD its only
  split ('test'), TyDiQA-GoldP each language's validation split (paper
  §4: "dev sets unless stated"). The SQuAD-trained model serves XQuAD and
  MLQA; TyDiQA-GoldP trains on its English training set (XTREME's
  `train_qa.sh`). Selection is on the English dev task.
  """
  def grid(name, kind, classes, evaluations, length=128, run_file=None):
    return TaskSpec(
        name, kind, classes, f"rembert_{name}_train_en", f"rembert_{name}_en",
        tuple(_family(*ev) for ev in evaluations), (), length=length,
        run_file=_runs(f"finetune_{run_file or name}"))

  specs = {s.name: s for s in (
      grid("xnli", "pair", 3, [("xnli", "validation")]),
      grid("pawsx", "pair", 2, [("pawsx", "validation")]),
      grid("panx", "tagging", 7, [("panx", "validation")]),
      # 18 = len(rembert_tasks.udpos.LABELS) (tests/sweep_test.py checks).
      grid("udpos", "tagging", 18, [("udpos", "validation")]),
      grid("squad", "qa", None, [("xquad", "test"), ("mlqa", "validation")],
           384, "xquad"),
      grid("tydiqa", "qa", None, [("tydiqa", "validation")], 384))}
  return {n: dataclasses.replace(specs[n], learning_rates=tuple(lrs[n]),
                                 batch_size=batch(n)) for n in names}


# Paper Table 10 (ablation models): batch 32 everywhere. TyDiQA-GoldP is not
# in Table 10's list; it gets the QA grid (our choice).
TABLE10_LRS = {"pawsx": (3e-5, 4e-5, 5e-5), "xnli": (1e-5, 2e-5, 3e-5),
               "squad": (2e-5, 3e-5, 4e-5), "tydiqa": (2e-5, 3e-5, 4e-5),
               "panx": (1e-5, 2e-5, 3e-5, 4e-5, 5e-5)}
# Paper Table 15 (RemBERT): batch 128, NER 64. TyDiQA-GoldP is not in Table
# 15; it gets SQuAD's settings (our choice).
TABLE15_LRS = {"pawsx": (8e-6,), "xnli": (1e-5,), "squad": (9e-6,),
               "udpos": (3e-5,), "panx": (8e-6,), "tydiqa": (9e-6,)}
TABLE15_BATCH = {"panx": 64}

EXPERIMENTS: Dict[str, Dict[str, TaskSpec]] = {
    "table10": _paper_grids(lambda name: 32, TABLE10_LRS,
                            ("pawsx", "xnli", "squad", "tydiqa", "panx")),
    "table15": _paper_grids(lambda name: TABLE15_BATCH.get(name, 128),
                            TABLE15_LRS, ("pawsx", "xnli", "squad", "tydiqa",
                                          "udpos", "panx")),
}


def demo_tasks(prefix: str = "rembert_synthetic_",
               train_steps: Optional[int] = None) -> Dict[str, TaskSpec]:
  """The synthetic tasks of the offline demo (`rembert_tasks.synthetic`).

  Fixed step counts (the demo's tuned budget), the same selection and
  per-family evaluation as the paper's grids, on the dev sets. The one home
  of the synthetic families' objectives and classes, and of the input
  lengths `reproduce` measured its results with (the demo's rows are
  shorter, to fit its data: `demo.TASKS`); QA's windows and answer limit
  are the tasks' (`synthetic.QA_SETTINGS`).
  """
  lang, qa = synthetic.TRAIN_LANGUAGE, synthetic.QA_SETTINGS

  def spec(name, kind, classes, lrs, length, steps, **kw):
    return TaskSpec(
        name, kind, classes, f"{prefix}{name}_train", f"{prefix}{name}_{lang}",
        (Evaluation(name, f"{prefix}{name}_zeroshot", "validation"),), lrs,
        length, 32, steps, train_language=lang, **kw)

  specs = (
      spec("pair", "pair", 2, (5e-4, 1e-3), 64, 300),
      spec("tag", "tagging", len(synthetic.TAGS), (2e-4, 5e-4), 64, 200),
      spec("qa", "qa", None, (2e-4, 5e-4), qa["max_seq_length"], 200,
           max_answer_length=qa["max_answer_length"]),
  )
  if train_steps:
    specs = tuple(dataclasses.replace(s, train_steps=train_steps) for s in specs)
  return {s.name: s for s in specs}


def experiment_tasks(name: str) -> Dict[str, TaskSpec]:
  if name == "demo":
    return demo_tasks()
  if name not in EXPERIMENTS:
    raise errors.UserError(f"unknown experiment {name!r}: expected one of "
                        f"{sorted(EXPERIMENTS) + ['demo']}")
  return dict(EXPERIMENTS[name])


@dataclasses.dataclass(frozen=True)
class GridPoint:
  task: TaskSpec
  learning_rate: float
  seed: int

  @property
  def key(self) -> str:
    return f"{self.task.name}/lr={sweep_report.format_lr(self.learning_rate)}/seed={self.seed}"


def expand_grid(tasks: Mapping[str, TaskSpec],
                learning_rates: Optional[Sequence[float]] = None,
                seeds: Sequence[int] = SEEDS) -> List[GridPoint]:
  """Every (task, learning rate, seed); `learning_rates` overrides the grids."""
  return [GridPoint(t, lr, s) for t in tasks.values()
          for lr in (learning_rates or t.learning_rates) for s in seeds]


# --------------------------------------------------------------------------
# Runners
# --------------------------------------------------------------------------

def results_path(workdir: str, point: GridPoint) -> pathlib.Path:
  return pathlib.Path(workdir) / "runs" / point.key / "results.json"


def make_model(spec: TaskSpec, config):
  """The T5X-style model class of a task, over `config`."""
  return models.make_model(spec.kind, config, spec.num_classes,
                           max_answer_length=spec.max_answer_length)


def resolve_steps(spec: TaskSpec) -> int:
  """The grid's fine-tuning steps: explicit, or `epochs` of its training set
  at its batch size (`protocol.train_steps`)."""
  if spec.train_steps:
    return spec.train_steps
  return protocol.train_steps(spec.train_task, spec.batch_size, spec.epochs)


def checkpoint_period(spec: TaskSpec, steps: int) -> int:
  """One checkpoint per epoch: each is a selection candidate."""
  return max(1, math.ceil(steps / spec.epochs))


def _in_family(task_name: str, family: str) -> bool:
  return protocol.task_family(task_name).rsplit("_", 1)[-1] == family


def run_point(workdir: str, point: GridPoint, config, pretrained: str,
              keep_checkpoints: bool = False, request=None) -> Dict[str, Any]:
  """Fine-tunes one grid point, selects its checkpoint on English dev,
  evaluates every family with it; writes its results.json (and with a
  `submission.Request`, its predictions of the request's split)."""
  # Deferred: TensorFlow and seqio, +5-7 s CPU (sweep alone: 3 s; measured).
  from rembert_t5x.runner import eval as eval_lib  # pylint: disable=g-import-not-at-top
  from rembert_t5x.runner import jobs  # pylint: disable=g-import-not-at-top
  from rembert_t5x.runner import train as runner_train  # pylint: disable=g-import-not-at-top

  spec = point.task
  path = results_path(workdir, point)
  model_dir = path.parent / "model"
  if model_dir.exists():
    # A grid point killed before writing results.json restarts from scratch
    # (its partial checkpoints would otherwise be resumed mid-schedule).
    shutil.rmtree(model_dir)
  model = make_model(spec, config)
  lengths = {"input_tokens": spec.length}
  steps = resolve_steps(spec)
  period = checkpoint_period(spec, steps)
  start = time.time()
  metrics = runner_train.train_model(model, jobs.experiment_config(
      model_dir=str(model_dir), mixture_or_task_name=spec.train_task,
      task_feature_lengths=lengths, train_steps=steps,
      batch_size=spec.batch_size, learning_rate=point.learning_rate,
      seed=point.seed, init_checkpoint=pretrained, checkpoint_period=period))
  step_dir, selection = eval_lib.select_checkpoint(
      model, str(model_dir), spec.selection_task, "validation", lengths)
  params = checkpoints.load_params_for(model, str(step_dir))
  evaluations = {}
  for ev in spec.evaluations:
    results = eval_lib.evaluate_params(model, params, ev.mixture, ev.split,
                                       lengths)
    evaluations[ev.family] = {
        "mixture": ev.mixture, "split": ev.split,
        "tasks": {t: m for t, m in sorted(results.items())
                  if _in_family(t, ev.family)}}
  if request is not None:
    # Deferred: TensorFlow and seqio, +5-7 s CPU (sweep alone: 3 s; measured).
    from rembert_t5x.experiments import submission  # pylint: disable=g-import-not-at-top
    submission.write_run_predictions(request, path.parent, spec, model,
                                     params, lengths)
  record = {
      "task": spec.name, "learning_rate": point.learning_rate,
      "seed": point.seed, "train_language": spec.train_language,
      "train_task": spec.train_task, "train_steps": steps,
      "batch_size": spec.batch_size, "checkpoint_period": period,
      "final_loss": metrics.get("loss"),
      "seconds": round(time.time() - start, 1),
      "selection": selection, "evaluations": evaluations}
  if not keep_checkpoints:
    shutil.rmtree(model_dir)
  io_utils.atomic_write_text(path, json.dumps(record, indent=1) + "\n")
  return record


def run_local(workdir: str, points: Sequence[GridPoint], config,
              pretrained: str, title: str, log: Callable[[str], None] = print,
              keep_checkpoints: bool = False,
              paper: Optional[paper_reference.PaperResults] = None,
              request=None) -> Dict[str, Any]:
  """Runs every grid point without results yet, then aggregates them all;
  with a `submission.Request`, then writes its submission folders."""
  records = []
  todo = sum(not results_path(workdir, p).exists() for p in points)
  done, start = 0, time.time()
  for i, point in enumerate(points):
    path = results_path(workdir, point)
    if path.exists():
      log(f"[{i + 1}/{len(points)}] {point.key}: done, skipped")
    else:
      log(f"[{i + 1}/{len(points)}] {point.key}: fine-tuning")
      run_point(workdir, point, config, pretrained,
                keep_checkpoints=keep_checkpoints, request=request)
      done += 1
      elapsed = time.time() - start
      log(f"[{i + 1}/{len(points)}] {point.key}: finished; {done} of {todo} "
          f"runs in {elapsed / 60:.1f} min, about "
          f"{elapsed / done * (todo - done) / 60:.1f} min left")
    records.append(json.loads(path.read_text()))
  table = sweep_report.write_outputs(workdir, records, title, paper)
  if request is not None:
    # Deferred: TensorFlow and seqio, +5-7 s CPU (sweep alone: 3 s; measured).
    from rembert_t5x.experiments import submission  # pylint: disable=g-import-not-at-top
    runs = [submission.SweepRun(p.task, p.learning_rate, p.seed,
                                results_path(workdir, p).parent,
                                make_model(p.task, config), r)
            for p, r in zip(points, records)]
    submission.write_sweep_folders(request, runs, table, config, pretrained,
                                   log)
  return table


def _gin_str(key: str, value: str) -> str:
  """`--gin.KEY="'value'"`: a gin string binding, quoted for a POSIX shell."""
  if any(c in value for c in "'\"$`\\"):
    raise errors.UserError(f"{key}: {value!r} contains a quote, '$', '`' or "
                        "backslash; choose a plainer path")
  return f"--gin.{key}=\"'{value}'\""


def t5x_commands(workdir: str, points: Sequence[GridPoint], model_gin: str,
                 pretrained: str, xtreme_dir: Optional[str] = None,
                 request=None) -> List[str]:
  """Shell lines for T5X: per grid point train, select, evaluate.

  Per point: `t5x.train` with the grid's run file (TRAIN_STEPS derived there
  from the training set, BATCH_SIZE and EPOCHS; a checkpoint and an English
  dev evaluation by inference every epoch), the grid's learning rate and
  batch size, the seed as RANDOM_SEED and as the training data's shuffle seed
  (`DatasetConfig.seed`: None in T5X's finetune.gin, a new order each run);
  `protocol select`, which reads the English dev metrics and prints the best
  checkpoint into $BEST; one `t5x.eval` per family on its split with $BEST.
  Every command names its tasks. With `xtreme_dir` (grids made local by
  `xtreme_local.prepare`) the script exports $REMBERT_XTREME_DIR, which makes
  `rembert_tasks` register the local tasks in every process; with a
  `submission.Request`, it adds `t5x.infer` of every evaluated language on
  $BEST and, per seed, the command writing its folder. The first line is
  `set -e` (pipe the output to `bash`); on a pod the same script runs on
  every worker at once, so `workdir` must be a bucket every host sees
  (docs/T5X.md, "Pods").
  """
  if request is not None:
    # Deferred: TensorFlow and seqio, +5-7 s CPU (sweep alone: 3 s; measured).
    from rembert_t5x.experiments import submission  # pylint: disable=g-import-not-at-top
  lines = ["set -e", "# A pod: run this same script on every worker at once "
           "(nothing changes per host); the directories must then be in a "
           "bucket (docs/T5X.md, \"Pods\")."]
  if xtreme_dir:
    # Deferred: TensorFlow and seqio, +5-7 s CPU (sweep alone: 3 s; measured).
    from rembert_t5x.experiments import xtreme_local  # pylint: disable=g-import-not-at-top
    lines.append(f"export {xtreme_local.XTREME_DIR_ENV}="
                 f"{shlex.quote(os.path.abspath(xtreme_dir))}")
  for p in points:
    spec = p.task
    if not spec.run_file:
      lines.append(f"# {p.key}: no T5X run file for {spec.name}, skipped")
      continue
    model_dir = f"{workdir.rstrip('/')}/runs/{p.key}"
    common = ["--gin_search_paths=.", f"--gin_file={model_gin}"]
    lines.append(f"# {p.key}")
    lines.append(" ".join([
        "python", "-m", "t5x.train", *common, f"--gin_file={spec.run_file}",
        _gin_str("INITIAL_CHECKPOINT_PATH", pretrained),
        _gin_str("MODEL_DIR", model_dir),
        _gin_str("MIXTURE_OR_TASK_NAME", spec.train_task),
        _gin_str("TRAIN_EVAL_TASK", spec.selection_task),
        f"--gin.LEARNING_RATE={p.learning_rate!r}",
        f"--gin.BATCH_SIZE={spec.batch_size}",
        f"--gin.EPOCHS={spec.epochs}",
        f"--gin.RANDOM_SEED={p.seed}",
        f"--gin.train/utils.DatasetConfig.seed={p.seed}"]))
    lines.append(" ".join([
        "BEST=$(python", "-m", "rembert_t5x.protocol", "select",
        f"--metrics_dir={model_dir}/inference_eval",
        f"--task={spec.selection_task}", f"--checkpoint_dir={model_dir})"]))
    for ev in spec.evaluations:
      lines.append(" ".join([
          "python", "-m", "t5x.eval", *common, f"--gin_file={ev.eval_file}",
          "--gin.CHECKPOINT_PATH=\"'$BEST'\"",
          _gin_str("MIXTURE_OR_TASK_NAME", ev.mixture),
          _gin_str("EVAL_OUTPUT_DIR", f"{model_dir}/eval_{ev.family}"),
          _gin_str("utils.DatasetConfig.split", ev.split)]))
    if request is not None:
      lines += submission.t5x_infer_lines(spec, model_dir, model_gin,
                                          request.split)
  if request is not None:
    lines += submission.t5x_folder_lines(request, [
        submission.InferRun(p.task.name, p.learning_rate, p.seed,
                            f"{workdir.rstrip('/')}/runs/{p.key}")
        for p in points])
  return lines


def _items(flag: str, text: str, parse: Callable[[str], Any], what: str
           ) -> List[Any]:
  """The comma-separated values of `--flag`, each parsed by `parse`.

  Raises:
    errors.UserError: naming the flag and the item that is not `what`, or
      an item given twice (its runs would count twice in the table).
  """
  values = []
  for item in text.split(","):
    try:
      value = parse(item.strip())
    except ValueError:
      value = None
    if value is None:
      raise errors.UserError(f"--{flag}={text}: {item!r} is not {what}")
    if value in values:
      raise errors.UserError(f"--{flag}={text}: {item.strip()} is given "
                             "twice")
    values.append(value)
  return values


def _learning_rate(text: str) -> Optional[float]:
  value = float(text)
  return value if 0 < value < math.inf else None


def _define_flags(fv: flags.FlagValues) -> None:
  def string(name, default, text, **kw):
    flags.DEFINE_string(name, default, text, flag_values=fv, **kw)

  def integer(name, text):
    flags.DEFINE_integer(name, None, text, flag_values=fv)

  string("experiment", None, "table10, table15 or demo", required=True)
  string("workdir", None, "output directory", required=True)
  flags.DEFINE_enum("runner", "local", ["local", "t5x"], "local: train here; "
                    "t5x: print the T5X commands", flag_values=fv)
  string("tasks", None, "comma-separated subset of the tasks")
  string("learning_rates", None, "comma-separated; overrides every task's "
         "grid")
  string("seeds", ",".join(map(str, SEEDS)), "comma-separated seeds")
  string("pretrained", None, "pre-training MODEL_DIR (local) or T5X "
         "checkpoint path (t5x)")
  integer("train_steps", "overrides every task's fine-tuning steps (local)")
  integer("batch_size", "overrides every task's batch size")
  string("model_gin", None, "model gin file of the pre-trained model "
         f"(default: {TINY_GIN} for demo; otherwise the rembert_config.json "
         "of --pretrained (local runner) or rembert.gin)")
  integer("vocab_size", "override VOCAB_SIZE (demo: the synthetic one)")
  string("xtreme_dir", None, "an XTREME download folder: run the grids on "
         "the rembert_local_* tasks over its files instead of TFDS")
  string("languages", None, "with --xtreme_dir and the local runner: "
         "evaluate only these languages (comma-separated; English is always "
         "kept), e.g. for a quick check or a partial download")
  flags.DEFINE_bool("keep_checkpoints", False, "keep every run's "
                    "checkpoints", flag_values=fv)
  string("submission_dir", None, "with --xtreme_dir: write XTREME submission "
         "folders SUBMISSION_DIR/seed-<s>/<task>/test-<lang>.<ext> "
         "(--runner=t5x: print the commands that do)")
  flags.DEFINE_enum("submission_split", "test", ["test", "dev"], "the split "
                    "--submission_dir predicts (files are named test- either "
                    "way)", flag_values=fv)
  string("paper_results", None, "JSON file of reference numbers shown beside "
         "ours (default for table15: the paper's Table 16, "
         "rembert_t5x/experiments/paper_results/rembert_xtreme.json; 'none' "
         "shows none)")


def main(argv=None) -> None:
  cli.run_main(_main, argv, _define_flags, doc=__doc__)


def _paper(args) -> Optional[paper_reference.PaperResults]:
  if args.paper_results == "none":
    return None
  if args.paper_results:
    return paper_reference.read_paper_results(args.paper_results)
  if args.experiment == "table15":
    return paper_reference.read_paper_results(
        str(paper_reference.PAPER_RESULTS))
  return None


def network_config(pretrained: str, model_gin: Optional[str],
                   default_gin: Optional[str] = REMBERT_GIN):
  """(network config, where it comes from): `model_gin`, else (a converted
  or pre-trained MODEL_DIR) `pretrained`'s rembert_config.json, else
  `default_gin`.

  Raises:
    errors.UserError: the gin file does not parse, or there is none.
  """
  saved = pathlib.Path(pretrained) / configs.CHECKPOINT_CONFIG_FILE
  if not model_gin and saved.is_file():
    return configs.read_checkpoint_config(saved), str(saved)
  model_gin = model_gin or default_gin
  if model_gin is None:
    raise errors.UserError(
        f"--pretrained={pretrained}: no {configs.CHECKPOINT_CONFIG_FILE}; "
        f"pass --model_gin=<the model's gin file> (the released RemBERT: "
        f"{REMBERT_GIN})")
  try:
    return configs.config_from_gin(model_gin), model_gin
  except configs.GinConfigError as e:
    raise errors.UserError(str(e)) from e


# What leaving each count flag unset means, for the message refusing 0.
_UNSET = {"train_steps": "each grid's steps then come from its epochs",
          "batch_size": "each grid keeps its own",
          "vocab_size": "the model's own is used"}


def _check_counts(args) -> None:
  """Refuses a count flag below 1 (unset is None; 0 is not read as unset).

  Raises:
    errors.UserError: naming the flag, its value and what unset means.
  """
  for name, unset in _UNSET.items():
    value = getattr(args, name)
    if value is not None and value < 1:
      raise errors.UserError(f"--{name} must be at least 1, got {value} "
                             f"(leave it unset: {unset})")


def _main(args) -> None:
  _check_counts(args)
  learning_rates = None if args.learning_rates is None else _items(
      "learning_rates", args.learning_rates, _learning_rate,
      "a positive finite number")
  seeds = _items("seeds", args.seeds, int, "an integer")
  paper = _paper(args)
  tasks = experiment_tasks(args.experiment)
  if args.tasks:
    unknown = set(args.tasks.split(",")) - set(tasks)
    if unknown:
      raise errors.UserError(f"experiment {args.experiment} has no task "
                          f"{sorted(unknown)}; tasks: {sorted(tasks)}")
    tasks = {n: tasks[n] for n in args.tasks.split(",")}
  overrides = {k: v for k, v in (("train_steps", args.train_steps),
                                 ("batch_size", args.batch_size))
               if v is not None}
  tasks = {n: dataclasses.replace(t, **overrides) for n, t in tasks.items()}
  if not args.pretrained:
    raise errors.UserError("--pretrained is required (a pre-training MODEL_DIR, "
                        "or a T5X checkpoint path with --runner=t5x)")
  if args.xtreme_dir:
    if args.experiment == "demo":
      raise errors.UserError("--xtreme_dir applies to the paper's grids "
                          "(table10, table15), not to the demo tasks")
    # Deferred: TensorFlow and seqio, +5-7 s CPU (sweep alone: 3 s; measured).
    from rembert_t5x.experiments import xtreme_local  # pylint: disable=g-import-not-at-top
    languages = args.languages.split(",") if args.languages else None
    if languages and args.runner == "t5x":
      raise errors.UserError("--languages applies to the local runner (the T5X "
                          "run files evaluate every language of a family)")
    tasks = xtreme_local.prepare(args.xtreme_dir, tasks, languages)
  elif args.languages:
    raise errors.UserError("--languages needs --xtreme_dir")
  request = None
  if args.submission_dir:
    if not args.xtreme_dir:
      raise errors.UserError("--submission_dir needs --xtreme_dir (the XTREME "
                             "files the predictions follow)")
    # Deferred: TensorFlow and seqio, +5-7 s CPU (sweep alone: 3 s; measured).
    from rembert_t5x.experiments import submission  # pylint: disable=g-import-not-at-top
    request = submission.Request(
        args.submission_dir, os.path.abspath(args.xtreme_dir),
        args.submission_split, tuple(languages) if languages else None)
    submission.check_inputs(request, list(tasks.values()))
  points = expand_grid(tasks, learning_rates, seeds)
  model_gin = args.model_gin or (
      TINY_GIN if args.experiment == "demo" else None)
  if args.runner == "t5x":
    print("\n".join(t5x_commands(
        args.workdir, points,
        model_gin or REMBERT_GIN, args.pretrained,
        xtreme_dir=args.xtreme_dir, request=request)))
    return
  vocab_size = args.vocab_size or (
      synthetic.VOCAB_SIZE if args.experiment == "demo" else None)
  config, config_source = network_config(args.pretrained, model_gin)
  if vocab_size is not None:
    config = dataclasses.replace(config, vocab_size=vocab_size)
  table = run_local(args.workdir, points, config, args.pretrained,
                    f"Sweep {args.experiment} ({config_source})",
                    keep_checkpoints=args.keep_checkpoints, paper=paper,
                    request=request)
  print(sweep_report.markdown(table, f"Sweep {args.experiment}", paper))


if __name__ == "__main__":
  main()
