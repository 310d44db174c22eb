"""The offline demo end to end, at a few steps per stage (a smoke run)."""

import json

from rembert_t5x import demo


def test_demo_writes_per_variant_task_and_language_results(tmp_path):
  settings = demo.DemoSettings(pretrain_steps=2, finetune_steps=2,
                               pair_finetune_steps=2, batch_size=8)
  results = demo.run(str(tmp_path), settings, log=lambda _: None)
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["variants"].keys() == {"coupled", "decoupled"}
  languages = set(saved["languages"])
  assert saved["train_language"] in languages and len(languages) >= 3
  for variant in saved["variants"].values():
    assert variant["params"]["pretraining_params"] > variant["params"]["finetuning_params"]
    for family, (_, _, metric) in demo.TASKS.items():
      per_language = variant["tasks"][family]
      assert set(per_language) == languages
      assert all(0.0 <= m[metric] <= 100.0 for m in per_language.values())
  # The coupled model ties E_in = E_out = H; the decoupled one saves
  # fine-tuning parameters with a smaller input embedding.
  assert (saved["variants"]["decoupled"]["params"]["finetuning_params"]
          < saved["variants"]["coupled"]["params"]["finetuning_params"])
  assert set(saved["chance"]) == set(demo.TASKS)
  table = (tmp_path / "results.md").read_text()
  for family in demo.TASKS:
    assert f"### {family}" in table
    assert (tmp_path / f"results_{family}.png").stat().st_size > 0
  assert "zero-shot avg" in demo.summary_table(results)
