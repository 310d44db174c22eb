"""A pod on one machine: the same global batch split over 2 processes.

Each spawned process (tests/multihost_worker.py) is one simulated host with
2 CPU devices, joined into one JAX cluster by `jax.distributed.initialize`
(gloo collectives); the mesh is data 2 x model 2, so each host feeds half of
every batch and shards the parameters over its own devices. The loss, the
gradient and the parameters after an AdamW step must equal those of one
process fed the whole batch on the same mesh shape (computed here, in the
test process, on 4 of its 8 simulated devices). The T5X trainer's step gets
the same check where t5x is installed.
"""

import importlib.util
import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests import multihost_worker

from tests import test_utils

REPO = pathlib.Path(__file__).resolve().parents[1]
# Generous: the two workers compile every case (~10 s of CPU each) on a
# machine whose cores the rest of the suite shares.
TIMEOUT_S = 900



def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env() -> dict:
  # The launcher sets the devices of each process (--local_device_count).
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = " ".join(
      f for f in env.get("XLA_FLAGS", "").split()
      if not f.startswith("--xla_force_host_platform_device_count"))
  return env


def spawn_cluster(count: int, command, devices: int = 2,
                  heartbeat_timeout: int = 100):
  """Starts `count` processes of `command` (a module and its arguments)
  through the launcher, one simulated host each; returns them running."""
  port = _free_port()
  return [subprocess.Popen(
      [sys.executable, "-m", "rembert_t5x.tools.multihost_launch",
       f"--coordinator_address=127.0.0.1:{port}",
       f"--process_count={count}", f"--process_index={index}",
       f"--local_device_count={devices}",
       f"--heartbeat_timeout={heartbeat_timeout}", "--", *command],
      cwd=REPO, env=_env(), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True) for index in range(count)]


def wait_all(processes, timeout=TIMEOUT_S):
  """(return codes, outputs); kills every process if one is still running
  after `timeout` seconds (a hang fails the test instead of the suite)."""
  outputs = []
  try:
    for p in processes:
      outputs.append(p.communicate(timeout=timeout)[0])
  except subprocess.TimeoutExpired:
    for p in processes:
      p.kill()
    pytest.fail(f"a worker still ran after {timeout} s: a hang")
  return [p.returncode for p in processes], outputs


def _max_abs(arrays) -> float:
  return max(float(np.max(np.abs(a))) for a in arrays)


def assert_same_results(split, whole, case):
  """The split run equals the whole-batch run up to float32 rounding.

  Both compute the same program on the same mesh shape; what may differ is
  the order of the cross-host sums (gloo vs in-process). A float32 sum of n
  terms is then off by at most about n * u * sum|terms| (u = 2**-24); the
  gradient entries here sum at most a few hundred terms (6 rows x 12
  tokens, through 2 layers) whose magnitudes stay within the largest
  entry's, so 1e-5 of the largest entry (~170 u) holds on any machine. A
  loss normalised per host is off by a factor (1.5 or more for tagging's
  uneven weights, tests/models_test.py), far outside it.
  """
  assert set(split) == set(whole), case
  np.testing.assert_allclose(split["loss"], whole["loss"], rtol=1e-5,
                             err_msg=case)
  for prefix in ("grads", "adamw"):
    names = [n for n in whole if n.startswith(prefix)]
    if not names:
      continue
    scale = _max_abs([whole[n] for n in names])
    for name in names:
      np.testing.assert_allclose(split[name], whole[name], rtol=0,
                                 atol=1e-5 * scale, err_msg=f"{case} {name}")


# The cases the suite runs: each compiles programs of its own in three
# processes (~45 s of wall time a case on 2 cores), so the suite takes the
# two a per-host mistake shows in first: tagging's uneven loss weights,
# packed, in 2 microbatches through an AdamW step, and QA's span gather over
# packed slots. Every case of multihost_worker.CASES (MLM, each head packed
# and not, the plain step):
# `MULTIHOST_CASES=all python -m pytest tests/multihost_test.py`
# (scripts/t5x_multihost_smoke.sh runs that).
FULL = os.environ.get("MULTIHOST_CASES") == "all"
SUITE_CASES = (tuple(case[0] for case in multihost_worker.CASES) if FULL
               else ("tagging_packed_adamw", "qa_packed"))


def _check(tmp_path, use_t5x: bool):
  names = [n for n in SUITE_CASES if not use_t5x or "adamw" not in n]
  extra = ("--cases=" + ",".join(names),) + (("--t5x",) if use_t5x else ())
  processes = spawn_cluster(
      2, ["tests.multihost_worker", str(tmp_path), *extra])
  whole = multihost_worker.run_cases(names, use_t5x=use_t5x)
  codes, outputs = wait_all(processes)
  assert codes == [0, 0], "\n".join(o[-3000:] for o in outputs)
  assert sorted(whole) == sorted(names)
  for case, arrays in whole.items():
    with np.load(tmp_path / f"{case}.npz") as split:
      assert_same_results(dict(split), arrays, case)


@pytest.mark.slow
def test_runner_step_on_two_hosts_equals_one_host(tmp_path):
  assert len(jax.devices()) >= 4  # conftest.py simulates 8
  _check(tmp_path, use_t5x=False)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("t5x") is None,
                    reason="t5x is not installed (pip install -e '.[t5x]'); "
                    "the runner's step gets the same check without it")
def test_t5x_trainer_step_on_two_hosts_equals_one_host(tmp_path):
  _check(tmp_path, use_t5x=True)


def test_one_failing_host_ends_every_host(tmp_path):
  """Host 1 meets a data error while host 0 waits for it in the first
  step's collectives: both end, with the error, and nothing hangs."""
  processes = spawn_cluster(
      2, ["tests.multihost_worker", str(tmp_path), "--cases=tagging",
          "--fail_process=1"], heartbeat_timeout=10)
  codes, outputs = wait_all(processes, timeout=300)
  assert codes[1] == 1 and "ValueError: a data error on host 1" in outputs[1]
  assert codes[0] != 0, outputs[0][-3000:]
  assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not FULL, reason="two processes importing the runner: "
                    "~50 s; set MULTIHOST_CASES=all (the in-process check "
                    "below runs always)")
def test_local_runner_refuses_several_processes(tmp_path):
  """The runner started on every host of a pod: each refuses in one line
  before reading or writing anything (the experiments train through the
  same `train.train_model`)."""
  run_gin = tmp_path / "run.gin"
  run_gin.write_text(test_utils.tiny_run_gin())
  processes = spawn_cluster(
      2, ["rembert_t5x.runner.train", f"--gin_file={run_gin}",
          f"--gin.MODEL_DIR='{tmp_path / 'm'}'"], devices=1)
  codes, outputs = wait_all(processes, timeout=300)
  for code, output in zip(codes, outputs):
    assert code == 2, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert last.startswith("error: the local runner runs on one host") and (
        "JAX sees 2 processes" in last and "t5x.train" in last), last
  assert sorted(p.name for p in tmp_path.iterdir()) == ["run.gin"]


@pytest.mark.parametrize("what", ["train", "eval", "embed_corpus"])
def test_runner_evaluator_and_embedding_refuse_several_processes(
    tmp_path, monkeypatch, capsys, what):
  """The runner's, the evaluator's and corpus embedding's check where JAX
  reports several processes (with real processes: the test above)."""
  from rembert_t5x.common import errors  # pylint: disable=g-import-not-at-top
  from rembert_t5x.runner import embed_corpus  # pylint: disable=g-import-not-at-top
  from rembert_t5x.runner import eval as eval_lib  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(jax, "process_count", lambda: 4)
  if what == "train":
    from rembert_t5x.runner import train  # pylint: disable=g-import-not-at-top
    from rembert_t5x.runner import train_config  # pylint: disable=g-import-not-at-top
    with pytest.raises(errors.UserError, match="the local runner runs on one "
                       "host, but JAX sees 4 processes"):
      train.train_model(test_utils.tiny_model("mlm"), train_config.TrainConfig(
          model_dir=str(tmp_path / "m"), mixture_or_task_name="unused",
          task_feature_lengths={"input_tokens": 8}, train_steps=1))
  elif what == "eval":
    with pytest.raises(errors.UserError, match="JAX sees 4 processes"):
      eval_lib.evaluate(str(tmp_path / "m"), str(tmp_path / "e"),
                        model=test_utils.tiny_model("pair"),
                        mixture_or_task_name="unused")
  else:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a\nb\n")
    with pytest.raises(SystemExit) as exit_info:
      embed_corpus.main([f"--sentences={corpus}", "--model_gin=x.gin",
                         f"--work_dir={tmp_path / 'w'}"])
    assert exit_info.value.code == 2
    assert "error: corpus embedding runs on one host, but JAX sees 4 " \
        "processes" in capsys.readouterr().err
  assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["corpus.txt"])


@pytest.mark.parametrize("argv,message", [
    (["--process_count=2", "--process_index=0",
      "--coordinator_address=127.0.0.1:1"], "no module to run"),
    (["--process_count=2", "--process_index=0",
      "--coordinator_address=127.0.0.1:1", "--"], "no module after `--`"),
    (["--process_count=2", "--process_index=2",
      "--coordinator_address=127.0.0.1:1", "--", "t5x.eval"],
     "--process_index=2: must be below --process_count=2"),
])
def test_launcher_errors_are_one_line(argv, message, capsys):
  """Before joining any cluster: nothing waits for a coordinator."""
  from rembert_t5x.tools import multihost_launch  # pylint: disable=g-import-not-at-top
  with pytest.raises(SystemExit) as exit_info:
    multihost_launch.main(argv)
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
