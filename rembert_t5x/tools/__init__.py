"""Small commands beside the runner: `count_params` (a gin file's parameter
counts), `evaluate_qa` (SQuAD/MLQA scores of a predictions file),
`make_synthetic_data` (the synthetic corpus and tasks on disk) and
`multihost_launch` (a simulated host of a pod). Nothing in the package
imports them; each is a `rembert-*` console script or a `python -m` module."""
