"""benchmarks/optimizer_update.py: the layouts it times hold the same model."""

import json

import jax
import numpy as np

from benchmarks import optimizer_update

TINY = "gin_configs/models/tiny.gin"


def test_every_layout_updates_as_many_parameters(capsys):
  optimizer_update.main(["--config", TINY, "--steps", "1", "--warmup", "0",
                         "--json"])
  rows = {r["layout"]: r for r in map(json.loads,
                                      capsys.readouterr().out.splitlines())}
  assert set(rows) == set(optimizer_update.LAYOUTS)
  assert len({r["params"] for r in rows.values()}) == 1
  # The scanned layout stacks each layer's arrays: fewer, as many elements.
  assert rows["ours_scanned"]["arrays"] < rows["ours"]["arrays"]
  assert rows["one_array"]["arrays"] == 1
  assert all(r["median_s"] > 0 and r["kernels"] >= 1 for r in rows.values())
  table = optimizer_update.table(
      [optimizer_update.Timed(**{k: r[k] for k in
                                 ("layout", "arrays", "params", "kernels",
                                  "times_s")}) for r in rows.values()], "cpu")
  assert "memory floor" in table.splitlines()[-1]


def test_scanned_shapes_stack_the_unscanned_ones():
  from rembert_t5x import configs  # pylint: disable=g-import-not-at-top
  import dataclasses  # pylint: disable=g-import-not-at-top
  cfg = configs.config_from_gin(TINY)
  flat = optimizer_update.param_shapes(cfg)
  stacked = optimizer_update.param_shapes(
      dataclasses.replace(cfg, scan_layers=True))
  sizes = lambda t: sorted(int(np.prod(s.shape))  # pylint: disable=g-long-lambda
                           for s in jax.tree_util.tree_leaves(t))
  assert sum(sizes(flat)) == sum(sizes(stacked))
