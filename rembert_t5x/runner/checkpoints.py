"""Reading the local runner's checkpoints, through orbax's public API only.

A MODEL_DIR holds `checkpoints/<step>/`, written by `train.train` with an
`orbax.checkpoint.CheckpointManager` (one item, the train state
`{"step", "params", "opt_state"}`), or by the converters (`{"step",
"params"}`). Every reader here asks a read-only CheckpointManager:
`all_steps` / `latest_step` list the committed steps (orbax never lists the
temporary directory of a save that was killed before its commit),
`item_metadata` gives shapes and dtypes without reading tensors, and
`restore` reads the params as host numpy arrays, whatever mesh wrote them.

A checkpoint path is a MODEL_DIR, its `checkpoints/` directory, or one step
directory `checkpoints/<step>`.
"""

import contextlib
import dataclasses
import json
import logging
import pathlib
import weakref
from typing import Any, Iterator, Optional, Sequence

import jax
import numpy as np
import orbax.checkpoint as ocp

from rembert_t5x import configs
from rembert_t5x.common import errors


def writer(checkpoints_dir: pathlib.Path, period: int,
           keep: int) -> ocp.CheckpointManager:
  """The manager `train.train` saves with (synchronous: a save is complete
  when the step returns, so a SIGKILL never loses a reported checkpoint)."""
  options = ocp.CheckpointManagerOptions(
      save_interval_steps=period, max_to_keep=keep,
      enable_async_checkpointing=False, create=True)
  if jax.default_backend() == "cpu":
    _save_whole_replicas()
  return ocp.CheckpointManager(checkpoints_dir, options=options)


def _save_whole_replicas() -> None:
  """Orbax's array handler without replica-parallel saving, process-wide.

  Replica-parallel saving has every replica of a replicated array write a
  slice of it: on CPU devices (one host's memory) that gains nothing and
  compiles a slicing program per array shape; the first save of a 138-array
  tree over 8 simulated CPU devices took 22.7 s with it, 0.6 s without. GPU
  and TPU runs keep orbax's default. The on-disk format is the same.
  """
  global _WHOLE_REPLICAS
  if not _WHOLE_REPLICAS:  # orbax logs a warning on every override
    ocp.type_handlers.register_type_handler(
        jax.Array, ocp.type_handlers.ArrayHandler(use_replica_parallel=False),
        override=True)
    _WHOLE_REPLICAS = True


_WHOLE_REPLICAS = False


class _QuietReadOnly(logging.Filter):
  """Drops orbax's warnings about the options of a read-only manager.

  Every read (eval, conversion, checkpoint selection) opens one; orbax
  warns that it is read-only and which options that implies, several lines
  per checkpoint read, none of them news.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (message.startswith("Given directory is read only") or
                message.startswith("CheckpointManagerOptions.read_only=True"))


logging.getLogger("absl").addFilter(_QuietReadOnly())


@contextlib.contextmanager
def _reader(root: pathlib.Path) -> Iterator[ocp.CheckpointManager]:
  manager = ocp.CheckpointManager(
      root, item_handlers=ocp.PyTreeCheckpointHandler(),
      options=ocp.CheckpointManagerOptions(read_only=True))
  try:
    yield manager
  finally:
    manager.close()


def _locate(path: str) -> tuple[pathlib.Path, Optional[int]]:
  """(the checkpoints directory, the step `path` names or None)."""
  given = pathlib.Path(path)
  if (given / "checkpoints").is_dir():
    return given / "checkpoints", None
  if not given.is_dir():
    raise errors.UserError(f"checkpoint {path}: no such directory")
  if given.name.isdigit():
    with _reader(given.parent) as manager:
      if int(given.name) in manager.all_steps():
        return given.parent, int(given.name)
  return given, None


def steps(path: str) -> list[int]:
  """The committed steps under `path`, oldest first (just the one it names
  when `path` is a step directory).

  Raises:
    errors.UserError: no such directory, or no committed checkpoint in it.
  """
  root, step = _locate(path)
  if step is not None:
    return [step]
  with _reader(root) as manager:
    found = sorted(manager.all_steps())
  if not found:
    raise errors.UserError(f"checkpoint {path}: no checkpoint found in {root}")
  return found


def latest_step(path: str) -> int:
  """The newest committed step under `path` (`CheckpointManager.latest_step`)."""
  root, step = _locate(path)
  if step is not None:
    return step
  with _reader(root) as manager:
    found = manager.latest_step()
  if found is None:
    raise errors.UserError(f"checkpoint {path}: no checkpoint found in {root}")
  return found


def step_dir(path: str, step: Optional[int] = None) -> pathlib.Path:
  """The directory of `step` (default: the latest) under `path`."""
  root, named = _locate(path)
  step = latest_step(path) if step is None else step
  if named is not None and named != step:
    raise errors.UserError(f"checkpoint {path} is step {named}, not {step}")
  # orbax's default step naming: the step number itself.
  return root / str(step)


def checkpoint_dirs(path: str) -> list[tuple[int, pathlib.Path]]:
  """(step, directory) of every committed checkpoint under `path`."""
  root, _ = _locate(path)
  return [(s, root / str(s)) for s in steps(path)]


def latest_checkpoint_dir(path: str) -> pathlib.Path:
  """The directory of the newest committed checkpoint under `path`."""
  return step_dir(path)


def tree_metadata(path: str, step: Optional[int] = None) -> dict[str, Any]:
  """The saved tree of array metadata (shapes, dtypes) of one checkpoint.

  Raises:
    errors.UserError: the checkpoint's metadata cannot be read: `checkpoint
      <step dir>: cannot read its metadata: <reason>`, the reason naming
      orbax's `_METADATA` file when it is missing or unreadable (then the
      error's cause is the OSError or ValueError of reading it).
  """
  root, _ = _locate(path)
  step = latest_step(path) if step is None else step
  where = f"checkpoint {root / str(step)}: cannot read its metadata"
  with _reader(root) as manager:
    try:
      meta = manager.item_metadata(step)
    except Exception as e:  # orbax raises several types for a bad directory
      problem = _metadata_file_problem(root / str(step))
      reason = problem[0] if problem else errors.first_line(e)
      raise errors.UserError(f"{where}: {reason}") from e
  tree = getattr(meta, "tree", meta)
  if not tree:
    # orbax returns no tree, with a logged warning only, when the file of
    # the tree (`_METADATA`) is gone.
    problem = _metadata_file_problem(root / str(step))
    if problem:
      raise errors.UserError(f"{where}: {problem[0]}") from problem[1]
    raise errors.UserError(f"{where}: orbax found no tree of arrays in it")
  return dict(tree)


# orbax's file of the saved tree (names, shapes, dtypes) in an item directory.
METADATA_FILE = "_METADATA"


def _metadata_file_problem(step_dir: pathlib.Path
                           ) -> Optional[tuple[str, BaseException]]:
  """(what is wrong, the error) with the step's `_METADATA`, or None.

  The file sits in the item directory (`default/`, the one item every
  checkpoint here has), or in the step directory itself in orbax's older
  single-item layout.
  """
  item = step_dir / "default"
  metadata = (item if item.is_dir() else step_dir) / METADATA_FILE
  try:
    json.loads(metadata.read_bytes())
  except FileNotFoundError as e:
    return f"orbax's metadata file {metadata} is missing", e
  except (OSError, ValueError) as e:
    return (f"orbax's metadata file {metadata} is unreadable: "
            f"{errors.first_line(e)}", e)
  return None


def _restore_numpy(root: pathlib.Path, step: int, item: dict,
                   partial: bool) -> dict:
  restore_args = jax.tree_util.tree_map(
      lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
  with _reader(root) as manager:
    return manager.restore(step, args=ocp.args.PyTreeRestore(
        item=item if partial else None, restore_args=restore_args,
        partial_restore=partial))


def load_params(path: str, step: Optional[int] = None) -> dict:
  """The params of one checkpoint (default: the latest) as host numpy.

  Host numpy arrays, whatever mesh wrote them, so a checkpoint saved on 8
  devices loads on 1. Only the params are read, not the optimizer state.
  """
  root, _ = _locate(path)
  step = latest_step(path) if step is None else step
  tree = tree_metadata(path, step)
  if "params" not in tree:
    raise errors.UserError(f"checkpoint {root / str(step)} has no 'params'")
  # Placeholder leaves: partial restore reads the keys the item names.
  item = jax.tree_util.tree_map(lambda _: np.zeros((), np.int8),
                                {"params": tree["params"]})
  return _restore_numpy(root, step, item, partial=True)["params"]


def load_param_subset(path: str, step: int,
                      names: Sequence[tuple[str, ...]]) -> dict:
  """Only the params at `names` (key paths under "params"), as numpy.

  For converters that stream a large checkpoint one subtree at a time.
  Returns the nested params dict holding just those leaves.
  """
  root, _ = _locate(path)
  item: dict = {}
  for name in names:
    node = item
    for key in name[:-1]:
      node = node.setdefault(key, {})
    # A placeholder leaf: partial restore reads only the keys present.
    node[name[-1]] = np.zeros((), np.int8)
  return _restore_numpy(root, step, {"params": item}, partial=True)["params"]


def param_shapes(tree) -> dict[str, tuple[int, ...]]:
  """{"a/b/c": shape} of a params tree (arrays, ShapeDtypeStructs or metadata)."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
    name = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
    out[name] = tuple(leaf.shape)
  return out


def model_param_shapes(model) -> dict[str, tuple[int, ...]]:
  """The parameter shapes `model` (a `models.RemBert*Model`) initialises.

  Traced once per model object (checkpoint selection loads every step).
  """
  shapes = _MODEL_SHAPES.get(model)
  if shapes is None:
    variables = jax.eval_shape(
        lambda rng: model.get_initial_variables(rng, {"input_tokens": (1, 8)}),
        jax.random.PRNGKey(0))
    shapes = _MODEL_SHAPES[model] = param_shapes(variables["params"])
  return shapes


_MODEL_SHAPES: "weakref.WeakKeyDictionary[Any, dict]" = (
    weakref.WeakKeyDictionary())


def _config_differences(source: pathlib.Path, config) -> str:
  """The architecture fields where the checkpoint's saved config differs.

  Returns "; <file> differs from the gin files in <fields>" when the
  checkpoint's MODEL_DIR holds `rembert_config.json` and differs, else "".
  """
  for directory in (source, *source.parents[:3]):
    saved = directory / configs.CHECKPOINT_CONFIG_FILE
    if saved.is_file():
      break
  else:
    return ""
  try:
    found = configs.read_checkpoint_config(saved)
  except errors.UserError:
    return ""
  fields = [f"{f.name} {getattr(found, f.name)!r} vs "
            f"{getattr(config, f.name)!r}"
            for f in dataclasses.fields(config)
            if f.name in ARCHITECTURE_FIELDS
            and getattr(found, f.name) != getattr(config, f.name)]
  return (f"; {saved} differs from the gin files in {', '.join(fields)}"
          if fields else "")


# The config fields that decide parameter shapes.
ARCHITECTURE_FIELDS = ("vocab_size", "input_embed_dim", "emb_dim",
                       "output_embed_dim", "num_layers", "num_heads",
                       "head_dim", "mlp_dim", "max_position_embeddings",
                       "type_vocab_size", "tie_embeddings")


def check_params_fit(model, params, source: str) -> None:
  """Refuses params that do not fit `model`, in one line.

  Every parameter the model initialises must be in `params` with the same
  shape (a pre-training checkpoint may hold more: the MLM head a retrieval
  or fine-tuning model does not use).

  Raises:
    errors.UserError: naming the checkpoint, the first missing or misshapen
      parameter with both shapes, and, when the checkpoint's MODEL_DIR holds
      `rembert_config.json`, the config fields that differ.
  """
  saved = param_shapes(params)
  for name, shape in sorted(model_param_shapes(model).items()):
    if saved.get(name) == shape:
      continue
    found = ("has no parameter " + name if name not in saved else
             f"has {name} of shape {saved[name]}, the model expects {shape}")
    raise errors.UserError(
        f"checkpoint {source} does not fit the model of the gin files: it "
        f"{found}{_config_differences(pathlib.Path(source), model.config)} "
        "(pass the model gin file the checkpoint was trained with)")


def load_params_for(model, path: str, step: Optional[int] = None) -> dict:
  """`load_params`, checked against `model` by `check_params_fit`."""
  params = load_params(path, step)
  check_params_fit(model, params, path)
  return params
