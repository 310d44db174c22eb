r"""Checks of scripts/t5x_multihost_smoke.sh (a pod simulated by local processes).

Commands that run on every process of a cluster (start them through
`python -m rembert_t5x.tools.multihost_launch ... -- scripts.multihost_checks
COMMAND ...`, or alone for one process):

  shards OUT_DIR TASK BATCH MP[,MP...]
      For each model parallelism MP: T5X's data layout for BATCH over the
      explicit (data, model) mesh of all devices
      (`partitioner.get_data_layout`, what t5x.train asks), then one pass
      over TASK's train split through T5X's own `t5x.utils.get_dataset`
      with that layout's (shard_id, num_shards), unpacked, unshuffled. Each
      process writes OUT_DIR/mp<MP>.process_<i>.json: its shard and a
      fingerprint (sha1 of the token ids) per example; then the whole task
      (one shard), which process 0 writes to OUT_DIR/whole.json.
  restore MP OUT_JSON CHECKPOINT [OUT_JSON CHECKPOINT ...]
      Restores the whole train state (params and AdamW state) of the tiny
      MLM model from a T5X checkpoint_N with T5X's own restore path
      (`utils.create_checkpoint_manager_and_restore`, Orbax,
      RestoreCheckpointConfig mode 'specific', strict), partitioned over the
      explicit mesh of all devices with model parallelism MP; gathers every
      leaf to the host and process 0 writes a sha1 per leaf to OUT_JSON,
      with the process count and how the largest parameter was sharded.

Commands run once, in one process, on what those wrote:

  read OUT_JSON CHECKPOINT        sha1 per leaf of the checkpoint read by
                                  orbax as numpy (no partitioner, no T5X).
  compare_shards OUT_DIR N MP[,MP...]
  compare_restores A.json B.json ...   the same leaves (params, optimizer
                                  state, step), equal, in every file.
  compare_metrics DIR_A DIR_B     inference_eval metrics of two t5x.eval runs
                                  equal (float tolerance 1e-5), one line per
                                  step in each (written once).
  compare_infer DIR_A DIR_B [TSV] t5x.infer outputs: one file each, same
                                  records in the same order; with a PAWS-X
                                  TSV, DIR_A's are its rows in file order.

Exits non-zero, with the reason on stderr, when a check fails.
"""

import glob
import hashlib
import json
import math
import os
import sys

import numpy as np

TINY_GIN = "gin_configs/models/tiny.gin"


def _sha(array) -> str:
  array = np.ascontiguousarray(np.asarray(array))
  return hashlib.sha1(
      str((array.dtype.str, array.shape)).encode() + array.tobytes()
  ).hexdigest()


def _fail(message: str) -> None:
  print(f"multihost_checks: FAIL: {message}", file=sys.stderr)
  sys.exit(1)


def _write_json(path, value) -> None:
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=1, sort_keys=True)


def _read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


# --- shards -----------------------------------------------------------------

def _examples(dataset):
  """Fingerprints of the examples (non-padding rows) of a batched dataset."""
  out = []
  for batch in dataset.as_numpy_iterator():
    for row in batch["input_tokens"]:
      row = row[row != 0]  # padding
      if row.size:
        out.append(_sha(row.astype(np.int64)))
  return out


def shards(out_dir: str, task: str, batch: int, mps: str) -> None:
  import jax  # pylint: disable=g-import-not-at-top
  import seqio  # pylint: disable=g-import-not-at-top
  from t5x import utils  # pylint: disable=g-import-not-at-top
  from rembert_t5x import feature_converters  # pylint: disable=g-import-not-at-top
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top
  import rembert_smoke_tasks  # pylint: disable=g-import-not-at-top,unused-import

  os.makedirs(out_dir, exist_ok=True)
  cfg = utils.DatasetConfig(
      mixture_or_task_name=task, task_feature_lengths={"input_tokens": 64},
      split="train", batch_size=batch, shuffle=False, seed=0, pack=False,
      use_cached=False)
  converter = feature_converters.PairClassificationFeatureConverter
  index = jax.process_index()
  for mp in (int(m) for m in mps.split(",")):
    layout = t5x_export.make_partitioner(mp).get_data_layout(batch)
    dataset = utils.get_dataset(cfg, layout.shard_id, layout.num_shards,
                                converter, num_epochs=1)
    _write_json(f"{out_dir}/mp{mp}.process_{index}.json", {
        "process_index": index, "process_count": jax.process_count(),
        "shard_id": layout.shard_id, "num_shards": layout.num_shards,
        "examples": _examples(dataset)})
  # Every process (get_dataset_inner checks the seed across hosts, a
  # collective); process 0 writes.
  whole = _examples(utils.get_dataset_inner(
      cfg, seqio.ShardInfo(0, 1), converter, seed=0, num_epochs=1))
  if index == 0:
    _write_json(f"{out_dir}/whole.json", {"examples": whole})


def compare_shards(out_dir: str, count: int, mps: str) -> None:
  whole = sorted(_read_json(f"{out_dir}/whole.json")["examples"])
  if not whole or len(set(whole)) != len(whole):
    _fail(f"the whole task has {len(whole)} examples, "
          f"{len(whole) - len(set(whole))} repeated: no identities to check")
  for mp in (int(m) for m in mps.split(",")):
    per = [_read_json(f"{out_dir}/mp{mp}.process_{i}.json")
           for i in range(count)]
    by_shard = {}
    for p in per:
      if p["process_count"] != count:
        _fail(f"process {p['process_index']} saw {p['process_count']} "
              f"processes, not {count}")
      # Processes of one data shard (model-parallel replicas on different
      # hosts) must read the same examples.
      same = by_shard.setdefault(p["shard_id"], p["examples"])
      if same != p["examples"]:
        _fail(f"mp={mp}: processes of shard {p['shard_id']} read different "
              "examples")
    num_shards = {p["num_shards"] for p in per}
    if num_shards != {len(by_shard)}:
      _fail(f"mp={mp}: layouts {num_shards} but shards {sorted(by_shard)}")
    seen = [e for examples in by_shard.values() for e in examples]
    if len(seen) != len(set(seen)):
      _fail(f"mp={mp}: {len(seen) - len(set(seen))} examples read by two "
            "shards")
    if sorted(seen) != whole:
      _fail(f"mp={mp}: the shards read {len(seen)} examples, the task has "
            f"{len(whole)} ({len(set(whole) - set(seen))} never read)")
    print(f"    mp={mp}: {count} processes -> {len(by_shard)} data shards "
          f"(process -> shard "
          f"{ {p['process_index']: p['shard_id'] for p in per} }), "
          f"sizes {[len(by_shard[s]) for s in sorted(by_shard)]}: disjoint, "
          f"together the whole task ({len(whole)} examples)")


# --- checkpoints ------------------------------------------------------------

def _flat(tree):
  from flax import traverse_util  # pylint: disable=g-import-not-at-top
  from flax import serialization  # pylint: disable=g-import-not-at-top
  if not isinstance(tree, dict):
    tree = serialization.to_state_dict(tree)
  return {"/".join(str(k) for k in key): value
          for key, value in traverse_util.flatten_dict(tree).items()}


def restore(mp: int, *pairs: str) -> None:
  """`restore MP OUT_JSON CHECKPOINT [OUT_JSON CHECKPOINT ...]`."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  from t5x import utils  # pylint: disable=g-import-not-at-top
  from rembert_t5x import models  # pylint: disable=g-import-not-at-top
  from rembert_t5x import network  # pylint: disable=g-import-not-at-top
  from rembert_t5x.convert import checkpoint_io  # pylint: disable=g-import-not-at-top
  from rembert_t5x.convert import t5x_export  # pylint: disable=g-import-not-at-top

  partitioner = t5x_export.make_partitioner(mp)
  for out_json, checkpoint in zip(pairs[::2], pairs[1::2]):
    config = t5x_export._fit_vocab_padding(  # pylint: disable=protected-access
        checkpoint_io.config_beside(None, TINY_GIN, checkpoint),
        _vocab_rows(checkpoint), checkpoint)
    optimizer = t5x_export.make_optimizer("adamw")
    model = models.RemBertMLMModel(network.RemBertForMaskedLM(config),
                                   optimizer_def=optimizer)
    initializer = utils.TrainStateInitializer(
        optimizer_def=optimizer, init_fn=model.get_initial_variables,
        input_shapes={"input_tokens": (8, 64)}, partitioner=partitioner)
    cfg = utils.RestoreCheckpointConfig(path=checkpoint, mode="specific",
                                        strict=True, fallback_to_scratch=False)
    # What t5x.train/eval/infer call (Orbax checkpoint manager).
    state, _ = utils.create_checkpoint_manager_and_restore(
        initializer, partitioner, cfg, checkpoint, None, use_orbax=True)
    if state is None:
      _fail(f"T5X restored nothing from {checkpoint}")
    out, sharding = {}, {}
    for name, leaf in sorted(_flat(state.state_dict()).items()):
      if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        shards = {tuple((s.start, s.stop) for s in index) for index in
                  leaf.sharding.devices_indices_map(leaf.shape).values()}
        sharding[name] = {
            "shape": list(leaf.shape), "distinct_shards": len(shards),
            "processes": sorted({d.process_index
                                 for d in leaf.sharding.device_set})}
        leaf = multihost_utils.process_allgather(leaf, tiled=True)
      out[name] = _sha(np.asarray(leaf))
    if jax.process_index() == 0:
      params = [n for n in sharding if n.startswith("target/")]
      big = max(params, key=lambda n: math.prod(sharding[n]["shape"]),
                default=None)
      _write_json(out_json, {"process_count": jax.process_count(),
                             "model_parallelism": mp, "leaves": out,
                             "largest": big and {big: sharding[big]}})


def _plain_read(checkpoint: str):
  """The checkpoint's state as numpy arrays, read by orbax in this one
  process, whatever wrote it (no partitioner, no T5X); flat names."""
  import jax  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  path = os.path.join(checkpoint, "state")
  checkpointer = ocp.PyTreeCheckpointer()
  metadata = checkpointer.metadata(path)
  tree = getattr(getattr(metadata, "item_metadata", metadata), "tree",
                 metadata)
  args = jax.tree_util.tree_map(
      lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
  return _flat(checkpointer.restore(path, restore_args=args))


def _vocab_rows(checkpoint: str) -> int:
  return int(np.shape(_plain_read(checkpoint)[
      "target/encoder/embeddings/word_embeddings/embedding"])[0])


def read(out_json: str, checkpoint: str) -> None:
  flat = _plain_read(checkpoint)
  _write_json(out_json, {"process_count": 0, "model_parallelism": 0,
                         "leaves": {n: _sha(v) for n, v in flat.items()},
                         "largest": None})


def compare_restores(*paths: str) -> None:
  runs = [_read_json(p) for p in paths]
  first = runs[0]["leaves"]
  params = sorted(n for n in first if n.startswith("target/"))
  if not params:
    _fail(f"{paths[0]}: no params (target/...)")
  for path, run in zip(paths[1:], runs[1:]):
    leaves = run["leaves"]
    common = sorted(set(first) & set(leaves))
    if set(first) != set(leaves):
      _fail(f"{path} and {paths[0]} hold different leaves: "
            f"{sorted(set(first) ^ set(leaves))[:3]}")
    differ = [n for n in common if first[n] != leaves[n]]
    if differ:
      _fail(f"{path} differs from {paths[0]} in {len(differ)} of "
            f"{len(common)} leaves, e.g. {differ[:3]}")
  for path, run in zip(paths, runs):
    print(f"    {os.path.basename(path)}: {run['process_count'] or 'numpy'} "
          f"process(es), model parallelism {run['model_parallelism']}, "
          f"{len(run['leaves'])} leaves; largest sharded param: {run['largest']}")
  print(f"    equal in all {len(paths)}: every leaf ({len(first)}: "
        f"{len(params)} params, the AdamW state, the step)")


# --- eval / infer outputs ---------------------------------------------------

def _metrics(out_dir: str):
  files = sorted(glob.glob(f"{out_dir}/inference_eval/*-metrics.jsonl"))
  if not files:
    _fail(f"no inference metrics under {out_dir}")
  result = {}
  for path in files:
    with open(path, encoding="utf-8") as f:
      lines = [json.loads(line) for line in f.read().splitlines() if line]
    steps = [line.get("step") for line in lines]
    if len(steps) != len(set(steps)):
      _fail(f"{path}: metrics written more than once per step: {steps}")
    result[os.path.basename(path)] = lines
  return result


def compare_metrics(dir_a: str, dir_b: str) -> None:
  a, b = _metrics(dir_a), _metrics(dir_b)
  if sorted(a) != sorted(b):
    _fail(f"metric files differ: {sorted(a)} vs {sorted(b)}")
  for name in a:
    if len(a[name]) != len(b[name]):
      _fail(f"{name}: {len(a[name])} vs {len(b[name])} lines")
    for x, y in zip(a[name], b[name]):
      if sorted(x) != sorted(y):
        _fail(f"{name}: keys {sorted(x)} vs {sorted(y)}")
      for key in x:
        u, v = x[key], y[key]
        if isinstance(u, float) or isinstance(v, float):
          if not math.isclose(u, v, rel_tol=1e-5, abs_tol=1e-5):
            _fail(f"{name}: {key} = {u} vs {v}")
        elif u != v:
          _fail(f"{name}: {key} = {u} vs {v}")
    print(f"    {name}: equal, {len(a[name])} line(s): {a[name][-1]}")


def _infer_records(out_dir: str):
  files = sorted(p for p in glob.glob(f"{out_dir}/*.jsonl*")
                 if not p.endswith(".COMPLETED"))
  if len(files) != 1:
    _fail(f"{out_dir}: expected one output file, found {files}")
  with open(files[0], encoding="utf-8") as f:
    return files[0], [json.loads(line) for line in f]


def _close(x, y) -> bool:
  if isinstance(x, float) or isinstance(y, float):
    return math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-5)
  if isinstance(x, dict) and isinstance(y, dict):
    return sorted(x) == sorted(y) and all(_close(x[k], y[k]) for k in x)
  if isinstance(x, list) and isinstance(y, list):
    return len(x) == len(y) and all(_close(u, v) for u, v in zip(x, y))
  return x == y


def compare_infer(dir_a: str, dir_b: str, pair_tsv: str = "") -> None:
  (path_a, a), (path_b, b) = _infer_records(dir_a), _infer_records(dir_b)
  if pair_tsv:  # the input file, `sentence1 TAB sentence2 TAB label` rows
    with open(pair_tsv, encoding="utf-8") as f:
      rows = [line.split("\t")[:2] for line in f.read().splitlines()]
    got = [[r.get("sentence1"), r.get("sentence2")] for r in a]
    if got != rows:
      first = next((i for i, (x, y) in enumerate(zip(got, rows)) if x != y),
                   min(len(got), len(rows)))
      _fail(f"{path_a}: records are not {pair_tsv}'s rows in order "
            f"({len(got)} vs {len(rows)} rows; first difference at {first})")
  if len(a) != len(b):
    _fail(f"{path_a}: {len(a)} records, {path_b}: {len(b)}")
  indices = [r.get("index", i) for i, r in enumerate(a)]
  if indices != list(range(len(a))):
    _fail(f"{path_a}: records not once each in input order: {indices}")
  for i, (x, y) in enumerate(zip(a, b)):
    if not _close(x, y):
      _fail(f"record {i} differs:\n  {json.dumps(x)}\n  {json.dumps(y)}")
  print(f"    {os.path.basename(path_a)}: {len(a)} records, each once, in "
        f"input order{' (the rows of ' + os.path.basename(pair_tsv) + ')' if pair_tsv else ''}, "
        "equal to the other run's")


COMMANDS = {"shards": shards, "compare_shards": compare_shards,
            "restore": restore, "read": read,
            "compare_restores": compare_restores,
            "compare_metrics": compare_metrics,
            "compare_infer": compare_infer}
_INTS = {"shards": (2,), "compare_shards": (1,), "restore": (0,)}


def main(argv) -> None:
  if len(argv) < 2 or argv[1] not in COMMANDS:
    print(__doc__, file=sys.stderr)
    sys.exit(2)
  args = list(argv[2:])
  for i in _INTS.get(argv[1], ()):
    args[i] = int(args[i])
  COMMANDS[argv[1]](*args)


if __name__ == "__main__":
  main(sys.argv)
