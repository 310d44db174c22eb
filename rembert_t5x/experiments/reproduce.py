r"""A small-scale reproduction of the paper's embedding ablations.

  python -m rembert_t5x.experiments.reproduce --workdir /tmp/reproduce
  python -m rembert_t5x.experiments.reproduce --workdir /tmp/r --seeds 2 \
      --pretrain_steps 100 --finetune_steps 20 --eval_examples 20   # smoke

Analogs of the paper's Tables 2, 4 and 6 and of its Figure 1 (dropping the
last layers), plus per-layer linear probes (`analysis.probe`), with the tiny
models of `VARIANTS` on a 12-language synthetic benchmark; what each table
stands for, why 12 languages and how the verdicts are made:
docs/EXPERIMENTS.md ("Reproducing the paper's ablations at toy scale").
A unit is one (variant, pre-training seed): MLM pre-training, one
fine-tuning per task in the training language, zero-shot evaluation of
every language; its record `runs/<variant>/seed-<s>/unit.json` lets a
stopped run resume. `--jobs` workers are pinned to one core each (tiny
models use one core better than two). Writes `reproduce.json` (every unit,
the tables, the tests), `reproduce.md` and `reproduce.png`.
"""

import dataclasses
import json
import pathlib
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from absl import flags
import numpy as np

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x import configs
from rembert_t5x.data import synthetic
from rembert_t5x.experiments import analysis
from rembert_t5x.experiments import demo
from rembert_t5x.experiments import report
from rembert_t5x.experiments import sweep
from rembert_t5x.experiments import synthetic_runs
from rembert_t5x import network
from rembert_t5x.runner import jobs as runner_jobs
from rembert_t5x.scoring import seed_statistics

NUM_LANGUAGES = 12
# The most SentencePiece makes of the 12-language corpus is 724 pieces (every
# name and six loans are shared: `synthetic.ANCHOR_WORDS`).
VOCAB_SIZE = 720
# The base's MLP: 2.25 H (the tiny config's is 4 H), so that the 48 x 720
# parameters E_in = 16 saves pay for one more layer (see VARIANTS).
BASE = dict(mlp_dim=144)

# name: overrides of the base model, the tiny config (`sweep.TINY_GIN`: H =
# 64, 2 layers of 4 heads x 16) with `BASE`. E_in = 16 is H / 4 (the paper's 128 is
# H / 6); E_out 16 / 64 / 256 is H / 4, H, 4H (paper: 128, 768 = H, 3072 = 4H).
VARIANTS: Dict[str, Dict[str, Any]] = {
    "coupled": dict(input_embed_dim=64, output_embed_dim=64,
                    tie_embeddings=True),
    "decoupled": dict(input_embed_dim=64, output_embed_dim=64),
    "ein16_eout16": dict(input_embed_dim=16, output_embed_dim=16),
    "ein16_eout64": dict(input_embed_dim=16, output_embed_dim=64),
    "ein16_eout256": dict(input_embed_dim=16, output_embed_dim=256),
    # The 48 x 720 parameters E_in = 16 saves, reinvested: a third layer
    # (+35k), or H = 80 (5 heads, MLP 180 = 2.25 H; +41k) -- fine-tuning
    # sizes within 4% of the coupled model's, as the paper matches them.
    "ein16_deeper": dict(input_embed_dim=16, output_embed_dim=64,
                         num_layers=3),
    "ein16_wider": dict(input_embed_dim=16, output_embed_dim=64, emb_dim=80,
                        num_heads=5, mlp_dim=180),
}


@dataclasses.dataclass(frozen=True)
class Direction:
  """One of the paper's claims: every (baseline, candidate) pair is expected
  to come out with the candidate higher."""
  claim: str
  comparisons: Sequence[tuple]


@dataclasses.dataclass(frozen=True)
class Table:
  title: str
  rows: Sequence[str]
  direction: Direction
  paper: str  # the paper's numbers for the direction, for the results table


TABLES: Dict[str, Table] = {
    "table2": Table(
        "Table 2: coupled vs decoupled embeddings at equal sizes",
        ("coupled", "decoupled"),
        Direction("decoupled above coupled", (("coupled", "decoupled"),)),
        "avg 62.3 -> 62.7 (+0.4, not on every task)"),
    "table4": Table(
        "Table 4: output embedding size with a small input embedding",
        ("ein16_eout16", "ein16_eout64", "ein16_eout256"),
        Direction("the score rises with E_out",
                  (("ein16_eout16", "ein16_eout64"),
                   ("ein16_eout64", "ein16_eout256"))),
        "avg 56.6 / 60.2 / 61.8 for E_out 128 / 768 / 3072, monotone on "
        "every task"),
    "table6": Table(
        "Table 6: the saved input-embedding parameters reinvested",
        ("coupled", "ein16_eout64", "ein16_wider", "ein16_deeper"),
        Direction("reinvesting in width or depth beats the coupled baseline",
                  (("coupled", "ein16_wider"), ("coupled", "ein16_deeper"))),
        "avg 62.3 (coupled) -> 64.5 (width) / 66.2 (depth); E_in small "
        "without reinvesting 60.2"),
}
FIGURE1_VARIANTS = TABLES["table4"].rows
FIGURE1_FAMILY = "tag"


@dataclasses.dataclass
class Settings(synthetic_runs.RunSettings):
  """Sizes and seeds of one reproduction (every field is a flag); the
  pre-training regime, learning rates and fine-tuning steps are the demo's
  (`demo.DemoSettings`: the regime in which its tiny encoders leave the
  unigram plateau and tagging transfers)."""
  pretrain_steps: int = demo.DemoSettings.pretrain_steps
  pretrain_length: int = demo.DemoSettings.pretrain_length
  pair_finetune_steps: int = demo.DemoSettings.pair_finetune_steps
  pair_finetune_learning_rate: float = (
      demo.DemoSettings.pair_finetune_learning_rate)
  eval_examples: int = 150
  seeds: int = 3
  corpus_sentences: int = 2000
  figure1: bool = True
  probes: bool = True

  def check(self) -> None:
    super().check("seeds")


def variant_config(name: str) -> network.RemBertConfig:
  """The network config of one variant (the base with its overrides)."""
  if name not in VARIANTS:
    raise errors.UserError(f"unknown variant {name!r}; expected one of "
                           f"{sorted(VARIANTS)}")
  return synthetic_runs.model_config(vocab_size=VOCAB_SIZE,
                                     **{**BASE, **VARIANTS[name]})


def units(settings: Settings) -> List[tuple]:
  """Every (variant, pre-training seed index), seeds outermost so that a
  partial run has every variant at its first seeds."""
  return [(v, s) for s in range(settings.seeds) for v in VARIANTS]


def unit_path(out: pathlib.Path, variant: str, seed: int) -> pathlib.Path:
  return out / "runs" / variant / f"seed-{seed}" / "unit.json"


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

def prepare(out: pathlib.Path, settings: Settings):
  """(manifest, `synthetic_runs.Session`) of the 12-language synthetic
  benchmark."""
  manifest, names = synthetic_runs.prepare_data(
      out, settings, "repro_", vocab_size=VOCAB_SIZE,
      num_languages=NUM_LANGUAGES)
  return manifest, synthetic_runs.Session(settings, "repro_", names)


# --------------------------------------------------------------------------
# One unit: pre-train, fine-tune, evaluate
# --------------------------------------------------------------------------

def run_unit(out: pathlib.Path, variant: str, p: int,
             session: synthetic_runs.Session, languages: Sequence[str],
             log: Callable[[str], None]) -> Dict[str, Any]:
  """Runs one (variant, seed) unit and writes its record.

  `session` is shared by the units of one worker, so each task family's
  evaluation examples are built once.
  """
  settings = session.settings
  config = variant_config(variant)
  unit_dir = unit_path(out, variant, p).parent
  seed = settings.seed + p
  start = time.time()
  pre_dir = unit_dir / "pretrain"
  log(f"{variant} seed {p}: pre-training {settings.pretrain_steps} steps")
  mlm = session.pretrain(config, str(pre_dir), seed)

  def finetune(family: str, layers: int) -> Dict[str, Dict[str, float]]:
    cfg = config if layers == config.num_layers else analysis.layer_config(
        config, layers)
    ft_dir = unit_dir / (family if layers == config.num_layers
                         else f"{family}-layers{layers}")
    log(f"{variant} seed {p}: {family}, {layers} layers, "
        f"{settings.finetune(family)[0]} steps")
    return session.finetune(synthetic_runs.finetune_model(family, cfg),
                            str(ft_dir), family,
                            sweep.demo_tasks()[family].length, seed,
                            str(pre_dir))

  record = {"variant": variant, "pretrain_seed": p, "seed": seed,
            "params": configs.count_parameters(config),
            "mlm": mlm,
            "families": {f: finetune(f, config.num_layers)
                         for f in synthetic_runs.FAMILIES}}
  if settings.figure1 and variant in FIGURE1_VARIANTS:
    record["figure1"] = {
        str(l): finetune(FIGURE1_FAMILY, l)
        for l in range(1, config.num_layers)}
  if settings.probes and variant in FIGURE1_VARIANTS:
    task = sweep.demo_tasks(prefix="repro_")[FIGURE1_FAMILY]
    result = analysis.probe(
        str(unit_dir / "probe"), config, str(pre_dir), task,
        languages=languages, task_prefix="repro_",
        log=lambda m: None)
    record["probe"] = {str(r["layer"]): r["scores"] for r in result["rows"]}
  record["seconds"] = round(time.time() - start, 1)
  io_utils.atomic_write_json(unit_path(out, variant, p), record, indent=1)
  return record


# --------------------------------------------------------------------------
# Units in processes
# --------------------------------------------------------------------------

def work(out: pathlib.Path, settings: Settings, todo: Sequence[tuple],
         log: Callable[[str], None] = print) -> None:
  """Runs the units of `todo` in this process."""
  manifest, session = prepare(out, settings)
  with synthetic_runs.compilation_cache(out / "xla_cache"):
    for variant, p in todo:
      record = run_unit(out, variant, p, session, manifest["languages"], log)
      log(f"{variant} seed {p}: done in {record['seconds']} s")


def _todo(out: pathlib.Path, settings: Settings) -> List[tuple]:
  return [u for u in units(settings) if not unit_path(out, *u).exists()]


def run(workdir: str, settings: Settings = Settings(),
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """The whole reproduction: units (`synthetic_runs.run_units`), then the
  tables; returns the results record."""
  settings.check()
  out = pathlib.Path(workdir)
  out.mkdir(parents=True, exist_ok=True)
  clock = synthetic_runs.Clock()
  prepare(out, settings)  # once, before the workers
  todo = _todo(out, settings)
  workers = synthetic_runs.run_units(
      "rembert_t5x.experiments.reproduce", out, settings, todo,
      lambda units_: work(out, settings, units_, log), log)
  records = [json.loads(unit_path(out, *u).read_text())
             for u in units(settings)]
  results = analyse(records, settings)
  results["timing"] = {**clock.elapsed(), "jobs": max(workers, 1),
                       "units_run": len(todo)}
  write(out, results)
  log(f"wrote {out / 'reproduce.md'}")
  return results


# --------------------------------------------------------------------------
# Tables and tests
# --------------------------------------------------------------------------

FAMILIES = synthetic_runs.FAMILIES
REPRODUCED, OPPOSITE = "reproduced", "opposite at this scale"
NOT_REPRODUCED = "not reproduced at this scale (no significant difference)"
NOT_TESTED = "not tested (fewer than 2 seeds a side)"


def unit_scores(record: Mapping[str, Any], train_language: str
                ) -> Dict[str, float]:
  """{family: zero-shot average, "avg": mean over the families} of a unit."""
  scores = {f: seed_statistics.zero_shot_average(
      {l: m[metric] for l, m in record["families"][f].items()},
      train_language) for f, metric in FAMILIES.items()}
  scores["avg"] = float(np.mean([scores[f] for f in FAMILIES]))
  return scores


def direction_verdict(tests: Sequence[Mapping[str, Any]],
                      alpha: float = seed_statistics.ALPHA) -> str:
  """The verdict on one of the paper's directions from its comparisons
  (each {"difference", "p_holm"}, candidate − baseline)."""
  if not tests or any(t["p_holm"] is None for t in tests):
    return NOT_TESTED
  significant = [t for t in tests if t["p_holm"] < alpha]
  if any(t["difference"] < 0 for t in significant):
    return OPPOSITE
  if len(significant) == len(tests):
    return REPRODUCED
  return NOT_REPRODUCED


def test_direction(direction: Direction,
                   values: Mapping[str, Sequence[float]]) -> Dict[str, Any]:
  """Welch's test of every comparison of `direction` on the per-seed values
  (`values[variant]`), Holm-corrected over the direction's comparisons."""
  tests = [dict(baseline=a, candidate=b, **test) for (a, b), test in zip(
      direction.comparisons, seed_statistics.welch_holm(
          [(values[a], values[b]) for a, b in direction.comparisons]))]
  return {"claim": direction.claim, "comparisons": tests,
          "verdict": direction_verdict(tests)}


def _layer_curve(records, key: str, train_language: str,
                 metric: Optional[str]) -> Dict[str, List[float]]:
  """{layers: [per-seed zero-shot average]} of a unit's per-layer results
  (fine-tuned `figure1`, metric given; or `probe` accuracies, metric None)."""
  curve: Dict[str, List[float]] = {}
  for r in records:
    for layers, langs in r.get(key, {}).items():
      scores = {l: (m[metric] if metric else m) for l, m in langs.items()}
      curve.setdefault(layers, []).append(
          seed_statistics.zero_shot_average(scores, train_language))
  return curve


def analyse(records: Sequence[Mapping[str, Any]], settings: Settings,
            train_language: Optional[str] = None) -> Dict[str, Any]:
  """Tables, per-variant summaries and the direction tests of the units."""
  train_language = train_language or synthetic.TRAIN_LANGUAGE
  by_variant: Dict[str, List[Mapping[str, Any]]] = {}
  for r in records:
    by_variant.setdefault(r["variant"], []).append(r)
  variants = {}
  for name, runs in by_variant.items():
    runs = sorted(runs, key=lambda r: r["pretrain_seed"])
    per_seed = [unit_scores(r, train_language) for r in runs]
    variants[name] = {
        "params": runs[0]["params"],
        "config": VARIANTS.get(name, {}),
        "seeds": [r["pretrain_seed"] for r in runs],
        "values": {k: [s[k] for s in per_seed] for k in per_seed[0]},
        "mean_std": {k: list(seed_statistics.mean_std([s[k] for s in per_seed]))
                     for k in per_seed[0]},
        "mlm_accuracy": list(seed_statistics.mean_std(
            [100 * r["mlm"].get("mlm/accuracy", float("nan")) for r in runs])),
        # The fine-tuning check: the score in the language it was trained on.
        "train_language": {
            f: list(seed_statistics.mean_std(
                [r["families"][f][train_language][m] for r in runs]))
            for f, m in FAMILIES.items()},
    }
    fig = _layer_curve(runs, "figure1", train_language, FAMILIES[FIGURE1_FAMILY])
    if fig:  # the run with every layer is the unit's main fine-tuning
      fig[str(variant_config(name).num_layers)] = (
          variants[name]["values"][FIGURE1_FAMILY])
      variants[name]["figure1"] = fig
    probe = _layer_curve(runs, "probe", train_language, None)
    if probe:
      variants[name]["probe"] = probe
  tables = {}
  for key, table in TABLES.items():
    if all(v in variants for v in table.rows):
      tables[key] = test_direction(
          table.direction, {v: variants[v]["values"]["avg"] for v in variants})
  figure1 = None
  curves = {v: variants[v]["figure1"] for v in FIGURE1_VARIANTS
            if "figure1" in variants.get(v, {})}
  if len(curves) == len(FIGURE1_VARIANTS):
    # Paper Figure 1: dropping the last layer costs more as E_out grows.
    costs = {}
    for v, curve in curves.items():
      full, dropped = max(curve, key=int), str(max(int(k) for k in curve) - 1)
      costs[v] = [a - b for a, b in zip(curve[full], curve[dropped])]
    figure1 = test_direction(
        Direction("dropping the last layer costs more as E_out grows",
                  ((FIGURE1_VARIANTS[0], FIGURE1_VARIANTS[-1]),)), costs)
    figure1["drop_cost"] = {v: list(seed_statistics.mean_std(c))
                            for v, c in costs.items()}
  return {"settings": dataclasses.asdict(settings),
          "train_language": train_language, "variants": variants,
          "tests": tables, "figure1": figure1, "units": list(records)}


def _config_cells(name: str, params: Mapping[str, int]) -> List[str]:
  c = variant_config(name)
  return [f"{c.input_embed_dim}", f"{c.output_embed_dim}"
          + (" (tied)" if c.tie_embeddings else ""),
          f"{c.emb_dim}", f"{c.num_layers}",
          f"{params['pretraining_params'] / 1e3:.0f}k",
          f"{params['finetuning_params'] / 1e3:.0f}k"]


def markdown(results: Mapping[str, Any]) -> str:
  """The paper-style tables, the direction tests and the analyses."""
  s, v = results["settings"], results["variants"]
  lines = []
  for key, table in TABLES.items():
    if key not in results["tests"]:
      continue
    lines += [f"### {table.title}", ""] + report.table(
        ("model", "E_in", "E_out", "H", "layers", "PT params", "FT params",
         "pair (acc)", "tag (F1)", "QA (F1)", "avg"),
        ([name, *_config_cells(name, v[name]["params"]),
          *(report.pm(v[name]["mean_std"][k]) for k in [*FAMILIES, "avg"])]
         for name in table.rows))
    test = results["tests"][key]
    lines += ["", f"Paper: {table.paper}. Direction tested: "
              f"**{test['claim']}** — **{test['verdict']}**.", ""]
    for t in test["comparisons"]:
      p = "n/a" if t["p_holm"] is None else f"{t['p_holm']:.3f}"
      ci = ("" if t["low"] is None else
            f" [{t['low']:+.1f}, {t['high']:+.1f}]")
      detectable = ("" if t.get("detectable") is None else
                    f"; detectable with 80% power: ±{t['detectable']:.1f}")
      lines.append(f"- {t['candidate']} − {t['baseline']}: avg "
                   f"{t['difference']:+.1f}{ci}, p (Welch, Holm) = {p}"
                   f"{detectable}")
    lines.append("")
  if results.get("figure1"):
    f1 = results["figure1"]
    kept = sorted(v[FIGURE1_VARIANTS[0]]["figure1"], key=int)
    lines += ["### Figure 1 analog: fine-tuning the first l layers only "
              f"({FIGURE1_FAMILY}, zero-shot F1)", ""] + report.table(
                  ["model", *(f"{l} layer(s)" for l in kept),
                   "cost of dropping the last layer"],
                  ([name, *(report.pm(seed_statistics.mean_std(
                      v[name]["figure1"][l])) for l in kept),
                    report.pm(f1["drop_cost"][name])]
                   for name in FIGURE1_VARIANTS))
    t = f1["comparisons"][0]
    p = "n/a" if t["p"] is None else f"{t['p']:.3f}"
    lines += ["", f"Paper: with E_out = 128 the last layers can go, with "
              f"3072 every layer is useful. Tested: **{f1['claim']}** "
              f"({t['candidate']} − {t['baseline']} {t['difference']:+.1f}, "
              f"p = {p}) — **{f1['verdict']}**.", ""]
  lines += ["### Convergence check: MLM accuracy (last pre-training steps) "
            f"and scores in the training language ({results['train_language']})",
            ""] + report.table(
                ("model", "MLM accuracy", "pair (acc)", "tag (F1)", "QA (F1)"),
                ([name, report.pm(v[name]["mlm_accuracy"]),
                  *(report.pm(v[name]["train_language"][f]) for f in FAMILIES)]
                 for name in VARIANTS if name in v)) + [""]
  probes = {name: v[name]["probe"] for name in FIGURE1_VARIANTS
            if "probe" in v.get(name, {})}
  if probes:
    layers = sorted(next(iter(probes.values())), key=int)
    lines += ["### Linear probes of the frozen pre-trained layers "
              "(entity tags, token accuracy, zero-shot average)", ""] + (
                  report.table(["model", *(f"layer {l}" for l in layers)],
                               ([name, *(report.pm(seed_statistics.mean_std(
                                   curve[l])) for l in layers)]
                                for name, curve in probes.items()))) + [""]
  seeds = sorted({len(x["seeds"]) for x in v.values()})
  n = "–".join(str(k) for k in (seeds[0], seeds[-1])) if len(seeds) > 1 else (
      str(seeds[0]) if seeds else "0")
  lines.append(
      f"Mean ± std over {n} pre-training seed(s) (one fine-tuning run each); "
      "scores are zero-shot averages over the 11 languages other than the "
      f"training one ({results['train_language']}), {s['eval_examples']} dev "
      "examples each; avg = mean of the three tasks. p: Welch's t-test over "
      "pre-training seeds on avg, Holm-corrected over the direction's "
      f"comparisons; a direction is reproduced only if every comparison has "
      f"p < {seed_statistics.ALPHA} in the paper's direction. Detectable: the "
      "smallest true difference the test would find with 80% power at "
      "Holm's first threshold, from the seeds' spreads "
      "(`seed_statistics.detectable_difference`): a direction 'not "
      "reproduced' says only that any effect is below it.")
  return "\n".join(lines)


def plot(results: Mapping[str, Any], path: pathlib.Path) -> None:
  """One panel per table (avg per variant, mean ± std, seeds as dots) and
  the Figure 1 analog."""
  v = results["variants"]
  keys = [k for k in TABLES if k in results["tests"]]
  panels = len(keys) + bool(results.get("figure1"))
  with report.figure(path, panels, (4.2 * panels, 3.8), dpi=110) as (_, axes):
    for ax, key in zip(axes, keys):
      rows = TABLES[key].rows
      means = [v[r]["mean_std"]["avg"][0] for r in rows]
      stds = [v[r]["mean_std"]["avg"][1] for r in rows]
      ax.bar(range(len(rows)), means, yerr=stds, capsize=4, color="#8fb3d9")
      for i, r in enumerate(rows):
        ax.plot([i] * len(v[r]["values"]["avg"]), v[r]["values"]["avg"], "k.")
      ax.set_xticks(range(len(rows)))
      ax.set_xticklabels(rows, rotation=30, ha="right", fontsize=8)
      pad = 3 * max(stds + [1])
      ax.set_ylim(min(means) - pad, max(means) + pad)
      ax.set_title(f"{key}: {results['tests'][key]['verdict'].split(' (')[0]}",
                   fontsize=9)
      ax.set_ylabel("zero-shot avg of pair/tag/QA")
    if results.get("figure1"):
      ax = axes[-1]
      for name in FIGURE1_VARIANTS:
        curve = v[name]["figure1"]
        layers = sorted(curve, key=int)
        ms = [seed_statistics.mean_std(curve[l]) for l in layers]
        ax.errorbar([int(l) for l in layers], [m for m, _ in ms],
                    yerr=[s for _, s in ms], marker="o", capsize=3, label=name)
      ax.set_xlabel("layers kept")
      ax.set_ylabel(f"{FIGURE1_FAMILY} zero-shot F1")
      ax.set_title("Figure 1 analog", fontsize=9)
      ax.legend(fontsize=7)


def write(out: pathlib.Path, results: Mapping[str, Any]) -> None:
  io_utils.atomic_write_json(out / "reproduce.json", results, indent=1)
  timing = results.get("timing", {})
  header = (f"# Small-scale reproduction of the paper's ablations\n\n"
            f"{timing.get('seconds', '?')} s wall, "
            f"{timing.get('cpu_seconds', '?')} s CPU, "
            f"{timing.get('jobs', '?')} worker process(es), "
            f"{timing.get('units_run', '?')} unit(s) run by this call.\n\n")
  io_utils.atomic_write_text(out / "reproduce.md", header + markdown(results))
  plot(results, out / "reproduce.png")


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def _define_flags(fv: flags.FlagValues) -> None:
  synthetic_runs.define_flags(fv, Settings)


def main(argv=None) -> None:
  def run_command(fv):
    settings = synthetic_runs.settings_from_flags(fv, Settings)
    if fv.worker is not None:
      runner_jobs.pin_to_core(fv.worker)
      start, out = time.time(), pathlib.Path(fv.workdir)
      work(out, settings, synthetic_runs.worker_units(
          units(settings), _todo(out, settings), fv.worker, settings),
           log=lambda m: print(f"[worker {fv.worker} {time.time() - start:5.0f}s]"
                               f" {m}", flush=True))
      return None
    return run(fv.workdir, settings)
  results = cli.run_main(run_command, argv, _define_flags, doc=__doc__)
  if results is not None:
    print(markdown(results))
    print(json.dumps(results["timing"]))


if __name__ == "__main__":
  main()
