r"""Exact BUCC mining at full size: time and memory of `margin_candidates`.

  python benchmarks/retrieval_scale.py                  # 10k, 50k, 100k a side
  python benchmarks/retrieval_scale.py --sizes 10000 --dense_sizes 10000 --json
  python benchmarks/retrieval_scale.py --sizes 400000 --num_source 2000

Mines random unit vectors (n sources against n targets, dimension 1152 as
RemBERT's pooled embeddings) with `retrieval_metrics.margin_candidates`, the
blocked exact search, each size in a fresh subprocess so its peak memory is
its own. Prints a markdown table, a row per size: seconds (compilation
included), the extra peak resident memory over the process with its inputs
already made, the plan's own estimate (`mining_plan`), and the time
projected to BUCC's 400k x 400k (work grows as sources x targets). At the
`--dense_sizes` the same subprocess also runs the full-matrix float64
reference (`_margin_candidates_dense`) on the same vectors and says whether
both mined the same pairs. `--num_source` mines that many sources against
each size's targets instead: the blocks and memory of a full-size target
side in a fraction of its time. With `--json`, one JSON object per size
instead of the table.
"""

import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import json
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from rembert_t5x.scoring import retrieval_metrics  # pylint: disable=g-import-not-at-top

# The full-matrix reference, timed beside the blocked search.
_dense_margin_candidates = retrieval_metrics._margin_candidates_dense  # pylint: disable=protected-access

BUCC_TEST_SIZE = 400_000  # about the largest BUCC 2018 test side (de-en)
GB = 1e9
_BUCC_K = BUCC_TEST_SIZE // 1000
TABLE_HEADER = ("sources x targets", "block", "seconds", "peak extra RSS GB",
                "plan GB", f"projected {_BUCC_K}k x {_BUCC_K}k s",
                "pairs", "dense seconds", "dense peak GB", "same pairs")


def _status_bytes(field: str) -> int:
  """A `/proc/self/status` memory field (VmRSS, VmHWM), in bytes."""
  for line in pathlib.Path("/proc/self/status").read_text().splitlines():
    if line.startswith(field + ":"):
      return int(line.split()[1]) * 1024
  raise RuntimeError(f"no {field} in /proc/self/status (Linux only).")


def _reset_peak() -> bool:
  """Resets VmHWM to the current RSS (Linux >= 4.0); False if refused."""
  try:
    pathlib.Path("/proc/self/clear_refs").write_text("5")
    return True
  except OSError:
    return False


def _measured(fn):
  """(fn's result, seconds, peak RSS over the RSS before the call in bytes,
  whether the peak was reset before the call).

  Without a peak reset the peak counts anything before the call that rose
  above the RSS at the call; the inputs are made without a transient, so
  that is little.
  """
  reset = _reset_peak()
  before = _status_bytes("VmRSS")
  tick = time.perf_counter()
  result = fn()
  seconds = time.perf_counter() - tick
  return result, seconds, _status_bytes("VmHWM") - before, reset


def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
  """[n, dim] float32 random unit vectors, made in place (no float64 copy)."""
  x = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x


def measure(n: int, dim: int = 1152, k: int = 4, block_size=None,
            dense: bool = False, num_source=None) -> dict:
  """Mines `num_source` (default n) sources against n targets, random unit
  vectors, in this process; one result dict."""
  num_source = num_source or n
  source, target = unit_vectors(num_source, dim, 0), unit_vectors(n, dim, 1)
  plan = retrieval_metrics.mining_plan(num_source, n, dim, k, block_size)
  load = os.getloadavg()[0]
  pairs, seconds, peak, reset = _measured(
      lambda: retrieval_metrics.margin_candidates(source, target, k,
                                                  block_size))
  row = {
      "n": n, "num_source": num_source, "dim": dim, "k": k,
      "block_size": plan.block_size,
      "seconds": round(seconds, 3), "peak_rss_gb": round(peak / GB, 3),
      "plan_peak_gb": round(plan.peak_bytes / GB, 3),
      "projected_bucc_test_s": round(
          seconds * BUCC_TEST_SIZE**2 / (num_source * n)),
      "pairs": len(pairs), "backend": jax.default_backend(),
      "cpus": os.cpu_count(), "peak_reset": reset,
      "load_average_before": load,
  }
  if dense:
    expected, dense_seconds, dense_peak, _ = _measured(
        lambda: _dense_margin_candidates(source, target, k))
    scores = {(i, j): score for i, j, score in pairs}
    row.update(
        dense_seconds=round(dense_seconds, 3),
        dense_peak_rss_gb=round(dense_peak / GB, 3),
        same_pairs=set(scores) == {(i, j) for i, j, _ in expected},
        same_order=[p[:2] for p in pairs] == [p[:2] for p in expected],
        max_score_rel_diff=max(
            (abs(scores[i, j] - score) / abs(score)
             for i, j, score in expected if (i, j) in scores), default=0.0))
  row["load_average_after"] = os.getloadavg()[0]
  return row


def measure_in_subprocess(n: int, dim: int, k: int, block_size, dense: bool,
                          num_source=None) -> dict:
  """`measure` in a fresh Python process: a peak RSS of this size alone."""
  command = [sys.executable, __file__, "--single_size", str(n),
             "--dim", str(dim), "--k", str(k)]
  if block_size:
    command += ["--block_size", str(block_size)]
  if num_source:
    command += ["--num_source", str(num_source)]
  if dense:
    command.append("--dense_sizes=" + str(n))
  proc = subprocess.run(command, capture_output=True, text=True, check=False)
  if proc.returncode:
    raise RuntimeError(f"retrieval_scale at n={n} failed:\n{proc.stderr}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _agreement(row) -> str:
  """The "same pairs" cell: the pair sets, their order, the scores."""
  if not row["same_pairs"]:
    return "**no**"
  order = "same order" if row["same_order"] else "another order"
  return f"yes ({order}, scores within {row['max_score_rel_diff']:.0e})"


def table(rows) -> str:
  """The markdown table of `measure` results."""
  lines = ["| " + " | ".join(TABLE_HEADER) + " |",
           "|" + "---|" * len(TABLE_HEADER)]
  for r in rows:
    dense = ([f"{r['dense_seconds']:.2f}", f"{r['dense_peak_rss_gb']:.2f}",
              _agreement(r)]
             if "dense_seconds" in r else ["—"] * 3)
    cells = [f"{r['num_source']:,} x {r['n']:,}", str(r["block_size"]),
             f"{r['seconds']:.2f}", f"{r['peak_rss_gb']:.2f}",
             f"{r['plan_peak_gb']:.2f}", f"{r['projected_bucc_test_s']:,}",
             f"{r['pairs']:,}"] + dense
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def _sizes(text: str) -> list:
  return [int(s) for s in text.split(",") if s]


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--sizes", type=_sizes, default=[10_000, 50_000, 100_000],
                 help="sentences a side, comma-separated")
  p.add_argument("--dense_sizes", type=_sizes, default=[],
                 help="sizes at which the full-matrix reference runs too")
  p.add_argument("--dim", type=int, default=1152)
  p.add_argument("--k", type=int, default=4)
  p.add_argument("--block_size", type=int, default=None,
                 help="source rows per block (default: mining_plan's)")
  p.add_argument("--num_source", type=int, default=None,
                 help="sources at every size (default: as many as targets)")
  p.add_argument("--json", action="store_true")
  p.add_argument("--single_size", type=int, help=argparse.SUPPRESS)
  a = p.parse_args(argv)
  if a.single_size:  # the subprocess of one size
    print(json.dumps(measure(a.single_size, a.dim, a.k, a.block_size,
                             a.single_size in a.dense_sizes, a.num_source)))
    return
  rows = []
  for n in sorted(set(a.sizes) | set(a.dense_sizes)):
    rows.append(measure_in_subprocess(n, a.dim, a.k, a.block_size,
                                      n in a.dense_sizes, a.num_source))
    if a.json:
      print(json.dumps(rows[-1]), flush=True)
  if not a.json:
    print(f"{a.dim}-dim random unit vectors, k={a.k}, backend "
          f"{rows[0]['backend']}, {rows[0]['cpus']} CPUs, load average "
          f"{rows[0]['load_average_before']:.2f} before the first size, "
          f"{rows[-1]['load_average_after']:.2f} after the last")
    print(table(rows))


if __name__ == "__main__":
  main()
