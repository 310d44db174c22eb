"""A process that ends with an error ends: its tf.data pipelines go first.

A pipeline whose worker threads run Python (`tf.numpy_function`,
`tf.data.Dataset.from_generator`: the QA windows, the local-file readers)
must be destroyed while those threads can still take the GIL. An error's
traceback holds the frames it passed through, and with them the iterator
they were reading; the error sits in a reference cycle, so only the
interpreter's last garbage collection frees it, after finalization has
begun. The iterator's destructor then waits for the calls in flight, each
waiting for the GIL, and a thread that asks for the GIL during finalization
is stopped for good: the process hangs at 0% CPU after its `error:` line
(the main thread in the iterator's destructor, no thread left in Python),
or aborts.

`end_pipelines_at_exit` frees that garbage in an `atexit` callback, which
runs before finalization: the destructors release the GIL while they wait,
the calls in flight finish, the threads end. Every entry point
(`common.cli`) and every reader that builds such a pipeline registers it,
so T5X's own entry points (`t5x.train`, `t5x.infer`) get it as well.
"""

import atexit
import gc
import sys

# What the interpreter keeps of an uncaught exception for post-mortem
# debugging (`sys.last_exc` from Python 3.12); an exiting process has no use
# for it, and it would keep the failed pipeline alive past the callback.
_LAST_EXCEPTION = ("last_exc", "last_type", "last_value", "last_traceback")


def _end_pipelines() -> None:
  for name in _LAST_EXCEPTION:
    if hasattr(sys, name):
      setattr(sys, name, None)
  gc.collect()


def end_pipelines_at_exit() -> None:
  """Frees unreachable pipelines at exit, before the interpreter finalizes.

  Registers the `atexit` callback once per process, however often it is
  called (each built pipeline, each command run in one test process).
  """
  atexit.unregister(_end_pipelines)
  atexit.register(_end_pipelines)
