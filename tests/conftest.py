"""Test-wide settings.

Eight simulated CPU devices let the sharding tests build real data x model
meshes on one machine; XLA reads the flag once, before jax is imported.
"""

import os
import tempfile

# XLA's MLIR fusion emitters take most of the CPU compile time of the tests'
# tiny programs; its older LLVM IR emitters compile them faster (measured:
# tests/models_test.py with no compilation cache, 76 s -> 51 s) and give the
# same results within the tests' tolerances. jaxlib is pinned
# (pyproject.toml), so the flag exists (XLA aborts on an unknown one).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8 "
                      "--xla_cpu_use_fusion_emitters=false")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# A persistent XLA compilation cache: the suite compiles the same tiny train
# and eval steps many times over (every `train.train` call and every CLI
# subprocess jits afresh); identical programs are then compiled once per
# machine. Subprocesses inherit it through the environment. Set
# JAX_COMPILATION_CACHE_DIR to '' to turn it off.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    os.path.join(tempfile.gettempdir(), "rembert_t5x_test_jax_cache"))
# Every program is cached: the many tiny ones (e.g. the slices orbax
# compiles per array shape to save a replicated array) would otherwise be
# compiled again by every test process.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# XLA's backend optimisations (LLVM passes, fusion heuristics) are most of
# the compile time of the tests' tiny programs and buy nothing at their size:
# a third less CPU time for a train-and-checkpoint test, same results within
# the tests' tolerances. Benchmarks (benchmarks/) never set this. Set it to
# 0 to test with full optimisation.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")


import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.fixture(autouse=True)
def _no_vocabulary_from_an_earlier_run():
  """Each test starts with no run vocabulary chosen.

  A run (train, evaluate, a T5X gin hook) makes its checkpoint's vocabulary
  the process default (`vocabulary.use_checkpoint_vocabulary`); tests share
  one process, so that choice must not leak into the next test.
  """
  import gin  # pylint: disable=g-import-not-at-top
  from rembert_t5x.data import vocabulary  # pylint: disable=g-import-not-at-top
  vocabulary.use_checkpoint_vocabulary()
  # Nor gin bindings: a test that parses a run file (e.g. binding
  # MIXTURE_OR_TASK_MODULE) must not configure the next test's train.train.
  # Cleared after the test too: module-scoped fixtures of the next module
  # run before this fixture's next setup.
  gin.clear_config()
  yield
  gin.clear_config()
  vocabulary.use_checkpoint_vocabulary()


@pytest.fixture
def clean_gin():
  """Clears gin's config and constants after a test that parsed T5X's run
  files (`test_utils.parse_t5x_gin`)."""
  yield
  import gin  # pylint: disable=g-import-not-at-top
  gin.clear_config(clear_constants=True)


@pytest.fixture
def random_mlm_task():
  """Registers the tiny random-token MLM task the run files name
  (`test_utils.register_random_mlm_task`)."""
  from tests import test_utils  # pylint: disable=g-import-not-at-top
  test_utils.register_random_mlm_task()


@pytest.fixture
def run_gin(request, tmp_path):
  """The test module's `RUN_GIN` text written to `tmp_path/run.gin`; its
  path."""
  path = tmp_path / "run.gin"
  path.write_text(request.module.RUN_GIN)
  return path


def pytest_configure(config):
  """Keeps the module order `pytest_collection_modifyitems` sets.

  pytest-xdist (>= 3.6) otherwise hands `--dist loadfile` modules out by
  test count, largest first: the long end-to-end modules, which have few
  tests, went last (measured: one worker idle for the last 38 s).
  """
  if hasattr(config.option, "loadscopereorder"):
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
  """Modules with end-to-end (`slow`, `packaging`) tests run first.

  `.ci/run` gives whole modules to two xdist workers in collection order;
  started last, the few long modules left one worker idle for minutes while
  the other finished them. First, the many short modules fill the end.
  """
  del config
  long_modules = {item.module.__name__ for item in items
                  if item.get_closest_marker("slow") is not None
                  or item.get_closest_marker("packaging") is not None}
  items.sort(key=lambda item: item.module.__name__ not in long_modules)


def pytest_collection_finish(session):
  """Moves everything alive after collection out of the garbage collector's
  view.

  Collection imports TensorFlow, JAX, seqio and every test module: millions
  of long-lived objects that each full collection would walk again (pytest
  alone runs five at the end of the session). Measured on eval, models,
  train and qa tests run serially: 153 s -> 149 s user CPU.
  """
  del session
  import gc  # pylint: disable=g-import-not-at-top
  gc.collect()
  gc.freeze()
  # Tracing allocates many short-lived objects: the default first threshold
  # (700) ran ~5,500 young collections (6 s) in the models, train and eval
  # tests; at 50,000, 41 (1.4 s), 2% less CPU time overall.
  gc.set_threshold(50_000, 20, 100)
