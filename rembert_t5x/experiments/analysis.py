r"""Paper §5 analyses of a pre-trained encoder: dropped layers and layer probes.

  # Figure 1: drop the last k layers, fine-tune what is kept.
  python -m rembert_t5x.experiments.analysis --mode=drop_layers --pretrained=/tmp/m \
    --workdir=/tmp/drop --task=tag --layers=1,2
  # Linear probes of frozen per-layer features (0 = embeddings).
  python -m rembert_t5x.experiments.analysis --mode=probe --pretrained=/tmp/m \
    --workdir=/tmp/probe --task=tag

Both read the synthetic demo tasks (`rembert_tasks.synthetic`) and a model
gin file describing the pre-trained model (default the tiny one). Each mode
writes `<mode>.json`, `<mode>.md` and `<mode>.png` to --workdir.

drop_layers keeps the first l layers of the pre-trained encoder
(`models.finetuning_params_from_pretraining` with num_layers = l), fine-tunes
on the training language and evaluates every language's dev set.

probe takes frozen layer-l features without touching the network: running the
encoder with `num_layers=l` on the first l layers' parameters gives exactly
the hidden state after layer l (l = 0: embeddings and the E_in -> H
projection). A linear softmax classifier (Adam, full batch) is trained on
training-language features and scored on every language's dev set: tokens
of words (first sub-tokens) for `tag`, mean-pooled sequences for `pair`.
"""

import dataclasses
import functools
import json
import pathlib
import time
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x import configs
from rembert_t5x.experiments import sweep
from rembert_t5x import layer_stacking
from rembert_t5x import network
from rembert_t5x.runner import checkpoints


def layer_config(config: network.RemBertConfig, num_layers: int
                 ) -> network.RemBertConfig:
  """`config` cut to its first `num_layers` layers (no pre-training-only ones).

  Unscanned: the truncated encoder reads per-layer params
  (`encoder_params`), whatever the checkpoint's layout.
  """
  return dataclasses.replace(config, num_layers=num_layers, scan_layers=False,
                             num_pretraining_only_layers=0)


def encoder_params(pretrained: Mapping[str, Any], num_layers: int
                   ) -> Dict[str, Any]:
  """The pre-trained encoder's embeddings, projection and layers < num_layers."""
  encoder = layer_stacking.unstack_layers(pretrained)["encoder"]
  return {k: v for k, v in encoder.items()
          if not (k.startswith("layers_") and int(k[7:]) >= num_layers)}


def layer_features(config: network.RemBertConfig, pretrained, num_layers: int,
                   batch: Mapping[str, np.ndarray]) -> np.ndarray:
  """`[batch, length, emb_dim]` hidden states after layer `num_layers`.

  Layer 0 is the input of the first layer (embeddings, projected to H): a
  config needs at least one layer, so it is read from a one-layer encoder's
  captured intermediates.
  """
  params = encoder_params(pretrained, max(num_layers, 1))
  inputs = (batch["input_tokens"], batch["token_types"], batch["segment_ids"],
            batch["positions"])
  first = "embedding_projection" if "embedding_projection" in params else "embeddings"
  features = _features_fn(config, num_layers, first if not num_layers else None)
  return np.asarray(features(params, *inputs))


@functools.lru_cache(maxsize=None)
def _features_fn(config: network.RemBertConfig, num_layers: int,
                 capture: Optional[str]):
  """The jitted `(params, *inputs) -> features` of one layer count.

  One compiled program per (config, layer count), reused for every batch
  and language (un-jitted, Flax dispatches every op of the encoder one by
  one). `capture` names the module whose output is layer 0's features.
  """
  module = network.RemBertEncoder(layer_config(config, max(num_layers, 1)))

  def features(params, *inputs):
    if capture is None:
      return module.apply({"params": params}, *inputs)
    _, state = module.apply(
        {"params": params}, *inputs,
        capture_intermediates=lambda mdl, _: mdl.name == capture)
    return state["intermediates"][capture]["__call__"][0]

  return jax.jit(features)


# --------------------------------------------------------------------------
# drop_layers
# --------------------------------------------------------------------------

def drop_layers(workdir: str, config: network.RemBertConfig, pretrained: str,
                task: sweep.TaskSpec, kept_layers: Sequence[int],
                learning_rate: Optional[float] = None, seed: int = 0,
                log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Fine-tunes the first l pre-trained layers for each l; scores per language.

  Each kept-layer count is a grid point of its own (`sweep.run_point` under
  `workdir/l=<l>/`), resumable like a sweep.
  """
  lr = learning_rate or task.learning_rates[-1]
  rows = []
  for l in kept_layers:
    if not 0 <= l <= config.num_layers:
      raise errors.UserError(f"cannot keep {l} layers of {config.num_layers}")
    sub = str(pathlib.Path(workdir) / f"l={l}")
    point = sweep.GridPoint(task, lr, seed)
    path = sweep.results_path(sub, point)
    if path.exists():
      log(f"{l} layers: done, skipped")
    else:
      log(f"{l} layers: fine-tuning {task.name} {task.train_steps} steps")
      sweep.run_point(sub, point, layer_config(config, l), pretrained)
    record = json.loads(path.read_text())
    scores = sweep.family_scores(record)[task.evaluations[0].family]
    zero = [v for lang, v in scores.items() if lang != task.train_language]
    rows.append({"layers": l, "scores": scores,
                 "train_language": scores[task.train_language],
                 "avg": float(np.mean(list(scores.values()))),
                 "zero_shot_avg": float(np.mean(zero)) if zero else None})
  return {"mode": "drop_layers", "task": task.name, "learning_rate": lr,
          "seed": seed, "total_layers": config.num_layers,
          "train_language": task.train_language, "rows": rows}


# --------------------------------------------------------------------------
# probe
# --------------------------------------------------------------------------

def _examples(task: sweep.TaskSpec, task_name: str, split: str, limit: int,
              config) -> list:
  # Deferred: seqio and TensorFlow (seconds); `--help` needs neither.
  from rembert_t5x.data import inputs  # pylint: disable=g-import-not-at-top
  model = sweep.make_model(task, config)
  data = inputs.make_dataset(model, task_name, {"input_tokens": task.length},
                            batch_size=1, split=split, seed=0, pack=False,
                            shuffle=False, num_epochs=1)
  batches = []
  try:
    for i, b in enumerate(data):
      if i >= limit:
        break
      batches.append(b)
  finally:
    data.close()
  if not batches:
    raise errors.UserError(f"task {task_name}, split {split}: no examples")
  return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def _probe_data(task: sweep.TaskSpec, feats: np.ndarray,
                batch: Mapping[str, np.ndarray]):
  """(features [n, d], labels [n]) of a task's frozen hidden states."""
  if task.kind == "tagging":
    keep = batch["weights"] > 0
    return feats[keep], batch["targets"][keep]
  if task.kind == "pair":
    mask = (batch["segment_ids"] > 0)[..., None]
    pooled = (feats * mask).sum(1) / np.maximum(mask.sum(1), 1)
    return pooled, batch["label"]
  raise errors.UserError(f"probe supports tag and pair tasks, not {task.kind}")


def train_linear_probe(x: np.ndarray, y: np.ndarray, num_classes: int,
                       steps: int = 300, learning_rate: float = 1e-2,
                       l2: float = 1e-4, seed: int = 0):
  """A softmax classifier on standardised features (Adam, full batch).

  Returns:
    predict(x) -> labels.
  """
  mean, std = x.mean(0), x.std(0) + 1e-6
  xs = jnp.asarray((x - mean) / std)
  ys = jnp.asarray(y)
  params = {"w": 0.01 * jax.random.normal(jax.random.PRNGKey(seed),
                                          (x.shape[1], num_classes)),
            "b": jnp.zeros((num_classes,))}
  tx = optax.adam(learning_rate)

  def loss_fn(p):
    logits = xs @ p["w"] + p["b"]
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, ys).mean()
    return ce + l2 * jnp.sum(p["w"] ** 2)

  @jax.jit
  def step(p, s):
    grads = jax.grad(loss_fn)(p)
    updates, s = tx.update(grads, s, p)
    return optax.apply_updates(p, updates), s

  state = tx.init(params)
  for _ in range(steps):
    params, state = step(params, state)
  params = jax.device_get(params)

  def predict(features):
    z = (features - mean) / std
    return np.argmax(z @ params["w"] + params["b"], axis=-1)

  return predict


def probe(workdir: str, config: network.RemBertConfig, pretrained: str,
          task: sweep.TaskSpec, languages: Sequence[str],
          task_prefix: str, train_examples: int = 256,
          eval_examples: int = 128, steps: int = 300,
          log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Per-layer linear-probe accuracy, per language (trained on one language)."""
  del workdir
  # Deferred: seqio and TensorFlow (seconds).
  from rembert_t5x.data import vocabulary  # pylint: disable=g-import-not-at-top
  vocabulary.use_checkpoint_vocabulary(pretrained)  # before the tasks' data
  params = checkpoints.load_params(pretrained)
  train_batch = _examples(task, task.train_task, "train", train_examples,
                          config)
  eval_batches = {lang: _examples(task, f"{task_prefix}{task.name}_{lang}",
                                  "validation", eval_examples, config)
                  for lang in languages}
  num_classes = task.num_classes
  _, y_train = _probe_data(task, np.zeros(train_batch["input_tokens"].shape
                                          + (1,)), train_batch)
  majority = int(np.bincount(y_train, minlength=num_classes).argmax())
  rows = []
  for l in range(config.num_layers + 1):
    x, y = _probe_data(task, layer_features(config, params, l, train_batch),
                       train_batch)
    predict = train_linear_probe(x, y, num_classes, steps=steps)
    scores = {}
    for lang, batch in eval_batches.items():
      xe, ye = _probe_data(task, layer_features(config, params, l, batch),
                           batch)
      scores[lang] = float(100 * np.mean(predict(xe) == ye))
    log(f"layer {l}: " + ", ".join(f"{k} {v:.1f}" for k, v in scores.items()))
    rows.append({"layer": l, "scores": scores,
                 "train_accuracy": float(100 * np.mean(predict(x) == y)),
                 "avg": float(np.mean(list(scores.values())))})
  majority_scores = {}
  for lang, batch in eval_batches.items():
    _, ye = _probe_data(task, np.zeros(batch["input_tokens"].shape + (1,)),
                        batch)
    majority_scores[lang] = float(100 * np.mean(ye == majority))
  return {"mode": "probe", "task": task.name, "metric": "accuracy",
          "train_language": task.train_language,
          "train_examples": int(train_batch["input_tokens"].shape[0]),
          "majority_baseline": majority_scores, "rows": rows}


# --------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------

def markdown(result: Mapping[str, Any]) -> str:
  rows = result["rows"]
  langs = list(rows[0]["scores"]) if rows else []
  train_lang = result["train_language"]
  names = [f"{l} (train)" if l == train_lang else l for l in langs]
  if result["mode"] == "drop_layers":
    head = (f"# Dropping layers: {result['task']} fine-tuned from the first l "
            f"of {result['total_layers']} pre-trained layers (lr "
            f"{sweep.format_lr(result['learning_rate'])}, seed "
            f"{result['seed']})")
    key, extra = "layers", ["zero-shot avg"]
  else:
    head = (f"# Linear probes of frozen layer features: {result['task']} "
            f"(accuracy; trained on {result['train_examples']} "
            f"{train_lang} examples; layer 0 = embeddings)")
    key, extra = "layer", ["train acc"]
  lines = [head, "", f"| {key} | " + " | ".join(names + ["avg"] + extra) + " |",
           "|" + "---|" * (len(names) + 2 + len(extra))]
  for r in rows:
    cells = [f"{r['scores'][l]:.1f}" for l in langs] + [f"{r['avg']:.1f}"]
    if result["mode"] == "drop_layers":
      z = r["zero_shot_avg"]
      cells.append("" if z is None else f"{z:.1f}")
    else:
      cells.append(f"{r['train_accuracy']:.1f}")
    lines.append(f"| {r[key]} | " + " | ".join(cells) + " |")
  if result["mode"] == "probe":
    base = result["majority_baseline"]
    lines.append("| majority | " + " | ".join(
        [f"{base[l]:.1f}" for l in langs]
        + [f"{np.mean(list(base.values())):.1f}", ""]) + " |")
  return "\n".join(lines) + "\n"


def plot(result: Mapping[str, Any], path: pathlib.Path) -> None:
  """Score vs layers, one line per language (train language bold)."""
  # Deferred: only plots need matplotlib.
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  key = "layers" if result["mode"] == "drop_layers" else "layer"
  rows = result["rows"]
  xs = [r[key] for r in rows]
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for lang in rows[0]["scores"]:
    train = lang == result["train_language"]
    ax.plot(xs, [r["scores"][lang] for r in rows], marker="o",
            linewidth=2.5 if train else 1,
            label=f"{lang} (train)" if train else lang)
  ax.plot(xs, [r["avg"] for r in rows], "k--", label="avg")
  ax.set_xticks(xs)
  ax.set_xlabel("kept layers" if key == "layers" else "layer (0 = embeddings)")
  ax.set_ylabel("score" if key == "layers" else "probe accuracy")
  ax.set_title(f"{result['mode']}: {result['task']}", fontsize=10)
  ax.legend(fontsize=7)
  fig.tight_layout()
  tmp = path.with_name(f".{path.name}.tmp.png")
  fig.savefig(tmp, dpi=100)
  plt.close(fig)
  tmp.replace(path)


def write(workdir: str, result: Mapping[str, Any]) -> None:
  out = pathlib.Path(workdir)
  out.mkdir(parents=True, exist_ok=True)
  mode = result["mode"]
  io_utils.atomic_write_text(out / f"{mode}.json",
                             json.dumps(result, indent=1) + "\n")
  io_utils.atomic_write_text(out / f"{mode}.md", markdown(result))
  plot(result, out / f"{mode}.png")


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_enum("mode", None, ["drop_layers", "probe"], "the analysis",
                    flag_values=fv, required=True)
  flags.DEFINE_string("workdir", None, "output directory", flag_values=fv,
                      required=True)
  flags.DEFINE_string("pretrained", None, "pre-training MODEL_DIR",
                      flag_values=fv, required=True)
  flags.DEFINE_string("task", "tag", "demo task: pair, tag, qa",
                      flag_values=fv)
  flags.DEFINE_string("model_gin", "gin_configs/models/tiny.gin",
                      "model gin file of the pre-trained model",
                      flag_values=fv)
  flags.DEFINE_string("layers", None, "drop_layers: kept-layer counts, "
                      "comma-separated (default 1..num_layers)",
                      flag_values=fv)
  flags.DEFINE_float("learning_rate", None, "drop_layers: fine-tuning "
                     "learning rate (default: the task grid's largest)",
                     flag_values=fv)
  flags.DEFINE_integer("train_steps", None, "fine-tuning steps (default: "
                       "the demo task's)", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "fine-tuning seed", flag_values=fv)
  flags.DEFINE_integer("probe_steps", 300, "probe: training steps",
                       flag_values=fv)
  flags.DEFINE_integer("train_examples", 256, "probe: training examples",
                       flag_values=fv)
  flags.DEFINE_integer("eval_examples", 128, "probe: evaluation examples",
                       flag_values=fv)


def main(argv=None) -> None:
  result = cli.run_main(_main, argv, _define_flags, doc=__doc__)
  print(markdown(result))


def _main(args) -> Dict[str, Any]:
  # Deferred: importing it prepares the synthetic data (seconds).
  from rembert_tasks import synthetic as synthetic_tasks  # pylint: disable=g-import-not-at-top
  tasks = sweep.demo_tasks(train_steps=args.train_steps)
  if args.task not in tasks:
    raise errors.UserError(f"unknown task {args.task!r}: expected {sorted(tasks)}")
  task = tasks[args.task]
  try:
    config = configs.config_from_gin(args.model_gin)
  except configs.GinConfigError as e:
    raise errors.UserError(str(e)) from e
  config = dataclasses.replace(config, vocab_size=synthetic_tasks.VOCAB_SIZE)
  start = time.time()
  if args.mode == "drop_layers":
    layers = ([int(x) for x in args.layers.split(",")] if args.layers
              else list(range(1, config.num_layers + 1)))
    result = drop_layers(args.workdir, config, args.pretrained, task, layers,
                         args.learning_rate, args.seed)
  else:
    manifest = synthetic_tasks.prepare()
    result = probe(args.workdir, config, args.pretrained, task,
                   manifest["languages"], synthetic_tasks.PREFIX,
                   args.train_examples, args.eval_examples, args.probe_steps)
  result["seconds"] = round(time.time() - start, 1)
  write(args.workdir, result)
  return result


if __name__ == "__main__":
  main()
