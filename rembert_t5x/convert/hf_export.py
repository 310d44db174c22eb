"""What a Hugging Face export holds beside its weights: tokenizer, labels, card.

`t5x-to-hf` (`checkpoint_io.t5x_to_hf`) writes next to `config.json` and
`model.safetensors`:

  sentencepiece.model      the checkpoint's vocabulary, unchanged;
  tokenizer.json           the same pieces as a `tokenizers` Unigram model,
                           with RemBERT's text normalisation and the
                           `[CLS] a [SEP] b [SEP]` template (token types 0/1);
  tokenizer_config.json,   the tokenizer class and the five special tokens;
  special_tokens_map.json
  README.md                the model card (`model_card`).

Every special token is the piece of that name in the vocabulary, its id read
by name (`pieces.read_special_ids`), never assumed: our layout (0-4) and the
released one ([CLS]=312, [SEP]=313, ...) export alike, and `len(tokenizer)` is
the number of pieces (no token is appended).

`tokenizer_config.json` names the generic `PreTrainedTokenizerFast`, which
transformers 4 and 5 build from `tokenizer.json` as written. transformers 5's
`RemBertTokenizer` rebuilds the Unigram model with the unknown id fixed at
2 and by default returns no `token_type_ids`: with [UNK] elsewhere (id 1 in
our layout, where 2 is [CLS]) unknown characters would become another piece,
and sentence pairs would reach the model without their token types.

Label names (`config.json` `id2label` / `label2id`) of a classification or
tagging head come from, in order: `--labels`, the label names of `--task`
(the `targets` feature of a registered SeqIO task or mixture), the task the
run trained on (`mixture_or_task_name` in its MODEL_DIR's `config.gin`);
else `LABEL_<i>`, as Hugging Face names unnamed classes.
"""

import ast
import base64
import dataclasses
import json
import pathlib
import re
import shlex
from typing import Any, Optional, Sequence

from absl import logging
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from rembert_t5x.common import errors
from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x.data import pieces
from rembert_t5x import network

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
MODEL_CARD = "README.md"

_SPACE = "\u2581"  # SentencePiece's and Metaspace's whitespace marker "▁"

# The Hugging Face role of each special piece. [CLS] and [SEP] are also
# bos/eos, as in google/rembert's files.
_ROLES = (("pad_token", pieces.PAD_PIECE), ("unk_token", pieces.UNK_PIECE),
          ("cls_token", pieces.CLS_PIECE), ("sep_token", pieces.SEP_PIECE),
          ("mask_token", pieces.MASK_PIECE), ("bos_token", pieces.CLS_PIECE),
          ("eos_token", pieces.SEP_PIECE))


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """A checkpoint's SentencePiece model, checked for export."""

  path: pathlib.Path
  ids: pieces.SpecialIds
  proto: sentencepiece_model_pb2.ModelProto

  @property
  def num_pieces(self) -> int:
    return len(self.proto.pieces)


def read_vocabulary(path: pathlib.Path, rows: int,
                    source: str) -> Vocabulary:
  """Reads and checks the vocabulary exported with a checkpoint.

  Args:
    path: the `.model` file.
    rows: the checkpoint's vocabulary rows (`RemBertConfig.vocab_size`).
    source: names the checkpoint in errors.

  Raises:
    errors.UserError: the file is unreadable, lacks a special piece (naming
      the piece and the file), or has more pieces than `rows`.
  """
  try:
    data = path.read_bytes()
    processor = spm.SentencePieceProcessor(model_proto=data)
    ids = pieces.read_special_ids(processor, str(path))
  except OSError as e:
    raise errors.UserError(f"{path}: cannot read: {e.strerror or e}") from e
  except ValueError as e:  # read_special_ids names the piece and the file
    raise errors.UserError(str(e)) from e
  except RuntimeError as e:  # sentencepiece's parse error
    raise errors.UserError(f"{path}: not a SentencePiece model: "
                           f"{errors.first_line(e)}") from e
  proto = sentencepiece_model_pb2.ModelProto.FromString(data)
  if len(proto.pieces) > rows:
    raise errors.UserError(
        f"{path}: {len(proto.pieces)} pieces, but {source} has {rows} "
        "vocabulary rows (ids past them would have no embedding)")
  return Vocabulary(path, ids, proto)


# --- Tokenizer files ------------------------------------------------------------


def _id_of(vocab: Vocabulary, piece: str) -> int:
  return vocab.ids.as_tuple()[pieces.SPECIAL_PIECES.index(piece)]


def _added_token(piece: str) -> dict[str, Any]:
  # Matched in raw text before normalisation, as Hugging Face's RemBERT
  # tokenizer matches its special tokens.
  return {"content": piece, "single_word": False, "lstrip": False,
          "rstrip": False, "normalized": False, "special": True}


def _template(vocab: Vocabulary) -> dict[str, Any]:
  """`[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]`, B's part token type 1."""
  def special(piece, type_id):
    return {"SpecialToken": {"id": piece, "type_id": type_id}}

  def sequence(name, type_id):
    return {"Sequence": {"id": name, "type_id": type_id}}

  cls, sep = pieces.CLS_PIECE, pieces.SEP_PIECE
  single = [special(cls, 0), sequence("A", 0), special(sep, 0)]
  return {
      "type": "TemplateProcessing",
      "single": single,
      "pair": single + [sequence("B", 1), special(sep, 1)],
      "special_tokens": {p: {"id": p, "ids": [_id_of(vocab, p)], "tokens": [p]}
                         for p in (cls, sep)},
  }


def tokenizer_json(vocab: Vocabulary) -> dict[str, Any]:
  """The `tokenizers` serialisation of `vocab` (the `tokenizer.json` file).

  Tokenises as `RemBertVocabulary` does: "``" and "''" become '"', runs of
  spaces one space, then the model's own normalisation (its precompiled
  character map), and whitespace becomes "▁", prefixed to the text.
  """
  normalizers = [
      {"type": "Replace", "pattern": {"String": "``"}, "content": '"'},
      {"type": "Replace", "pattern": {"String": "''"}, "content": '"'},
      {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
  ]
  charsmap = vocab.proto.normalizer_spec.precompiled_charsmap
  if charsmap:
    normalizers.append({"type": "Precompiled", "precompiled_charsmap":
                        base64.b64encode(charsmap).decode("ascii")})
  metaspace = {"type": "Metaspace", "replacement": _SPACE,
               "prepend_scheme": "always", "split": True}
  return {
      "version": "1.0",
      "truncation": None,
      "padding": None,
      "added_tokens": [{"id": i, **_added_token(p)} for i, p in
                       sorted(zip(vocab.ids.as_tuple(), pieces.SPECIAL_PIECES))],
      "normalizer": {"type": "Sequence", "normalizers": normalizers},
      "pre_tokenizer": metaspace,
      "post_processor": _template(vocab),
      "decoder": metaspace,
      "model": {"type": "Unigram", "unk_id": vocab.ids.unk,
                "vocab": [[p.piece, p.score] for p in vocab.proto.pieces],
                "byte_fallback": False},
  }


def special_tokens_map() -> dict[str, str]:
  return dict(_ROLES)


def tokenizer_config(vocab: Vocabulary, max_length: int) -> dict[str, Any]:
  """The `tokenizer_config.json` of an export (see the module docstring)."""
  return {
      "tokenizer_class": "PreTrainedTokenizerFast",
      # RemBERT's pair inputs carry token types (0 for [CLS] a [SEP], 1 after).
      "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
      "model_max_length": max_length,
      "padding_side": "right",
      "clean_up_tokenization_spaces": False,
      # What RemBertTokenizer reads when a user loads it by name.
      "do_lower_case": False, "keep_accents": True, "remove_space": True,
      **special_tokens_map(),
      "added_tokens_decoder": {str(i): _added_token(p) for i, p in
                               sorted(zip(vocab.ids.as_tuple(),
                                          pieces.SPECIAL_PIECES))},
  }


def write_tokenizer(vocab: Vocabulary, out: pathlib.Path,
                    max_length: int) -> None:
  """Writes the tokenizer files (not `sentencepiece.model`) into `out`."""
  for name, content in ((TOKENIZER_JSON, tokenizer_json(vocab)),
                        (TOKENIZER_CONFIG, tokenizer_config(vocab, max_length)),
                        (SPECIAL_TOKENS_MAP, special_tokens_map())):
    (out / name).write_text(json.dumps(content, indent=2, ensure_ascii=False)
                            + "\n", encoding="utf-8")


# --- The run that wrote a checkpoint ------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunRecord:
  """What a MODEL_DIR records about its training run (None: not recorded).

  From the local runner's `config.gin` (the operative gin config) and
  `metrics.jsonl` (`rembert_t5x.runner.train`).
  """

  task: Optional[str] = None  # train.mixture_or_task_name
  train_steps: Optional[int] = None
  batch_size: Optional[int] = None
  init_checkpoint: Optional[str] = None
  logged_step: Optional[int] = None  # the last line of metrics.jsonl
  loss: Optional[float] = None


_GIN_FIELDS = ("mixture_or_task_name", "train_steps", "batch_size",
               "init_checkpoint")
_GIN_LINE = re.compile(r"^(?:[\w.]+\.)?(\w+)\s*=\s*(.+?)\s*$")


def _gin_value(text: str, macros: dict[str, str]) -> Any:
  if text.startswith("%"):
    text = macros.get(text[1:], "None")
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return None  # a reference (@...) or anything else not a literal


def read_run(model_dir: Optional[pathlib.Path]) -> RunRecord:
  """The `RunRecord` of a MODEL_DIR (all None without its files)."""
  if model_dir is None:
    return RunRecord()
  found: dict[str, Any] = {}
  gin_file = model_dir / "config.gin"
  if gin_file.is_file():
    bound, macros = {}, {}
    for line in gin_file.read_text(errors="replace").splitlines():
      match = _GIN_LINE.match(line)
      if not match:
        continue
      name, value = match.groups()
      if "." not in line.split("=")[0]:
        macros[name] = value
      elif name in _GIN_FIELDS:
        bound[name] = value
    for name, value in bound.items():
      found[name] = _gin_value(value, macros)
  metrics = model_dir / "metrics.jsonl"
  if metrics.is_file():
    for line in reversed(metrics.read_text(errors="replace").splitlines()):
      try:
        last = json.loads(line)
      except json.JSONDecodeError:
        continue  # a line cut short by a killed run
      found["logged_step"], found["loss"] = last.get("step"), last.get("loss")
      break

  def typed(key, kind):
    value = found.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
      return None  # not recorded, or not a literal of the expected type
    return value

  return RunRecord(typed("mixture_or_task_name", str),
                   typed("train_steps", int), typed("batch_size", int),
                   typed("init_checkpoint", str), typed("logged_step", int),
                   typed("loss", (int, float)))


# --- Label names --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Labels:
  names: tuple[str, ...]
  origin: str  # where the names come from, as the model card says it


def task_label_names(task: str) -> Optional[tuple[str, ...]]:
  """The label names of a registered SeqIO task or mixture, if it has any.

  They are the names of its `targets` feature's vocabulary
  (`xtreme_preprocessors.LabelVocabulary`); for a mixture, its first task's.
  Importing `rembert_tasks` registers every task family of the package.
  """
  # Deferred: the task registry imports seqio and TensorFlow (seconds), which
  # only an export of a classifier without --labels needs.
  import seqio  # pylint: disable=g-import-not-at-top
  import rembert_tasks  # pylint: disable=g-import-not-at-top,unused-import
  try:
    found = seqio.get_mixture_or_task(task)
  except ValueError:
    return None
  tasks = found.tasks if isinstance(found, seqio.Mixture) else [found]
  for each in tasks:
    feature = each.output_features.get("targets")
    names = getattr(getattr(feature, "vocabulary", None), "names", None)
    if names:
      return tuple(names)
  return None


def resolve_labels(head: cc.Head, num_classes: Optional[int],
                   labels: Optional[Sequence[str]], task: Optional[str],
                   run: RunRecord) -> Optional[Labels]:
  """The label names of a classification or tagging head (see the module
  docstring for the order); None for other heads.

  Raises:
    errors.UserError: `labels` for a head without classes; `labels` or
      `task`'s names not one per class; `task` without label names.
  """
  if num_classes is None:
    if labels:
      raise errors.UserError(f"--labels: the checkpoint has a {head.value} "
                             "head, which has no classes to name")
    return None
  generic = tuple(f"LABEL_{i}" for i in range(num_classes))
  if labels:
    names = tuple(labels)
    if len(names) != num_classes:
      raise errors.UserError(
          f"--labels has {len(names)} names {list(names)}, but the "
          f"checkpoint's head has {num_classes} classes")
    if len(set(names)) != len(names):
      raise errors.UserError(f"--labels: {list(names)} repeats a name")
    return Labels(names, "from --labels")
  name = task or run.task
  if not name:
    return Labels(generic, "unnamed: no --labels, --task or config.gin")
  found = task_label_names(name)
  if found is not None and len(found) == num_classes:
    return Labels(found, f"from the task {name}")
  why = (f"has {len(found)} labels {list(found)}" if found
         else "is not a registered SeqIO task or mixture with label names")
  if task:
    raise errors.UserError(
        f"--task={task} {why}; the checkpoint's head has {num_classes} "
        "classes: pass --labels=NAME,NAME,...")
  logging.warning("the run's task %s %s; naming the %d classes LABEL_<i> "
                  "(pass --labels or --task)", name, why, num_classes)
  return Labels(generic, f"unnamed: the run's task {name} {why}")


# --- The model card -----------------------------------------------------------

# Head -> (its Auto class, its pipeline task).
_HEADS = {
    cc.Head.MASKED_LM: ("AutoModelForMaskedLM", "fill-mask"),
    cc.Head.ENCODER: ("AutoModel", "feature-extraction"),
    cc.Head.SEQUENCE_CLASSIFICATION: ("AutoModelForSequenceClassification",
                                      "text-classification"),
    cc.Head.TOKEN_CLASSIFICATION: ("AutoModelForTokenClassification",
                                   "token-classification"),
    cc.Head.QUESTION_ANSWERING: ("AutoModelForQuestionAnswering",
                                 "question-answering"),
}

CITATION = """\
@inproceedings{chung2021rethinking,
  title     = {Rethinking Embedding Coupling in Pre-trained Language Models},
  author    = {Chung, Hyung Won and F{\\'e}vry, Thibault and Tsai, Henry and
               Johnson, Melvin and Ruder, Sebastian},
  booktitle = {International Conference on Learning Representations (ICLR)},
  year      = {2021},
  url       = {https://arxiv.org/abs/2010.12821}
}"""


def command_line(command: str, **flags: Any) -> str:
  """`rembert-convert COMMAND --flag=value ...` for the flags that are set."""
  words = ["rembert-convert", command]
  for name, value in flags.items():
    if value is None or value is False:
      continue
    if isinstance(value, (list, tuple)):
      value = ",".join(value)
    words.append(f"--{name}" if value is True
                 else f"--{name}={shlex.quote(str(value))}")
  return " ".join(words)


def _usage(head: cc.Head, directory: str) -> str:
  auto, task = _HEADS[head]
  where = json.dumps(directory)
  if head == cc.Head.SEQUENCE_CLASSIFICATION:
    call = 'classify({"text": "first sentence", "text_pair": "second one"})'
    return (f'from transformers import pipeline\nclassify = pipeline("{task}",'
            f' model={where})\n{call}')
  if head == cc.Head.TOKEN_CLASSIFICATION:
    return (f'from transformers import pipeline\ntag = pipeline("{task}", '
            f'model={where}, aggregation_strategy="first")\n'
            'tag("Angela Merkel spoke in Berlin.")')
  if head == cc.Head.MASKED_LM:
    return (f'from transformers import pipeline\nfill = pipeline("{task}", '
            f'model={where})\nfill("Paris is the [MASK] of France.")')
  lines = ["from transformers import AutoTokenizer, " + auto,
           f"tokenizer = AutoTokenizer.from_pretrained({where})",
           f"model = {auto}.from_pretrained({where})"]
  if head == cc.Head.QUESTION_ANSWERING:
    lines += ['inputs = tokenizer("question?", "context ...", '
              'return_tensors="pt")',
              "out = model(**inputs)  # start_logits, end_logits [1, tokens]",
              '# transformers 4.x: pipeline("question-answering", '
              f"model={where})"]
  else:
    lines += ['batch = tokenizer(["one", "two words"], padding=True, '
              'return_tensors="pt")',
              "hidden = model(**batch).last_hidden_state"]
  return "\n".join(lines)


def _table(rows: Sequence[tuple[str, Any]]) -> str:
  return "\n".join(["| | |", "|---|---|",
                    *(f"| {key} | {value} |" for key, value in rows)])


def model_card(*, config: network.RemBertConfig, hf_config: dict[str, Any],
               head: cc.Head, parameters: int, labels: Optional[Labels],
               vocab: Optional[Vocabulary], step: int, run: RunRecord,
               checkpoint: str, command: str, directory: str) -> str:
  """The export's `README.md`: what it is, how to load it, where it is from.

  Args:
    config: our network config.
    hf_config: the `config.json` contents.
    head: the head the export has.
    parameters: its parameter count.
    labels: the head's label names (None without classes).
    vocab: the exported vocabulary (None: none travelled).
    step: the checkpoint's step.
    run: what the MODEL_DIR records about the run.
    checkpoint: the checkpoint directory read.
    command: the command that made the export.
    directory: the export directory, for the usage example.
  """
  auto, task = _HEADS[head]
  architecture = hf_config["architectures"][0]
  layers = hf_config["num_hidden_layers"]
  sizes = [
      ("class", f"`{architecture}` (`{auto}`)"),
      ("parameters", f"{parameters:,}"),
      ("vocabulary rows", f"{hf_config['vocab_size']:,}"),
      ("input embedding size (E_in)", config.input_embed_dim),
      ("hidden size (H)", config.emb_dim),
  ]
  if head == cc.Head.MASKED_LM:
    sizes.append(("output embedding size (E_out)", config.output_embed_dim))
  sizes += [("layers", layers),
            ("attention heads x size", f"{config.num_heads} x {config.head_dim}"),
            ("feed-forward size", config.mlp_dim),
            ("max positions", config.max_position_embeddings)]
  if labels is not None:
    sizes.append(("labels", ", ".join(f"{i} `{n}`"
                                      for i, n in enumerate(labels.names))
                  + f" ({labels.origin})"))
  parts = [
      "---", "library_name: transformers", f"pipeline_tag: {task}",
      "tags:", "- rembert", "- rembert-t5x", "---", "",
      f"# RemBERT: {architecture}", "",
      "RemBERT (Chung et al., ICLR 2021) decouples the input and output "
      "embeddings: small input embeddings (E_in) are projected to the hidden "
      "size, and the larger output embedding (E_out) of masked-language-model "
      "pre-training is dropped for fine-tuning. This directory was exported "
      "from a rembert-t5x (T5X/SeqIO) checkpoint with "
      "`rembert-convert t5x-to-hf`.", "",
      "## Architecture", "", _table(sizes), "",
      "## Vocabulary", "",
  ]
  rows = hf_config["vocab_size"]
  if vocab is None:
    parts += ["No vocabulary travelled with the checkpoint, so this directory "
              "has no tokenizer: export again with `--vocab=sentencepiece.model`.",
              ""]
  else:
    parts += [f"A SentencePiece unigram model of {vocab.num_pieces:,} pieces "
              "(`sentencepiece.model`; `tokenizer.json` holds the same pieces "
              "for `AutoTokenizer`). Special pieces, read from the file by "
              "name:", "",
              "| piece | id |", "|---|---|",
              *(f"| `{p}` | {i} |" for p, i in
                zip(pieces.SPECIAL_PIECES, vocab.ids.as_tuple())), ""]
    if vocab.num_pieces < rows:
      parts += [f"The model has {rows:,} vocabulary rows and the tokenizer "
                f"{vocab.num_pieces:,} pieces (`len(tokenizer)`): rows "
                f"{vocab.num_pieces:,}-{rows - 1:,} are padding, which the "
                "tokenizer never produces.", ""]
  parts += ["## Training", ""]
  trained = [f"- Checkpoint: `{checkpoint}`, step {step:,}."]
  if run.task:
    trained.append(f"- Task (SeqIO): `{run.task}`" + (
        f", {run.train_steps:,} steps" if run.train_steps is not None else "")
        + (f" of batch size {run.batch_size}" if run.batch_size else "") + ".")
  if run.init_checkpoint:
    trained.append(f"- Started from `{run.init_checkpoint}`.")
  if run.logged_step is not None:
    trained.append(f"- Last logged step {run.logged_step:,}" + (
        f", loss {run.loss:.4f}" if run.loss is not None else "")
        + " (`metrics.jsonl`).")
  if not (run.task or run.logged_step is not None):
    trained.append("- Not recorded: the checkpoint's directory has no "
                   "`config.gin` or `metrics.jsonl` of a rembert-t5x run "
                   "(e.g. a converted checkpoint).")
  parts += trained + [
      "", "## Usage", "", "```python", _usage(head, directory), "```", "",
      "## How this export was made", "", "```bash", command, "```", "",
      "## Citation", "", "```bibtex", CITATION, "```", ""]
  return "\n".join(parts)
