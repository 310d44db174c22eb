"""The road from the released RemBERT to Table 16, as one function.

`run_road` does what a user of the released model does, command by command
(docs/EXPERIMENTS.md, "From the released RemBERT to Table 16"): a Hugging
Face RemBERT directory (the user's, or a tiny "released-like" one built here
by `build_released_like_hf`), `hf-to-t5x`, the Table 15 sweep over an XTREME
download folder, and the Table-16-style table with XTREME submission folders
of the dev and test sets (a second sweep call reusing the first one's kept
checkpoints). Without `xtreme_dir`, a tiny folder in XTREME's exact layouts
is written (`write_tiny_xtreme`): XQuAD is the real data of `data_dir`;
every other file holds real sentences with SYNTHETIC labels, and the test
files are label-less as XTREME's, so such a run exercises every command and
its scores mean nothing.
"""

import csv
import io
import json
import os
import pathlib
import unicodedata
from typing import Dict, List, Mapping, Optional, Sequence

from rembert_t5x import configs
from rembert_t5x.convert import checkpoint_conversion as cc
from rembert_t5x import network
from rembert_t5x.convert import checkpoint_io
from rembert_t5x.data import pieces
from rembert_t5x.data import vocabulary
from rembert_t5x.data import xtreme_readers
from rembert_t5x.experiments import submission
from rembert_t5x.experiments import sweep
from rembert_t5x.experiments import xtreme_local
from rembert_tasks import retrieval

# Every family of the table15 sweep and the local files it reads.
FAMILY_GRIDS = ("xnli", "pawsx", "panx", "udpos", "squad", "tydiqa")
# ISO 639-1 -> the Tatoeba file code in data_dir/tatoeba (LASER's ISO 639-3)
# for languages of the XTREME families outside the Tatoeba task's 36.
_EXTRA_TATOEBA = {"ms": "zsm", "ur": "urd"}
SYNTHETIC_NOTE = (
    "SYNTHETIC LABELS: real sentences, made-up labels (pairs: by position; "
    "tags: by position, punctuation and digits; TyDi: cloze questions). "
    "XQuAD (and its copies standing in for SQuAD and MLQA) is real. "
    "This run exercises every command; its scores mean nothing.")


# --------------------------------------------------------------------------
# 1. A tiny released-like Hugging Face directory
# --------------------------------------------------------------------------

def _tatoeba_code(lang: str) -> Optional[str]:
  return retrieval.TATOEBA_LANGUAGES.get(lang) or _EXTRA_TATOEBA.get(lang)


def _tatoeba_file(data_dir: str, lang: str) -> Optional[str]:
  """The Tatoeba file of `lang` under data_dir (English: the German pairs'
  English side), or None."""
  code = "deu" if lang == "en" else _tatoeba_code(lang)
  if code is None:
    return None
  path = xtreme_readers.tatoeba_files(data_dir, code)[lang == "en"]
  return path if os.path.isfile(path) else None


def build_released_like_hf(out_dir: str, data_dir: str,
                           languages: Sequence[str], vocab_size: int = 2000,
                           hidden_size: int = 32, num_layers: int = 2,
                           num_heads: int = 2, seed: int = 0) -> str:
  """Writes a tiny Hugging Face RemBERT directory laid out like the hub's.

  `config.json` + weights (`RemBertForMaskedLM.save_pretrained`, random
  weights) and `sentencepiece.model`: a unigram model trained on the
  Tatoeba text of `languages` in `data_dir`, its special pieces moved to
  the released ids (`pieces.RELEASED_LAYOUT`), which `config.json`
  names as pad/bos/eos ids as the hub's does.

  Returns:
    `out_dir`.
  """
  # Deferred and optional: torch and transformers only write the HF checkpoint.
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  files = {l: [f] for l in languages
           if (f := _tatoeba_file(data_dir, l)) is not None}
  if not files:
    raise ValueError(f"{data_dir}/tatoeba: no text of {list(languages)}")
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  trained = pieces.train_sentencepiece(
      files, str(out / "trained"), vocab_size, max_sentences=30_000,
      seed=seed, character_coverage=0.995)
  spm_file = str(out / pieces.VOCABULARY_FILENAME)
  vocabulary.move_special_pieces(trained, spm_file,
                                 pieces.RELEASED_LAYOUT)
  for suffix in (".model", ".vocab"):
    pathlib.Path(str(out / "trained") + suffix).unlink()
  layout = pieces.RELEASED_LAYOUT
  config = cc.hf_config(
      network.RemBertConfig(
          vocab_size=vocab_size, emb_dim=hidden_size, num_layers=num_layers,
          num_heads=num_heads, head_dim=hidden_size // num_heads,
          input_embed_dim=hidden_size // 2,
          output_embed_dim=hidden_size * 3 // 4, mlp_dim=hidden_size * 2,
          # QA windows are 384 tokens (XTREME's).
          max_position_embeddings=512, dropout_rate=0.0,
          pad_id=layout[pieces.PAD_PIECE]),
      bos_token_id=layout[pieces.CLS_PIECE],
      eos_token_id=layout[pieces.SEP_PIECE])
  torch.manual_seed(seed)
  transformers.RemBertForMaskedLM(config).save_pretrained(out)
  return out_dir


# --------------------------------------------------------------------------
# 2. A tiny folder in XTREME's download layout
# --------------------------------------------------------------------------

def _sentences(data_dir: str, lang: str, n: int, offset: int = 0
               ) -> tuple[List[str], str]:
  """`n` real sentences of `lang` and where they come from.

  Languages without text in data_dir get English sentences (said so in
  the manifest)."""
  path = _tatoeba_file(data_dir, lang)
  origin = path
  if path is None:
    path = _tatoeba_file(data_dir, "en")
    origin = f"{path} (no {lang} text in {data_dir}: English stand-in)"
  with open(path, encoding="utf-8") as f:
    lines = [l.strip() for l in f if l.strip() and "\t" not in l]
  return lines[offset:offset + n], origin


def _words(sentence: str) -> List[str]:
  """Whitespace words; scripts written without spaces in pairs of
  characters."""
  words = sentence.split()
  if len(words) == 1 and len(sentence) > 3:
    words = [sentence[i:i + 2] for i in range(0, len(sentence), 2)]
  return words


def _pair_rows(sentences: Sequence[str], labels: Sequence[str] = ()) -> str:
  """Each sentence paired with the next, with a label cycling through
  `labels`; no labels: XTREME's test files."""
  buf = io.StringIO()
  csv.writer(buf, delimiter="\t", lineterminator="\n").writerows(
      [s, sentences[(i + 1) % len(sentences)],
       *([labels[i % len(labels)]] if labels else [])]
      for i, s in enumerate(sentences))
  return buf.getvalue()


def _ner_tag(i: int, word: str) -> str:
  del word
  return ("O", "B-LOC", "I-LOC", "O")[i % 4]


def _pos_tag(i: int, word: str) -> str:
  if all(unicodedata.category(c).startswith("P") for c in word):
    return "PUNCT"
  if any(c.isdigit() for c in word):
    return "NUM"
  return ("NOUN", "VERB", "ADJ", "DET")[i % 4]


def _tag_rows(sentences: Sequence[str], tag) -> str:
  """`word<TAB>tag` lines; `tag=None`: words only (XTREME's test files)."""
  blocks = ["\n".join(w if tag is None else f"{w}\t{tag(i, w)}"
                      for i, w in enumerate(_words(s)))
            for s in sentences]
  return "\n\n".join(blocks) + "\n"


def _blank_answers(paragraphs: Sequence[Mapping]) -> List[Mapping]:
  """XTREME's hidden QA sets: every answer "" at 0
  (`utils_preprocess.remove_qa_test_annotations`)."""
  return [{"context": p["context"], "qas": [
      {"id": q["id"], "question": q["question"],
       "answers": [{"answer_start": 0, "text": ""}]} for q in p["qas"]]}
          for p in paragraphs]


def _squad_json(paragraphs: Sequence[Mapping], title: str) -> str:
  return json.dumps({"version": "1.1", "data": [
      {"title": title, "paragraphs": list(paragraphs)}]}, ensure_ascii=False)


def _xquad_paragraphs(data_dir: str, lang: str, start: int, n: int
                      ) -> List[Mapping]:
  path = os.path.join(data_dir, "xquad", f"xquad.{lang}.json")
  with open(path, encoding="utf-8") as f:
    data = json.load(f)["data"]
  paragraphs = [p for article in data for p in article["paragraphs"]]
  return paragraphs[start:start + n]


def _cloze_paragraphs(sentences: Sequence[str], lang: str) -> List[Mapping]:
  """SQuAD-format cloze questions over real sentences: the context is three
  sentences, the question the middle one with its longest word blanked,
  the answer that word."""
  out = []
  for k in range(len(sentences) // 3):
    first, middle, last = sentences[3 * k:3 * k + 3]
    words = [w.strip(".,!?;:\"'()«»¿¡。、") for w in middle.split()]
    answer = max(words, key=len)
    if not answer:
      continue
    context = f"{first} {middle} {last}"
    start = len(first) + 1 + middle.index(answer)
    out.append({"context": context, "qas": [{
        "id": f"{lang}-{k}-0", "question": middle.replace(answer, "_____", 1),
        "answers": [{"text": answer, "answer_start": start}]}]})
  return out


def write_tiny_xtreme(out_dir: str, data_dir: str, grids: Sequence[str],
                      examples: int = 8, qa_paragraphs: int = 2,
                      languages: Optional[Sequence[str]] = None
                      ) -> Dict[str, object]:
  """Writes the files the grids read, in XTREME's download layout.

  Every file `xtreme_local.required_files` lists for the grids is written
  (English always included, as the sweep evaluates it): pair and tagging
  files from `examples` real sentences per language (the English training
  set twice that), QA from XQuAD (`qa_paragraphs` paragraphs per language;
  SQuAD train/dev and MLQA dev are XQuAD paragraphs too) and TyDi cloze
  questions over real sentences. Labels are synthetic (`SYNTHETIC_NOTE`).
  Then the test files a submission reads (`_write_test_files`) and the
  Tatoeba and BUCC files (`_write_retrieval`).

  Returns:
    A manifest {"note", "files": {relative path: origin}}.
  """
  root = pathlib.Path(out_dir)
  origins: Dict[str, str] = {}

  def write(rel: str, text: str, origin: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    origins[rel] = origin

  # The sweep always evaluates English: the folder needs its files.
  languages = xtreme_local.with_english(languages)
  pair_labels = {"xnli": xtreme_readers.XNLI_LABELS,
                 "pawsx": sorted(xtreme_readers.PAWSX_LABEL_IDS)}
  specs = sweep.EXPERIMENTS["table15"]
  for grid in grids:
    for _, candidates in xtreme_local.required_files(specs[grid], languages):
      rel = candidates[0]
      family, name = rel.split("/")[0], os.path.basename(rel)
      if family in ("xnli", "pawsx", "panx", "udpos"):
        split, lang = name[:-len(".tsv")].split("-", 1)
        n = examples * 2 if split == "train" else examples
        offset = 0 if split == "train" else examples * 2
        sents, origin = _sentences(data_dir, lang, n, offset)
        if family in pair_labels:
          text = _pair_rows(sents, pair_labels[family])
        else:
          text = _tag_rows(sents, _ner_tag if family == "panx" else _pos_tag)
        write(rel, text, origin)
      elif family == "tydiqa":
        lang = name.split(".")[2]
        n = 3 * (examples * 2 if "train" in name else examples)
        sents, origin = _sentences(data_dir, lang, n)
        write(rel, _squad_json(_cloze_paragraphs(sents, lang), "tydiqa"),
              f"cloze questions over {origin}")
      else:  # squad/, xquad/, mlqa/: real XQuAD paragraphs
        if family == "squad":
          lang = "en"
        elif family == "xquad":  # xquad.{lang}.json
          lang = name.split(".")[1]
        else:  # dev-context-{lang}-question-{lang}.json
          lang = name.split("-")[2]
        start = {"squad/train-v1.1.json": qa_paragraphs,
                 "squad/dev-v1.1.json": 2 * qa_paragraphs}.get(rel, 0)
        write(rel, _squad_json(_xquad_paragraphs(data_dir, lang, start,
                                                 qa_paragraphs), family),
              f"{data_dir}/xquad/xquad.{lang}.json, paragraphs "
              f"{start}-{start + qa_paragraphs - 1}")
  _write_test_files(root, data_dir, grids, examples, qa_paragraphs,
                    languages, write)
  _write_retrieval(data_dir, examples, languages, write)
  manifest = {"note": SYNTHETIC_NOTE, "files": origins}
  (root / "MANIFEST.json").write_text(json.dumps(manifest, indent=1,
                                                 ensure_ascii=False))
  return manifest


def _write_test_files(root: pathlib.Path, data_dir: str,
                      grids: Sequence[str], examples: int, qa_paragraphs: int,
                      languages: Optional[Sequence[str]], write) -> None:
  """The test files of the grids' families, label-less as XTREME's (XQuAD
  and TyDiQA-GoldP test on the files the sweep reads)."""
  for grid in grids:
    for ev in sweep.EXPERIMENTS["table15"][grid].evaluations:
      for lang in submission.required_languages(ev.family, "test",
                                                languages):
        path = submission.input_file(str(root), ev.family, "test", lang)
        if os.path.isfile(path):
          continue
        rel = os.path.relpath(path, root)
        if ev.family == "mlqa":
          write(rel, _squad_json(_blank_answers(_xquad_paragraphs(
              data_dir, lang, 0, qa_paragraphs)), "mlqa"),
                f"{data_dir}/xquad/xquad.{lang}.json, answers blanked")
          continue
        sents, origin = _sentences(data_dir, lang, examples, examples * 3)
        write(rel, _pair_rows(sents) if ev.family in ("xnli", "pawsx")
              else _tag_rows(sents, None), f"{origin}, no labels")


def _write_retrieval(data_dir: str, examples: int,
                     languages: Optional[Sequence[str]], write) -> None:
  """Tatoeba in XTREME's layout (`{lang}-en.{lang}`, the English side
  sorted) and BUCC 2018 dev (with gold) and test, from real Tatoeba pairs."""
  for task in submission.RETRIEVAL_TASKS:
    for lang in submission.required_languages(task, "test", languages):
      code = _tatoeba_code(lang)
      if code is None:
        continue
      source_path, english_path = xtreme_readers.tatoeba_files(
          data_dir, code)
      if not (os.path.isfile(source_path) and os.path.isfile(english_path)):
        continue
      pairs = [p for p in xtreme_readers.read_parallel_lines(
          source_path, english_path) if "\t" not in "".join(p)]
      if task == "tatoeba":
        chosen = pairs[:examples]
        write(f"tatoeba/{lang}-en.{lang}",
              "".join(f"{s}\n" for s, _ in chosen), source_path)
        write(f"tatoeba/{lang}-en.en",
              "".join(f"{e}\n" for e in sorted(e for _, e in chosen)),
              f"{english_path}, sorted as XTREME")
        continue
      for k, split in enumerate(("dev", "test")):
        chosen = pairs[(k + 1) * examples:(k + 2) * examples]
        base = f"bucc2018/{lang}-en.{split}"
        write(f"{base}.{lang}", "".join(
            f"{lang}-{i:09d}\t{s}\n" for i, (s, _) in enumerate(chosen)),
              source_path)
        # English in another order, so mining is not the identity.
        write(f"{base}.en", "".join(
            f"en-{i:09d}\t{chosen[i][1]}\n" for i in reversed(
                range(len(chosen)))), english_path)
        if split == "dev":
          write(f"{base}.gold", "".join(
              f"{lang}-{i:09d}\ten-{i:09d}\n" for i in range(len(chosen))),
                "aligned Tatoeba pairs")


# --------------------------------------------------------------------------
# 3-4. Convert, sweep, table
# --------------------------------------------------------------------------

def road_languages(grids: Sequence[str],
                   languages: Optional[Sequence[str]] = None) -> List[str]:
  """Every language the grids read (for the tiny vocabulary)."""
  langs = set()
  for grid in grids:
    spec = sweep.EXPERIMENTS["table15"][grid]
    langs.add(spec.train_language)
    for ev in spec.evaluations:
      langs.update(xtreme_local.evaluated_languages(ev.family, languages))
  return sorted(langs)


def run_road(workdir: str, data_dir: str, *, hf_dir: Optional[str] = None,
             xtreme_dir: Optional[str] = None,
             grids: Sequence[str] = FAMILY_GRIDS, train_steps: Optional[int]
             = 2, seeds: str = "0", batch_size: Optional[int] = None,
             examples: int = 8, qa_paragraphs: int = 2,
             languages: Optional[Sequence[str]] = None,
             log=print) -> Dict[str, object]:
  """Runs the road; returns {"commands", "table", "markdown", ...}.

  Every step is logged as the shell command that does the same.
  """
  work = pathlib.Path(workdir).resolve()
  work.mkdir(parents=True, exist_ok=True)
  commands = []
  if hf_dir is None:
    hf_dir = str(work / "hf")
    if not (pathlib.Path(hf_dir) / "config.json").is_file():
      log(f"[1/4] a tiny released-like Hugging Face RemBERT in {hf_dir}")
      build_released_like_hf(hf_dir, data_dir,
                             road_languages(grids, languages))
  else:
    log(f"[1/4] Hugging Face RemBERT: {hf_dir}")
  model_dir = work / "model"
  commands.append("rembert-convert hf-to-t5x "
                  f"--hf_dir={hf_dir} --output_dir={model_dir}")
  log(f"[2/4] {commands[-1]}")
  if not (model_dir / configs.CHECKPOINT_CONFIG_FILE).is_file():
    summary = checkpoint_io.hf_to_t5x(hf_dir, str(model_dir))
    log(summary.to_json())
  if xtreme_dir is None:
    xtreme_dir = str(work / "xtreme")
    log(f"[3/4] a tiny XTREME-layout folder in {xtreme_dir}: "
        f"{SYNTHETIC_NOTE}")
    write_tiny_xtreme(xtreme_dir, data_dir, grids, examples, qa_paragraphs,
                      languages)
  sweep_dir = work / "sweep"
  argv = ["--experiment=table15", f"--workdir={sweep_dir}",
          f"--pretrained={model_dir}", f"--xtreme_dir={xtreme_dir}",
          f"--tasks={','.join(grids)}", f"--seeds={seeds}"]
  t5x_argv = list(argv)
  if train_steps:
    argv.append(f"--train_steps={train_steps}")
  if batch_size:
    argv.append(f"--batch_size={batch_size}")
  if languages:
    argv.append(f"--languages={','.join(languages)}")
  # Checkpoints kept: the second call predicts the test sets with the
  # checkpoints the first one selected.
  argv.append("--keep_checkpoints")
  submissions = {}
  for split in ("dev", "test"):
    submissions[split] = str(work / f"submission-{split}")
    split_argv = [*argv, f"--submission_dir={submissions[split]}",
                  f"--submission_split={split}"]
    commands.append("python -m rembert_t5x.experiments.sweep "
                    + " ".join(split_argv))
    log(f"[{3 if split == 'dev' else 4}/4] {commands[-1]}")
    sweep.main(split_argv)
  commands.append("python -m rembert_t5x.experiments.sweep --runner=t5x "
                  + " ".join(t5x_argv).replace(
                      f"--pretrained={model_dir}",
                      f"--pretrained={work / 't5x_native'}/checkpoint_0")
                  + f" --submission_dir={submissions['test']}"
                  + " --model_gin=<the model's gin file>")
  log(f"[4/4] {sweep_dir / 'sweep.md'}; submission folders "
      f"{submissions['dev']}/seed-*/ (score with XTREME's evaluate.py "
      f"against dev labels) and {submissions['test']}/seed-*/ (with T5X "
      f"instead: rembert-convert t5x-native --checkpoint_dir={model_dir} "
      f"--output_dir={work / 't5x_native'}; {commands[-1]} | bash)")
  saved = json.loads((sweep_dir / "sweep.json").read_text())
  return {"commands": commands, "table": saved, "model_dir": str(model_dir),
          "xtreme_dir": xtreme_dir, "hf_dir": hf_dir,
          "submissions": submissions,
          "markdown": (sweep_dir / "sweep.md").read_text()}
