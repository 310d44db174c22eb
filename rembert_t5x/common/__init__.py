"""What every layer shares: user errors, the command-line helpers, atomic file I/O, and ending tf.data pipelines at exit."""
