r"""The offline demo: coupled vs decoupled embeddings, zero-shot transfer.

  python -m rembert_t5x.demo --workdir /tmp/demo

On one CPU machine, with nothing downloaded:
  1. generates a synthetic multilingual corpus (languages that share a latent
     grammar but not their words or scripts, plus shared anchors such as
     digits and names) and synthetic tasks in the XTREME formats;
  2. trains a SentencePiece vocabulary on the corpus;
  3. pre-trains two tiny models with MLM: coupled (tied E_in = E_out = H, the
     mBERT baseline) and decoupled (E_in < H < E_out, RemBERT's design);
  4. fine-tunes each on pair classification, entity tagging and extractive
     QA in the training language only, from the pre-trained encoder (the MLM
     head, the output embedding, is dropped);
  5. evaluates every language zero-shot and writes `results.json` and
     `results.md` (per variant, task and language, with chance levels) and
     `results.png`.

Every stage is the same code a real run uses: SeqIO tasks, our feature
converters, the model classes T5X trains, the local runner and SeqIO's
evaluator.
"""

import argparse
import dataclasses
import pathlib
import sys
import time
from typing import Any, Dict

from rembert_t5x import cli
from rembert_t5x import configs
from rembert_t5x import eval as eval_lib
from rembert_t5x import io_utils
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import synthetic
from rembert_t5x import synthetic_baselines
from rembert_t5x import train

VARIANTS = {
    "coupled": "gin_configs/models/tiny_coupled.gin",
    "decoupled": "gin_configs/models/tiny.gin",
}
TASKS = {
    # family: (objective, input length, main metric)
    "pair": ("pair", 64, "accuracy"),
    "tag": ("tagging", 64, "f1"),
    "qa": ("qa", 96, "f1"),
}
NUM_CLASSES = {"pair": 2, "tag": len(synthetic.TAGS)}


@dataclasses.dataclass
class DemoSettings:
  pretrain_steps: int = 2000
  finetune_steps: int = 200
  batch_size: int = 32
  pretrain_length: int = 64
  pretrain_learning_rate: float = 3e-3
  finetune_learning_rate: float = 5e-4
  # Sentence-pair comparison is learnt more slowly than tagging or QA: it
  # gets more steps and a higher learning rate.
  pair_finetune_steps: int = 600
  pair_finetune_learning_rate: float = 1e-3
  seed: int = 0

  def finetune(self, family: str):
    """(steps, learning rate) for fine-tuning one task family."""
    if family == "pair":
      return self.pair_finetune_steps, self.pair_finetune_learning_rate
    return self.finetune_steps, self.finetune_learning_rate


def run(workdir: str, settings: DemoSettings = DemoSettings(),
        log=print) -> Dict[str, Any]:
  """Runs the whole demo under `workdir`; returns the results record."""
  from rembert_tasks import synthetic as synthetic_tasks  # pylint: disable=g-import-not-at-top

  out = pathlib.Path(workdir)
  out.mkdir(parents=True, exist_ok=True)
  start = time.time()
  stamp = lambda: f"[{time.time() - start:5.0f}s]"
  log(f"{stamp()} synthetic data and vocabulary in {out / 'data'}")
  manifest = synthetic_tasks.prepare(str(out / "data"), seed=settings.seed)
  names = synthetic_tasks.register_synthetic(manifest, prefix="demo_")
  vocab_size = synthetic_tasks.VOCAB_SIZE
  chance = synthetic_baselines.chance_levels(manifest["dir"], split="dev")

  results: Dict[str, Any] = {"variants": {}, "chance": chance,
                             "languages": manifest["languages"],
                             "train_language": manifest["train_language"],
                             "settings": dataclasses.asdict(settings)}
  for variant, gin_file in VARIANTS.items():
    config = dataclasses.replace(configs.config_from_gin(gin_file),
                                 vocab_size=vocab_size)
    counts = configs.count_parameters(config)
    results["variants"][variant] = {"params": counts, "tasks": {}}
    pre_dir = out / variant / "pretrain"
    log(f"{stamp()} {variant}: pre-training {settings.pretrain_steps} steps "
        f"({counts['pretraining_params']:,} parameters)")
    pre = train.train(
        str(pre_dir), model=models.RemBertMLMModel(
            network.RemBertForMaskedLM(config), max_predictions_per_seq=16),
        mixture_or_task_name=names["mlm"],
        task_feature_lengths={"input_tokens": settings.pretrain_length},
        train_steps=settings.pretrain_steps, batch_size=settings.batch_size,
        learning_rate=settings.pretrain_learning_rate,
        warmup_steps=settings.pretrain_steps // 10, pack=True,
        checkpoint_period=settings.pretrain_steps, log_period=50,
        seed=settings.seed, progress_bar=False)
    results["variants"][variant]["mlm"] = {
        "loss": pre["loss"], "accuracy": pre["mlm/accuracy"]}
    for family, (kind, length, metric) in TASKS.items():
      steps, learning_rate = settings.finetune(family)
      log(f"{stamp()} {variant}: fine-tuning {family} on "
          f"{manifest['train_language']}, {steps} steps")
      model = _finetune_model(kind, config, family)
      lengths = {"input_tokens": length}
      ft_dir = out / variant / family
      train.train(
          str(ft_dir), model=model,
          mixture_or_task_name=f"demo_{family}_train",
          task_feature_lengths=lengths, train_steps=steps,
          batch_size=settings.batch_size, learning_rate=learning_rate,
          warmup_steps=steps // 10, checkpoint_period=steps, log_period=50,
          seed=settings.seed, init_checkpoint=str(pre_dir),
          progress_bar=False)
      log(f"{stamp()} {variant}: evaluating {family} zero-shot")
      params = train.load_params(str(ft_dir))
      task_metrics = eval_lib.evaluate_params(
          model, params, names[family], "validation", lengths)
      results["variants"][variant]["tasks"][family] = {
          eval_lib.task_language(t): m for t, m in task_metrics.items()}
  results["seconds"] = round(time.time() - start, 1)
  _write(out, results)
  log(f"{stamp()} wrote {out / 'results.md'}")
  return results


def _finetune_model(kind: str, config: network.RemBertConfig, family: str):
  module = models.make_module(kind, config, NUM_CLASSES.get(family))
  if kind == "pair":
    return models.RemBertPairClassificationModel(module)
  if kind == "tagging":
    return models.RemBertTaggingModel(module)
  from rembert_tasks import synthetic as synthetic_tasks  # pylint: disable=g-import-not-at-top
  return models.RemBertQAModel(
      module, max_answer_length=synthetic_tasks.QA_SETTINGS["max_answer_length"])


def summary_table(results: Dict[str, Any]) -> str:
  """Markdown: one table per task, languages as rows, variants as columns."""
  lines = []
  train_lang = results["train_language"]
  for family, (_, _, metric) in TASKS.items():
    lines += [f"### {family} ({metric}; fine-tuned on {train_lang} only)", "",
              "| language | " + " | ".join(results["variants"]) + " | chance |",
              "|---|" + "---|" * (len(results["variants"]) + 1)]
    for lang in results["languages"]:
      cells = []
      for variant in results["variants"].values():
        value = variant["tasks"].get(family, {}).get(lang, {}).get(metric)
        cells.append("" if value is None else f"{value:.1f}")
      chance = results["chance"].get(family, {}).get(lang)
      note = " (train)" if lang == train_lang else ""
      lines.append(f"| {lang}{note} | " + " | ".join(cells) +
                   f" | {'' if chance is None else f'{chance:.1f}'} |")
    zero_shot = [l for l in results["languages"] if l != train_lang]
    cells = []
    for variant in results["variants"].values():
      values = [variant["tasks"].get(family, {}).get(l, {}).get(metric)
                for l in zero_shot]
      values = [v for v in values if v is not None]
      cells.append(f"{sum(values) / len(values):.1f}" if values else "")
    chances = [results["chance"].get(family, {}).get(l) for l in zero_shot]
    chances = [c for c in chances if c is not None]
    lines.append("| **zero-shot avg** | " + " | ".join(cells) + " | " +
                 (f"{sum(chances) / len(chances):.1f}" if chances else "") + " |")
    lines.append("")
  return "\n".join(lines)


def _write(out: pathlib.Path, results: Dict[str, Any]) -> None:
  io_utils.atomic_write_json(out / "results.json", results, indent=1)
  params = "; ".join(
      f"{v}: {r['params']['pretraining_params']:,} pre-training / "
      f"{r['params']['finetuning_params']:,} fine-tuning parameters"
      for v, r in results["variants"].items())
  text = (f"# Offline demo: zero-shot cross-lingual transfer\n\n"
          f"{params}. Total time {results['seconds']} s.\n\n"
          f"{summary_table(results)}")
  io_utils.atomic_write_text(out / "results.md", text)
  for family, (_, _, metric) in TASKS.items():
    groups = {v: {l: m[metric] for l, m in r["tasks"].get(family, {}).items()
                  if metric in m}
              for v, r in results["variants"].items()}
    eval_lib.plot_languages(groups, out / f"results_{family}.png",
                            f"{family}: zero-shot from "
                            f"{results['train_language']}", metric,
                            results["chance"].get(family))


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", required=True)
  for field in dataclasses.fields(DemoSettings):
    parser.add_argument(f"--{field.name}", type=field.type
                        if field.type in (int, float) else type(field.default),
                        default=field.default)
  args = parser.parse_args(argv)
  settings = DemoSettings(**{f.name: getattr(args, f.name)
                             for f in dataclasses.fields(DemoSettings)})
  try:
    results = run(args.workdir, settings)
  except cli.UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  print(summary_table(results))


if __name__ == "__main__":
  main()
