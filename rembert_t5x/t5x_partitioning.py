"""A T5X partitioner with an explicit (data, model) device mesh.

T5X's `PjitPartitioner` builds its mesh from the hardware topology. On CPU
(including simulated devices, `XLA_FLAGS=--xla_force_host_platform_device_count=N`)
that mesh is always (processes, local devices): `num_partitions` is ignored,
and an explicit `ici_mesh_shape` fails. `explicit_mesh_partitioner` returns a
`PjitPartitioner` whose mesh is `jax.make_mesh((data, model))` over all
devices, so model parallelism can be exercised on any backend (the local
runner's `train_lib.make_mesh` builds the same mesh):

  # gin (see gin_configs/runs/t5x_cpu_model_parallel.gin)
  train_script.train.partitioner = @t5x_partitioning.explicit_mesh_partitioner()
  t5x_partitioning.explicit_mesh_partitioner.model_parallelism = 2

This module imports t5x only when the partitioner is built, so the package
(and gin files that reference it) load without t5x installed.
"""

import functools
from typing import Any, Optional, Sequence, Tuple

from absl import logging
import jax
from jax.sharding import AxisType
from jax.sharding import Mesh

MESH_AXES = ("data", "model")


def explicit_mesh(model_parallelism: int = 1,
                  devices: Optional[Sequence[Any]] = None) -> Mesh:
  """All devices as a `(data, model)` mesh with `model_parallelism` columns.

  Built by `jax.make_mesh`, which orders the devices for the hardware: on TPU
  along the physical torus (as T5X's own mesh does), on GPU by device id, on
  CPU as given. Its axes are `Auto`, as `jax.sharding.Mesh`'s are, not
  `jax.make_mesh`'s default `Explicit`: shardings come from the logical axis
  rules, as under T5X, not from the array types.

  Args:
    model_parallelism: size of the "model" mesh axis; must divide the number
      of devices. The "data" axis takes the rest.
    devices: devices to use (default: `jax.devices()`).

  Returns:
    A `jax.sharding.Mesh` with axis names ("data", "model").

  Raises:
    ValueError: if `model_parallelism` does not divide the device count.
  """
  devices = list(jax.devices() if devices is None else devices)
  if model_parallelism < 1 or len(devices) % model_parallelism:
    raise ValueError(
        f"model_parallelism={model_parallelism} must divide the number of "
        f"devices ({len(devices)}); on CPU simulate more with "
        "XLA_FLAGS=--xla_force_host_platform_device_count=N")
  return jax.make_mesh(
      (len(devices) // model_parallelism, model_parallelism), MESH_AXES,
      axis_types=(AxisType.Auto,) * len(MESH_AXES), devices=devices)


@functools.lru_cache(maxsize=None)
def _partitioner_class():
  """Builds the PjitPartitioner subclass on first use (imports t5x)."""
  # Deferred: t5x is optional (not on PyPI).
  from t5x import partitioning as t5x_partitioning  # pylint: disable=g-import-not-at-top

  class ExplicitMeshPjitPartitioner(t5x_partitioning.PjitPartitioner):
    """`PjitPartitioner` over `explicit_mesh(model_parallelism)`."""

    def __init__(self, model_parallelism: int = 1, **kwargs):
      # T5X requires num_partitions or a submesh; its value only matters to
      # T5X's own mesh builder, which `mesh` below replaces.
      kwargs.setdefault("num_partitions", model_parallelism)
      super().__init__(**kwargs)
      self._model_parallelism = model_parallelism

    @functools.cached_property
    def mesh(self) -> Mesh:
      mesh = explicit_mesh(self._model_parallelism)
      logging.info("explicit_mesh_partitioner: mesh %s over %d devices",
                   dict(mesh.shape), mesh.size)
      return mesh

  return ExplicitMeshPjitPartitioner


def explicit_mesh_partitioner(
    model_parallelism: int = 1,
    logical_axis_rules: Optional[Sequence[Tuple[str, Optional[str]]]] = None,
    params_on_devices: bool = True,
) -> Any:
  """A `t5x.partitioning.PjitPartitioner` over an explicit (data, model) mesh.

  Args:
    model_parallelism: size of the "model" mesh axis (the rest is "data").
    logical_axis_rules: logical axis -> mesh axis rules, e.g.
      `t5x.partitioning.standard_logical_axis_rules(additional_rules=
      rembert_t5x.partitioning.rembert_additional_axis_rules())`; T5X's
      standard rules when None.
    params_on_devices: passed to the partitioner.

  Returns:
    The partitioner (a `PjitPartitioner` subclass instance).
  """
  cls = _partitioner_class()
  return cls(model_parallelism=model_parallelism,
             logical_axis_rules=logical_axis_rules,
             params_on_devices=params_on_devices)
