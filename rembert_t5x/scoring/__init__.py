"""Scorers: XTREME's metrics, their standard errors, retrieval mining.

`metrics` (accuracy, entity F1, UD-POS F1, SQuAD/MLQA F1 and exact match, as
XTREME's `evaluate.py` computes them), `standard_errors` (bootstrap spreads
over examples), `seed_statistics` (spread over seeds, Welch's test, Holm)
and `retrieval_metrics` (Tatoeba nearest neighbours, BUCC margin mining in
bounded memory). Plain Python, numpy and JAX: no seqio,
TensorFlow or model code, so anything above may import them.
"""
