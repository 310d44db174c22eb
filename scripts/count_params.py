"""Prints pre-training and fine-tuning parameter counts of a model gin file.

  python scripts/count_params.py --gin_file=gin_configs/models/paper/rembert.gin

prints one JSON line {"pretraining_params": N, "finetuning_params": M},
counted from the initialised parameter tree (shapes only, via jax.eval_shape).
"""

import json
import sys

from absl import app
from absl import flags

from rembert_t5x import configs

_GIN_FILE = flags.DEFINE_string("gin_file", None, "Model gin file.", required=True)
_GIN_BINDINGS = flags.DEFINE_multi_string(
    "gin_bindings", [], "Extra gin bindings, e.g. 'NUM_LAYERS = 4'.")


def main(argv):
  del argv
  try:
    config = configs.config_from_gin(_GIN_FILE.value, _GIN_BINDINGS.value)
  except configs.GinConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  print(json.dumps(configs.count_parameters(config)))


if __name__ == "__main__":
  app.run(main)
