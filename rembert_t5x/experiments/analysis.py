r"""The paper's layer analyses of a pre-trained encoder (Figure 1 and probes).

  # Figure 1 on the demo tasks: fine-tune the first l layers.
  python -m rembert_t5x.experiments.analysis --mode=drop_layers --pretrained=/tmp/m \
    --workdir=/tmp/drop --task=tag --layers=1,2
  # Linear probes of frozen per-layer features (0 = embeddings).
  python -m rembert_t5x.experiments.analysis --mode=probe --pretrained=/tmp/m \
    --workdir=/tmp/probe --task=tag
  # Cross-lingual retrieval of parallel examples per layer (is the
  # pre-trained encoder aligned across languages?).
  python -m rembert_t5x.experiments.analysis --mode=align --pretrained=/tmp/m \
    --workdir=/tmp/align --task=pair

Tasks: a demo task (`pair`, `tag`, `qa`: the synthetic tasks of
`rembert_tasks.synthetic`, model gin file default tiny.gin), or, with
--xtreme_dir, a grid of the sweep's --experiment (table15 by default) on the
`rembert_local_*` tasks over XTREME's download folder (`xtreme_local`;
docs/EXPERIMENTS.md, "The analyses on XTREME's tasks", has the commands).
The network config is --model_gin, else the `rembert_config.json` in the
MODEL_DIR. Each mode writes `<mode>.{json,md,png}` to --workdir.

drop_layers fine-tunes the first l pre-trained layers with the grid's
protocol (`sweep.run_point`) and scores every language on the family's
split. probe trains, per layer, a linear softmax classifier (Adam, full
batch) on frozen training-language hidden states (one encoder pass captures
every layer; layer 0: embeddings and the E_in -> H projection) and scores it
on every language of the family's split: tokens of words (first sub-tokens)
for tagging, mean-pooled sequences for pairs. align: see `align`.
"""

import dataclasses
import functools
import itertools
import json
import pathlib
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax
import seqio

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.common import io_utils
from rembert_t5x.data import inputs
from rembert_t5x.data import vocabulary
from rembert_t5x.experiments import report
from rembert_t5x.experiments import sweep
from rembert_t5x.experiments import sweep_report
from rembert_t5x.experiments import synthetic_runs
from rembert_t5x.experiments import xtreme_local
from rembert_t5x import models
from rembert_t5x import network
from rembert_t5x import protocol
from rembert_t5x.runner import checkpoints
from rembert_t5x.scoring import retrieval_metrics

# Task kinds a linear probe reads (one label per word or per pair).
PROBE_KINDS = ("pair", "tagging")
# The model features the encoder reads, in its argument order.
ENCODER_FEATURES = ("input_tokens", "token_types", "segment_ids", "positions")


def layer_config(config: network.RemBertConfig, num_layers: int
                 ) -> network.RemBertConfig:
  """`config` cut to its first `num_layers` layers (no pre-training-only ones).

  Unscanned: the truncated encoder reads per-layer params
  (`models.pretrained_encoder`), whatever the checkpoint's layout.
  """
  return dataclasses.replace(config, num_layers=num_layers, scan_layers=False,
                             num_pretraining_only_layers=0)


def hidden_states(config: network.RemBertConfig, encoder: Mapping[str, Any],
                  batch: Mapping[str, np.ndarray]) -> List[np.ndarray]:
  """Every layer's hidden states, from one pass of the encoder.

  Args:
    config: the pre-trained network's config.
    encoder: its encoder params
      (`models.pretrained_encoder(params, config.num_layers)`).
    batch: model features; `ENCODER_FEATURES` are read.

  Returns:
    num_layers + 1 float32 arrays `[batch, length, emb_dim]`: index 0 is the
    first layer's input (the embeddings, projected to H when E_in != H),
    index l the output of layer l.
  """
  first = ("embedding_projection" if config.input_embed_dim != config.emb_dim
           else "embeddings")
  states = _hidden_states_fn(layer_config(config, config.num_layers), first)(
      encoder, *(batch[k] for k in ENCODER_FEATURES))
  return [np.asarray(s, np.float32) for s in states]


@functools.lru_cache(maxsize=None)
def _hidden_states_fn(config: network.RemBertConfig, first: str):
  """The jitted `(params, *inputs) -> [states per layer]` of one config.

  One compiled program, reused for every batch of one shape and every
  language (un-jitted, Flax dispatches every op of the encoder one by one).
  `first` names the module whose output is layer 0's state.
  """
  module = network.RemBertEncoder(config)
  names = (first, *(f"layers_{i}" for i in range(config.num_layers)))

  def states(params, *inputs):
    _, state = module.apply(
        {"params": params}, *inputs,
        capture_intermediates=lambda mdl, _: mdl.name in names)
    return [state["intermediates"][n]["__call__"][0] for n in names]

  return jax.jit(states)


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
      log(f"{l} layers: fine-tuning {task.name} "
          f"{sweep.resolve_steps(task)} steps")
      sweep.run_point(sub, point, layer_config(config, l), pretrained)
    record = json.loads(path.read_text())
    scores = sweep_report.family_scores(record)[task.evaluations[0].family]
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
              config) -> Dict[str, np.ndarray]:
  """The first `limit` examples of a task's split as model features."""
  model = sweep.make_model(task, config)
  data = inputs.make_dataset(model, task_name, {"input_tokens": task.length},
                            batch_size=1, split=split, seed=0, pack=False,
                            shuffle=False, num_epochs=1)
  try:
    batches = list(itertools.islice(data, limit))
  finally:
    data.close()
  if not batches:
    raise errors.UserError(f"task {task_name}, split {split}: no examples")
  return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def evaluation_tasks(task: sweep.TaskSpec) -> Dict[str, str]:
  """{language: task name} of the grid's first family, on its split.

  Read from the family's mixture, i.e. the tasks registered for it (with
  --languages, only those); a language without the split is left out
  (UD-POS dev: kk, th, tl and yo have none).
  """
  ev = task.evaluations[0]
  out = {}
  for t in seqio.get_mixture_or_task(ev.mixture).tasks:
    if (t.name != task.train_task and ev.split in t.splits
        and protocol.task_family(t.name).endswith(f"_{ev.family}")):
      out[protocol.task_language(t.name)] = t.name
  if not out:
    raise errors.UserError(f"mixture {ev.mixture}: no {ev.family} task has "
                           f"a {ev.split!r} split")
  return out


def _mean_pooled(feats: np.ndarray, batch: Mapping[str, np.ndarray]
                 ) -> np.ndarray:
  """`[rows, d]`: each row's hidden states averaged over its tokens."""
  mask = (batch["segment_ids"] > 0)[..., None]
  return (feats * mask).sum(1) / np.maximum(mask.sum(1), 1)


def _probe_data(task: sweep.TaskSpec, feats: np.ndarray,
                batch: Mapping[str, np.ndarray], pool: bool = False):
  """(features [n, d], labels [n]) of a task's frozen hidden states; with
  `pool`, one mean-pooled row per example whatever the task (no labels)."""
  if pool:
    return _mean_pooled(feats, batch), np.zeros(len(feats), np.int32)
  if task.kind == "tagging":
    keep = batch["weights"] > 0
    return feats[keep], batch["targets"][keep]
  return _mean_pooled(feats, batch), batch["label"]


def layer_probe_data(task: sweep.TaskSpec, config: network.RemBertConfig,
                     encoder: Mapping[str, Any],
                     batch: Mapping[str, np.ndarray], chunk_size: int = 32,
                     pool: bool = False
                     ) -> List[Tuple[np.ndarray, np.ndarray]]:
  """Per layer (0..num_layers), the probe's (features, labels) of `batch`.

  `chunk_size` rows at a time, the last chunk padded, so one compiled
  program serves every batch and only the probe's features are kept (not
  every layer's `[rows, length, emb_dim]` states at once).
  """
  n = batch["input_tokens"].shape[0]
  parts: List[List[Tuple[np.ndarray, np.ndarray]]] = [
      [] for _ in range(config.num_layers + 1)]
  for start in range(0, n, chunk_size):
    rows = {k: v[start:start + chunk_size] for k, v in batch.items()}
    m = rows["input_tokens"].shape[0]
    padded = {k: np.pad(rows[k], [(0, chunk_size - m)]
                        + [(0, 0)] * (rows[k].ndim - 1))
              for k in ENCODER_FEATURES}
    for l, states in enumerate(hidden_states(config, encoder, padded)):
      parts[l].append(_probe_data(task, states[:m], rows, pool))
  return [(np.concatenate([x for x, _ in p]), np.concatenate([y for _, y in p]))
          for p in parts]


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


def check_probe_kind(task: sweep.TaskSpec, mode: str = "probe") -> None:
  if task.kind not in PROBE_KINDS:
    raise errors.UserError(f"{mode}: {task.name} is a {task.kind} task; "
                           f"{mode} reads pair and tagging tasks")


def _frozen_encoder(mode: str, config: network.RemBertConfig,
                    pretrained: str, task: sweep.TaskSpec,
                    languages: Optional[Sequence[str]],
                    task_prefix: Optional[str]):
  """(encoder params, {language: task name}) that `mode` (probe or align)
  reads; see `probe` for `languages` and `task_prefix`."""
  check_probe_kind(task, mode)
  vocabulary.use_checkpoint_vocabulary(pretrained)  # before the tasks' data
  # Checked against the config first: a checkpoint of another shape is one
  # line naming the misfit parameter, not Flax's traceback mid-way.
  params = checkpoints.load_params_for(models.RemBertRetrievalModel(
      network.RemBertForRetrieval(config)), pretrained)
  encoder = models.pretrained_encoder(params, config.num_layers)
  return encoder, ({lang: f"{task_prefix}{task.name}_{lang}"
                    for lang in languages} if languages is not None
                   else evaluation_tasks(task))


def probe(workdir: str, config: network.RemBertConfig, pretrained: str,
          task: sweep.TaskSpec, languages: Optional[Sequence[str]] = None,
          task_prefix: Optional[str] = None, train_examples: int = 256,
          eval_examples: int = 128, steps: int = 300,
          log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Per-layer linear-probe accuracy, per language (trained on one language).

  Args:
    workdir: unused (the caller writes the result).
    config: the pre-trained network's config.
    pretrained: its MODEL_DIR.
    task: a pair or tagging grid; its training task trains the probes.
    languages: evaluate the tasks `<task_prefix><task.name>_<lang>`;
      default: every task of `evaluation_tasks(task)`.
    task_prefix: see `languages`.
    train_examples, eval_examples: examples read (per language).
    steps: probe training steps.
    log: progress lines.

  Returns:
    {"mode": "probe", "rows": [{"layer", "scores": {lang: accuracy},
     "train_accuracy", "avg"}], "majority_baseline": {lang: accuracy}, ...},
    scored on the family's split (`task.evaluations[0].split`).
  """
  del workdir
  encoder, tasks = _frozen_encoder("probe", config, pretrained, task,
                                   languages, task_prefix)
  split = task.evaluations[0].split
  train_batch = _examples(task, task.train_task, "train", train_examples,
                          config)
  train = layer_probe_data(task, config, encoder, train_batch)
  probes = []
  for l, (x, y) in enumerate(train):
    predict = train_linear_probe(x, y, task.num_classes, steps=steps)
    probes.append((predict, float(100 * np.mean(predict(x) == y))))
    log(f"layer {l}: probe trained on {len(y)} labels")
  y_train = train[0][1]
  majority = int(np.bincount(y_train, minlength=task.num_classes).argmax())
  scores: List[Dict[str, float]] = [{} for _ in probes]
  majority_scores = {}
  for lang, name in tasks.items():
    data = layer_probe_data(task, config, encoder, _examples(
        task, name, split, eval_examples, config))
    for l, ((predict, _), (x, y)) in enumerate(zip(probes, data)):
      scores[l][lang] = float(100 * np.mean(predict(x) == y))
    majority_scores[lang] = float(100 * np.mean(data[0][1] == majority))
    log(f"{lang}: " + ", ".join(f"{l} {s[lang]:.1f}"
                                for l, s in enumerate(scores)))
  rows = [{"layer": l, "scores": s, "train_accuracy": acc,
           "avg": float(np.mean(list(s.values())))}
          for l, (s, (_, acc)) in enumerate(zip(scores, probes))]
  return {"mode": "probe", "task": task.name, "metric": "accuracy",
          "split": split, "train_language": task.train_language,
          "train_examples": int(train_batch["input_tokens"].shape[0]),
          "majority_baseline": majority_scores, "rows": rows}


def retrieval_accuracy(queries: np.ndarray, candidates: np.ndarray,
                       center: bool = False) -> float:
  """% of rows i whose nearest candidate (cosine) is candidate i; with
  `center`, each side's mean row is removed first (a language's own offset,
  which can hide an otherwise shared geometry)."""
  if center:
    queries = queries - queries.mean(0)
    candidates = candidates - candidates.mean(0)
  return 100 * retrieval_metrics.nearest_neighbour_accuracy(queries,
                                                            candidates)


def align(workdir: str, config: network.RemBertConfig, pretrained: str,
          task: sweep.TaskSpec, languages: Optional[Sequence[str]] = None,
          task_prefix: Optional[str] = None, eval_examples: int = 128,
          log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Per-layer cross-lingual retrieval: does the encoder align languages?

  Reads a family's split that is parallel across languages (the same
  examples in every language: the synthetic tasks, XNLI, PAWS-X; not
  PAN-X or UD-POS) and, per layer, retrieves each training-language
  example's counterpart in every other language among that language's
  examples by cosine similarity of mean-pooled hidden states. Without an
  aligned representation zero-shot transfer has nothing to carry: near
  chance (100 / examples) at every layer says pre-training did not align
  the languages. Arguments as `probe`.

  Returns:
    {"mode": "align", "rows": [{"layer", "scores": {lang: top-1 %}, "avg",
     "centered", "centered_avg"}], "chance", ...}; "centered" is the same
    retrieval with each language's mean pooled row removed first.
  """
  del workdir
  encoder, tasks = _frozen_encoder("align", config, pretrained, task,
                                   languages, task_prefix)
  if task.train_language not in tasks:
    raise errors.UserError(f"align: no {task.train_language} task among "
                           f"{sorted(tasks)}")
  split = task.evaluations[0].split
  pooled = {lang: [x for x, _ in layer_probe_data(
      task, config, encoder,
      _examples(task, name, split, eval_examples, config), pool=True)]
            for lang, name in tasks.items()}
  queries = pooled.pop(task.train_language)
  n = len(queries[0])
  for lang, layers in pooled.items():
    if len(layers[0]) != n:
      raise errors.UserError(
          f"align: {tasks[lang]} has {len(layers[0])} {split} examples "
          f"where {tasks[task.train_language]} has {n}: the split is not "
          "parallel across languages")
  rows = []
  for l, q in enumerate(queries):
    scores = {lang: retrieval_accuracy(q, layers[l])
              for lang, layers in pooled.items()}
    centered = {lang: retrieval_accuracy(q, layers[l], center=True)
                for lang, layers in pooled.items()}
    rows.append({"layer": l, "scores": scores,
                 "avg": float(np.mean(list(scores.values()))),
                 "centered": centered,
                 "centered_avg": float(np.mean(list(centered.values())))})
    log(f"layer {l}: " + ", ".join(f"{k} {v:.1f}" for k, v in scores.items()))
  return {"mode": "align", "task": task.name, "metric": "retrieval accuracy",
          "split": split, "train_language": task.train_language,
          "eval_examples": n, "chance": 100 / n, "rows": rows}


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
            f"{sweep_report.format_lr(result['learning_rate'])}, seed "
            f"{result['seed']})")
    key, extra = "layers", ["zero-shot avg"]
  elif result["mode"] == "align":
    head = (f"# Cross-lingual retrieval of {train_lang} examples: "
            f"{result['task']} ({result['split']}, {result['eval_examples']} "
            "parallel examples a language, mean-pooled layer states, "
            f"top-1 %; chance {result['chance']:.1f}; layer 0 = embeddings)")
    key, extra = "layer", ["avg, each language's mean removed"]
  else:
    head = (f"# Linear probes of frozen layer features: {result['task']} "
            f"(accuracy on {result['split']}; trained on "
            f"{result['train_examples']} {train_lang} examples; layer 0 = "
            "embeddings)")
    key, extra = "layer", ["train acc"]
  lines = [head, "", *report.table([key, *names, "avg", *extra])]
  for r in rows:
    cells = [f"{r['scores'][l]:.1f}" for l in langs] + [f"{r['avg']:.1f}"]
    if result["mode"] == "drop_layers":
      z = r["zero_shot_avg"]
      cells.append("" if z is None else f"{z:.1f}")
    elif result["mode"] == "probe":
      cells.append(f"{r['train_accuracy']:.1f}")
    else:
      cells.append(f"{r['centered_avg']:.1f}")
    lines.append(report.row([r[key], *cells]))
  if result["mode"] == "probe":
    base = result["majority_baseline"]
    lines.append(report.row(["majority", *(f"{base[l]:.1f}" for l in langs),
                             f"{np.mean(list(base.values())):.1f}", ""]))
  return "\n".join(lines) + "\n"


def plot(result: Mapping[str, Any], path: pathlib.Path) -> None:
  """Score vs layers, one line per language (train language bold)."""
  key = "layers" if result["mode"] == "drop_layers" else "layer"
  rows = result["rows"]
  xs = [r[key] for r in rows]
  with report.figure(path) as (_, (ax,)):
    for lang in rows[0]["scores"]:
      train = lang == result["train_language"]
      ax.plot(xs, [r["scores"][lang] for r in rows], marker="o",
              linewidth=2.5 if train else 1,
              label=f"{lang} (train)" if train else lang)
    ax.plot(xs, [r["avg"] for r in rows], "k--", label="avg")
    ax.set_xticks(xs)
    ax.set_xlabel("kept layers" if key == "layers"
                  else "layer (0 = embeddings)")
    ax.set_ylabel({"drop_layers": "score", "probe": "probe accuracy",
                   "align": "retrieval accuracy"}[result["mode"]])
    ax.set_title(f"{result['mode']}: {result['task']}", fontsize=10)
    ax.legend(fontsize=7, ncol=1 + len(rows[0]["scores"]) // 12)


def write(workdir: str, result: Mapping[str, Any]) -> None:
  out = pathlib.Path(workdir)
  out.mkdir(parents=True, exist_ok=True)
  mode = result["mode"]
  io_utils.atomic_write_text(out / f"{mode}.json",
                             json.dumps(result, indent=1) + "\n")
  io_utils.atomic_write_text(out / f"{mode}.md", markdown(result))
  plot(result, out / f"{mode}.png")


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def _define_flags(fv: flags.FlagValues) -> None:
  string = functools.partial(flags.DEFINE_string, flag_values=fv)
  integer = functools.partial(flags.DEFINE_integer, flag_values=fv)
  flags.DEFINE_enum("mode", None, ["drop_layers", "probe", "align"],
                    "the analysis", flag_values=fv, required=True)
  string("workdir", None, "output directory", required=True)
  string("pretrained", None, "pre-training MODEL_DIR, or a converted one "
         "(rembert-convert hf-to-t5x)", required=True)
  string("task", "tag", "a demo task (pair, tag, qa), or with --xtreme_dir a "
         "grid of --experiment (xnli, pawsx, panx, udpos, squad, tydiqa; "
         "probe: not the QA ones)")
  string("xtreme_dir", None, "an XTREME download folder: run on the "
         "rembert_local_* tasks over its files")
  flags.DEFINE_enum("experiment", "table15", sorted(sweep.EXPERIMENTS),
                    "with --xtreme_dir: whose grid settings (batch size, "
                    "learning rate) fine-tune", flag_values=fv)
  string("languages", None, "with --xtreme_dir: evaluate only these "
         "languages (comma-separated; English is always kept)")
  string("model_gin", None, "model gin file of the pre-trained model "
         f"(default: demo tasks {sweep.TINY_GIN}; XTREME tasks the "
         "rembert_config.json in --pretrained)")
  string("layers", None, "drop_layers: kept-layer counts, comma-separated "
         "(default 1..num_layers)")
  flags.DEFINE_float("learning_rate", None, "drop_layers: fine-tuning "
                     "learning rate (default: the task grid's largest)",
                     flag_values=fv)
  integer("train_steps", None, "fine-tuning steps (default: the demo task's, "
          "or 3 epochs for XTREME tasks)")
  integer("seed", 0, "fine-tuning seed")
  integer("probe_steps", 300, "probe: training steps")
  integer("train_examples", 256, "probe: training examples")
  integer("eval_examples", 128, "probe, align: evaluation examples per "
          "language")


def main(argv=None) -> None:
  result = cli.run_main(_main, argv, _define_flags, doc=__doc__)
  print(markdown(result))


def _task(args) -> Tuple[sweep.TaskSpec, network.RemBertConfig]:
  """The grid of --task and the pre-trained model's config: a synthetic demo
  task and the tiny model's (--model_gin, else `sweep.TINY_GIN`); with
  --xtreme_dir, a sweep grid over its local tasks and --model_gin, else the
  MODEL_DIR's rembert_config.json."""
  if args.xtreme_dir:
    grids = sweep.experiment_tasks(args.experiment)
    if args.task not in grids:
      raise errors.UserError(f"--task={args.task} with --xtreme_dir: "
                             f"expected a grid of {args.experiment}: "
                             f"{sorted(grids)}")
  else:
    grids = sweep.demo_tasks()
    if args.task not in grids:
      hint = (" (an XTREME grid: add --xtreme_dir=DIR)"
              if args.task in sweep.EXPERIMENTS[args.experiment] else "")
      raise errors.UserError(f"unknown demo task {args.task!r}{hint}: "
                             f"expected {sorted(grids)}")
    if args.languages:
      raise errors.UserError("--languages needs --xtreme_dir")
  task = grids[args.task]
  if args.mode in ("probe", "align"):
    check_probe_kind(task, args.mode)
  if args.train_steps:
    task = dataclasses.replace(task, train_steps=args.train_steps)
  if not args.xtreme_dir:
    return task, synthetic_runs.model_config(args.model_gin or sweep.TINY_GIN)
  config, _ = sweep.network_config(args.pretrained, args.model_gin, None)
  languages = args.languages.split(",") if args.languages else None
  return xtreme_local.prepare(args.xtreme_dir, {task.name: task},
                              languages)[task.name], config


def _main(args) -> Dict[str, Any]:
  task, config = _task(args)
  start = time.time()
  if args.mode == "drop_layers":
    layers = ([int(x) for x in args.layers.split(",")] if args.layers
              else list(range(1, config.num_layers + 1)))
    result = drop_layers(args.workdir, config, args.pretrained, task, layers,
                         args.learning_rate, args.seed)
  elif args.mode == "align":
    result = align(args.workdir, config, args.pretrained, task,
                   eval_examples=args.eval_examples)
  else:
    result = probe(args.workdir, config, args.pretrained, task,
                   train_examples=args.train_examples,
                   eval_examples=args.eval_examples, steps=args.probe_steps)
  result["seconds"] = round(time.time() - start, 1)
  write(args.workdir, result)
  return result


if __name__ == "__main__":
  main()
