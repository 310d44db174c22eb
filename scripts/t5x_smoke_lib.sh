# Shared by scripts/t5x_smoke.sh and scripts/t5x_multihost_smoke.sh (sourced,
# not run): the checks on the python, the work directory and environment, the
# synthetic data + vocabulary, the smoke task module, and the metrics check.
#
#   source "$REPO/scripts/t5x_smoke_lib.sh"
#   smoke_init <script name>   # checks `import t5x`; sets WORK, START, env
#   smoke_data                 # data, vocabulary, $WORK/py/rembert_smoke_tasks.py
#   step "message"             # "=== [Ns] message"
#   check_metrics <output dir> <log>
# Also sets TINY and TASKS (the gin flags every T5X command of the smoke
# runs takes). Needs REPO set and the current directory at the repository root.

TINY=(--gin_search_paths=. --gin_file=gin_configs/models/tiny.gin)
TASKS=(--gin.MIXTURE_OR_TASK_MODULE="'rembert_smoke_tasks'")

# smoke_init <script name>: fails (exit 2) unless `python` imports T5X; makes
# the work directory (removed on exit unless KEEP=1) and exports the
# environment of the smoke runs.
smoke_init() {
  python -c "import t5x, t5x.train, t5x.eval, t5x.infer" 2>/dev/null || {
    echo "$1: 'import t5x' fails for $(command -v python);" \
         "put a python with T5X installed first on PATH." >&2
    exit 2
  }
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/rembert_${1%.sh}.XXXXXX")"
  if [[ "${KEEP:-0}" != 1 ]]; then trap 'rm -rf "$WORK"' EXIT; fi
  export PYTHONPATH="$WORK/py:$REPO${PYTHONPATH:+:$PYTHONPATH}"
  export TF_CPP_MIN_LOG_LEVEL=2 JAX_PLATFORMS=cpu
  export REMBERT_SMOKE_DATA="$WORK/data" REMBERT_SPM_PATH="$WORK/spm.model"
  START=$SECONDS
}

step() { echo "=== [$((SECONDS - START))s] $*"; }

# smoke_data: synthetic multilingual data + a 400-piece SentencePiece
# vocabulary under $WORK, and the task module T5X imports.
smoke_data() {
  step "synthetic data and vocabulary in $WORK"
python - <<'PY'
import glob, os, shutil
from rembert_t5x.data import pieces, synthetic, synthetic_files
data = os.environ["REMBERT_SMOKE_DATA"]
files = synthetic_files.generate(data, corpus_sentences=400, pair_train=64,
                                 tag_train=64, qa_train=64, eval_examples=16)
pieces.train_sentencepiece(
    {lang: [path] for lang, path in files["corpus"].items()},
    os.environ["REMBERT_SPM_PATH"][:-len(".model")], vocab_size=400,
    max_sentences=4000)
# XTREME's layout for the local-file tasks: <family>/{train-en,dev-xx,test-xx}.tsv
train = synthetic.TRAIN_LANGUAGE
for family, kind in (("pawsx", "pair"), ("panx", "tag")):
  os.makedirs(f"{data}/xtreme/{family}")
  for split, by_lang in files[kind].items():
    for lang, path in by_lang.items():
      out_lang = "en" if split == "train" else lang
      with open(path, encoding="utf-8") as f:
        text = f.read()
      if family == "panx" and split == "train":
        # PAN-X tokens carry "<lang>:"; the train file is read as English.
        text = text.replace(f"{train}:", "en:")
      with open(f"{data}/xtreme/{family}/{split}-{out_lang}.tsv", "w",
                encoding="utf-8") as f:
        f.write(text)
# ... and for QA: SQuAD train/dev from the training language, XQuAD per
# language from the test files.
qa_files = {"squad/train-v1.1.json": files["qa"]["train"][train],
            "squad/dev-v1.1.json": files["qa"]["dev"][train]}
qa_files.update({f"xquad/xquad.{lang}.json": path
                 for lang, path in files["qa"]["test"].items()})
for name, path in qa_files.items():
  os.makedirs(os.path.dirname(f"{data}/xtreme/{name}"), exist_ok=True)
  shutil.copy(path, f"{data}/xtreme/{name}")
# Tatoeba layout for retrieval: the tag dev sets are parallel across
# languages, sentence i of every language being the same latent sentence.
os.makedirs(f"{data}/xtreme/tatoeba")
def sentences(lang):
  return [" ".join(token for token, _ in s)
          for s in synthetic.make_tag_examples(lang, "dev", 16)]
for lang in files["tag"]["dev"]:
  if lang != train:
    for side, lines in ((lang, sentences(lang)), ("eng", sentences(train))):
      with open(f"{data}/xtreme/tatoeba/tatoeba.{lang}-eng.{side}", "w",
                encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
PY

# The task module T5X imports (MIXTURE_OR_TASK_MODULE): registers the smoke
# tasks over the files above with the project's own registration functions.
mkdir -p "$WORK/py"
cat > "$WORK/py/rembert_smoke_tasks.py" <<'PY'
import json, os
from rembert_tasks import panx, pawsx, pretraining, qa, retrieval
data = os.environ["REMBERT_SMOKE_DATA"]
with open(os.path.join(data, "manifest.json"), encoding="utf-8") as f:
  manifest = json.load(f)
languages = manifest["languages"]
pretraining.register_local_text_mlm(
    "smoke_mlm", directory=os.path.join(data, "corpus"))
pawsx.register_pawsx_local(os.path.join(data, "xtreme"), prefix="smoke_",
                           languages=languages)
panx.register_panx_local(os.path.join(data, "xtreme"), prefix="smoke_",
                         languages=languages)
# Windows that fit the synthetic contexts (rembert_tasks.synthetic).
qa.register_qa_local(os.path.join(data, "xtreme"), prefix="smoke_",
                     xquad_languages=languages, mlqa_languages=(),
                     tydiqa_languages=(), max_seq_length=96, doc_stride=32,
                     max_query_length=32, max_answer_length=12)
retrieval.register_tatoeba_local(
    os.path.join(data, "xtreme"), prefix="smoke_",
    languages={lang: lang for lang in languages
               if lang != manifest["train_language"]})
PY
}

# SeqIO's evaluator logs a failing metric and carries on; make it fatal.
check_metrics() {  # check_metrics <output dir> <log>
  if grep -q "Failed to evaluate task" "$2"; then
    grep "Failed to evaluate task" "$2" | head -3 >&2; exit 1; fi
  python - "$1" <<'PY'
import glob, json, sys
files = sorted(glob.glob(f"{sys.argv[1]}/inference_eval/*-metrics.jsonl"))
assert files, f"no inference metrics under {sys.argv[1]}"
for path in files:
  with open(path) as f:
    last = json.loads(f.read().splitlines()[-1])
  print("   ", path.rsplit("/", 1)[-1], last)
PY
}
