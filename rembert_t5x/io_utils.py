"""Moved to `rembert_t5x.runner.io_utils`; this old path stays an alias of it."""

from rembert_t5x import _moved

_moved.alias(__name__, "rembert_t5x.runner.io_utils")
