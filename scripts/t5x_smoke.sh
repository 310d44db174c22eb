#!/usr/bin/env bash
# End-to-end smoke test of the T5X run files against the real T5X, on CPU:
#   1. synthetic multilingual data + a 400-piece SentencePiece vocabulary;
#   2. tiny MLM pre-training (t5x.train, pretrain_mlm.gin + t5x_cpu_tiny.gin);
#   3. the same pre-training with model parallelism, data=2 x model=4 on 8
#      simulated CPU devices (t5x_cpu_model_parallel.gin), with 6 heads and a
#      2,001-token vocabulary: neither divides 4, so it runs only through the
#      joined heads x head_dim attention axis and the padded vocabulary;
#      in 2 microbatches (trainer.Trainer.num_microbatches);
#   4. PAWS-X-style fine-tuning from step 2's checkpoint (MLM head dropped,
#      fresh optimiser state, inference eval on every language);
#   5. PAN-X-style tagging and SQuAD/XQuAD-style QA fine-tuning from the same
#      checkpoint;
#   6. t5x.eval of the fine-tuned PAWS-X checkpoint on every test set;
#   7. t5x.infer with infer_pawsx.gin, infer_panx.gin and infer_xquad.gin on
#      one language each, checking the readable predictions (class names, a
#      tag per word, one answer per question).
#   8. t5x.eval of sentence retrieval (eval_tatoeba.gin) from step 2's
#      pre-training checkpoint, on parallel synthetic sentences.
# Needs: the first `python` on PATH with t5x and this package importable.
# No downloads. Takes a few minutes on 2 CPU cores. Exits non-zero on any
# failure. Keeps its work directory when KEEP=1 (path printed at the end).
# PACK=1 runs the fine-tuning steps packed (finetune_base.gin's PACK).
#
#   bash scripts/t5x_smoke.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
source scripts/t5x_smoke_lib.sh
smoke_init t5x_smoke.sh
smoke_data

step "pre-training (t5x.train, 4 steps)"
python -m t5x.train "${TINY[@]}" \
  --gin_file=gin_configs/runs/pretrain_mlm.gin \
  --gin_file=gin_configs/runs/t5x_cpu_tiny.gin "${TASKS[@]}" \
  --gin.MIXTURE_OR_TASK_NAME="'smoke_mlm'" \
  --gin.MODEL_DIR="'$WORK/pretrain'" --alsologtostderr \
  > "$WORK/pretrain.log" 2>&1 || { tail -50 "$WORK/pretrain.log"; exit 1; }
CKPT="$WORK/pretrain/checkpoint_4"
[[ -d "$CKPT" ]] || { echo "no $CKPT" >&2; tail -30 "$WORK/pretrain.log"; exit 1; }
# The local-text corpus has no 'validation' split: pretrain_mlm.gin turns
# train-eval off by itself (no --gin.train.train_eval_dataset_cfg=None).
grep -q "Train-eval is off: smoke_mlm_" "$WORK/pretrain.log" || {
  echo "pre-training: train-eval was not turned off" >&2; exit 1; }

step "pre-training with data=2 x model=4 on 8 simulated CPU devices, 2 microbatches"
XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m t5x.train \
  "${TINY[@]}" --gin_file=gin_configs/runs/pretrain_mlm.gin \
  --gin_file=gin_configs/runs/t5x_cpu_tiny.gin \
  --gin_file=gin_configs/runs/t5x_cpu_model_parallel.gin "${TASKS[@]}" \
  --gin.MODEL_PARALLELISM=4 --gin.NUM_HEADS=6 --gin.HEAD_DIM=16 \
  --gin.EMBED_DIM=96 --gin.VOCAB_SIZE=2001 \
  --gin.MIXTURE_OR_TASK_NAME="'smoke_mlm'" --gin.TRAIN_STEPS=2 \
  --gin.trainer.Trainer.num_microbatches=2 \
  --gin.MODEL_DIR="'$WORK/pretrain_mp'" --alsologtostderr \
  > "$WORK/pretrain_mp.log" 2>&1 || { tail -50 "$WORK/pretrain_mp.log"; exit 1; }
grep -q "explicit_mesh_partitioner: mesh {'data': 2, 'model': 4} over 8 devices" \
  "$WORK/pretrain_mp.log" || {
  echo "model-parallel run: no 2x4 mesh in the log" >&2
  grep -i "mesh" "$WORK/pretrain_mp.log" | head >&2; exit 1; }
grep -q "using microbatches: 2 microbatches" "$WORK/pretrain_mp.log" || {
  echo "trainer.Trainer.num_microbatches=2 did not reach the trainer" >&2; exit 1; }
[[ -d "$WORK/pretrain_mp/checkpoint_2" ]] || {
  echo "model-parallel run wrote no checkpoint_2" >&2; exit 1; }

# finetune <name> <run file> <train task> <train-eval task> <infer-eval
# mixture> [gin flags...]; PACK=1 fine-tunes packed (several examples per row).
PACK_FLAGS=()
if [[ "${PACK:-0}" == 1 ]]; then PACK_FLAGS=(--gin.PACK=True); fi
finetune() {
  step "fine-tuning $1 from $CKPT (t5x.train, 4 steps)"
  python -m t5x.train "${TINY[@]}" --gin_file="$2" \
    --gin_file=gin_configs/runs/t5x_cpu_tiny.gin "${TASKS[@]}" \
    --gin.MIXTURE_OR_TASK_NAME="'$3'" --gin.TRAIN_EVAL_TASK="'$4'" \
    --gin.INFER_EVAL_MIXTURE="'$5'" "${@:6}" "${PACK_FLAGS[@]}" \
    --gin.INITIAL_CHECKPOINT_PATH="'$CKPT'" \
    --gin.MODEL_DIR="'$WORK/finetune_$1'" --alsologtostderr \
    > "$WORK/finetune_$1.log" 2>&1 || { tail -50 "$WORK/finetune_$1.log"; exit 1; }
  [[ -d "$WORK/finetune_$1/checkpoint_4" ]] || {
    echo "fine-tuning $1 did not restart at step 0" >&2; ls "$WORK/finetune_$1" >&2; exit 1; }
  check_metrics "$WORK/finetune_$1" "$WORK/finetune_$1.log"
}
# The synthetic QA windows are 96 tokens, answers at most 12.
QA_FLAGS=(--gin.TASK_FEATURE_LENGTHS="{'input_tokens': 96}"
          --gin.models.RemBertQAModel.max_answer_length=12)
finetune pawsx gin_configs/runs/finetune_pawsx.gin smoke_pawsx_train_en \
  smoke_pawsx_qla smoke_pawsx_zeroshot
finetune panx gin_configs/runs/finetune_panx.gin smoke_panx_train_en \
  smoke_panx_qla smoke_panx_zeroshot
finetune qa gin_configs/runs/finetune_xquad.gin smoke_squad_train_en \
  smoke_squad_en smoke_xquad_zeroshot "${QA_FLAGS[@]}"

step "evaluating the PAWS-X checkpoint (t5x.eval, test split)"
python -m t5x.eval "${TINY[@]}" --gin_file=gin_configs/runs/eval_pawsx.gin \
  --gin_file=gin_configs/runs/t5x_cpu_tiny.gin "${TASKS[@]}" \
  --gin.MIXTURE_OR_TASK_NAME="'smoke_pawsx_zeroshot'" \
  --gin.CHECKPOINT_PATH="'$WORK/finetune_pawsx/checkpoint_4'" \
  --gin.EVAL_OUTPUT_DIR="'$WORK/eval_pawsx'" --alsologtostderr \
  > "$WORK/eval_pawsx.log" 2>&1 || { tail -50 "$WORK/eval_pawsx.log"; exit 1; }
check_metrics "$WORK/eval_pawsx" "$WORK/eval_pawsx.log"

# infer <run file> <task> <checkpoint> <family> [gin flags...]: t5x.infer on
# the task's test split; every line must be a readable record.
infer() {
  step "predictions with $1 on $2 (t5x.infer)"
  python -m t5x.infer "${TINY[@]}" --gin_file="gin_configs/runs/$1" \
    --gin_file=gin_configs/runs/t5x_cpu_tiny.gin "${TASKS[@]}" \
    --gin.MIXTURE_OR_TASK_NAME="'$2'" --gin.CHECKPOINT_PATH="'$3'" \
    --gin.INFER_OUTPUT_DIR="'$WORK/infer_$2'" "${@:5}" --alsologtostderr \
    > "$WORK/infer_$2.log" 2>&1 || { tail -50 "$WORK/infer_$2.log"; exit 1; }
  python - "$WORK/infer_$2" "$4" <<'PY'
import glob, json, sys
from rembert_tasks import panx, pawsx
(path,) = glob.glob(f"{sys.argv[1]}/*.jsonl-00000-of-00001")
with open(path, encoding="utf-8") as f:
  records = [json.loads(line) for line in f]
family = sys.argv[2]
assert len(records) == 16, f"{path}: {len(records)} records, expected 16"
for r in records:
  if family == "pair":
    assert r["prediction"] in pawsx.LABELS and r["gold"] in pawsx.LABELS, r
    assert abs(sum(r["probabilities"].values()) - 1) < 1e-3, r
  elif family == "tag":
    assert len(r["prediction"]) == len(r["words"]) == len(r["gold"]), r
    assert set(r["prediction"]) <= set(panx.LABELS) | {None}, r
  else:
    assert isinstance(r["prediction"], str) and r["gold"], r
    assert r["windows"] >= 1 and r["question"], r
assert sorted(r.get("index", i) for i, r in enumerate(records)) == list(
    range(16)), path
print("   ", path.rsplit("/", 1)[-1], "first record:",
      json.dumps(records[0], ensure_ascii=False))
PY
}
infer infer_pawsx.gin smoke_pawsx_qcy "$WORK/finetune_pawsx/checkpoint_4" pair
infer infer_panx.gin smoke_panx_qgr "$WORK/finetune_panx/checkpoint_4" tag
infer infer_xquad.gin smoke_xquad_qdv "$WORK/finetune_qa/checkpoint_4" qa \
  "${QA_FLAGS[@]}" --gin.MAX_ANSWER_LENGTH=12
step "retrieval from the pre-training checkpoint (t5x.eval, eval_tatoeba.gin)"
python -m t5x.eval "${TINY[@]}" --gin_file=gin_configs/runs/eval_tatoeba.gin \
  --gin_file=gin_configs/runs/t5x_cpu_tiny.gin "${TASKS[@]}" \
  --gin.MIXTURE_OR_TASK_NAME="'smoke_tatoeba_zeroshot'" \
  --gin.CHECKPOINT_PATH="'$CKPT'" \
  --gin.EVAL_OUTPUT_DIR="'$WORK/eval_tatoeba'" --alsologtostderr \
  > "$WORK/eval_tatoeba.log" 2>&1 || { tail -50 "$WORK/eval_tatoeba.log"; exit 1; }
check_metrics "$WORK/eval_tatoeba" "$WORK/eval_tatoeba.log"

step "done: T5X $(python -c 'import t5x, os; print(os.path.dirname(t5x.__file__))')"
if [[ "${KEEP:-0}" == 1 ]]; then echo "work directory kept: $WORK"; fi
echo "t5x_smoke.sh: PASS in $((SECONDS - START))s"
