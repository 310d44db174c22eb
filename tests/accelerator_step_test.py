"""Smoke test of benchmarks/accelerator_step.py on CPU: tiny config, 1 step.

Checks that a variant runs end to end in-process and that the table reports a
variant that could not run (cuDNN attention on CPU) instead of failing.
"""

import argparse
import math

import pytest

from benchmarks import accelerator_step
from benchmarks import flops

# Minutes, not seconds: `-m 'not slow'` leaves it out of a quick loop
# (.ci/run runs everything).
pytestmark = pytest.mark.slow


def _args(**kw):
  base = dict(config="gin_configs/models/tiny.gin", batch=2, seq_len=16,
              steps=1, warmup=0, override=[],
              # The 4096^2 peak matmul takes ~30 s in bfloat16 on a CPU; the
              # smoke run only needs a positive number.
              peak_matmul_size=256)
  base.update(kw)
  return argparse.Namespace(**base)


def test_variant_reports_loss_speed_and_flops():
  row = accelerator_step.run_variant(_args(), "bfloat16", "einsum")
  assert math.isfinite(row["first_loss"]) and row["first_loss"] > 0
  assert row["step_s"] > 0 and row["compile_s"] > 0
  assert row["tflops"] > 0 and 0 < row["mfu"]
  assert row["backend"] == "cpu"


def test_reference_row_and_error_row_in_table():
  ref = accelerator_step.run_variant(_args(), "float32", "einsum")
  rows = [ref, {"dtype": "bfloat16", "attention": "cudnn",
                "error": "cuDNN attention needs a GPU"}]
  text = accelerator_step.table(rows)
  assert "+0.00e+00" in text  # the reference's own difference
  assert "not run: cuDNN attention needs a GPU" in text


def test_override_parses_json_and_strings():
  assert accelerator_step._parse_override("num_layers=3") == ("num_layers", 3)
  assert accelerator_step._parse_override("dtype=bfloat16") == (
      "dtype", "bfloat16")
  # Booleans as gin writes them, and as JSON does.
  assert accelerator_step._parse_override("scan_layers=True") == (
      "scan_layers", True)
  assert accelerator_step._parse_override("scan_layers=false") == (
      "scan_layers", False)


def test_flop_model_counts_the_gathered_head():
  cfg = accelerator_step.configs.config_from_gin("gin_configs/models/tiny.gin")
  full = flops.train_step_flops(cfg, 2, 16, 16)
  gathered = flops.train_step_flops(cfg, 2, 16, 3)
  assert full > gathered > 0
