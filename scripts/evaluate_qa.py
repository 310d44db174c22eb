r"""Scores QA predictions with the official SQuAD v1.1 or MLQA rules.

  python scripts/evaluate_qa.py --dataset_file=xquad.de.json \
      --prediction_file=predictions.json --normalization=squad
  python scripts/evaluate_qa.py --dataset_file=dev-context-zh-question-zh.json \
      --prediction_file=predictions.json --normalization=mlqa --lang=zh

The prediction file is a JSON object {question id: answer text}. Questions
without a prediction score 0 (each is noted on stderr, as the official
scripts do). Prints one JSON line {"exact_match": x, "f1": y} (percent).
Malformed input gives a one-line error naming the file and field, exit 2.
"""

import json
import sys

from absl import app
from absl import flags

from rembert_t5x import metrics
from rembert_t5x.runner import cli

_DATASET_FILE = flags.DEFINE_string(
    "dataset_file", None, "SQuAD-format JSON with gold answers.",
    required=True)
_PREDICTION_FILE = flags.DEFINE_string(
    "prediction_file", None, "JSON object {question id: answer text}.",
    required=True)
_NORMALIZATION = flags.DEFINE_enum(
    "normalization", "squad", list(metrics.NORMALIZATIONS),
    "squad: XQuAD, TyDiQA-GoldP, SQuAD; mlqa: MLQA (needs --lang).")
_LANG = flags.DEFINE_string(
    "lang", None, "Answer language; required for --normalization=mlqa "
    f"({', '.join(metrics.MLQA_LANGUAGES)}).")


def main(argv):
  if len(argv) > 1:
    print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
    sys.exit(2)
  if _NORMALIZATION.value == "mlqa" and not _LANG.value:
    print("error: --normalization=mlqa needs --lang", file=sys.stderr)
    sys.exit(2)

  def note_missing(question_id):
    print(f"Unanswered question {question_id} will receive score 0.",
          file=sys.stderr)

  with cli.user_errors(ValueError):
    scores = metrics.evaluate_prediction_file(
        _DATASET_FILE.value, _PREDICTION_FILE.value, _NORMALIZATION.value,
        _LANG.value, on_missing=note_missing)
  print(json.dumps(scores))


if __name__ == "__main__":
  app.run(main)
