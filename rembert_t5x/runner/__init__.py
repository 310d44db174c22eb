"""The local runner: training loop, evaluation, checkpoints, jobs."""
