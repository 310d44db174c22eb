"""Test-wide settings.

Eight simulated CPU devices let the sharding tests build real data x model
meshes on one machine; XLA reads the flag once, before jax is imported.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.fixture(autouse=True)
def _no_vocabulary_from_an_earlier_run():
  """Each test starts with no run vocabulary chosen.

  A run (train, evaluate, a T5X gin hook) makes its checkpoint's vocabulary
  the process default (`vocabulary.use_checkpoint_vocabulary`); tests share
  one process, so that choice must not leak into the next test.
  """
  from rembert_t5x import vocabulary  # pylint: disable=g-import-not-at-top
  vocabulary.use_checkpoint_vocabulary()
  yield
  vocabulary.use_checkpoint_vocabulary()
