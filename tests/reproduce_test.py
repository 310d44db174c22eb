"""Tests for rembert_t5x.experiments.reproduce: variants, statistics, tables.

The long run itself is not run here (README "Reproducing the paper's
ablations"); these check its parts on tiny made-up unit records.
"""

import dataclasses
import functools
import pathlib

import pytest

from rembert_t5x.common import errors
from rembert_t5x import configs
from rembert_t5x.experiments import reproduce
from rembert_t5x.experiments import synthetic_runs
from rembert_tasks import synthetic as synthetic_tasks

LANGS = ("qla", "qcy", "qgr")


@functools.lru_cache(maxsize=None)
def _counts(variant):
  return configs.count_parameters(reproduce.variant_config(variant))


def _record(variant, seed, score, layers_scores=None):
  """A unit record whose every language scores `score` on every task (the
  training language 100, so it must not enter the zero-shot average)."""
  def langs(value, metric):
    return {l: {metric: 100.0 if l == "qla" else value} for l in LANGS}
  record = {"variant": variant, "pretrain_seed": seed, "seed": seed,
            "params": _counts(variant),
            "mlm": {"mlm/accuracy": 0.5},
            "families": {f: langs(score, m)
                         for f, m in reproduce.FAMILIES.items()}}
  if layers_scores is not None:
    record["figure1"] = {str(l): langs(v, "f1")
                         for l, v in layers_scores.items()}
    record["probe"] = {"0": {l: 50.0 for l in LANGS},
                       "1": {l: 60.0 for l in LANGS}}
  return record


def test_variants_follow_the_paper_shapes():
  counts = {v: _counts(v) for v in reproduce.VARIANTS}
  coupled = reproduce.variant_config("coupled")
  # The paper's regime: the embeddings are a large share of the model.
  embedding = coupled.vocab_size * coupled.input_embed_dim
  assert embedding / counts["coupled"]["finetuning_params"] > 0.35
  # Table 6: the reinvested models fine-tune at about the coupled size.
  for name in ("ein16_deeper", "ein16_wider"):
    ratio = (counts[name]["finetuning_params"] /
             counts["coupled"]["finetuning_params"])
    assert 0.95 < ratio < 1.05, (name, ratio)
  # Table 4: E_out only changes pre-training size, not fine-tuning size.
  table4 = [counts[v] for v in reproduce.TABLES["table4"].rows]
  assert len({c["finetuning_params"] for c in table4}) == 1
  assert [c["pretraining_params"] for c in table4] == sorted(
      c["pretraining_params"] for c in table4)
  # Table 2: decoupling adds the output embedding, nothing else.
  assert (counts["decoupled"]["finetuning_params"] ==
          counts["coupled"]["finetuning_params"])
  assert (counts["decoupled"]["pretraining_params"] >
          counts["coupled"]["pretraining_params"])


def test_every_table_row_and_comparison_is_a_variant():
  for table in reproduce.TABLES.values():
    assert set(table.rows) <= set(reproduce.VARIANTS)
    for pair in table.direction.comparisons:
      assert set(pair) <= set(table.rows)


def test_unknown_variant_is_a_user_error():
  with pytest.raises(errors.UserError, match="unknown variant 'big'"):
    reproduce.variant_config("big")


def test_unit_scores_leave_out_the_training_language():
  scores = reproduce.unit_scores(_record("coupled", 0, 40.0), "qla")
  assert scores == {"pair": 40.0, "tag": 40.0, "qa": 40.0, "avg": 40.0}


@pytest.mark.parametrize("tests, verdict", [
    ([dict(difference=2.0, p_holm=0.01)], reproduce.REPRODUCED),
    ([dict(difference=2.0, p_holm=0.01), dict(difference=1.0, p_holm=0.2)],
     reproduce.NOT_REPRODUCED),
    ([dict(difference=2.0, p_holm=0.01), dict(difference=-3.0, p_holm=0.01)],
     reproduce.OPPOSITE),
    ([dict(difference=2.0, p_holm=None)], reproduce.NOT_TESTED),
    ([], reproduce.NOT_TESTED),
])
def test_direction_verdict(tests, verdict):
  assert reproduce.direction_verdict(tests) == verdict


def test_direction_test_separated_and_overlapping_seeds():
  direction = reproduce.Direction("b above a", (("a", "b"),))
  clear = reproduce.test_direction(
      direction, {"a": [50.0, 50.5, 49.5], "b": [60.0, 60.4, 59.6]})
  assert clear["verdict"] == reproduce.REPRODUCED
  assert clear["comparisons"][0]["difference"] == pytest.approx(10.0)
  noisy = reproduce.test_direction(
      direction, {"a": [50.0, 58.0, 45.0], "b": [52.0, 47.0, 57.0]})
  assert noisy["verdict"] == reproduce.NOT_REPRODUCED
  # Spreads of ~6.6 and 5 points over 3 seeds: only a large effect is seen.
  assert noisy["comparisons"][0]["detectable"] > 15
  worse = reproduce.test_direction(
      direction, {"a": [60.0, 60.4, 59.6], "b": [50.0, 50.5, 49.5]})
  assert worse["verdict"] == reproduce.OPPOSITE


def test_analyse_tables_figure1_and_markdown(tmp_path):
  settings = dataclasses.replace(reproduce.Settings(), seeds=3)
  # Scores rise with E_out and with reinvestment; decoupled = coupled.
  base = {"coupled": 40.0, "decoupled": 40.0, "ein16_eout16": 30.0,
          "ein16_eout64": 35.0, "ein16_eout256": 45.0, "ein16_deeper": 50.0,
          "ein16_wider": 48.0}
  records = []
  for variant, score in base.items():
    for seed, noise in enumerate((-0.5, 0.0, 0.5)):
      layers = None
      if variant in reproduce.FIGURE1_VARIANTS:
        # Dropping the last layer costs 1 point at E_out 16, 8 at 256.
        cost = {"ein16_eout16": 1.0, "ein16_eout64": 4.0,
                "ein16_eout256": 8.0}[variant]
        layers = {1: score + noise - cost}
      records.append(_record(variant, seed, score + noise, layers))
  results = reproduce.analyse(records, settings, train_language="qla")
  assert results["tests"]["table2"]["verdict"] == reproduce.NOT_REPRODUCED
  assert results["tests"]["table4"]["verdict"] == reproduce.REPRODUCED
  assert results["tests"]["table6"]["verdict"] == reproduce.REPRODUCED
  assert results["variants"]["ein16_eout64"]["mean_std"]["avg"] == [
      pytest.approx(35.0), pytest.approx(0.5)]
  figure1 = results["figure1"]
  assert figure1["drop_cost"]["ein16_eout16"][0] == pytest.approx(1.0)
  assert figure1["drop_cost"]["ein16_eout256"][0] == pytest.approx(8.0)
  assert figure1["verdict"] == reproduce.REPRODUCED
  text = reproduce.markdown(results)
  for needle in ("Table 2", "Table 4", "Table 6", "Figure 1 analog",
                 "PT params", "35.0 ± 0.5", "reproduced", "layer 1",
                 "Convergence check", "detectable with 80% power: ±"):
    assert needle in text
  reproduce.write(tmp_path, results)
  assert (tmp_path / "reproduce.png").stat().st_size > 0
  assert "Table 6" in (tmp_path / "reproduce.md").read_text()


def test_units_seeds_outermost_and_settings_checked():
  units = reproduce.units(dataclasses.replace(reproduce.Settings(), seeds=2))
  assert units[:len(reproduce.VARIANTS)] == [
      (v, 0) for v in reproduce.VARIANTS]
  assert len(units) == 2 * len(reproduce.VARIANTS)
  with pytest.raises(errors.UserError, match="--seeds must be at least 1"):
    reproduce.Settings(seeds=0).check()


def test_flags_round_trip():
  settings = reproduce.Settings(seeds=2, pretrain_steps=7, figure1=False)
  fv = reproduce.cli.parse_flags(
      ["--workdir=/tmp/x"] + synthetic_runs.worker_flags(settings),
      reproduce._define_flags)  # pylint: disable=protected-access
  assert synthetic_runs.settings_from_flags(fv, reproduce.Settings) == settings
  assert pathlib.Path(fv.workdir) == pathlib.Path("/tmp/x")


def test_the_vocabulary_fits_the_twelve_language_corpus(tmp_path):
  """SentencePiece makes at most ~720 pieces of the 12 languages' corpus at
  the default 2,000 sentences a language (~695 at 200): VOCAB_SIZE must
  stay within it when the languages change."""
  settings = reproduce.Settings()
  manifest = synthetic_tasks.prepare(
      str(tmp_path / "d"), vocab_size=reproduce.VOCAB_SIZE,
      num_languages=reproduce.NUM_LANGUAGES,
      corpus_sentences=settings.corpus_sentences, pair_train=4,
      tag_train=4, qa_train=4, eval_examples=4)
  assert len(manifest["languages"]) == reproduce.NUM_LANGUAGES
