"""The T5X model adapters: init, losses, gradients, predictions, fine-tune init."""

import dataclasses
import functools

from clu import metrics as clu_metrics
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rembert_t5x.common import errors
from rembert_t5x import configs
from rembert_t5x import models
from rembert_t5x import network
from tests import test_utils
from tests import tolerances

B, L = test_utils.TINY_BATCH_SHAPE
CFG = test_utils.TINY_CONFIG


def _mlm_batch(seed=0):
  rng, batch = test_utils.tiny_batch(seed)
  weights = (rng.random((B, L)) < 0.25).astype(np.float32) * (batch["segment_ids"] > 0)
  batch.update(targets=rng.integers(5, CFG.vocab_size, (B, L)).astype(np.int32),
               weights=weights)
  return batch


def _init(model):
  shapes = {k: (B, L) for k in ("input_tokens", "token_types", "segment_ids", "positions")}
  variables = model.get_initial_variables(jax.random.PRNGKey(0), shapes)
  assert set(variables) == {"params", "params_axes"}
  return variables["params"]


def _check_loss(model, params, batch):
  loss, metrics = test_utils.jit_loss(model, params, batch)
  assert np.isfinite(loss)
  for name, metric in metrics.items():
    assert isinstance(metric, clu_metrics.Metric), name
    assert np.isfinite(metric.compute()), name
  grads = test_utils.jit_grad(model, params, batch)
  norms = [float(jnp.linalg.norm(g)) for g in jax.tree_util.tree_leaves(grads)]
  assert all(np.isfinite(norms)) and sum(norms) > 0
  eval_loss, _ = jax.jit(model.eval_fn)(params, batch)
  np.testing.assert_allclose(eval_loss, loss)
  return loss, metrics


def test_mlm_model():
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(CFG))
  params = _init(model)
  batch = _mlm_batch()
  loss, metrics = _check_loss(model, params, batch)
  # The loss is the mean cross entropy over weighted positions: near log(V)
  # at initialisation.
  assert abs(float(loss) - np.log(CFG.vocab_size)) < 1.0
  assert float(metrics["mlm/num_predictions"].compute()) == batch["weights"].sum()
  preds = jax.jit(model.predict_batch)(params, batch)
  assert preds.shape == (B, L)
  scores = jax.jit(model.score_batch)(params, batch)
  assert scores.shape == (B,) and np.all(np.asarray(scores) <= 0)


def test_mlm_accuracy_is_argmax_accuracy():
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(CFG))
  params = _init(model)
  batch = _mlm_batch()
  # Make the model right at some positions: targets = its own predictions
  # in the first row, random elsewhere.
  preds = np.asarray(jax.jit(model.predict_batch)(params, batch))
  batch["targets"][0] = preds[0]
  _, metrics = test_utils.jit_loss(model, params, batch)
  w = batch["weights"]
  want = float(((preds == batch["targets"]) * w).sum() / w.sum())
  assert want > 0
  np.testing.assert_allclose(
      float(metrics["mlm/accuracy"].compute()), want, rtol=1e-6)


def test_mlm_gathered_head_gives_the_same_loss_and_gradients():
  full = models.RemBertMLMModel(network.RemBertForMaskedLM(CFG))
  gathered = models.RemBertMLMModel(network.RemBertForMaskedLM(CFG),
                                    max_predictions_per_seq=6)
  params = _init(full)
  batch = _mlm_batch()
  assert batch["weights"].sum(-1).max() <= 6
  loss_full, _ = test_utils.jit_loss(full, params, batch)
  loss_g, metrics = test_utils.jit_loss(gathered, params, batch)
  np.testing.assert_allclose(loss_g, loss_full, rtol=1e-6)
  assert float(metrics["mlm/dropped_predictions"].compute()) == 0
  g_full = test_utils.jit_grad(full, params, batch)
  g_gath = test_utils.jit_grad(gathered, params, batch)
  # Same formula, other gather/scatter order: the float32 gradient bound of
  # the tiny model; dropping or misplacing a prediction moves whole leaves.
  tolerances.assert_trees_close_normwise(
      g_gath, g_full, tolerances.tiny_gradient_rtol(CFG, L, ("mlm",), B * L),
      B * L)


def test_mlm_gather_overflow_is_counted():
  model = models.RemBertMLMModel(network.RemBertForMaskedLM(CFG),
                                 max_predictions_per_seq=1)
  params = _init(model)
  batch = _mlm_batch()
  _, metrics = test_utils.jit_loss(model, params, batch)
  assert float(metrics["mlm/dropped_predictions"].compute()) == batch["weights"].sum() - np.minimum(batch["weights"].sum(-1), 1).sum()


def test_cross_entropy_matches_optax_values_and_gradients():
  import optax  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.standard_normal((3, 4, 11)) * 5, jnp.float32)
  labels = jnp.asarray(rng.integers(0, 11, (3, 4)), jnp.int32)
  weights = jnp.asarray(rng.random((3, 4)), jnp.float32)
  ours = lambda z: jnp.sum(models._cross_entropy(z, labels) * weights)  # pylint: disable=protected-access
  ref = lambda z: jnp.sum(
      optax.softmax_cross_entropy_with_integer_labels(z, labels) * weights)
  # Two float32 log-softmax formulas: exp(z - max) is off by (|z - max| + 1) u
  # relative, the denominator's 11 terms add 11 u, so each probability (the
  # gradient is w (p - onehot), w <= 1) is within (2 M + 13) u relative, M =
  # max |z|, per evaluation; the loss sums 12 cross entropies <= M + log 11.
  m = float(jnp.max(jnp.abs(logits)))
  per_position = tolerances.float32_chain_rtol([2 * m, 11 + 2])
  np.testing.assert_allclose(ours(logits), ref(logits), rtol=0,
                             atol=12 * per_position * (m + np.log(11)))
  np.testing.assert_allclose(jax.grad(ours)(logits), jax.grad(ref)(logits),
                             rtol=0, atol=per_position)


def test_pair_classification_model():
  model = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(CFG, num_classes=3))
  params = _init(model)
  _, batch = test_utils.tiny_batch()
  batch["label"] = np.array([0, 2, 1], np.int32)
  _check_loss(model, params, batch)
  preds = jax.jit(model.predict_batch)(params, batch)
  assert preds.shape == (B, 1) and set(np.asarray(preds).ravel()) <= {0, 1, 2}


def test_tagging_model():
  model = models.RemBertTaggingModel(
      network.RemBertForTokenClassification(CFG, num_classes=7))
  params = _init(model)
  rng, batch = test_utils.tiny_batch()
  batch["targets"] = rng.integers(0, 7, (B, L)).astype(np.int32)
  batch["weights"] = (rng.random((B, L)) < 0.5).astype(np.float32)
  _check_loss(model, params, batch)
  assert jax.jit(model.predict_batch)(params, batch).shape == (B, L)


def test_retrieval_model_embeds_with_the_pretrained_encoder():
  model = models.RemBertRetrievalModel(models.make_module("retrieval", CFG))
  assert isinstance(model.module, network.RemBertForRetrieval)
  params = _init(model)
  _, batch = test_utils.tiny_batch()
  embeddings = jax.jit(model.predict_batch)(params, batch)
  assert embeddings.shape == (B, CFG.emb_dim)
  assert embeddings.dtype == jnp.float32
  scores, aux = jax.jit(functools.partial(
      model.score_batch, return_intermediates=True))(params, batch)
  np.testing.assert_array_equal(scores, embeddings)
  assert aux == {}
  # A pre-training checkpoint's params (MLM head and all) work as they are.
  mlm = models.RemBertMLMModel(network.RemBertForMaskedLM(CFG))
  mlm_params = _init(mlm)
  full = jax.jit(model.predict_batch)(mlm_params, batch)
  only_encoder = jax.jit(model.predict_batch)({"encoder": mlm_params["encoder"]},
                                     batch)
  np.testing.assert_array_equal(full, only_encoder)
  # Rows differ, padding does not matter (row 1 is padded from 9 on).
  assert not np.allclose(full[0], full[1])
  trimmed = {k: v[1:2, :9] for k, v in batch.items()}
  # The same encoder at another length: float32 forward bound (the pooled
  # mean's L terms included), relative to the embedding's scale; attending
  # to the padding moves it by ~1e-3 relative.
  rtol = tolerances.float32_chain_rtol(tolerances.tiny_network_reductions(
      CFG, L, (None,), loss_positions=L))
  np.testing.assert_allclose(model.predict_batch(mlm_params, trimmed)[0],
                             full[1], rtol=0,
                             atol=rtol * float(np.abs(full[1]).max()))
  with pytest.raises(errors.UserError, match="no training loss"):
    model.loss_fn(params, batch)
  with pytest.raises(errors.UserError, match="no training loss"):
    model.eval_fn(params, batch)


def test_qa_model_predicts_spans_inside_the_context():
  model = models.RemBertQAModel(network.RemBertForQuestionAnswering(CFG),
                                max_answer_length=3)
  params = _init(model)
  _, batch = test_utils.tiny_batch()
  batch["start_positions"] = np.array([6, 0, 7], np.int32)
  batch["end_positions"] = np.array([7, 0, 8], np.int32)
  _check_loss(model, params, batch)
  logits, aux = jax.jit(model.predict_batch_with_aux)(params, batch)
  assert logits.shape == (B, 2, L)
  spans = np.asarray(aux["best_span"])
  assert spans.shape == (B, 2)
  last_real = batch["segment_ids"].sum(-1) - 1
  for (s, e), last in zip(spans, last_real):
    assert 5 <= s <= e < s + 3 and e < last
  assert aux["best_score"].shape == (B,)


def test_best_spans_brute_force():
  rng = np.random.default_rng(3)
  start, end = rng.normal(size=(4, 9)), rng.normal(size=(4, 9))
  mask = rng.random((4, 9)) < 0.7
  spans, scores = models.best_spans(jnp.asarray(start), jnp.asarray(end),
                                    jnp.asarray(mask), max_answer_length=4)
  for b in range(4):
    cands = [(start[b, i] + end[b, j], i, j) for i in range(9) for j in range(i, min(i + 4, 9))
             if mask[b, i] and mask[b, j]]
    best = max(cands)
    assert tuple(np.asarray(spans[b])) == best[1:]
    # float32 start + end (each rounded from float64: u, then the sum: u)
    # against the float64 sum: within 3 u (|start| + |end|), also where
    # the sum cancels to near zero.
    np.testing.assert_allclose(
        scores[b], best[0], rtol=0,
        atol=3 * tolerances.U32 * (np.abs(start[b]).max() + np.abs(end[b]).max()))


def test_finetuning_init_drops_the_output_embedding_and_extra_layers():
  cfg = dataclasses.replace(CFG, num_pretraining_only_layers=2)
  mlm = models.RemBertMLMModel(network.RemBertForMaskedLM(cfg))
  pretrained = _init(mlm)
  cls = models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(cfg, num_classes=3))
  initial = _init(cls)
  params = models.finetuning_params_from_pretraining(pretrained, initial, cfg.num_layers)
  assert "mlm_head" not in params
  assert sorted(k for k in params["encoder"] if k.startswith("layers_")) == ["layers_0", "layers_1"]
  np.testing.assert_array_equal(
      params["encoder"]["layers_1"]["mlp"]["wi"]["kernel"],
      pretrained["encoder"]["layers_1"]["mlp"]["wi"]["kernel"])
  encoder_count = sum(np.size(x) for x in jax.tree_util.tree_leaves(params["encoder"]))
  assert encoder_count == configs.count_parameters(cfg)["finetuning_params"]
  _, batch = test_utils.tiny_batch()
  batch["label"] = np.array([0, 2, 1], np.int32)
  assert np.isfinite(test_utils.jit_loss(cls, params, batch)[0])


def test_finetuning_init_rejects_another_architecture():
  other = dataclasses.replace(CFG, emb_dim=64, head_dim=16)
  pretrained = _init(models.RemBertMLMModel(network.RemBertForMaskedLM(other)))
  initial = _init(models.RemBertPairClassificationModel(
      network.RemBertForSequenceClassification(CFG, num_classes=3)))
  with pytest.raises(ValueError, match="pre-trained parameter encoder/.* has shape"):
    models.finetuning_params_from_pretraining(pretrained, initial, CFG.num_layers)


@pytest.mark.parametrize("coupled,max_predictions", [(False, 4), (True, None)])
def test_padded_vocabulary_is_numerically_the_plain_model(coupled,
                                                          max_predictions):
  """Padding 97 -> 128 rows changes no loss, metric or gradient, and padded
  rows are never predicted, even with large weights in them (full logits
  and the gathered head with the custom-VJP decoder)."""
  from rembert_t5x.convert import checkpoint_conversion as cc  # pylint: disable=g-import-not-at-top
  plain_cfg = test_utils.TINY_COUPLED_CONFIG if coupled else CFG
  padded_cfg = dataclasses.replace(plain_cfg, vocab_pad_multiple=128)
  plain = models.RemBertMLMModel(network.RemBertForMaskedLM(plain_cfg),
                                 max_predictions_per_seq=max_predictions)
  padded = models.RemBertMLMModel(network.RemBertForMaskedLM(padded_cfg),
                                  max_predictions_per_seq=max_predictions)
  params = _init(plain)
  padded_params = cc.unflatten(cc.resize_vocab_params(
      cc.flatten(jax.device_get(params)), 128))
  # Garbage in the padded rows must not matter: large decoder weights would
  # win the argmax and dominate the softmax if they were not masked.
  flat = cc.flatten(padded_params)
  bias = "mlm_head/decoder_bias" if coupled else "mlm_head/decoder/bias"
  flat[bias] = np.where(np.arange(128) >= 97, 1e4, flat[bias])
  flat["encoder/embeddings/word_embeddings/embedding"][97:] = 3.0
  padded_params = cc.unflatten(flat)
  batch = _mlm_batch()
  batch["weights"][0, :6] = 1.0  # row 0 overflows max_predictions = 4

  # float32 bounds of the tiny model (the log-sum-exp runs over 128 columns
  # instead of 97, so XLA may block it and the decoder differently); a
  # padded row leaking into the softmax (bias 1e4) moves everything by O(1).
  positions = int(batch["weights"].size)
  forward_rtol = tolerances.float32_chain_rtol(
      tolerances.tiny_network_reductions(padded_cfg, L, ("mlm",), positions))
  grad_rtol = tolerances.tiny_gradient_rtol(padded_cfg, L, ("mlm",), positions)
  loss, metrics = jax.jit(plain.loss_fn)(params, batch)
  padded_loss, padded_metrics = jax.jit(padded.loss_fn)(padded_params, batch)
  np.testing.assert_allclose(padded_loss, loss, rtol=forward_rtol)
  for name, metric in metrics.items():
    np.testing.assert_allclose(padded_metrics[name].compute(),
                               metric.compute(), rtol=forward_rtol,
                               err_msg=name)
  grads = jax.jit(jax.grad(lambda p: plain.loss_fn(p, batch)[0]))(params)
  padded_grads = cc.flatten(jax.jit(
      jax.grad(lambda p: padded.loss_fn(p, batch)[0]))(padded_params))
  got, want = {}, {}
  for path, g in cc.flatten(grads).items():
    rows = slice(None)
    if padded_grads[path].shape != g.shape:
      axis = [a for a, (x, y) in enumerate(zip(g.shape,
                                               padded_grads[path].shape))
              if x != y][0]
      rows = (slice(None),) * axis + (slice(0, 97),)
      pad_rows = (slice(None),) * axis + (slice(97, None),)
      assert not np.any(np.asarray(padded_grads[path])[pad_rows]), path
    got[path], want[path] = np.asarray(padded_grads[path])[rows], g
  tolerances.assert_trees_close_normwise(got, want, grad_rtol, positions)
  preds = np.asarray(padded.predict_batch(padded_params, batch))
  np.testing.assert_array_equal(preds, jax.jit(plain.predict_batch)(params, batch))
  assert preds.max() < 97
  np.testing.assert_allclose(padded.score_batch(padded_params, batch),
                             jax.jit(plain.score_batch)(params, batch),
                             rtol=forward_rtol)


def test_bfloat16_activations_keep_the_float32_loss():
  """bf16 compute (params float32, as the TPU run files do) on tiny.gin.

  Tolerance: the loss within 2^-8 = 0.39% relative, one bfloat16 unit
  roundoff. Every activation is rounded to bfloat16 (relative error up to
  2^-9 per rounding, a few roundings per layer), but LayerNorm, softmax and
  the cross entropy run in float32 and the loss averages ~100 independent
  per-position errors, so it moves far less than one roundoff (measured:
  1e-5 to 2.3e-4 relative at three weight scales). Gradients are summed over
  the batch from bf16 activations: within 5% in L2 norm and at cosine
  >= 0.999 of the float32 ones (measured: <= 2.1%, >= 0.9997).
  """
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  cfg = configs.config_from_gin(
      str(test_utils.REPO_ROOT / "gin_configs" / "models" / "tiny.gin"))
  batch = {k: jnp.asarray(v) for k, v in
           common.synthetic_mlm_batch(8, 64, cfg.vocab_size).items()}
  params = test_utils.perturbed(jax.jit(network.RemBertForMaskedLM(cfg).init)(
      jax.random.PRNGKey(0), batch["input_tokens"])["params"])

  def loss_and_grads(dtype):
    model = models.RemBertMLMModel(network.RemBertForMaskedLM(
        dataclasses.replace(cfg, dtype=dtype)), max_predictions_per_seq=12)
    loss, grads = jax.jit(jax.value_and_grad(
        lambda p: model.loss_fn(p, batch)[0]))(params)
    assert all(g.dtype == jnp.float32 for g in jax.tree_util.tree_leaves(grads))
    return float(loss), jnp.concatenate(
        [g.ravel() for g in jax.tree_util.tree_leaves(grads)])

  loss32, grads32 = loss_and_grads("float32")
  loss16, grads16 = loss_and_grads("bfloat16")
  assert abs(loss16 - loss32) <= 2**-8 * loss32
  assert loss16 != loss32  # bf16 really ran
  assert float(jnp.linalg.norm(grads16 - grads32)
               / jnp.linalg.norm(grads32)) <= 0.05
  cosine = grads16 @ grads32 / (jnp.linalg.norm(grads16)
                                * jnp.linalg.norm(grads32))
  assert float(cosine) >= 0.999


# --- Microbatching: k microbatches give the full batch's gradient ------------


def _t5x_style_accumulation(model, params, batch, k):
  """Gradients and merged metrics of k microbatches, as T5X's trainer does.

  t5x/trainer.py `accumulate_grads_microbatched`: microbatch i is rows
  [i * m, (i + 1) * m) of the batch, its gradient is added into float32
  zeros, and the metrics are merged.
  """
  size = next(iter(batch.values())).shape[0] // k
  grad_fn = jax.jit(jax.grad(model.loss_fn, has_aux=True))
  total = jax.tree_util.tree_map(lambda p: jnp.zeros(p.shape, jnp.float32),
                                 params)
  merged = None
  for i in range(k):
    micro = {name: x[i * size:(i + 1) * size] for name, x in batch.items()}
    grads, metrics = grad_fn(params, micro, None)
    total = jax.tree_util.tree_map(jnp.add, total, grads)
    merged = metrics if merged is None else {
        name: m.merge(metrics[name]) for name, m in merged.items()}
  return total, merged


@pytest.mark.parametrize("kind", ["mlm", "pair", "tagging", "qa"])
def test_microbatches_sum_to_the_full_batch_gradient(kind, k=3):
  model = test_utils.tiny_model(kind)
  params = _init(model)
  batch = jax.tree_util.tree_map(jnp.asarray, test_utils.six_row_batch(kind))
  full_grads, full_metrics = jax.jit(jax.grad(model.loss_fn, has_aux=True))(
      params, batch, None)
  grads, metrics = _t5x_style_accumulation(
      model, params, models.with_full_batch_loss_weight(model, batch), k)
  # The same sums split three ways (a micro-batch mean instead of the full
  # batch's is off by factors, below).
  tolerances.assert_same_sums(grads, full_grads, metrics["loss"].compute(),
                              full_metrics["loss"].compute(), kind, batch, CFG)
  if kind not in ("pair", "tagging"):
    return
  # Without the feature each microbatch takes its own mean: for one weight
  # per example that is k times the full gradient, for uneven weights
  # something else again.
  naive, _ = _t5x_style_accumulation(model, params, batch, k)
  if kind == "pair":
    rows, length = batch["input_tokens"].shape
    tolerances.assert_trees_close_normwise(
        naive, jax.tree_util.tree_map(lambda g: k * g, full_grads),
        tolerances.tiny_gradient_rtol(
            CFG, length, tolerances.tiny_head(kind, length), rows * length),
        rows * length)
  else:
    ratios = [float(jnp.vdot(n, n) / jnp.vdot(f, f)) for n, f in zip(
        jax.tree_util.tree_leaves(naive),
        jax.tree_util.tree_leaves(full_grads)) if float(jnp.vdot(f, f)) > 0]
    assert min(ratios) > 1.5 and max(ratios) - min(ratios) > 0.1, ratios


def test_full_batch_loss_weight_is_the_total_on_every_row():
  model = test_utils.tiny_model("tagging")
  batch = test_utils.six_row_batch("tagging")
  out = models.with_full_batch_loss_weight(model, batch)
  total = batch["weights"].sum()
  np.testing.assert_array_equal(out[models.FULL_BATCH_LOSS_WEIGHT],
                                np.full(2 * B, total, np.float32))
  assert set(out) == set(batch) | {models.FULL_BATCH_LOSS_WEIGHT}
  # With the feature, the loss of the whole batch is unchanged.
  params = _init(model)
  np.testing.assert_allclose(test_utils.jit_loss(model, params, out)[0],
                             test_utils.jit_loss(model, params, batch)[0],
                             rtol=1e-6)


def test_models_and_the_corpus_embedder_import_without_the_data_stack():
  """A bare accelerator machine has JAX but no TensorFlow or seqio: the
  models, the corpus embedder and the benchmarks run there must not import
  them (T5X's `FEATURE_CONVERTER_CLS` still reads the converter class)."""
  code = (
      "import sys\n"
      "from rembert_t5x import models\n"
      "from rembert_t5x.runner import embed_corpus, finetune_packing\n"
      "from benchmarks import bucc_corpus, finetune_throughput, "
      "optimizer_update, accelerator_step\n"
      "print(sorted(m for m in ('tensorflow', 'seqio') if m in sys.modules))\n"
      "print(models.RemBertMLMModel.FEATURE_CONVERTER_CLS.__name__)\n")
  assert test_utils.run_python(code).split() == ["[]", "MLMFeatureConverter"]
