r"""Prints pre-training and fine-tuning parameter counts of a model gin file.

  rembert-count-params --gin_file=gin_configs/models/paper/rembert.gin \
      [--gin.NUM_LAYERS=4] [--gin_bindings='NUM_HEADS = 8'] [--gin_search_paths=DIR]

prints one JSON line {"pretraining_params": N, "finetuning_params": M},
counted from the initialised parameter tree (shapes only, via jax.eval_shape).
Flags are T5X's gin flags (`rembert_t5x.common.cli.define_gin_flags`): `--gin.KEY=VALUE` is the
binding `KEY = VALUE`; a user error is one `error: ...` line and exit code 2.
"""

import json

from absl import flags

from rembert_t5x.common import cli
from rembert_t5x import configs


def _main(fv: flags.FlagValues) -> None:
  config = configs.config_from_gin(fv.gin_file, fv.gin_bindings,
                                   search_paths=fv.gin_search_paths)
  print(json.dumps(configs.count_parameters(config)))


def main(argv=None) -> None:
  cli.run_main(_main, argv, doc=__doc__)


if __name__ == "__main__":
  main()
