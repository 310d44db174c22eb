"""Trivial baselines ("chance levels") of the synthetic tasks, for the demo table.

Kept apart from `synthetic.py`, which only generates data: scoring needs the
XTREME readers and the metrics.
"""

import collections
import json
import os
from typing import Dict

from rembert_t5x.data import synthetic
from rembert_t5x.data import xtreme_readers
from rembert_t5x.scoring import metrics

CHANCE_METRICS = {"pair": "accuracy", "tag": "entity_f1", "qa": "f1"}


def chance_levels(workdir: str, split: str = "dev") -> Dict[str, Dict[str,
                                                                    float]]:
  """Scores (0-100) of trivial baselines on every language's `split`.

  None of the baselines reads a word, so they are what a model that learned
  nothing transferable would score zero-shot:

  * pair: accuracy of always predicting the majority label of the training
    file (50 for the exactly balanced data).
  * tag: entity-level micro F1 (`metrics.entity_f1`, seqeval's) of tagging each
    position with the most frequent tag at that position in the training
    sentences. (Predicting all O scores 0.)
  * qa: SQuAD v1.1 F1 of answering every question with the first
    whitespace-separated token of its context.

  Args:
    workdir: a directory written by `synthetic_files.generate`.
    split: "dev" or "test".

  Returns:
    {task: {lang: score}}; see `CHANCE_METRICS` for the metric names.
  """
  with open(os.path.join(workdir, "manifest.json"), encoding="utf-8") as f:
    manifest = json.load(f)
  files = {task: {s: {c: os.path.join(workdir, p) for c, p in by_lang.items()}
                  for s, by_lang in manifest["files"][task].items()}
           for task in ("pair", "tag", "qa")}
  train = manifest["train_language"]
  levels = {"pair": {}, "tag": {}, "qa": {}}

  def pair_labels(path):
    return [e["label"] for e in xtreme_readers.read_pair_tsv(
        path, xtreme_readers.PAWSX_LABEL_IDS)]

  def tag_names(path, code):
    return [[synthetic.TAGS[t] for t in sentence["tags"]]
            for sentence in xtreme_readers.read_conll_tags(
                path, synthetic.TAGS, strip_prefix=f"{code}:")]

  majority = collections.Counter(pair_labels(
      files["pair"]["train"][train])).most_common(1)[0][0]
  for code, path in files["pair"][split].items():
    labels = pair_labels(path)
    levels["pair"][code] = 100.0 * labels.count(majority) / len(labels)

  by_position = collections.defaultdict(collections.Counter)
  for sentence in tag_names(files["tag"]["train"][train], train):
    for i, tag in enumerate(sentence):
      by_position[i][tag] += 1
  for code, path in files["tag"][split].items():
    gold = tag_names(path, code)
    predicted = [[by_position[i].most_common(1)[0][0] if by_position[i]
                  else "O" for i in range(len(s))] for s in gold]
    levels["tag"][code] = 100.0 * metrics.entity_f1(gold, predicted)

  for code, path in files["qa"][split].items():
    with open(path, encoding="utf-8") as f:
      squad = json.load(f)
    scores = [max(metrics.squad_f1(paragraph["context"].split()[0],
                                   a["text"]) for a in qa["answers"])
              for article in squad["data"]
              for paragraph in article["paragraphs"]
              for qa in paragraph["qas"]]
    levels["qa"][code] = 100.0 * sum(scores) / len(scores)
  return levels
