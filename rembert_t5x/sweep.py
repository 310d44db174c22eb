r"""Fine-tuning sweeps over the paper's grids, aggregated into an XTREME table.

  # The offline demo tasks with a pre-trained tiny model (local runner):
  python -m rembert_t5x.sweep --experiment=demo --workdir=/tmp/sweep \
    --pretrained=/tmp/m --learning_rates=5e-4,1e-3 --seeds=0,1
  # The paper's ablation grid (Table 10), as T5X commands for a cluster:
  python -m rembert_t5x.sweep --experiment=table10 --workdir=gs://b/sweep \
    --runner=t5x --pretrained=gs://b/pretrain/checkpoint_N \
    --model_gin=gin_configs/models/paper/table3_ein128_eout768.gin

Experiments (the grids are data, `EXPERIMENTS` below):
  table10  the ablation models' grids (paper Table 10): PAWS-X {3,4,5}e-5,
           XNLI {1,2,3}e-5, SQuAD-trained QA {2,3,4}e-5, NER {1,...,5}e-5.
  table15  RemBERT's settings (Table 15): PAWS-X 8e-6, XNLI 1e-5, SQuAD 9e-6,
           POS 3e-5 (batch 128), NER 8e-6 (batch 64).
  demo     the synthetic pair / tag / qa tasks of the offline demo.
Every experiment runs 3 seeds unless --seeds says otherwise.

`--runner=local` fine-tunes each (task, learning rate, seed) from the
pre-training MODEL_DIR `--pretrained` with the local runner, evaluates every
language's dev set (zero-shot from the training language) and writes
`DIR/runs/<task>/lr=<lr>/seed=<seed>/results.json`; a grid point whose
results file exists is not rerun (the sweep resumes). `--runner=t5x` only
prints one `python -m t5x.train` and one `python -m t5x.eval` command per grid
point. Aggregation (local runner) writes DIR/sweep.json, DIR/sweep.md and
DIR/sweep.png: per task the learning rate with the best training-language
dev score (mean over seeds) is selected, and its per-language scores are
reported as mean ± std over seeds, with the average over languages; QA is
scored as XTREME does, (EM + F1) / 2.
"""

import argparse
import dataclasses
import json
import pathlib
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from rembert_t5x import cli

SEEDS = (0, 1, 2)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One fine-tuning task of an experiment.

  Attributes:
    name: short name used in directories and tables ('xnli', 'pair', ...).
    kind: model objective: 'pair', 'tagging' or 'qa'.
    num_classes: classes (pair) or tags (tagging); None for QA.
    train_task: SeqIO task trained on (the training language only).
    eval_mixture: SeqIO mixture with one task per evaluation language.
    learning_rates: the grid.
    length: input length (`input_tokens`).
    batch_size: fine-tuning batch size.
    train_steps: fine-tuning steps (3 epochs for the paper's tasks).
    train_language: the language trained on and selected on.
    run_file / eval_file: T5X run files (None: no T5X run file yet).
    max_answer_length: QA decoding limit.
  """
  name: str
  kind: str
  num_classes: Optional[int]
  train_task: str
  eval_mixture: str
  learning_rates: tuple
  length: int = 128
  batch_size: int = 32
  train_steps: int = 1000
  train_language: str = "en"
  run_file: Optional[str] = None
  eval_file: Optional[str] = None
  max_answer_length: int = 30


def _xtreme(name, kind, num_classes, train, zeroshot, lrs, steps, length=128,
            batch_size=32, run=None, max_answer_length=30):
  return TaskSpec(
      name, kind, num_classes, f"rembert_{train}", f"rembert_{zeroshot}",
      tuple(lrs), length, batch_size, steps,
      run_file=run and f"gin_configs/runs/finetune_{run}.gin",
      eval_file=run and f"gin_configs/runs/eval_{run}.gin",
      max_answer_length=max_answer_length)


# Steps are 3 epochs of the English training set at the task's batch size
# (the run files' TRAIN_STEPS); UD-POS English (EWT) has 12,543 sentences.
# UD-POS has no T5X run file yet.
EXPERIMENTS: Dict[str, Dict[str, TaskSpec]] = {
    "table10": {t.name: t for t in (
        _xtreme("pawsx", "pair", 2, "pawsx_train_en", "pawsx_zeroshot",
                (3e-5, 4e-5, 5e-5), 4632, run="pawsx"),
        _xtreme("xnli", "pair", 3, "xnli_train_en", "xnli_zeroshot",
                (1e-5, 2e-5, 3e-5), 36816, run="xnli"),
        _xtreme("xquad", "qa", None, "squad_train_en", "xquad_zeroshot",
                (2e-5, 3e-5, 4e-5), 8311, length=384, run="xquad"),
        _xtreme("panx", "tagging", 7, "panx_train_en", "panx_zeroshot",
                (1e-5, 2e-5, 3e-5, 4e-5, 5e-5), 1875, run="panx"),
    )},
    "table15": {t.name: t for t in (
        _xtreme("pawsx", "pair", 2, "pawsx_train_en", "pawsx_zeroshot",
                (8e-6,), 4632, run="pawsx"),
        _xtreme("xnli", "pair", 3, "xnli_train_en", "xnli_zeroshot",
                (1e-5,), 36816, run="xnli"),
        _xtreme("xquad", "qa", None, "squad_train_en", "xquad_zeroshot",
                (9e-6,), 8311, length=384, run="xquad"),
        _xtreme("udpos", "tagging", 17, "udpos_train_en", "udpos_zeroshot",
                (3e-5,), 294, batch_size=128),
        _xtreme("panx", "tagging", 7, "panx_train_en", "panx_zeroshot",
                (8e-6,), 938, batch_size=64, run="panx"),
    )},
}


def demo_tasks(prefix: str = "rembert_synthetic_",
               train_steps: Optional[int] = None) -> Dict[str, TaskSpec]:
  """The synthetic tasks of the offline demo (`rembert_tasks.synthetic`)."""
  from rembert_t5x import synthetic  # pylint: disable=g-import-not-at-top
  lang = synthetic.TRAIN_LANGUAGE
  specs = (
      TaskSpec("pair", "pair", 2, f"{prefix}pair_train", f"{prefix}pair_zeroshot",
               (5e-4, 1e-3), 64, 32, 300, lang),
      TaskSpec("tag", "tagging", len(synthetic.TAGS), f"{prefix}tag_train",
               f"{prefix}tag_zeroshot", (2e-4, 5e-4), 64, 32, 200, lang),
      TaskSpec("qa", "qa", None, f"{prefix}qa_train", f"{prefix}qa_zeroshot",
               (2e-4, 5e-4), 96, 32, 200, lang, max_answer_length=12),
  )
  if train_steps:
    specs = tuple(dataclasses.replace(s, train_steps=train_steps) for s in specs)
  return {s.name: s for s in specs}


def experiment_tasks(name: str) -> Dict[str, TaskSpec]:
  if name == "demo":
    return demo_tasks()
  if name not in EXPERIMENTS:
    raise cli.UserError(f"unknown experiment {name!r}: expected one of "
                        f"{sorted(EXPERIMENTS) + ['demo']}")
  return dict(EXPERIMENTS[name])


@dataclasses.dataclass(frozen=True)
class GridPoint:
  task: TaskSpec
  learning_rate: float
  seed: int

  @property
  def key(self) -> str:
    return f"{self.task.name}/lr={format_lr(self.learning_rate)}/seed={self.seed}"


def format_lr(lr: float) -> str:
  """A short, stable spelling: 3e-05 -> '3e-05', 0.0005 -> '5e-04'."""
  return f"{lr:.0e}" if float(f"{lr:.0e}") == lr else repr(lr)


def expand_grid(tasks: Mapping[str, TaskSpec],
                learning_rates: Optional[Sequence[float]] = None,
                seeds: Sequence[int] = SEEDS) -> List[GridPoint]:
  """Every (task, learning rate, seed); `learning_rates` overrides the grids."""
  return [GridPoint(t, lr, s) for t in tasks.values()
          for lr in (learning_rates or t.learning_rates) for s in seeds]


# --------------------------------------------------------------------------
# Aggregation (pure functions over results records)
# --------------------------------------------------------------------------

def task_score(metrics: Mapping[str, float]) -> float:
  """One number per (task, language): XTREME's (EM + F1) / 2 for QA."""
  if "exact_match" in metrics and "f1" in metrics:
    return (metrics["exact_match"] + metrics["f1"]) / 2
  for name in ("f1", "accuracy"):
    if name in metrics:
      return float(metrics[name])
  raise ValueError(f"no score among metrics {sorted(metrics)}")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (ddof=1; 0 for a single value)."""
  values = np.asarray(values, dtype=np.float64)
  std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
  return float(values.mean()), std


def aggregate(records: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
  """The XTREME table from per-grid-point results.

  Args:
    records: one per (task, learning rate, seed): {"task", "learning_rate",
      "seed", "train_language", "languages": {lang: {metric: value}}}.

  Returns:
    {"tasks": {task: {"best_learning_rate", "train_language",
      "learning_rates": {lr: {"dev": [mean, std], "avg": [mean, std],
      "seeds": n}}, "languages": {lang: [mean, std]}, "avg": [mean, std],
      "zero_shot_avg": [mean, std]}}, "average": mean over tasks of "avg"}.
    The best learning rate maximises the training-language dev score
    averaged over seeds (ties: the smaller rate). Per-language and average
    numbers are those of the best rate, mean ± std over its seeds; "avg" is
    the mean over all languages (training language included, as XTREME
    reports), "zero_shot_avg" leaves the training language out.
  """
  by_task: Dict[str, Dict[float, List[Mapping[str, Any]]]] = {}
  for r in records:
    by_task.setdefault(r["task"], {}).setdefault(
        float(r["learning_rate"]), []).append(r)
  out: Dict[str, Any] = {"tasks": {}}
  for task, by_lr in sorted(by_task.items()):
    train_lang = next(iter(by_lr.values()))[0]["train_language"]
    summary = {}
    for lr, runs in sorted(by_lr.items()):
      scores = [_scores(r) for r in runs]
      if any(train_lang not in s for s in scores):
        raise ValueError(f"task {task}, lr {lr}: no {train_lang} dev result")
      summary[lr] = {
          "dev": mean_std([s[train_lang] for s in scores]),
          "avg": mean_std([np.mean(list(s.values())) for s in scores]),
          "seeds": len(runs)}
    best = max(sorted(summary), key=lambda lr: summary[lr]["dev"][0])
    scores = [_scores(r) for r in by_lr[best]]
    langs = sorted(set().union(*scores))
    zero_shot = [l for l in langs if l != train_lang]
    out["tasks"][task] = {
        "best_learning_rate": best,
        "train_language": train_lang,
        "learning_rates": {format_lr(lr): v for lr, v in summary.items()},
        "languages": {l: mean_std([s[l] for s in scores if l in s])
                      for l in langs},
        "avg": summary[best]["avg"],
        "zero_shot_avg": mean_std([np.mean([s[l] for l in zero_shot])
                                   for s in scores]) if zero_shot else None,
    }
  averages = [t["avg"][0] for t in out["tasks"].values()]
  out["average"] = float(np.mean(averages)) if averages else None
  return out


def _scores(record: Mapping[str, Any]) -> Dict[str, float]:
  return {l: task_score(m) for l, m in record["languages"].items()}


def _pm(pair) -> str:
  return "" if pair is None else f"{pair[0]:.1f} ± {pair[1]:.1f}"


def markdown(table: Mapping[str, Any], title: str) -> str:
  """sweep.md: a summary, then per task its LR grid and language table."""
  tasks = table["tasks"]
  lines = [f"# {title}", "",
           "Scores: accuracy / F1 / XTREME QA (EM + F1) / 2, mean ± std over "
           "seeds at the learning rate with the best training-language dev "
           "score.", "",
           "| task | best lr | train-lang dev | avg (all langs) | zero-shot avg |",
           "|---|---|---|---|---|"]
  for name, t in tasks.items():
    lr = format_lr(t["best_learning_rate"])
    lines.append(f"| {name} | {lr} | {_pm(t['learning_rates'][lr]['dev'])} | "
                 f"{_pm(t['avg'])} | {_pm(t['zero_shot_avg'])} |")
  if table.get("average") is not None:
    lines.append(f"| **average over tasks** | | | {table['average']:.1f} | |")
  for name, t in tasks.items():
    lines += ["", f"## {name} (trained on {t['train_language']})", "",
              f"| learning rate | {t['train_language']} dev | avg | seeds |",
              "|---|---|---|---|"]
    for lr, v in t["learning_rates"].items():
      best = " **(best)**" if float(lr) == t["best_learning_rate"] else ""
      lines.append(f"| {lr}{best} | {_pm(v['dev'])} | {_pm(v['avg'])} | "
                   f"{v['seeds']} |")
    lines += ["", "| language | score |", "|---|---|"]
    for lang, v in t["languages"].items():
      note = " (train)" if lang == t["train_language"] else ""
      lines.append(f"| {lang}{note} | {_pm(v)} |")
    lines.append(f"| **avg** | {_pm(t['avg'])} |")
  return "\n".join(lines) + "\n"


def plot(table: Mapping[str, Any], path: pathlib.Path, title: str) -> None:
  """One panel per task: per-language score (best lr), error bars = std."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  tasks = table["tasks"]
  fig, axes = plt.subplots(1, max(len(tasks), 1), squeeze=False,
                           figsize=(max(4, 3.5 * len(tasks)), 3.5))
  for ax, (name, t) in zip(axes[0], tasks.items()):
    langs = list(t["languages"])
    means = [t["languages"][l][0] for l in langs]
    stds = [t["languages"][l][1] for l in langs]
    colors = ["tab:orange" if l == t["train_language"] else "tab:blue"
              for l in langs]
    ax.bar(range(len(langs)), means, yerr=stds, color=colors, capsize=3)
    ax.axhline(t["avg"][0], color="k", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(langs)))
    ax.set_xticklabels(langs, rotation=90 if len(langs) > 12 else 0)
    ax.set_title(f"{name} (lr {format_lr(t['best_learning_rate'])}, "
                 f"avg {t['avg'][0]:.1f})", fontsize=9)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  tmp = path.with_name(f".{path.name}.tmp.png")
  fig.savefig(tmp, dpi=100)
  plt.close(fig)
  tmp.replace(path)


def write_outputs(workdir: str, records: Sequence[Mapping[str, Any]],
                  title: str) -> Dict[str, Any]:
  """Aggregates and writes sweep.json, sweep.md and sweep.png."""
  from rembert_t5x import io_utils  # pylint: disable=g-import-not-at-top
  out = pathlib.Path(workdir)
  table = aggregate(records)
  io_utils.atomic_write_text(out / "sweep.json", json.dumps(
      {"title": title, **table, "runs": list(records)}, indent=1) + "\n")
  io_utils.atomic_write_text(out / "sweep.md", markdown(table, title))
  plot(table, out / "sweep.png", title)
  return table


# --------------------------------------------------------------------------
# Runners
# --------------------------------------------------------------------------

def results_path(workdir: str, point: GridPoint) -> pathlib.Path:
  return pathlib.Path(workdir) / "runs" / point.key / "results.json"


def make_model(spec: TaskSpec, config):
  """The T5X-style model class of a task, over `config`."""
  from rembert_t5x import models  # pylint: disable=g-import-not-at-top
  module = models.make_module(spec.kind, config, spec.num_classes)
  if spec.kind == "pair":
    return models.RemBertPairClassificationModel(module)
  if spec.kind == "tagging":
    return models.RemBertTaggingModel(module)
  return models.RemBertQAModel(module, max_answer_length=spec.max_answer_length)


def run_point(workdir: str, point: GridPoint, config, pretrained: str,
              split: str = "validation", keep_checkpoints: bool = False
              ) -> Dict[str, Any]:
  """Fine-tunes and evaluates one grid point; writes its results.json."""
  from rembert_t5x import eval as eval_lib  # pylint: disable=g-import-not-at-top
  from rembert_t5x import io_utils  # pylint: disable=g-import-not-at-top
  from rembert_t5x import train  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top

  spec = point.task
  path = results_path(workdir, point)
  model_dir = path.parent / "model"
  if model_dir.exists():
    # A grid point killed before writing results.json restarts from scratch
    # (its partial checkpoints would otherwise be resumed mid-schedule).
    shutil.rmtree(model_dir)
  model = make_model(spec, config)
  lengths = {"input_tokens": spec.length}
  start = time.time()
  metrics = train.train(
      str(model_dir), model=model, mixture_or_task_name=spec.train_task,
      task_feature_lengths=lengths, train_steps=spec.train_steps,
      batch_size=spec.batch_size, learning_rate=point.learning_rate,
      warmup_steps=spec.train_steps // 10, checkpoint_period=spec.train_steps,
      log_period=max(1, min(50, spec.train_steps)), seed=point.seed,
      data_seed=point.seed, init_checkpoint=pretrained, progress_bar=False)
  params = train.load_params(str(model_dir))
  task_metrics = eval_lib.evaluate_params(model, params, spec.eval_mixture,
                                          split, lengths)
  record = {
      "task": spec.name, "learning_rate": point.learning_rate,
      "seed": point.seed, "train_language": spec.train_language,
      "split": split, "train_steps": spec.train_steps,
      "final_loss": metrics.get("loss"),
      "seconds": round(time.time() - start, 1),
      "languages": {eval_lib.task_language(t): m
                    for t, m in sorted(task_metrics.items())}}
  if not keep_checkpoints:
    shutil.rmtree(model_dir)
  io_utils.atomic_write_text(path, json.dumps(record, indent=1) + "\n")
  return record


def run_local(workdir: str, points: Sequence[GridPoint], config,
              pretrained: str, title: str, log: Callable[[str], None] = print,
              keep_checkpoints: bool = False) -> Dict[str, Any]:
  """Runs every grid point without results yet, then aggregates them all."""
  records = []
  for i, point in enumerate(points):
    path = results_path(workdir, point)
    if path.exists():
      log(f"[{i + 1}/{len(points)}] {point.key}: done, skipped")
    else:
      log(f"[{i + 1}/{len(points)}] {point.key}: fine-tuning "
          f"{point.task.train_steps} steps")
      run_point(workdir, point, config, pretrained,
                keep_checkpoints=keep_checkpoints)
    records.append(json.loads(path.read_text()))
  return write_outputs(workdir, records, title)


def _gin_str(key: str, value: str) -> str:
  """`--gin.KEY="'value'"`: a gin string binding, quoted for a POSIX shell."""
  if any(c in value for c in "'\"$`\\"):
    raise cli.UserError(f"{key}: {value!r} contains a quote, '$', '`' or "
                        "backslash; choose a plainer path")
  return f"--gin.{key}=\"'{value}'\""


def t5x_commands(workdir: str, points: Sequence[GridPoint], model_gin: str,
                 pretrained: str) -> List[str]:
  """One `t5x.train` and one `t5x.eval` command per grid point.

  The seed goes to T5X's `RANDOM_SEED` macro (t5x/configs/runs/finetune.gin
  binds `train.random_seed = %RANDOM_SEED`; init and dropout) and to the
  training data's shuffle seed (`train/utils.DatasetConfig.seed`, None in
  T5X's finetune.gin, i.e. a new order each run). TRAIN_STEPS counts
  fine-tuning steps only (finetune_base.gin restores no step), so the last
  checkpoint is `checkpoint_<TRAIN_STEPS>`. Evaluation uses the dev
  sets ('validation'), as the paper reports; T5X's train also evaluates
  every EVAL_PERIOD steps on the English dev set for checkpoint selection.
  """
  lines = []
  for p in points:
    spec = p.task
    if not spec.run_file:
      lines.append(f"# {p.key}: no T5X run file for {spec.name} yet, skipped")
      continue
    model_dir = f"{workdir.rstrip('/')}/runs/{p.key}"
    # Steps, warm-up (10%) and decay are passed explicitly: the run files'
    # values assume their own batch size.
    steps = spec.train_steps
    warmup = steps // 10
    common = ["--gin_search_paths=.", f"--gin_file={model_gin}"]
    train_cmd = ["python", "-m", "t5x.train", *common,
                 f"--gin_file={spec.run_file}",
                 _gin_str("INITIAL_CHECKPOINT_PATH", pretrained),
                 _gin_str("MODEL_DIR", model_dir),
                 f"--gin.LEARNING_RATE={p.learning_rate!r}",
                 f"--gin.BATCH_SIZE={spec.batch_size}",
                 f"--gin.TRAIN_STEPS={steps}",
                 f"--gin.WARMUP_STEPS={warmup}",
                 f"--gin.DECAY_FACTOR={1 / (steps - warmup):.6e}",
                 f"--gin.RANDOM_SEED={p.seed}",
                 f"--gin.train/utils.DatasetConfig.seed={p.seed}"]
    eval_cmd = ["python", "-m", "t5x.eval", *common,
                f"--gin_file={spec.eval_file}",
                _gin_str("CHECKPOINT_PATH", f"{model_dir}/checkpoint_{steps}"),
                _gin_str("EVAL_OUTPUT_DIR", f"{model_dir}/eval"),
                _gin_str("utils.DatasetConfig.split", "validation")]
    lines.append(" ".join(train_cmd))
    lines.append(" ".join(eval_cmd))
  return lines


def _floats(text: Optional[str]) -> Optional[List[float]]:
  return [float(x) for x in text.split(",")] if text else None


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--experiment", required=True,
                      help="table10, table15 or demo")
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--runner", choices=("local", "t5x"), default="local")
  parser.add_argument("--tasks", help="comma-separated subset of the tasks")
  parser.add_argument("--learning_rates", help="comma-separated; overrides "
                      "every task's grid")
  parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
  parser.add_argument("--pretrained", help="pre-training MODEL_DIR (local) "
                      "or T5X checkpoint path (t5x)")
  parser.add_argument("--train_steps", type=int,
                      help="overrides every task's fine-tuning steps (local)")
  parser.add_argument("--batch_size", type=int,
                      help="overrides every task's batch size")
  parser.add_argument("--model_gin", default=None,
                      help="model gin file of the pre-trained model "
                      "(default: tiny.gin for demo, rembert.gin otherwise)")
  parser.add_argument("--vocab_size", type=int, default=None,
                      help="override VOCAB_SIZE (demo: the synthetic one)")
  parser.add_argument("--keep_checkpoints", action="store_true")
  args = parser.parse_args(argv)
  try:
    _main(args)
  except cli.UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


def _main(args) -> None:
  tasks = experiment_tasks(args.experiment)
  if args.tasks:
    unknown = set(args.tasks.split(",")) - set(tasks)
    if unknown:
      raise cli.UserError(f"experiment {args.experiment} has no task "
                          f"{sorted(unknown)}; tasks: {sorted(tasks)}")
    tasks = {n: tasks[n] for n in args.tasks.split(",")}
  overrides = {k: v for k, v in (("train_steps", args.train_steps),
                                 ("batch_size", args.batch_size)) if v}
  tasks = {n: dataclasses.replace(t, **overrides) for n, t in tasks.items()}
  points = expand_grid(tasks, _floats(args.learning_rates),
                       [int(s) for s in args.seeds.split(",")])
  model_gin = args.model_gin or (
      "gin_configs/models/tiny.gin" if args.experiment == "demo"
      else "gin_configs/models/paper/rembert.gin")
  if not args.pretrained:
    raise cli.UserError("--pretrained is required (a pre-training MODEL_DIR, "
                        "or a T5X checkpoint path with --runner=t5x)")
  if args.runner == "t5x":
    print("\n".join(t5x_commands(args.workdir, points, model_gin,
                                 args.pretrained)))
    return
  from rembert_t5x import configs  # pylint: disable=g-import-not-at-top
  vocab_size = args.vocab_size
  if args.experiment == "demo":
    from rembert_tasks import synthetic as synthetic_tasks  # pylint: disable=g-import-not-at-top
    vocab_size = vocab_size or synthetic_tasks.VOCAB_SIZE
  else:
    import rembert_tasks  # pylint: disable=g-import-not-at-top,unused-import
  try:
    config = configs.config_from_gin(model_gin)
  except configs.GinConfigError as e:
    raise cli.UserError(str(e)) from e
  if vocab_size:
    config = dataclasses.replace(config, vocab_size=vocab_size)
  table = run_local(args.workdir, points, config, args.pretrained,
                    f"Sweep {args.experiment} ({model_gin})",
                    keep_checkpoints=args.keep_checkpoints)
  print(markdown(table, f"Sweep {args.experiment}"))


if __name__ == "__main__":
  main()
