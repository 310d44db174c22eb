"""The local runner: training loop, evaluation, checkpoints, command line, file I/O."""
