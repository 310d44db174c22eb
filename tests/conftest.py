"""Test-wide settings.

Eight simulated CPU devices let the sharding tests build real data x model
meshes on one machine; XLA reads the flag once, before jax is imported.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
