"""`t5x-to-hf` exports that the ordinary Hugging Face client code uses.

The client is the real `transformers` (AutoTokenizer, AutoModelFor*, pipeline)
on tiny RemBERTs with random weights. Their vocabulary is trained here on
real Tatoeba sentences (English and German, so Greek text is [UNK]) and
written in two layouts: ours ([PAD] [UNK] [CLS] [SEP] [MASK] = 0-4) and the
released one (`pieces.RELEASED_LAYOUT`); the user session of project issue
28 adds its own ([UNK] 1, [CLS] 312, [SEP] 313, [MASK] 314). Each model goes
HF -> `hf-to-t5x` -> `t5x-to-hf`, as a user's would. The fine-tuned heads'
predictions through Hugging Face are compared with our evaluator's
(`runner.eval.evaluate_params` on SeqIO tasks of the same real sentences).
"""

import dataclasses
import functools
import json
import shutil

import numpy as np
import pytest
import seqio
from sentencepiece import sentencepiece_model_pb2
import tensorflow as tf

from rembert_t5x.common import errors
from rembert_t5x.convert import checkpoint_io
from rembert_t5x.convert import convert_checkpoint
from rembert_t5x.convert import hf_export
from rembert_t5x.data import pieces
from rembert_t5x.data import qa
from rembert_t5x.data import squad_files
from rembert_t5x.data import vocabulary
from rembert_t5x import models
from rembert_t5x.runner import checkpoints
from rembert_t5x.runner import eval as eval_lib
from rembert_tasks import panx
from rembert_tasks import registry
from rembert_tasks import xnli
from tests import test_utils

torch = test_utils.LazyModule("torch")
transformers = test_utils.LazyModule("transformers")

# 400 pieces (the released layout needs ids up to 336); positions for QA
# windows of one real sentence.
CFG = dataclasses.replace(test_utils.TINY_CONFIG, vocab_size=400,
                          max_position_embeddings=128)
ISSUE_LAYOUT = {pieces.CLS_PIECE: 312, pieces.SEP_PIECE: 313,
                pieces.MASK_PIECE: 314}
LAYOUTS = ("trained", "released")
GREEK = "Ο σκύλος τρέχει στο πάρκο."  # no Greek in the training text


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """Real sentences, and the vocabulary in each layout."""
  tatoeba = test_utils.shared_data_dir("tatoeba")
  xquad = test_utils.shared_data_dir("xquad")
  tmp = tmp_path_factory.mktemp("hf_export")
  eng = (tatoeba / "tatoeba.deu-eng.eng").read_text("utf-8").splitlines()
  deu = (tatoeba / "tatoeba.deu-eng.deu").read_text("utf-8").splitlines()
  corpus = tmp / "corpus.txt"
  corpus.write_text("\n".join(eng[:800] + deu[:800]) + "\n", "utf-8")
  trained = pieces.train_sentencepiece({"xx": [str(corpus)]},
                                       str(tmp / "trained"), CFG.vocab_size,
                                       character_coverage=1.0)
  vocabs = {
      "trained": trained,
      "released": test_utils.released_layout_vocabulary(
          trained, str(tmp / "released.model")),
      "issue": vocabulary.move_special_pieces(
          trained, str(tmp / "issue.model"), ISSUE_LAYOUT),
  }
  squad = json.loads((xquad / "xquad.en.json").read_text("utf-8"))
  # Sentences the vocabulary was not trained on.
  return {"vocabs": vocabs, "eng": eng[800:840], "deu": deu[800:840],
          "xquad": squad_files.parse_squad_json(squad, "xquad.en.json")}


def _export(tmp_path, hf_model, vocab, **kwargs):
  """HF model -> `hf-to-t5x` -> our MODEL_DIR -> `t5x-to-hf`; returns
  (MODEL_DIR, export directory)."""
  hf_model.save_pretrained(tmp_path / "hf")
  shutil.copyfile(vocab, tmp_path / "hf" / pieces.VOCABULARY_FILENAME)
  checkpoint_io.hf_to_t5x(str(tmp_path / "hf"), str(tmp_path / "ours"))
  checkpoint_io.t5x_to_hf(str(tmp_path / "ours"), str(tmp_path / "export"),
                          **kwargs)
  return tmp_path / "ours", tmp_path / "export"


def _random_hf(cls, num_labels=2):
  return test_utils.randomise_hf(cls(test_utils.hf_config(CFG, num_labels)))


def _centred(hf_model, rows):
  """`hf_model` with its classifier bias moved so that its mean logits over
  `rows` ((ids, token types) of real inputs) are 0: a random model would
  otherwise predict one class nearly everywhere, which compares nothing."""
  length = max(len(ids) for ids, _ in rows)
  pad = lambda seq: list(seq) + [0] * (length - len(seq))
  mask = np.array([pad([1] * len(ids)) for ids, _ in rows])
  with torch.no_grad():
    logits = test_utils.run_hf(hf_model, np.array([pad(i) for i, _ in rows]),
                               np.array([pad(t) for _, t in rows]),
                               mask).logits.numpy()
    if logits.ndim == 3:  # tagging: the mean over real tokens
      logits = logits[mask.astype(bool)]
    hf_model.classifier.bias -= torch.tensor(logits.mean(0))
  return hf_model


# --- The tokenizer and padded batches ------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS + ("issue",))
def test_user_session_tokenizer_and_padded_batches(tmp_path, data, layout):
  """A user's session: AutoTokenizer pads with the model's [PAD], its
  length is the model's vocabulary, and a padded batch predicts as one
  sentence at a time."""
  vocab_file = data["vocabs"][layout]
  _, export = _export(tmp_path, _random_hf(transformers.RemBertForMaskedLM),
                      vocab_file)
  assert sorted(p.name for p in export.iterdir()) == [
      "README.md", "config.json", "model.safetensors", "sentencepiece.model",
      "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
  ours = vocabulary.RemBertVocabulary(vocab_file)
  ids = ours.special_ids
  tok = transformers.AutoTokenizer.from_pretrained(export)
  model = transformers.AutoModelForMaskedLM.from_pretrained(export)
  assert len(tok) == model.config.vocab_size == CFG.vocab_size
  assert (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id,
          tok.sep_token_id, tok.mask_token_id) == ids.as_tuple()
  assert model.config.pad_token_id == ids.pad
  assert tok.model_max_length == CFG.max_position_embeddings
  # The generic fast class (hf_export's docstring says why).
  assert json.loads((export / hf_export.TOKENIZER_CONFIG).read_text())[
      "tokenizer_class"] == "PreTrainedTokenizerFast"

  texts = [*data["eng"][:3], GREEK, *data["deu"][:3], "a [MASK] b"]
  for text in texts:  # our tokenisation, with [CLS] ... [SEP]
    assert tok(text)["input_ids"] == [ids.cls, *ours.encode(text), ids.sep]
  assert ids.unk in tok(GREEK)["input_ids"]
  batch = tok(texts, padding=True, return_tensors="pt")
  lengths = batch["attention_mask"].sum(1)
  assert len(set(lengths.tolist())) > 1
  assert (batch["input_ids"][batch["attention_mask"] == 0] == ids.pad).all()
  with torch.no_grad():
    padded = model(**batch).logits
    for row, text in enumerate(texts):
      alone = model(**tok(text, return_tensors="pt")).logits[0]
      n = int(lengths[row])
      np.testing.assert_allclose(padded[row, :n].numpy(), alone.numpy(),
                                 atol=1e-5)
      assert (padded[row, :n].argmax(-1) == alone.argmax(-1)).all()

  fill = transformers.pipeline("fill-mask", model=str(export), top_k=1)
  assert fill(f"{data['eng'][0]} {tok.mask_token}")[0]["token"] < len(tok)
  # hf-to-t5x reads the export back, tokenizer files and card beside it.
  checkpoint_io.hf_to_t5x(str(export), str(tmp_path / "again"))


# --- Task heads against our evaluator ------------------------------------------


def _capture(store):
  def metric(targets, predictions):
    del targets
    store.extend(predictions)
    return {"examples": float(len(predictions))}
  return metric


def _source(examples):
  return seqio.FunctionDataSource(
      lambda split, shuffle_files, seed=0: tf.data.Dataset.from_tensor_slices(
          examples), splits=["train", "validation"])


def _our_predictions(kind, num_classes, model_dir, task, length):
  """Runs our evaluator on `task` with the MODEL_DIR's params (the task's
  metric captures the postprocessed predictions)."""
  adapter = {"pair": models.RemBertPairClassificationModel,
             "tagging": models.RemBertTaggingModel,
             "qa": models.RemBertQAModel}[kind](
                 models.make_module(kind, CFG, num_classes=num_classes))
  params = checkpoints.load_params(str(model_dir))
  eval_lib.evaluate_params(adapter, params, task, "validation",
                           {"input_tokens": length}, batch_size=8)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pair_classification_pipeline_matches_our_evaluator(tmp_path, data,
                                                            layout):
  vocab_file = data["vocabs"][layout]
  ours_vocab = vocabulary.RemBertVocabulary(vocab_file)
  ids = ours_vocab.special_ids
  encoded = [([ids.cls, *ours_vocab.encode(a), ids.sep],
              [*ours_vocab.encode(b), ids.sep])
             for a, b in zip(data["deu"], data["eng"])]
  fits = [(a, b, x + y, [0] * len(x) + [1] * len(y))
          for (a, b), (x, y) in zip(zip(data["deu"], data["eng"]), encoded)
          if len(x) + len(y) <= 64][:24]
  first, second = [a for a, *_ in fits], [b for _, b, *_ in fits]
  model_dir, export = _export(
      tmp_path, _centred(_random_hf(
          transformers.RemBertForSequenceClassification, 3),
          [(x, t) for *_, x, t in fits]),
      vocab_file, task="rembert_xnli_zeroshot")
  config = json.loads((export / "config.json").read_text())
  assert config["id2label"] == {str(i): n for i, n in enumerate(xnli.LABELS)}
  assert config["label2id"] == {n: i for i, n in enumerate(xnli.LABELS)}

  ours = []
  registry.register_pair(
      "pair", lambda role, lang: _source({
          "sentence1": first, "sentence2": second, "label": [0] * len(first)}),
      ["de"], prefix=f"hfx_{layout}_", labels=xnli.LABELS,
      vocabulary=ours_vocab, metric_fn=_capture(ours))
  _our_predictions("pair", 3, model_dir, f"hfx_{layout}_pair_de", 64)

  classify = transformers.pipeline("text-classification", model=str(export))
  pairs = [{"text": a, "text_pair": b} for a, b in zip(first, second)]
  one_by_one = [classify(p) for p in pairs]
  batched = classify(pairs, batch_size=8)  # padded batches
  assert [r["label"] for r in one_by_one] == [xnli.LABELS[i] for i in ours]
  assert [r["label"] for r in batched] == [r["label"] for r in one_by_one]
  np.testing.assert_allclose([r["score"] for r in batched],
                             [r["score"] for r in one_by_one], atol=1e-5)
  assert len(set(ours)) > 1  # the random model is not constant


def _first_token_tags(outputs, sentence):
  """The tag of each space-separated word's first token (pipeline output
  with aggregation "none", nothing ignored), the token our tagging tasks
  label. A token's span includes the space before it, so a word's first
  token is the first to end at or after the word's start: "▁" alone (the
  space) when the word's first letter has no piece with "▁"."""
  starts, position = [], 0
  for word in sentence.split(" "):
    starts.append(position)
    position += len(word) + 1
  tags = []
  for start in starts:
    first = next(o for o in outputs if o["end"] >= start)
    tags.append(first["entity"])
  return tags


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tagging_pipeline_matches_our_evaluator(tmp_path, data, layout):
  vocab_file = data["vocabs"][layout]
  ours_vocab = vocabulary.RemBertVocabulary(vocab_file)
  ids = ours_vocab.special_ids
  # One space between words (the pipeline reads text, our task words), and
  # short enough for one example of 64 tokens.
  rows = []
  for sentence in data["eng"] + data["deu"]:
    tokens = [i for w in sentence.split(" ") for i in ours_vocab.encode(w)]
    if "  " not in sentence and len(tokens) <= 62:
      rows.append((sentence, [ids.cls, *tokens, ids.sep]))
  sentences = [s for s, _ in rows[:24]]
  model_dir, export = _export(
      tmp_path, _centred(_random_hf(transformers.RemBertForTokenClassification,
                                    len(panx.LABELS)),
                         [(x, [0] * len(x)) for _, x in rows[:24]]),
      vocab_file, labels=list(panx.LABELS))
  words = [s.split(" ") for s in sentences]
  ours = []
  registry.register_tagging(
      "tag", lambda role, lang: _source({
          "tokens": tf.ragged.constant(words),
          "tags": tf.ragged.constant([[0] * len(w) for w in words])}),
      ["xx"], prefix=f"hfx_{layout}_", labels=panx.LABELS,
      vocabulary=ours_vocab, metric_fn=_capture(ours))
  _our_predictions("tagging", len(panx.LABELS), model_dir,
                   f"hfx_{layout}_tag_xx", 64)

  tag = transformers.pipeline("token-classification", model=str(export),
                              ignore_labels=[])
  theirs = [_first_token_tags(tag(s), s) for s in sentences]
  assert theirs == [list(p) for p in ours]
  batched = tag(sentences, batch_size=8)  # padded batches
  assert [_first_token_tags(o, s) for o, s in zip(batched, sentences)] == theirs
  assert len({t for sentence in theirs for t in sentence}) > 2


def _answer_sentences(examples, vocab, length, limit):
  """Questions whose context is cut to the sentence holding the answer,
  short enough for one window of `length` tokens."""
  out = []
  for ex in examples:
    start = ex.answer_starts[0]
    begin = ex.context.rfind(". ", 0, start) + 2 if ". " in ex.context[:start] \
        else 0
    end = ex.context.find(". ", start)
    end = len(ex.context) if end < 0 else end + 1
    context = ex.context[begin:end]
    if len(vocab.encode(ex.question)) + len(vocab.encode(context)) + 3 > length:
      continue
    out.append({"id": ex.example_id, "question": ex.question,
                "context": context,
                "answers": {"text": [ex.answer_texts[0]],
                            "answer_start": [start - begin]}})
    if len(out) == limit:
      break
  return out


def _best_span(starts, ends, in_context, max_answer_length):
  """The context span with the largest start + end logit, as a transformers
  5 user decodes it (its `question-answering` pipeline is gone)."""
  best = None
  for s in np.flatnonzero(in_context):
    for e in range(s, min(s + max_answer_length, len(starts))):
      if in_context[e] and (best is None or starts[s] + ends[e] > best[0]):
        best = (starts[s] + ends[e], s, e)
  return best[1], best[2]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_question_answering_matches_our_evaluator(tmp_path, data, layout):
  vocab_file = data["vocabs"][layout]
  ours_vocab = vocabulary.RemBertVocabulary(vocab_file)
  model_dir, export = _export(
      tmp_path, _random_hf(transformers.RemBertForQuestionAnswering),
      vocab_file)
  ours, length, max_answer = [], 128, 15
  examples = _answer_sentences(data["xquad"], ours_vocab, length, 16)
  signature = squad_files.SQUADLIKE_SIGNATURE
  registry.add_task(
      f"hfx_{layout}_qa",
      source=seqio.FunctionDataSource(
          lambda split, shuffle_files, seed=0: tf.data.Dataset.from_generator(
              lambda: iter(examples), output_signature=signature),
          splits=["validation"]),
      preprocessors=[functools.partial(
          qa.qa_windows_preprocessor, max_seq_length=length,
          source="xquad.en.json", on_misaligned="ignore")],
      output_features=qa.output_features(ours_vocab, length),
      # n_best = every token: the best valid span, as the decoding below
      # (and Hugging Face's QA pipeline) searches all pairs.
      postprocess_fn=functools.partial(qa.postprocess_window, n_best=length,
                                       max_answer_length=max_answer),
      metric_fns=[_capture(ours)])
  _our_predictions("qa", None, model_dir, f"hfx_{layout}_qa", length)
  assert len(ours) == len(examples)  # one window each

  tok = transformers.AutoTokenizer.from_pretrained(export)
  model = transformers.AutoModelForQuestionAnswering.from_pretrained(export)
  questions = [e["question"] for e in examples]
  contexts = [e["context"] for e in examples]
  batch = tok(questions, contexts, padding=True, return_offsets_mapping=True,
              return_tensors="pt")
  offsets = batch.pop("offset_mapping").tolist()
  with torch.no_grad():
    padded = model(**batch)
  theirs = []
  ids = ours_vocab.special_ids
  for row, (question, context) in enumerate(zip(questions, contexts)):
    alone = tok(question, context, return_tensors="pt")
    assert alone["input_ids"][0].tolist() == [  # our QA window's tokens
        ids.cls, *ours_vocab.encode(question), ids.sep,
        *ours_vocab.encode(context), ids.sep]
    with torch.no_grad():
      out = model(**alone)
    n = alone["input_ids"].shape[1]
    for name in ("start_logits", "end_logits"):
      np.testing.assert_allclose(getattr(padded, name)[row, :n].numpy(),
                                 getattr(out, name)[0].numpy(), atol=1e-5)
    in_context = np.array([s == 1 for s in batch.sequence_ids(row)])
    start, end = _best_span(padded.start_logits[row].numpy(),
                            padded.end_logits[row].numpy(), in_context,
                            max_answer)
    theirs.append(context[offsets[row][start][0]:offsets[row][end][1]])
  assert [t.strip() for t in theirs] == [p["text"].strip() for p in ours]
  assert len(set(theirs)) > len(theirs) // 2


# --- Labels, the model card, bad input ------------------------------------------


def _our_checkpoint(tmp_path, kind, vocab, num_classes=None, config=CFG):
  """A MODEL_DIR of our own (random init), with its vocabulary."""
  return test_utils.write_random_checkpoint(
      tmp_path / "ours", kind, config, num_classes=num_classes,
      vocab_file=vocab)


def test_labels_come_from_the_run_and_the_card_says_what_it_knows(
    tmp_path, data):
  out = _our_checkpoint(tmp_path, "pair", data["vocabs"]["released"], 2)
  (out / "config.gin").write_text(
      "MIXTURE = 'rembert_pawsx_zeroshot'\n"
      "train.batch_size = 32\n"
      "train.init_checkpoint = '/tmp/rembert'\n"
      "train.mixture_or_task_name = %MIXTURE\n"
      "train.train_steps = 1200\n")
  (out / "metrics.jsonl").write_text(
      '{"step": 1100, "loss": 0.75}\n{"step": 1200, "loss": 0.5}\n{"step"')
  summary = checkpoint_io.t5x_to_hf(str(out), str(tmp_path / "export"))
  export = tmp_path / "export"
  config = json.loads((export / "config.json").read_text())
  assert config["id2label"] == {"0": "different_meaning", "1": "paraphrase"}
  card = (export / "README.md").read_text()
  for expected in (
      "pipeline_tag: text-classification",
      "`RemBertForSequenceClassification` (`AutoModelForSequenceClassification`)",
      f"| parameters | {summary.parameters:,} |",
      "| input embedding size (E_in) | 16 |", "| hidden size (H) | 32 |",
      "| `[CLS]` | 312 |", "| `[SEP]` | 313 |", "| `[UNK]` | 2 |",
      "0 `different_meaning`, 1 `paraphrase` (from the task "
      "rembert_pawsx_zeroshot)",
      "Task (SeqIO): `rembert_pawsx_zeroshot`, 1,200 steps of batch size 32.",
      "Started from `/tmp/rembert`.",
      "Last logged step 1,200, loss 0.5000",
      f"rembert-convert t5x-to-hf --checkpoint_dir={out} "
      f"--output_dir={export}",
      "Rethinking Embedding Coupling in Pre-trained Language Models",
      "Chung, Hyung Won and F{\\'e}vry, Thibault and Tsai, Henry"):
    assert expected in card, expected


def test_labels_flag_task_flag_and_their_errors(tmp_path, data, capsys):
  vocab = data["vocabs"]["trained"]
  out = _our_checkpoint(tmp_path, "pair", vocab, 3)
  export = tmp_path / "export"
  convert_checkpoint.main(["t5x-to-hf", f"--checkpoint_dir={out}",
                           f"--output_dir={export}", "--labels=no,maybe,yes"])
  config = json.loads((export / "config.json").read_text())
  assert config["label2id"] == {"no": 0, "maybe": 1, "yes": 2}
  card = (export / "README.md").read_text()
  assert "--labels=no,maybe,yes" in card
  assert "Not recorded: the checkpoint's directory has no" in card

  def fails(match, **kwargs):
    with pytest.raises(errors.UserError, match=match):
      checkpoint_io.t5x_to_hf(str(out), str(tmp_path / "bad"), **kwargs)
    assert not (tmp_path / "bad").exists()

  fails(r"--labels has 2 names \['a', 'b'\], but the checkpoint's head has "
        "3 classes", labels=["a", "b"])
  fails(r"repeats a name", labels=["a", "b", "a"])
  fails(r"--task=rembert_pawsx_zeroshot has 2 labels", task="rembert_pawsx_zeroshot")
  fails(r"--task=no_such_task is not a registered SeqIO task", task="no_such_task")
  with pytest.raises(SystemExit) as exit_info:  # the tool: one line, code 2
    convert_checkpoint.main(["t5x-to-hf", f"--checkpoint_dir={out}",
                             f"--output_dir={tmp_path / 'bad'}",
                             "--labels=a,b"])
  assert exit_info.value.code == 2
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      "error: --labels has 2 names ['a', 'b'], but the checkpoint's head has "
      "3 classes")
  # Without names anywhere: Hugging Face's own LABEL_<i>; a run's task
  # without names (here not registered) is said in the card, not an error.
  checkpoint_io.t5x_to_hf(str(out), str(tmp_path / "plain"))
  config = json.loads((tmp_path / "plain" / "config.json").read_text())
  assert config["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
  (out / "config.gin").write_text("train.train.mixture_or_task_name = 'mine'\n")
  checkpoint_io.t5x_to_hf(str(out), str(tmp_path / "mine"))
  assert ("(unnamed: the run's task mine is not a registered SeqIO task or "
          "mixture with label names)") in (tmp_path / "mine" / "README.md"
                                            ).read_text()

  qa_dir = _our_checkpoint(tmp_path / "qa", "qa", vocab)
  with pytest.raises(errors.UserError, match="question_answering head, which "
                     "has no classes"):
    checkpoint_io.t5x_to_hf(str(qa_dir), str(tmp_path / "bad"),
                            labels=["a", "b"])


def test_bad_vocabularies_are_errors_naming_the_piece_or_the_rows(
    tmp_path, data):
  proto = sentencepiece_model_pb2.ModelProto.FromString(
      open(data["vocabs"]["released"], "rb").read())
  for piece in proto.pieces:
    if piece.piece == pieces.MASK_PIECE:
      piece.piece = "[MASKED]"
  no_mask = tmp_path / "no_mask.model"
  no_mask.write_bytes(proto.SerializeToString())
  out = _our_checkpoint(tmp_path, "pair", str(no_mask), 3)
  with pytest.raises(errors.UserError,
                     match=rf"{out}/sentencepiece\.model: SentencePiece model "
                           r"has no piece '\[MASK\]'"):
    checkpoint_io.t5x_to_hf(str(out), str(tmp_path / "bad"))
  # --vocab replaces the checkpoint's own.
  checkpoint_io.t5x_to_hf(str(out), str(tmp_path / "good"),
                          vocab=data["vocabs"]["released"])

  small = dataclasses.replace(CFG, vocab_size=350)
  out = _our_checkpoint(tmp_path / "small", "pair",
                        data["vocabs"]["trained"], 3, config=small)
  with pytest.raises(errors.UserError, match=r"ours/sentencepiece\.model: 400 "
                     r"pieces, but checkpoint .* has 350 vocabulary rows"):
    checkpoint_io.t5x_to_hf(str(out), str(tmp_path / "bad"))
  assert not (tmp_path / "bad").exists()


def test_padded_rows_are_stated_in_the_card(tmp_path, data):
  out = _our_checkpoint(tmp_path, "pair", data["vocabs"]["trained"], 3)
  checkpoint_io.t5x_to_hf(str(out), str(tmp_path / "export"),
                          hf_vocab_size=512)
  tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "export")
  assert len(tok) == CFG.vocab_size
  card = (tmp_path / "export" / "README.md").read_text()
  assert ("The model has 512 vocabulary rows and the tokenizer 400 pieces "
          "(`len(tokenizer)`): rows 400-511 are padding") in card
