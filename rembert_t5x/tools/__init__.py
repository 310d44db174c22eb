"""Small commands beside the runner: `count_params` (a gin file's parameter
counts) and `evaluate_qa` (SQuAD/MLQA scores of a predictions file). Nothing
in the package imports them; each is a `rembert-*` console script."""
