"""benchmarks/bucc_corpus.py: a BUCC submission's two passes, tiny."""

import json

import numpy as np

from benchmarks import bucc_corpus

TINY = "gin_configs/models/tiny.gin"


def test_random_corpus_keeps_the_drawn_lengths_cut_to_the_row():
  rng = np.random.default_rng(0)
  tokens = bucc_corpus.random_corpus(np.array([3, 9, 200]), 50, 16, rng)
  assert tokens.lengths().tolist() == [3, 9, 16]
  assert tokens.max_length == 16
  assert tokens.flat.min() >= 5 and tokens.flat.max() < 50


def test_embeds_both_sides_and_mines_them(capsys, tmp_path):
  pool = tmp_path / "lengths.json"
  pool.write_text(json.dumps([5, 12, 30, 64, 200]))
  bucc_corpus.main(["--config", TINY, "--sentences", "40", "--dtype",
                    "float32", "--lengths_file", str(pool), "--work_dir",
                    str(tmp_path / "work"), "--json"])
  r = json.loads(capsys.readouterr().out.splitlines()[-1])
  assert [s["sentences"] for s in r["sides"]] == [40, 40]
  assert r["embed_s"] > 0 and r["mine_s"] > 0
  assert 0 < r["candidates"] <= 40
  assert (tmp_path / "work" / "source" / "embeddings.npy").is_file()
  assert "whole submission" in bucc_corpus.table(r)
