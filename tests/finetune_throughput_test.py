"""benchmarks/finetune_throughput.py: the batches it times.

The benchmark's end-to-end run (`--quick --json`, ~50 s) is not part of the
suite's time budget; run it by hand.
"""

import json

import numpy as np
import pytest

from benchmarks import finetune_lengths
from benchmarks import finetune_throughput


def test_sorted_eval_batches_longest_first_cut_to_buckets():
  rng = np.random.default_rng(0)
  lengths = np.array([5, 40, 17, 3, 64, 30])
  batch = finetune_throughput.unpacked_batch("pair", lengths, 64, 100, rng)
  parts = [{k: v[:3] for k, v in batch.items()},
           {k: v[3:] for k, v in batch.items()}]
  out = finetune_throughput.sorted_eval_batches(parts, 4)
  # Longest first: 64 40 30 17 | 5 3; buckets 64 and 16.
  assert [b["input_tokens"].shape for b in out] == [(4, 64), (2, 16)]
  assert list((out[0]["segment_ids"] > 0).sum(-1)) == [64, 40, 30, 17]
  assert set(out[0]) == {"input_tokens", "token_types", "segment_ids",
                         "positions"}


def test_unpacked_batch_layout():
  rng = np.random.default_rng(0)
  lengths = np.array([4, 10])
  for head in finetune_throughput.HEADS:
    b = finetune_throughput.unpacked_batch(head, lengths, 12, 100, rng)
    assert list((b["segment_ids"] > 0).sum(-1)) == [4, 10]
    assert (b["input_tokens"][:, 0] == 2).all()  # [CLS]
    assert b["input_tokens"][1, 9] == 3 and b["input_tokens"][0, 3] == 3
    if head == "qa":
      assert (b["start_positions"] <= b["end_positions"]).all()
      assert (b["end_positions"] < lengths - 1).all()
    if head == "tagging":
      assert list(b["weights"].sum(-1)) == [2, 8]


def test_qa_row_length_is_the_qa_modules():
  from rembert_t5x.data import qa  # pylint: disable=g-import-not-at-top
  assert finetune_throughput.SEQ_LEN["qa"] == qa.MAX_SEQ_LENGTH


def test_length_pools_from_a_file_name_what_is_missing(tmp_path):
  path = tmp_path / "pools.json"
  path.write_text(json.dumps({"pair": {"128": [5, 9]}}))
  pools = finetune_lengths.file_pools(str(path))
  assert pools("pair", 128).tolist() == [5, 9]
  with pytest.raises(SystemExit, match="no pool for head 'tagging' at 128"):
    pools("tagging", 128)
