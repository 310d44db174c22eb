"""RemBERT (Chung et al., ICLR 2021) as a T5X/SeqIO plugin in JAX and Flax.

Package map, lowest layer first; imports point down only
(docs/DESIGN.md, enforced by tests/import_layers_test.py):

  common/       errors, the command-line helpers, atomic files, shutdown
  core          network (the plain-Flax model), layers, configs, optimizer,
                partitioning, protocol (the paper's fine-tuning settings)
  scoring/      XTREME's metrics, standard errors, BUCC/Tatoeba mining
  data/         vocabularies, preprocessors, XTREME readers, QA windows
  rembert_tasks (the top-level `tasks/` folder): SeqIO task registration
  models        T5X `BaseModel`s, feature converters, T5X adapters
  runner/       the local trainer and evaluator (T5X's pieces, no t5x)
  convert/      checkpoints to and from Hugging Face, TF and T5X-native
  experiments/  sweeps, the demo, reproductions, XTREME submission folders
  tools/        small commands (parameter counts, QA scoring)

Gin files name classes and functions of core, data (the vocabulary hook
`vocabulary.checkpoint_vocabulary`), models and runner, and the tasks by
their module (`MIXTURE_OR_TASK_MODULE`, e.g. `'rembert_tasks'`).
"""
