r"""Scores QA predictions with the official SQuAD v1.1 or MLQA rules.

  rembert-evaluate-qa --dataset_file=xquad.de.json \
      --prediction_file=predictions.json --normalization=squad
  rembert-evaluate-qa --dataset_file=dev-context-zh-question-zh.json \
      --prediction_file=predictions.json --normalization=mlqa --lang=zh

The prediction file is a JSON object {question id: answer text}. Questions
without a prediction score 0 (each is noted on stderr, as the official
scripts do). Prints one JSON line {"exact_match": x, "f1": y} (percent).
Malformed input gives a one-line error naming the file and field, exit 2.
"""

import json
import sys

from absl import flags

from rembert_t5x.common import cli
from rembert_t5x.common import errors
from rembert_t5x.scoring import metrics


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_string("dataset_file", None, "SQuAD-format JSON with gold "
                      "answers.", flag_values=fv, required=True)
  flags.DEFINE_string("prediction_file", None, "JSON object {question id: "
                      "answer text}.", flag_values=fv, required=True)
  flags.DEFINE_enum("normalization", "squad", list(metrics.NORMALIZATIONS),
                    "squad: XQuAD, TyDiQA-GoldP, SQuAD; mlqa: MLQA (needs "
                    "--lang).", flag_values=fv)
  flags.DEFINE_string("lang", None, "Answer language; required for "
                      "--normalization=mlqa "
                      f"({', '.join(metrics.MLQA_LANGUAGES)}).",
                      flag_values=fv)


def _main(fv: flags.FlagValues) -> dict:
  if fv.normalization == "mlqa" and not fv.lang:
    raise errors.UserError("--normalization=mlqa needs --lang")

  def note_missing(question_id):
    print(f"Unanswered question {question_id} will receive score 0.",
          file=sys.stderr)

  return metrics.evaluate_prediction_file(
      fv.dataset_file, fv.prediction_file, fv.normalization, fv.lang,
      on_missing=note_missing)


def main(argv=None) -> None:
  # The library raises ValueError for malformed files: bad input here.
  print(json.dumps(cli.run_main(_main, argv, _define_flags, doc=__doc__,
                                also=(ValueError,))))


if __name__ == "__main__":
  main()
