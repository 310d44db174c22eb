"""Smoke tests of the benchmark scripts: tiny config, 1-2 steps, no timing.

They check that each script runs end to end and that its JSON line has the
documented keys and sane values; the numbers themselves are not asserted.
"""

import json
import math
import os
from pathlib import Path

import jax
import pytest

from benchmarks import accelerator_step
from benchmarks import attention
from benchmarks import common
from benchmarks import flops as flop_model
from benchmarks import input_pipeline
from benchmarks import scaling
from benchmarks import step_profile
from benchmarks import train_step
from tests import test_utils

# Minutes, not seconds: `-m 'not slow'` leaves it out of a quick loop
# (.ci/run runs everything).
pytestmark = pytest.mark.slow

TINY = "gin_configs/models/tiny.gin"
TATOEBA = test_utils.SHARED_DATA / "tatoeba"


def _positive(x):
  return isinstance(x, float) and math.isfinite(x) and x > 0


def test_num_selected_matches_mask_tokens_rule():
  assert common.num_selected(126) == 19  # round(18.9)
  assert common.num_selected(10) == 2    # round(1.5) rounds half up
  assert common.num_selected(2) == 1     # at least one
  assert common.max_predictions(128) == 22


def test_synthetic_batch_selects_like_the_pipeline():
  b = common.synthetic_mlm_batch(3, 32, 100)
  assert (b["weights"].sum(-1) == common.num_selected(30)).all()
  assert (b["weights"][:, [0, -1]] == 0).all()  # [CLS], [SEP] never selected
  assert (b["input_tokens"][b["weights"] == 0]
          == b["targets"][b["weights"] == 0]).all()


def test_time_interleaved_turns():
  calls = []
  fns = {n: (lambda n=n: calls.append(n)) for n in ("a", "b")}
  times = common.time_interleaved(fns, {"a": 1, "b": 0}, {"a": 4, "b": 2},
                                  block=3, rewarm=1)
  assert {n: len(t) for n, t in times.items()} == {"a": 4, "b": 2}
  # warm-up a; turn a: 1 untimed + 3 timed; turn b: 1 + 2; turn a: 1 + 1.
  assert "".join(calls) == "a" + "aaaa" + "bbb" + "aa"


def test_hugepage_reexec_is_opt_in(monkeypatch):
  calls = []
  monkeypatch.setattr(os, "execve", lambda *a: calls.append(a))
  monkeypatch.setattr("sys.platform", "linux")
  monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
  monkeypatch.setattr("sys.argv", ["train_step.py", "--json"])
  common.reexec_with_hugepage_malloc()  # no flag: returns
  assert not calls
  argv = ["train_step.py", "--json", common.HUGEPAGE_MALLOC_FLAG]
  monkeypatch.setattr("sys.argv", argv)
  common.reexec_with_hugepage_malloc()
  (_, args, env), = calls
  assert args[1:] == argv
  assert env["GLIBC_TUNABLES"] == ("glibc.malloc.arena_max=2:"
                                   + common.HUGEPAGE_MALLOC)
  monkeypatch.setenv("GLIBC_TUNABLES", common.HUGEPAGE_MALLOC)
  common.reexec_with_hugepage_malloc()  # already set: no second re-start
  assert len(calls) == 1


def test_flops_count_head_only_at_gathered_positions():
  cfg = common.load_config(TINY)
  full = flop_model.forward_matmul_flops(cfg, 2, 16, 16)
  gathered = flop_model.forward_matmul_flops(cfg, 2, 16, 4)
  head = 2 * cfg.emb_dim * cfg.output_embed_dim + (
      2 * cfg.output_embed_dim * cfg.vocab_size)
  assert full - gathered == 2 * 12 * head


def test_train_step_json(capsys):
  train_step.main(["--config", TINY, "--batch", "2", "--seq_len", "16",
                   "--steps", "2", "--warmup", "0", "--hf_steps", "1",
                   "--hf_warmup", "0", "--peak_n", "128", "--also_no_gather",
                   "--json"])
  r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  for key in ("config", "batch", "seq_len", "ours_tokens_per_s",
              "hf_tokens_per_s", "ratio", "ours_mfu", "peak_flops_per_s"):
    assert key in r, key
  assert (r["batch"], r["seq_len"]) == (2, 16)
  for key in ("ours_tokens_per_s", "hf_tokens_per_s", "ratio", "ours_mfu",
              "peak_flops_per_s", "ours_no_gather_tokens_per_s"):
    assert _positive(r[key]), (key, r[key])
  assert r["ratio"] == pytest.approx(
      r["ours_tokens_per_s"] / r["hf_tokens_per_s"])
  assert r["steps"] == {"ours": 2, "ours_no_gather": 2, "peak": 2, "hf": 1}
  assert r["selected_per_row"] <= r["max_predictions_per_seq"]
  assert math.isfinite(r["ours_loss"])


def test_scaling_json_and_plot(capsys, tmp_path):
  png = tmp_path / "scaling.png"
  # Two points: T=16 (both sweeps, 2 layers) and T=32 (seq_len sweep only).
  scaling.main(["--config", TINY, "--seq_lens", "16,32", "--batches", "2,1",
                "--layers", "2", "--steps", "1", "--warmup", "0",
                "--peak_n", "64", "--out", str(png), "--json"])
  r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert (r["base_num_layers"], r["layers_seq_len"], r["layers_batch"]) == (
      2, 16, 2)
  assert [(p["num_layers"], p["batch"], p["seq_len"], p["sweeps"])
          for p in r["points"]] == [(2, 2, 16, ["seq_len", "layers"]),
                                    (2, 1, 32, ["seq_len"])]
  for p in r["points"]:
    for key in ("step_s", "tokens_per_s", "gflop_per_s", "attn_share",
                "peak_gflop_per_s", "mfu"):
      assert _positive(p[key]), (key, p[key])
    assert p["tokens_per_s"] == pytest.approx(p["tokens_per_step"] / p["step_s"])
    assert len(p["step_times_s"]) == 1
    assert math.isfinite(p["loss"])
  # attention's share of the FLOPs grows with T
  assert r["points"][1]["attn_share"] > r["points"][0]["attn_share"]
  assert r["plot"] == str(png)
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_input_pipeline_json(capsys, tmp_path):
  if not TATOEBA.is_dir():
    if os.environ.get("CI") == "true":
      pytest.fail(f"Real test data missing: {TATOEBA} (CI=true).")
    pytest.skip(f"Real test data not found at {TATOEBA}.")
  input_pipeline.main([
      "--config", TINY, "--batch", "2", "--seq_len", "32",
      "--data_dir", str(TATOEBA), "--vocab_size", "400",
      "--max_sentences", "1500", "--max_languages", "3",
      "--pipeline_batches", "2", "--model_steps", "1", "--rounds", "1",
      "--json"])
  r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  for key in ("pipeline_tokens_per_s", "model_tokens_per_s", "ratio"):
    assert _positive(r[key]), (key, r[key])
  assert r["ratio"] == pytest.approx(
      r["pipeline_tokens_per_s"] / r["model_tokens_per_s"])
  assert 0 < r["fill"] <= 1
  assert r["languages"] == 3
  assert r["max_selected_per_row"] <= r["max_predictions_per_seq"]
  assert r["dropped_predictions_last_step"] == 0


def test_input_pipeline_fails_clearly_without_data(tmp_path):
  with pytest.raises(SystemExit, match="Tatoeba data not found"):
    input_pipeline.tatoeba_files(tmp_path / "missing")


def test_attention_benchmark_runs_every_cpu_implementation():
  out = attention.run(TINY, batch=2, seq_len=16, steps=1)
  assert set(out["median_s"]) == {"einsum_forward", "einsum_forward_backward",
                                  "xla_forward", "xla_forward_backward"}
  assert all(_positive(t) for t in out["median_s"].values())
  assert out["max_abs_diff_from_einsum"]["xla"] < 1e-4


ACCELERATOR_TINY = ["--config", TINY, "--batch", "2", "--seq_len", "16",
                    "--steps", "1", "--warmup", "0",
                    "--peak_matmul_size", "64", "--json"]


def test_accelerator_step_profile_on_cpu(capsys, tmp_path):
  accelerator_step.main(ACCELERATOR_TINY + [
      "--profile", str(tmp_path), "--profile_steps", "1"])
  out = capsys.readouterr().out
  p = json.loads(out.strip().splitlines()[-1])["profile"]
  assert [r["batch"] for r in p["fit"]["rows"]] == [1, 2]
  assert all(_positive(r["step_s"]) for r in p["fit"]["rows"])
  assert math.isfinite(p["fit"]["fixed_s"])
  assert math.isfinite(p["fit"]["per_token_s"])
  assert p["kernels"]["matmul"] > 0
  assert p["kernels_total"] == sum(p["kernels"].values())
  # AdamW touches every parameter array: at least one kernel each.
  assert p["optimizer"]["kernels"] >= p["param_leaves"] > 0
  assert Path(p["xplane"]).is_file()
  assert Path(p["xplane"]).is_relative_to(tmp_path)
  assert p["top_ops"] and p["traced_ms_per_step"] > 0
  assert "matmul" in {category for _, category, _ in p["top_ops"]}
  for text in ("fixed vs per-token", "fit: step = ", "kernel launches",
               "optimizer update alone", "| op | category | ms/step |"):
    assert text in out, text


def test_accelerator_step_against_hugging_face_on_cpu(capsys, monkeypatch):
  monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  accelerator_step.main(ACCELERATOR_TINY + ["--hf"])
  out = capsys.readouterr().out
  r = json.loads(out.strip().splitlines()[-1])["hf"]
  for side in ("ours", "hf"):
    assert "error" not in r[side], r[side]
    for key in ("step_s", "tokens_per_s", "tflops", "mfu"):
      assert _positive(r[side][key]), (side, key, r[side][key])
    assert math.isfinite(r[side]["first_loss"])
  assert r["hf"]["precision"] == "bfloat16 autocast"
  assert r["ratio"] == pytest.approx(
      r["ours"]["tokens_per_s"] / r["hf"]["tokens_per_s"])
  table = [l for l in out.splitlines() if l.startswith("| ")]
  assert len(table) == 3  # header, ours, HF (the --- line starts with "|-")
  assert {l.count("|") for l in table} == {len(accelerator_step.HF_HEADER) + 1}
  assert "ours / HF tokens/s: " in out


def test_accelerator_not_run_row_has_every_cell():
  jax_traceback = "\n".join([
      "Traceback (most recent call last):",
      '  File "x.py", line 1, in <module>',
      "RuntimeError: cuDNN is not detected.",
      "--------------------",
      "For simplicity, JAX has removed its internal frames from the "
      "traceback of the following exception. Set "
      "JAX_TRACEBACK_FILTERING=off to include these."])
  reason = accelerator_step.error_message(jax_traceback)
  assert reason == "RuntimeError: cuDNN is not detected."
  assert accelerator_step.error_message(
      "XlaRuntimeError: INTERNAL: no kernel\nmore detail") == (
          "XlaRuntimeError: INTERNAL: no kernel")
  row = {"dtype": "float32", "attention": "einsum", "first_loss": 7.0,
         "step_s": 0.5, "step_s_min": 0.4, "step_s_max": 0.6, "tflops": 1.0,
         "matmul_peak_tflops": 10.0, "mfu": 0.1, "peak_bytes": None,
         "compile_s": 2.0}
  text = accelerator_step.table(
      [row, {"dtype": "bfloat16", "attention": "cudnn", "error": reason}])
  lines = text.splitlines()
  assert {l.count("|") for l in lines} == {
      len(accelerator_step.TABLE_HEADER) + 1}
  assert "| 10.0% |" in lines[2]  # the MFU cell
  assert "not run: RuntimeError: cuDNN is not detected. |" in lines[3]


def test_matmul_peak_is_the_best_of_its_trials():
  peak = accelerator_step.matmul_peak("float32", 32, trials=3, reps=2)
  assert len(peak["trials"]) == 3
  assert peak["tflops"] == max(peak["trials"]) > 0


def test_step_profile_reads_hlo_and_fits_a_line():
  def f(x, w):
    return jax.numpy.sin(x @ w).sum(), (x.T @ x).sum()
  x = jax.numpy.ones((8, 4))
  hlo = jax.jit(f).lower(x, jax.numpy.ones((4, 4))).compile().as_text()
  ops = step_profile.hlo_ops(hlo)
  counts = step_profile.kernel_counts(ops)
  assert counts["matmul"] == 2
  assert step_profile.module_name(hlo) == "jit_f"
  assert step_profile._split_instruction(  # pylint: disable=protected-access
      "  ROOT %t = (f32[2]{0}, s32[]) tuple(%a, %b)") == (
          "t", "tuple", "%a, %b)")
  fixed, per_token = step_profile.linear_fit([100, 200, 300],
                                             [0.07, 0.08, 0.09])
  assert fixed == pytest.approx(0.06) and per_token == pytest.approx(1e-4)
  with pytest.raises(ValueError, match="two distinct"):
    step_profile.linear_fit([100, 100], [0.1, 0.2])


def test_step_profile_names_gpu_kernels():
  """Kernel names as an H200 trace printed them (docs/PERFORMANCE.md v9)."""
  cases = {
      "nvjet_sm90_tst_144x128_64x6_1x2_h_bz_TNN": "matmul",
      "gemm_fusion_dot_778": "matmul",
      "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_":
          "attention (cuDNN)",
      "input_scatter_fusion_2": "scatter",
      "loop_convert_multiply_fusion_31": "elementwise fusion",
      "input_add_reduce_fusion_12": "reduction fusion",
      "fusion_6933": "other kernel"}
  for kernel, category in cases.items():
    assert step_profile.kernel_category(kernel) == category, kernel
  assert step_profile._hlo_name_of_kernel(  # pylint: disable=protected-access
      "input_scatter_fusion_2") == "input_scatter_fusion.2"
  # XLA:GPU's embedding-gradient fusion (an H200 trace's input_scatter_fusion_2)
  hlo = "\n".join([
      "HloModule jit_grad, is_scheduled=true",
      "%fused_scatter (p0: f32[16,4], p1: s32[3,1], p2: f32[3,4]) -> f32[16,4] {",
      "  %p0 = f32[16,4]{1,0} parameter(0)",
      "  %p1 = s32[3,1]{1,0} parameter(1)",
      "  %p2 = f32[3,4]{1,0} parameter(2)",
      "  ROOT %scatter.1 = f32[16,4]{1,0} scatter(%p0, %p1, %p2), "
      "to_apply=%add",
      "}",
      "ENTRY %main.5 (a: f32[16,4], i: s32[3,1], u: f32[3,4]) -> f32[16,4] {",
      "  %a = f32[16,4]{1,0} parameter(0)",
      "  %i = s32[3,1]{1,0} parameter(1)",
      "  %u = f32[3,4]{1,0} parameter(2)",
      "  ROOT %input_scatter_fusion.2 = f32[16,4]{1,0} fusion(%a, %i, %u), "
      "kind=kInput, calls=%fused_scatter",
      "}", ""])
  ops = step_profile.hlo_ops(hlo)
  assert ops["input_scatter_fusion.2"].category == "scatter"


def test_retrieval_scale_json_and_table(capsys):
  from benchmarks import retrieval_scale  # pylint: disable=g-import-not-at-top
  retrieval_scale.main(["--sizes", "60", "--dense_sizes", "60", "--dim", "16",
                        "--block_size", "16", "--json"])
  row, = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert (row["n"], row["block_size"], row["same_pairs"]) == (60, 16, True)
  assert _positive(row["seconds"]) and _positive(row["dense_seconds"])
  assert row["peak_rss_gb"] >= 0 and 0 < row["pairs"] <= 60
  assert row["projected_bucc_test_s"] > row["seconds"]
  lines = retrieval_scale.table([row]).splitlines()
  assert {l.count("|") for l in lines} == {
      len(retrieval_scale.TABLE_HEADER) + 1}
  assert f"scores within {row['max_score_rel_diff']:.0e}) |" in lines[2]
