"""One simulated host of the split-batch checks (tests/multihost_test.py).

    python -m rembert_t5x.tools.multihost_launch \
        --coordinator_address=127.0.0.1:PORT --process_count=2 \
        --process_index=I --local_device_count=2 \
        -- tests.multihost_worker OUT_DIR [--t5x] [--cases=NAME,...] \
        [--fail_process=I]

The launcher joins the process into a JAX cluster of local processes
(`jax.distributed.initialize`, CPU collectives through gloo), as one host
of a TPU pod slice is. Every process builds the same global batch and hands
JAX only the rows its own devices hold (`jax.make_array_from_callback`
calls back for the addressable shards alone), so a process never feeds
another host's rows; then one train step of each case runs on a ("data",
"model") mesh over all processes' devices. Process 0 writes, per case, the
loss and the gradient (or the parameters after an AdamW step) to
OUT_DIR/<case>.npz; the test compares them with the same run in one process
fed the whole batch.

The local runner's step (`runner/train_lib.make_train_step`, the step the
runner and the experiments train with) is what runs by default; `--t5x`
runs our T5X trainer's partitioned step (`t5x_trainer.FullBatchLossTrainer`)
instead, with T5X's own microbatching. `--fail_process=I`: process I raises
a data error before the first step while the others wait in it (the
launcher must end them all).
"""

import dataclasses
import pathlib
import sys

# Cases: (name, kind, packed, microbatches, optimizer). Every head, each
# fine-tuning head packed and not, gradient accumulation on all but one
# (six-row batches in 3 microbatches, packed batches of 4 rows in 2, so that
# each microbatch splits evenly over the data axis; tagging at 1 shows that
# the plain step's mean is over the global batch too). Tagging's loss
# weights differ between rows and so between hosts: the case that catches a
# loss normalised per host. The gradient is compared for every case, the
# parameters after an AdamW step for one (each case compiles programs of its
# own: ~10 s of CPU).
CASES = (
    ("mlm", "mlm", False, 3, "grads"),
    ("pair", "pair", False, 3, "grads"),
    ("pair_packed", "pair", True, 2, "grads"),
    ("tagging_1", "tagging", False, 1, "grads"),
    ("tagging", "tagging", False, 3, "grads"),
    ("tagging_packed", "tagging", True, 2, "grads"),
    ("tagging_packed_adamw", "tagging", True, 2, "adamw"),
    ("qa", "qa", False, 3, "grads"),
    ("qa_packed", "qa", True, 2, "grads"),
)
# The mesh: data 2 x model 2. With two processes of two devices each, a
# process holds one data shard (half of every batch) and shards the
# parameters over its two devices.
MESH_SHAPE = (2, 2)
# Example lengths of the packed cases (row length 12): first fit by
# decreasing length packs them into 4 rows of at most 3 examples.
PACKED_LENGTHS = (5, 12, 7, 3, 5, 4, 6, 2)


def _packed_batch(kind: str):
  """Fine-tuning examples of PACKED_LENGTHS, packed into 4 rows of 12."""
  from rembert_t5x.runner import finetune_packing  # pylint: disable=g-import-not-at-top
  from tests import test_utils  # pylint: disable=g-import-not-at-top
  batch = test_utils.unpacked_finetune_batch(
      kind, PACKED_LENGTHS, test_utils.TINY_BATCH_SHAPE[1], seed=11)
  max_segments = batch["input_tokens"].shape[1] if kind == "tagging" else 3
  return finetune_packing.pack(batch, max_segments=max_segments, num_rows=4)


def _global_batch(numpy_batch, sharding):
  """The global batch as a jax.Array: this process supplies its shards only."""
  import jax  # pylint: disable=g-import-not-at-top
  return {name: jax.make_array_from_callback(
      x.shape, sharding, lambda index, x=x: x[index])
          for name, x in numpy_batch.items()}


def _model(kind: str, vocab_pad_multiple: int = 1):
  """The tiny model of `kind`, without dropout (every process and the
  one-process run must compute the same function)."""
  from rembert_t5x import models  # pylint: disable=g-import-not-at-top
  from rembert_t5x import network  # pylint: disable=g-import-not-at-top
  from tests import test_utils  # pylint: disable=g-import-not-at-top
  cfg = dataclasses.replace(test_utils.TINY_CONFIG, dropout_rate=0.0,
                            classifier_dropout_rate=0.0,
                            vocab_pad_multiple=vocab_pad_multiple)
  if kind == "mlm":
    return models.RemBertMLMModel(network.RemBertForMaskedLM(cfg),
                                  max_predictions_per_seq=5)
  model = test_utils.tiny_model(kind)
  model.module = models.make_module(kind, cfg, num_classes=7)
  return model


def _gradient_capture():
  """An optax transformation whose state after a step is that step's
  gradient, and which leaves the parameters unchanged."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top

  def update(grads, state, params=None):
    del state, params
    return jax.tree_util.tree_map(jnp.zeros_like, grads), grads

  return optax.GradientTransformation(
      lambda params: jax.tree_util.tree_map(jnp.zeros_like, params), update)


def _run_local(kind, packed, microbatches, optimizer):
  """{"loss", "grads" or "params"} of one step of the runner's train step:
  with "grads" the step's gradient (captured, parameters unchanged), with
  "adamw" the parameters after one step of the runner's AdamW."""
  import jax  # pylint: disable=g-import-not-at-top
  from rembert_t5x.runner import train_lib  # pylint: disable=g-import-not-at-top
  from tests import test_utils  # pylint: disable=g-import-not-at-top
  model = _model(kind)
  numpy_batch = (_packed_batch(kind) if packed
                 else test_utils.six_row_batch(kind))
  mesh = train_lib.make_mesh(MESH_SHAPE, jax.devices())
  rules = train_lib.default_rules()
  shapes = {"input_tokens": numpy_batch["input_tokens"].shape}
  batch = _global_batch(numpy_batch, train_lib.batch_sharding(mesh))
  adamw, schedule = train_lib.make_optimizer(1e-3, total_steps=10)
  tx = _gradient_capture() if optimizer == "grads" else adamw
  state, shardings = train_lib.init_train_state(
      model, tx, jax.random.PRNGKey(0), shapes, mesh, rules)
  step = train_lib.jit_train_step(
      train_lib.make_train_step(model, tx, schedule, microbatches),
      shardings, mesh, rules)
  state, metrics = step(state, batch, jax.random.PRNGKey(1))
  result = state.opt_state if optimizer == "grads" else state.params
  return {"loss": _gather(metrics["loss"]), optimizer: _gather(result)}


def _run_t5x(kind, packed, microbatches, optimizer):
  """{"loss", "grads"} of one step of our T5X trainer's partitioned step
  (SGD at learning rate 1: the gradient is what the step subtracts)."""
  del optimizer  # always "grads"
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from t5x import optimizers  # pylint: disable=g-import-not-at-top
  from t5x import utils  # pylint: disable=g-import-not-at-top
  from rembert_t5x import partitioning  # pylint: disable=g-import-not-at-top
  from rembert_t5x import t5x_partitioning as explicit  # pylint: disable=g-import-not-at-top
  from rembert_t5x import t5x_trainer  # pylint: disable=g-import-not-at-top
  from tests import test_utils  # pylint: disable=g-import-not-at-top
  # Padded as the T5X run files pad (VOCAB_PAD_MULTIPLE): T5X's partitioner
  # shards the vocabulary rows over "model" and needs them to divide.
  model = _model(kind, partitioning.T5X_VOCAB_PAD_MULTIPLE)
  numpy_batch = (_packed_batch(kind) if packed
                 else test_utils.six_row_batch(kind))
  # T5X's own CPU mesh is (processes, local devices) whatever num_partitions:
  # 2 x 2 on the workers, but 1 x 8 in the test process. The same 2 x 2 mesh
  # everywhere, over the first 4 devices.
  partitioner = explicit.explicit_mesh_partitioner(
      model_parallelism=MESH_SHAPE[1],
      logical_axis_rules=partitioning.logical_axis_rules())
  partitioner.mesh = explicit.explicit_mesh(
      MESH_SHAPE[1], devices=jax.devices()[:MESH_SHAPE[0] * MESH_SHAPE[1]])
  initializer = utils.TrainStateInitializer(
      optimizer_def=optimizers.sgd(1.0), init_fn=model.get_initial_variables,
      input_shapes={"input_tokens": numpy_batch["input_tokens"].shape},
      partitioner=partitioner)
  state = initializer.from_scratch(jax.random.PRNGKey(0))
  before = _gather(state.params)
  trainer = t5x_trainer.FullBatchLossTrainer(
      model=model, train_state=state, partitioner=partitioner,
      eval_names=[], summary_dir=None,
      train_state_axes=initializer.train_state_axes,
      rng=jax.random.PRNGKey(1), learning_rate_fn=lambda _: 1.0,
      num_microbatches=microbatches)
  sharding = jax.sharding.NamedSharding(partitioner.mesh,
                                        partitioner.data_partition_spec)
  batch = _global_batch(numpy_batch, sharding)
  state, metrics = trainer._partitioned_train_step(state, batch)  # pylint: disable=protected-access
  after = _gather(state.params)
  loss = metrics["loss"]
  loss = loss.compute() if hasattr(loss, "compute") else loss
  grads = jax.tree_util.tree_map(lambda b, a: b - a, before, after)
  return {"grads": grads, "loss": _gather(jnp.asarray(loss))}


def _gather(tree):
  """Every leaf as one host numpy array (all processes take part)."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  if jax.process_count() == 1:
    return jax.device_get(tree)
  return multihost_utils.process_allgather(tree, tiled=True)


def _flatten(tree, prefix):
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {prefix + jax.tree_util.keystr(path): np.asarray(x)
          for path, x in flat}


def run_cases(names, use_t5x: bool = False):
  """{case name: {array name: numpy array}} of the CASES named."""
  run = _run_t5x if use_t5x else _run_local
  results = {}
  for name, kind, packed, microbatches, optimizer in CASES:
    if name not in names or (use_t5x and optimizer != "grads"):
      continue  # the T5X step runs with SGD: its update is the gradient
    result = run(kind, packed, microbatches, optimizer)
    results[name] = {"loss": result["loss"]}
    for key in ("grads", "adamw"):
      if key in result:
        results[name].update(_flatten(result[key], key))
  return results


def main(argv):
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  out_dir = pathlib.Path(argv[1])
  names = [case[0] for case in CASES]
  fail_process = None
  for arg in argv[2:]:
    if arg.startswith("--cases="):
      names = arg[len("--cases="):].split(",")
    elif arg.startswith("--fail_process="):
      fail_process = int(arg[len("--fail_process="):])
  if jax.process_index() == fail_process:
    raise ValueError(f"a data error on host {fail_process}")
  results = run_cases(names, use_t5x="--t5x" in argv[2:])
  if jax.process_index() == 0:
    for name, arrays in results.items():
      np.savez(out_dir / f"{name}.npz", **arrays)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
