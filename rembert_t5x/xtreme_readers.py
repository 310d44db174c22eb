"""Moved to `rembert_t5x.data.xtreme_readers`; this old path stays an alias of it."""

from rembert_t5x import _moved

_moved.alias(__name__, "rembert_t5x.data.xtreme_readers")
