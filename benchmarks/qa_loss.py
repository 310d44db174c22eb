r"""QA loss definitions compared: F1/EM of `span_softmax` 'row' and 'own_tokens'.

  python benchmarks/qa_loss.py --workdir=/tmp/qa_loss --hugepage_malloc

Pre-trains one tiny model (gin_configs/runs/local_tiny_pretrain.gin), then,
for each setting and seed, fine-tunes it on the synthetic QA task
(local_tiny_finetune_qa.gin) and evaluates the last checkpoint on every
language (local_tiny_eval_qa.gin). Settings:

  row_padded  span_softmax='row', pack=False: BERT's and Hugging Face's loss
              (the softmax also covers the row's padding)
  own_padded  span_softmax='own_tokens', pack=False
  own_packed  span_softmax='own_tokens', packed rows (the runner's default)

Each run is the runner's own `train.train` / `eval.evaluate`, configured by
`configs.parse_gin` with the run files and the bindings the equivalent
command lines pass (`python -m rembert_t5x.runner.train --gin_file=… --gin.X=…`,
listed in docs/QA_LOSS_RESULTS.md); seed k sets both `train.train.seed` and
`train.train.data_seed`, so the settings see the same initialisation and
data order for a given seed. Each finished run leaves `record.json` in its
MODEL_DIR, and a rerun with the same --workdir skips it. Writes
`<workdir>/results.json` (per run: scores per language, training wall and
CPU seconds; per setting: mean and sample std over seeds) and prints it.
"""

import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from rembert_t5x import configs  # pylint: disable=g-import-not-at-top
from rembert_t5x import protocol  # pylint: disable=g-import-not-at-top
from rembert_t5x.runner import eval as eval_lib  # pylint: disable=g-import-not-at-top
from rembert_t5x.runner import jobs  # pylint: disable=g-import-not-at-top
from rembert_t5x.runner import train  # pylint: disable=g-import-not-at-top
from rembert_t5x.scoring import seed_statistics  # pylint: disable=g-import-not-at-top

PRETRAIN_GIN = "gin_configs/runs/local_tiny_pretrain.gin"
FINETUNE_GIN = "gin_configs/runs/local_tiny_finetune_qa.gin"
EVAL_GIN = "gin_configs/runs/local_tiny_eval_qa.gin"
# setting: (span_softmax, pack)
SETTINGS = {
    "row_padded": ("row", False),
    "own_padded": ("own_tokens", False),
    "own_packed": ("own_tokens", True),
}
TRAIN_LANGUAGE = "qla"  # tasks/synthetic.py's manifest: "train_language"
METRICS = ("f1", "exact_match")


def _timed(fn):
  """(fn(), wall seconds, CPU seconds of this process, all threads)."""
  wall, cpu = time.perf_counter(), jobs.cpu_seconds()
  out = fn()
  return out, time.perf_counter() - wall, jobs.cpu_seconds() - cpu


def pretrain(workdir: pathlib.Path, steps: int) -> dict:
  model_dir = workdir / "pretrain"
  configs.parse_gin([PRETRAIN_GIN], [
      f"MODEL_DIR = '{model_dir}'", f"TRAIN_STEPS = {steps}",
      f"train.train.checkpoint_period = {steps}",
      "train.train.progress_bar = False"])
  metrics, wall, cpu = _timed(train.train)
  return {"model_dir": str(model_dir), "steps": steps, "wall_s": wall,
          "cpu_s": cpu, "last_metrics": metrics}


def finetune_bindings(model_dir: pathlib.Path, init: str, softmax: str,
                      pack: bool, seed: int, steps: int) -> list:
  """The bindings of one fine-tuning run (the command line's --gin.X=…)."""
  return [f"MODEL_DIR = '{model_dir}'", f"INITIAL_CHECKPOINT_PATH = '{init}'",
          f"TRAIN_STEPS = {steps}", f"train.train.pack = {pack}",
          f"train.train.seed = {seed}", f"train.train.data_seed = {seed}",
          f"models.RemBertQAModel.span_softmax = '{softmax}'",
          "train.train.progress_bar = False"]


def finetune_and_evaluate(workdir: pathlib.Path, init: str, setting: str,
                          seed: int, steps: int) -> dict:
  model_dir = workdir / setting / f"seed{seed}"
  record_path = model_dir / "record.json"
  if record_path.is_file():
    return json.loads(record_path.read_text())
  softmax, pack = SETTINGS[setting]
  configs.parse_gin([FINETUNE_GIN], finetune_bindings(
      model_dir, init, softmax, pack, seed, steps))
  metrics, wall, cpu = _timed(train.train)
  # What the model was built with, from the operative config it wrote.
  operative = (model_dir / "config.gin").read_text()
  bound = f"models.RemBertQAModel.span_softmax = '{softmax}'"
  if bound not in operative:
    raise SystemExit(f"{model_dir}/config.gin lacks {bound!r}")
  configs.parse_gin([EVAL_GIN], [f"CHECKPOINT_PATH = '{model_dir}'",
                                 f"EVAL_OUTPUT_DIR = '{model_dir / 'eval'}'"])
  scores, eval_wall, _ = _timed(eval_lib.evaluate)
  languages = {protocol.task_language(t): m
               for t, m in scores["tasks"].items()}
  record = {"setting": setting, "span_softmax": softmax, "pack": pack,
            "seed": seed, "train_wall_s": wall, "train_cpu_s": cpu,
            "eval_wall_s": eval_wall, "last_train_metrics": metrics,
            "languages": languages}
  record_path.write_text(json.dumps(record, indent=1))
  return record


def run_scores(record: dict) -> dict:
  """The run's numbers: training-language and zero-shot F1/EM, seconds."""
  langs = record["languages"]
  out = {}
  for metric in METRICS:
    out[f"{TRAIN_LANGUAGE}_{metric}"] = langs[TRAIN_LANGUAGE][metric]
    out[f"zero_shot_{metric}"] = seed_statistics.zero_shot_average(
        {l: m[metric] for l, m in langs.items()}, TRAIN_LANGUAGE)
  out["train_wall_s"] = record["train_wall_s"]
  out["train_cpu_s"] = record["train_cpu_s"]
  return out


def summarize(records: list) -> dict:
  """Per setting and number: per-seed values, mean and sample std; and the
  per-seed differences of each setting from own_padded (same seeds)."""
  by_setting = {s: [run_scores(r) for r in records if r["setting"] == s]
                for s in SETTINGS}
  summary = {}
  for setting, runs in by_setting.items():
    summary[setting] = {}
    for key in runs[0]:
      values = [r[key] for r in runs]
      mean, std = seed_statistics.mean_std(values)
      summary[setting][key] = {"values": values, "mean": mean, "std": std}
  base = by_setting["own_padded"]
  for setting in ("row_padded", "own_packed"):
    for key in base[0]:
      diffs = [r[key] - b[key] for r, b in zip(by_setting[setting], base)]
      mean, std = seed_statistics.mean_std(diffs)
      summary[setting][f"minus_own_padded/{key}"] = {
          "values": diffs, "mean": mean, "std": std,
          "welch": seed_statistics.welch_test([b[key] for b in base],
                                          [r[key] for r in by_setting[setting]])}
  return summary


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument(common.HUGEPAGE_MALLOC_FLAG, action="store_true",
                 help="run under GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "
                      "(re-starts the script; Linux)")
  p.add_argument("--workdir", required=True)
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--pretrain_steps", type=int, default=300)
  p.add_argument("--finetune_steps", type=int, default=300,
                 help="local_tiny_finetune_qa.gin's TRAIN_STEPS")
  a = p.parse_args(argv)
  workdir = pathlib.Path(a.workdir).resolve()
  start = time.perf_counter()
  pre = pretrain(workdir, a.pretrain_steps)
  records = [finetune_and_evaluate(workdir, pre["model_dir"], setting, seed,
                                   a.finetune_steps)
             for seed in range(a.seeds) for setting in SETTINGS]
  result = {"pretrain": pre, "finetune_steps": a.finetune_steps,
            "malloc": common.malloc_setting(), "runs": records,
            "summary": summarize(records),
            "total_wall_s": time.perf_counter() - start}
  (workdir / "results.json").write_text(json.dumps(result, indent=1))
  print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
  common.reexec_with_hugepage_malloc()
  main()
