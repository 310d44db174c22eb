r"""The offline demo: coupled vs decoupled embeddings, zero-shot transfer.

  python -m rembert_t5x.experiments.demo --workdir /tmp/demo          # ~9-10 min on 2 idle cores
  python -m rembert_t5x.experiments.demo --workdir /tmp/demo --full   # 3 pre-training seeds

Pre-trains a tiny coupled (tied E_in = E_out = H, the mBERT baseline) and a
tiny decoupled (E_in < H < E_out, RemBERT's design) model on a synthetic
multilingual corpus made here, fine-tunes each on pair classification,
entity tagging and extractive QA in one language and evaluates every
language zero-shot; writes `results.json`, `results.md` and
`results_<task>.png`. What it runs, how to read its numbers (mean ± std over
seeds, Welch's t-test: `scoring.seed_statistics`) and what it costs: docs/EXPERIMENTS.md
("The offline demo").

Seeds: run r of pre-training seed p uses training seed `seed + p` for
pre-training and `seed + p * finetune_seeds + r` for fine-tuning (weights of
the new head, data order, dropout); the data are generated once with
`data_seed`. A pre-training or fine-tuning run whose record (`demo_mlm.json`,
`demo_run.json`) is in the work directory is not rerun. Compiled programs
are kept in `<workdir>/xla_cache` (`synthetic_runs.compilation_cache`).
"""

import dataclasses
import json
import pathlib
import shutil
from typing import Any, Callable, Dict, List

from absl import flags

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x import configs
from rembert_t5x.experiments import report
from rembert_t5x.experiments import sweep
from rembert_t5x.experiments import synthetic_baselines
from rembert_t5x.experiments import synthetic_runs
from rembert_t5x import network
from rembert_t5x.runner import eval as eval_lib
from rembert_t5x.scoring import seed_statistics

VARIANTS = {
    "coupled": "gin_configs/models/tiny_coupled.gin",
    "decoupled": sweep.TINY_GIN,
}
BASELINE, CANDIDATE = "coupled", "decoupled"
TASKS = {
    # family: input length (objectives: `sweep.demo_tasks`; main metrics:
    # `synthetic_runs.FAMILIES`). The lengths fit the synthetic data: its
    # longest example (train and every language's dev set, default data
    # seed) has 55 pair / 31 tag / 62 QA tokens, so nothing is cut; longer
    # rows were mostly padding (tag examples average 13 tokens), and a
    # fine-tuning step's time grows with the row length. Longer examples
    # (other data seeds) are truncated (pair), split (tag) or windowed (QA)
    # as in XTREME.
    "pair": 56, "tag": 32, "qa": 64}


@dataclasses.dataclass
class DemoSettings(synthetic_runs.RunSettings):
  """Sizes and seeds of one demo run (every field is a command-line flag).

  Sized to finish within about 10 minutes on 2 idle cores, with the two
  variants in two worker processes (docs/DEMO_RESULTS.md has the measured
  runs); `--full` and the step flags run longer. The bootstrap standard error
  of an accuracy near 60% is ~2.4 points at the default 400 dev examples per
  language (~1.4 for a 3-language average).
  """
  pretrain_seeds: int = 1
  finetune_seeds: int = 3
  # Pre-training rows of 16 pieces (one or two sentences), 2,000 steps: both
  # tiny encoders leave the unigram plateau within ~1,000-1,500 steps and
  # tagging transfers; rows of 64 needed ~3,000 steps (docs/DEMO_RESULTS.md).
  pretrain_steps: int = 2000
  pretrain_length: int = 16
  # Pair fine-tuning: 300 steps at 1e-3, on the pair task with 80% unrelated
  # negatives (`synthetic.PAIR_UNRELATED_FRACTION`). Screened on one
  # pre-trained model per variant, three seeds: 61.5 / 64.1 zero-shot, against
  # 57.7 / 60.3 at 5e-4 and 52.7 / 56.2 with half the negatives unrelated
  # (docs/DEMO_RESULTS.md).
  pair_finetune_steps: int = 300
  pair_finetune_learning_rate: float = 1e-3
  # Comma-separated subset of TASKS (a quicker run, or a smoke test).
  tasks: str = ",".join(TASKS)
  # Fine-tuning packs each step's examples into fewer rows (the runner's
  # default); False trains one example per row, to see what packing saves.
  finetune_pack: bool = True

  def families(self) -> List[str]:
    return self.tasks.split(",")

  def check(self) -> None:
    unknown = sorted(set(self.families()) - set(TASKS))
    if unknown or not self.tasks:
      raise errors.UserError(
          f"--tasks {self.tasks!r}: unknown task(s) {unknown}; expected a "
          f"comma-separated subset of {list(TASKS)}")
    super().check("pretrain_seeds", "finetune_seeds")


FULL = dict(pretrain_seeds=3)


def run(workdir: str, settings: DemoSettings = DemoSettings(),
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Runs the whole demo under `workdir`; returns the results record.

  The data are made here; the variants with runs left are the units of
  `synthetic_runs.run_units`; the tables are built from the records the
  runs leave in `workdir`.
  """
  settings.check()
  out = pathlib.Path(workdir)
  out.mkdir(parents=True, exist_ok=True)
  clock = synthetic_runs.Clock()
  log(f"{clock()} synthetic data ({settings.eval_examples} dev examples per "
      f"language) and vocabulary in {out / 'data'}")
  with clock.stage("data"):
    manifest, session = _prepare(out, settings, clock)
    chance = synthetic_baselines.chance_levels(manifest["dir"], split="dev")
  timing_dir = out / "timing"
  if timing_dir.exists():
    shutil.rmtree(timing_dir)  # stage times of this call only
  workers = synthetic_runs.run_units(
      "rembert_t5x.experiments.demo", out, settings, _todo(out, settings),
      lambda todo: _work(out, todo, manifest, session, log), log)
  for worker_file in sorted(timing_dir.glob("*.json")):
    clock.add(json.loads(worker_file.read_text())["stages"])
  results = _collect(out, settings, manifest, chance)
  results.update(analyse(results))
  results["timing"] = clock.totals()
  results["timing"]["jobs"] = workers
  _write(out, results)
  log(f"{clock()} wrote {out / 'results.md'}")
  return results


def _prepare(out: pathlib.Path, settings: DemoSettings,
             clock: synthetic_runs.Clock):
  """(manifest, `synthetic_runs.Session` timed by `clock`) of the data."""
  manifest, names = synthetic_runs.prepare_data(
      out, settings, "demo_", {"qa_max_seq_length": TASKS["qa"]})
  return manifest, synthetic_runs.Session(settings, "demo_", names, clock)


def _records(settings: DemoSettings, out: pathlib.Path, variant: str):
  """(pre-training seed, family or None, fine-tuning run, record path) of
  every run of `variant`, in the order they run."""
  for p in range(settings.pretrain_seeds):
    yield p, None, None, out / variant / f"pretrain-{p}" / "demo_mlm.json"
    for family in settings.families():
      for r in range(settings.finetune_seeds):
        yield (p, family, r,
               out / variant / f"{family}-{p}-{r}" / "demo_run.json")


def _todo(out: pathlib.Path, settings: DemoSettings) -> List[str]:
  """The variants with a run left, in `VARIANTS` order."""
  return [v for v in VARIANTS if not all(
      path.exists() for *_, path in _records(settings, out, v))]


def _work(out: pathlib.Path, variants: List[str], manifest: Dict[str, Any],
          session: synthetic_runs.Session, log: Callable[[str], None]
          ) -> None:
  """Pre-trains, fine-tunes and evaluates the runs of `variants` that have
  no record yet, in this process, writing one record per run; `manifest`
  and `session` are `_prepare`'s."""
  settings, clock = session.settings, session.clock
  with synthetic_runs.compilation_cache(out / "xla_cache"):
    for variant in variants:
      config = variant_config(variant)
      counts = configs.count_parameters(config)
      # One model object per task: its jitted predict function is reused by
      # every seed.
      task_models = {f: synthetic_runs.finetune_model(f, config)
                     for f in settings.families()}
      for p, family, r, done in _records(settings, out, variant):
        pre_dir = out / variant / f"pretrain-{p}"
        if done.exists():
          continue
        if family is None:
          log(f"{clock()} {variant}: pre-training seed {p}, "
              f"{settings.pretrain_steps} steps "
              f"({counts['pretraining_params']:,} parameters)")
          io_utils.atomic_write_json(done, session.pretrain(
              config, str(pre_dir), settings.seed + p))
          continue
        seed = settings.seed + p * settings.finetune_seeds + r
        log(f"{clock()} {variant}: {family} on {manifest['train_language']}, "
            f"pre-training seed {p}, fine-tuning seed {seed}: "
            f"{settings.finetune(family)[0]} steps, evaluation")
        languages = session.finetune(
            task_models[family], str(done.parent), family, TASKS[family],
            seed, str(pre_dir), pack=settings.finetune_pack)
        io_utils.atomic_write_json(done, {
            "variant": variant, "family": family, "pretrain_seed": p,
            "finetune_seed": seed, "languages": languages})


def variant_config(variant: str) -> network.RemBertConfig:
  """The variant's model config with the synthetic vocabulary's size."""
  return synthetic_runs.model_config(VARIANTS[variant])


def _collect(out: pathlib.Path, settings: DemoSettings,
             manifest: Dict[str, Any], chance) -> Dict[str, Any]:
  """The results record from the runs' records on disk."""
  results: Dict[str, Any] = {"variants": {}, "chance": chance, "runs": [],
                             "languages": manifest["languages"],
                             "train_language": manifest["train_language"],
                             "settings": dataclasses.asdict(settings)}
  for variant in VARIANTS:
    record = results["variants"][variant] = {
        "params": configs.count_parameters(variant_config(variant)),
        "mlm": []}
    for p, family, _, path in _records(settings, out, variant):
      saved = json.loads(path.read_text())
      if family is None:
        record["mlm"].append({"pretrain_seed": p, "loss": saved["loss"],
                              "accuracy": saved["mlm/accuracy"]})
      else:
        results["runs"].append(saved)
  return results


def work(out: pathlib.Path, settings: DemoSettings, worker: int) -> None:
  """Worker `worker` of `settings.jobs`: runs its share of the variants,
  then writes its stage times to `<out>/timing/worker-<i>.json`."""
  clock = synthetic_runs.Clock()
  log = lambda m: print(f"[worker {worker}] {m}", flush=True)  # pylint: disable=unnecessary-lambda-assignment
  variants = synthetic_runs.worker_units(VARIANTS, _todo(out, settings),
                                         worker, settings)
  _work(out, variants, *_prepare(out, settings, clock), log)
  log(f"{clock()} done")
  (out / "timing").mkdir(exist_ok=True)
  io_utils.atomic_write_json(out / "timing" / f"worker-{worker}.json",
                             clock.totals())


def analyse(results: Dict[str, Any]) -> Dict[str, Any]:
  """{"summary": {family: {variant: ...}}, "comparison": {family: ...}}
  from the per-run records (`seed_statistics.summarize` and `.compare`)."""
  summary = {}
  families = {r["family"] for r in results["runs"]}
  for family, metric in synthetic_runs.FAMILIES.items():
    if family not in families:
      continue
    summary[family] = {
        v: seed_statistics.summarize(
            [r for r in results["runs"]
             if r["variant"] == v and r["family"] == family],
            metric, results["train_language"])
        for v in results["variants"]}
  return {"summary": summary,
          "comparison": seed_statistics.compare(summary, BASELINE, CANDIDATE)}


def zero_shot_chance(results: Dict[str, Any]) -> Dict[str, float]:
  """Chance level of each family's zero-shot average."""
  return {f: seed_statistics.zero_shot_average(levels, results["train_language"])
          for f, levels in results["chance"].items()}


def summary_table(results: Dict[str, Any]) -> str:
  """Markdown: the zero-shot comparison, then per task a language table."""
  metrics = {f: m for f, m in synthetic_runs.FAMILIES.items()
             if f in results["summary"]}
  legend = (seed_statistics.unit_description(results["summary"]) +
            " eval SE: bootstrap standard error of one run's zero-shot "
            "average over the dev examples (upper bound). p: Welch's t-test "
            "over seeds, Holm-corrected over the tasks; a direction is "
            f"stated only for p < {seed_statistics.ALPHA}.")
  lines = [report.comparison_table(
      results["summary"], results["comparison"], metrics, BASELINE, CANDIDATE,
      zero_shot_chance(results)), "", legend, ""]
  train_lang = results["train_language"]
  variants = list(results["variants"])
  for family, metric in metrics.items():
    lines += [f"### {family} ({metric}; fine-tuned on {train_lang} only; "
              "mean ± std over seeds, eval SE in brackets)", "",
              *report.table(["language", *variants, "chance"])]
    for lang in results["languages"]:
      cells = []
      for variant in variants:
        ses = [r["languages"][lang].get(f"{metric}_se")
               for r in results["runs"]
               if r["variant"] == variant and r["family"] == family]
        se = (f" [{sum(ses) / len(ses):.1f}]" if ses and None not in ses
              else "")
        cells.append(report.pm(
            results["summary"][family][variant]["languages"][lang]) + se)
      chance = results["chance"].get(family, {}).get(lang)
      lines.append(report.row([
          lang + (" (train)" if lang == train_lang else ""), *cells,
          "" if chance is None else f"{chance:.1f}"]))
    lines.append("")
  return "\n".join(lines)


def _write(out: pathlib.Path, results: Dict[str, Any]) -> None:
  io_utils.atomic_write_json(out / "results.json", results, indent=1)
  params = "; ".join(
      f"{v}: {r['params']['pretraining_params']:,} pre-training / "
      f"{r['params']['finetuning_params']:,} fine-tuning parameters"
      for v, r in results["variants"].items())
  s, timing = results["settings"], results["timing"]
  text = (f"# Offline demo: zero-shot cross-lingual transfer\n\n"
          f"{params}. {s['pretrain_seeds']} pre-training seed(s) × "
          f"{s['finetune_seeds']} fine-tuning seeds per variant, "
          f"{s['eval_examples']} dev examples per language, seed base "
          f"{s['seed']}. Total {timing['seconds']} s wall, "
          f"{timing['cpu_seconds']} s CPU.\n\n"
          "Zero-shot averages (every language but the training one):\n\n"
          f"{summary_table(results)}")
  io_utils.atomic_write_text(out / "results.md", text)
  for family, metric in synthetic_runs.FAMILIES.items():
    if family not in results["summary"]:
      continue
    by_variant = results["summary"][family]
    groups = {v: {l: ms[0] for l, ms in s["languages"].items()}
              for v, s in by_variant.items()}
    errors = {v: {l: ms[1] for l, ms in s["languages"].items()}
              for v, s in by_variant.items()}
    eval_lib.plot_languages(
        groups, out / f"results_{family}.png",
        f"{family}: zero-shot from {results['train_language']} "
        "(mean ± std over seeds)", metric, results["chance"].get(family),
        errors=errors)


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_bool("full", False, f"the longer run: {FULL} (explicit flags "
                    "win)", flag_values=fv)
  synthetic_runs.define_flags(fv, DemoSettings, with_defaults=False)


def _settings(fv: flags.FlagValues):
  """(workdir, DemoSettings) of parsed flags; `--full` sets `FULL` unless a
  flag names the field explicitly."""
  return fv.workdir, synthetic_runs.settings_from_flags(
      fv, DemoSettings, **(FULL if fv.full else {}))


def parse_args(argv):
  """(workdir, DemoSettings) from command-line arguments (see `_settings`)."""
  return _settings(cli.parse_flags(argv, _define_flags, doc=__doc__))


def main(argv=None) -> None:
  def run_demo(fv):
    workdir, settings = _settings(fv)
    if fv.worker is not None:
      # Not pinned to a core: pinned, a worker's fine-tuning ran ~1.5x
      # slower (its input-pipeline and XLA threads then share one core).
      work(pathlib.Path(workdir), settings, fv.worker)
      return None
    return run(workdir, settings)
  results = cli.run_main(run_demo, argv, _define_flags, doc=__doc__)
  if results is None:  # a worker
    return
  print(summary_table(results))
  print(json.dumps(results["timing"]))


if __name__ == "__main__":
  main()
