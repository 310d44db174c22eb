#!/usr/bin/env bash
# One lent-GPU session's measurements of the full RemBERT step, in priority
# order, each stage under its own time limit so a slow one cannot starve the
# rest. Logs go to $OUT (default /tmp/accelerator_session); the last lines
# printed are each stage's table.
#
#   bash benchmarks/accelerator_session.sh                 # on the GPU machine
#   CONFIG=gin_configs/models/tiny.gin BATCH=2 BATCH2=4 SEQ_LEN=32 \
#     FIT=1,2 bash benchmarks/accelerator_session.sh       # the same on CPU
#
# Stages (STAGES picks a subset, e.g. STAGES="profile variants"):
#   env       the device, driver and package versions
#   cudnn     tests/layers_test.py's cuDNN-vs-einsum attention test (GPU only)
#   profile   fixed vs per-token fit (batches $FIT), kernel counts, the
#             optimizer update alone, a trace's top ops, at $BATCH x $SEQ_LEN
#   hf        Hugging Face's RemBertForMaskedLM against ours, same batch
#   variants  the step at $BATCH2 x $SEQ_LEN, once per override set in
#             $VARIANT_OVERRIDES (";"-separated; "-" is none)
#   optimizer the AdamW update alone per parameter layout (optimizer_update.py)
#   bucc      a BUCC side's embedding pass through runner/embed_corpus.py,
#             $BUCC_SENTENCES a side, then mining them (bucc_corpus.py)
#   mine      margin_candidates at $MINE_SIZES a side (retrieval_scale.py)
#   finetune  packed vs unpacked vs Hugging Face fine-tuning, $FT_HEADS
#             (finetune_throughput.py)
# bucc and finetune read length pools written here by their scripts'
# --write_lengths (the GPU image has no TensorFlow and no data): put them in
# $INPUTS as bucc_lengths.json and finetune_lengths.json.
# The persistent compilation cache ($JAX_COMPILATION_CACHE_DIR) lets the
# `hf` stage reuse the profile's compiled step.
set -u
OUT=${OUT:-/tmp/accelerator_session}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
C=${CONFIG:-gin_configs/models/paper/rembert.gin}
B=${BATCH:-16}
B2=${BATCH2:-32}
L=${SEQ_LEN:-512}
FIT=${FIT:-8,16}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-2}
VARIANT=${VARIANT:-bfloat16:auto}
PROFILE_OVERRIDES=${PROFILE_OVERRIDES:-}
VARIANT_OVERRIDES=${VARIANT_OVERRIDES:-"-;vocab_pad_multiple=128"}
STAGES=${STAGES:-env cudnn profile hf variants}
INPUTS=${INPUTS:-.device_inputs}
BUCC_SENTENCES=${BUCC_SENTENCES:-100000}
MINE_SIZES=${MINE_SIZES:-400000}
FT_HEADS=${FT_HEADS:-pair,tagging}
FT_ARGS=${FT_ARGS:-"--draws 2 --steps 2 --eval_passes 1"}
export PYTHONUNBUFFERED=1
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/rembert_jax_cache}
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=1

overrides() {  # "a=1 b=2" -> --override a=1 --override b=2
  local o
  for o in $1; do [ "$o" != "-" ] && printf -- '--override %s ' "$o"; done
}

stage() {  # name limit_s command...
  local name=$1 limit=$2 start rc
  shift 2
  echo "=== $name (limit ${limit}s): $*"
  start=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "=== $name: exit $rc after $(( $(date +%s) - start ))s"
  grep -v '^{' "$OUT/$name.log" | tail -n 45
}

for s in $STAGES; do
  case $s in
    env)
      stage env 60 bash -c 'nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, flax, optax; print(\"jax\", jax.__version__, \"flax\", flax.__version__, \"optax\", optax.__version__, jax.devices())"; python3 -c "import torch, transformers; print(\"torch\", torch.__version__, \"transformers\", transformers.__version__)"' ;;
    cudnn)
      # --noconftest: the suite's conftest sets CPU-only XLA flags and
      # imports the data stack (seqio, TensorFlow), which the GPU image lacks.
      stage cudnn 120 python3 -m pytest --noconftest -p no:cacheprovider -q \
        tests/layers_test.py -k "cudnn or attention" ;;
    profile)
      # shellcheck disable=SC2046
      stage profile 260 python3 benchmarks/accelerator_step.py --config "$C" \
        --batch "$B" --seq_len "$L" --variant "$VARIANT" --steps "$STEPS" \
        --warmup "$WARMUP" --profile /tmp/rembert_profile --fit_batches "$FIT" \
        --profile_steps 3 --top_ops 25 --json $(overrides "$PROFILE_OVERRIDES") ;;
    hf)
      # shellcheck disable=SC2046
      stage hf 180 python3 benchmarks/accelerator_step.py --config "$C" \
        --batch "$B" --seq_len "$L" --variant "$VARIANT" --steps "$STEPS" \
        --warmup "$WARMUP" --hf --json $(overrides "$PROFILE_OVERRIDES") ;;
    variants)
      IFS=';' read -r -a sets <<<"$VARIANT_OVERRIDES"
      i=0
      for set in "${sets[@]}"; do
        # shellcheck disable=SC2046
        stage "variants$i" 150 python3 benchmarks/accelerator_step.py \
          --config "$C" --batch "$B2" --seq_len "$L" --steps "$STEPS" \
          --warmup "$WARMUP" --variants "${VARIANT/auto/cudnn}" --json \
          $(overrides "$set")
        i=$((i + 1))
      done ;;
    optimizer)
      stage optimizer 150 python3 benchmarks/optimizer_update.py \
        --config "$C" --steps "$STEPS" --warmup "$WARMUP" ;;
    bucc)
      stage bucc 240 python3 benchmarks/bucc_corpus.py --config "$C" \
        --lengths_file "$INPUTS/bucc_lengths.json" \
        --sentences "$BUCC_SENTENCES" ;;
    mine)
      stage mine 150 python3 benchmarks/retrieval_scale.py \
        --sizes "$MINE_SIZES" ;;
    finetune)
      # shellcheck disable=SC2086
      stage finetune 330 python3 benchmarks/finetune_throughput.py \
        --config "$C" --heads "$FT_HEADS" \
        --lengths_file "$INPUTS/finetune_lengths.json" --dtype bfloat16 $FT_ARGS \
        --json_file "$OUT/finetune.jsonl" ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done
