#!/usr/bin/env bash
# Multi-host smoke test of the T5X run files against the real T5X, on CPU: a
# TPU pod slice (one Python process per host, jax.process_count() > 1)
# simulated by NUM_PROCESSES local processes of DEVICES_PER_PROCESS CPU
# devices each, joined by rembert_t5x.tools.multihost_launch (gloo
# collectives). Same synthetic data and task module as scripts/t5x_smoke.sh
# (scripts/t5x_smoke_lib.sh). Stages:
#   1. MLM pre-training (t5x.train, packed, 4 steps) on N processes, data x
#      model = MODEL_PARALLELISM (default 2) over the explicit mesh of all
#      devices (t5x_cpu_model_parallel.gin): the mesh and T5X's per-host
#      data shard in each log; checkpoints written once (one checkpoint_N);
#      one TensorBoard writer (process 0).
#   2. Per-host input shards: on N processes, T5X's own
#      `t5x.utils.get_dataset` with the data layout T5X's partitioner gives
#      each process (model parallelism 1 and MODEL_PARALLELISM), one pass of
#      the PAWS-X train task: the shards are disjoint and together the task;
#      processes of one data shard read the same examples
#      (scripts/multihost_checks.py shards; not the trainer's own iterator).
#   3. Checkpoints across topologies: a 1-process pre-training too; the
#      N-process checkpoint restored (T5X's Orbax restore, params + AdamW
#      state) in 1 process and in N processes with the model axis over all
#      devices, the 1-process one in N; every leaf equal to a plain numpy
#      read of the checkpoint.
#   4. PAWS-X fine-tuning from stage 1's checkpoint on N processes, unpacked
#      (with inference eval) and packed (--gin.PACK=True) with data 1 x model
#      N*D: the model axis spans every process.
#   5. t5x.eval of the fine-tuned checkpoint on N processes and on 1: the
#      same metrics, one line per step (written once); t5x.infer on N and on
#      1: one output file, each example once, in input order, equal records.
#   6. Retrieval eval (eval_tatoeba.gin) from stage 1's checkpoint on N
#      processes and on 1: the same accuracies.
#   7. One host failing: the last process reads a damaged PAWS-X train file
#      (REMBERT_SMOKE_DATA pointing at a broken copy, for it alone) in a
#      fine-tuning run; every process must exit non-zero within a bounded
#      time (--heartbeat_timeout=10), the failing one with the data error.
#   8. The split-batch exactness matrix: MULTIHOST_CASES=all pytest
#      tests/multihost_test.py (with this python: the T5X trainer case too).
# Needs: the first `python` on PATH with t5x and this package importable
# (e.g. PATH=/opt/t5xvenv/bin:$PATH), free local TCP ports. No downloads.
# Takes ~20 min on 2 CPU cores with 2 processes (every process compiles).
# Each process is killed after PROCESS_TIMEOUT s (default 900). Exits
# non-zero on any failure; the last line is the summary
# ("t5x_multihost_smoke.sh: PASS in Ns (N processes x D devices)" or FAIL
# with the reason). Keeps its work directory (logs under logs/) when KEEP=1.
#
#   bash scripts/t5x_multihost_smoke.sh
#   NUM_PROCESSES=4 DEVICES_PER_PROCESS=1 bash scripts/t5x_multihost_smoke.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
N="${NUM_PROCESSES:-2}"
D="${DEVICES_PER_PROCESS:-2}"
MP="${MODEL_PARALLELISM:-2}"
ALL=$((N * D))
SKIP_PYTEST="${SKIP_PYTEST:-0}"
NAME=t5x_multihost_smoke.sh
if (( N < 2 || D < 1 || ALL % MP )); then
  echo "$NAME: FAIL: needs NUM_PROCESSES >= 2 and MODEL_PARALLELISM" \
       "($MP) dividing NUM_PROCESSES x DEVICES_PER_PROCESS ($ALL)" >&2
  exit 2
fi
source scripts/t5x_smoke_lib.sh
smoke_init "$NAME"
mkdir -p "$WORK/logs"
REASON="unexpected error (see above)"
finish() {
  local rc=$?
  if [[ "${KEEP:-0}" == 1 ]]; then echo "work directory kept: $WORK"
  else rm -rf "$WORK"; fi
  if (( rc == 0 )); then
    echo "$NAME: PASS in ${SECONDS}s ($N processes x $D devices)"
  else
    echo "$NAME: FAIL in ${SECONDS}s ($N processes x $D devices):" \
         "$REASON"
  fi
}
trap finish EXIT
fail() { REASON="$*"; echo "FAIL: $*" >&2; exit 1; }
free_port() {
  python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# cluster <name> <count> <module> [args...]: the module on <count> processes
# through the launcher, logs in $WORK/logs/<name>.<i>.log. Process i gets
# the environment assignments in HOST_ENV_<i> (if set). Returns 0 when every
# process exits 0; otherwise prints each failing log's tail and returns 1.
# CLUSTER_CODES holds the exit codes, CLUSTER_SECONDS the wall time. The
# launcher's --heartbeat_timeout is HEARTBEAT_TIMEOUT (default 60 s: on 2
# busy cores a live process can miss 10 s of heartbeats; stage 7 uses 10).
cluster() {
  local name=$1 count=$2 port i pids=() began=$SECONDS failed=0
  shift 2
  port=$(free_port)
  for ((i = 0; i < count; i++)); do
    local var="HOST_ENV_$i"
    # shellcheck disable=SC2086
    timeout -k 10 "${PROCESS_TIMEOUT:-900}" env ${!var:-} \
      python -m rembert_t5x.tools.multihost_launch \
      --coordinator_address="127.0.0.1:$port" --process_count="$count" \
      --process_index="$i" --local_device_count="$D" \
      --heartbeat_timeout="${HEARTBEAT_TIMEOUT:-60}" \
      -- "$@" > "$WORK/logs/$name.$i.log" 2>&1 &
    pids+=($!)
  done
  CLUSTER_CODES=()
  for ((i = 0; i < count; i++)); do
    local code=0
    wait "${pids[$i]}" || code=$?
    CLUSTER_CODES+=("$code")
  done
  CLUSTER_SECONDS=$((SECONDS - began))
  for ((i = 0; i < count; i++)); do
    if [[ "${CLUSTER_CODES[$i]}" != 0 ]]; then
      failed=1
      if [[ "${EXPECT_FAILURE:-0}" != 1 ]]; then
        echo "--- $name process $i exited ${CLUSTER_CODES[$i]}" \
             "(124: timed out); tail of $WORK/logs/$name.$i.log:" >&2
        grep -v "Warning\|warnings.warn" "$WORK/logs/$name.$i.log" \
          | tail -30 >&2
      fi
    fi
  done
  echo "    $name: $count processes, exit codes ${CLUSTER_CODES[*]}," \
       "${CLUSTER_SECONDS}s"
  return $failed
}
# single <name> <devices> <module> [args...]: one plain process (no cluster)
# with <devices> simulated CPU devices; log in $WORK/logs/<name>.log.
single() {
  local name=$1 devices=$2
  shift 2
  XLA_FLAGS="--xla_force_host_platform_device_count=$devices" \
    timeout -k 10 "${PROCESS_TIMEOUT:-900}" python -m "$@" \
    > "$WORK/logs/$name.log" 2>&1 || {
    grep -v "Warning\|warnings.warn" "$WORK/logs/$name.log" | tail -30 >&2
    return 1; }
}
checks() { python -m scripts.multihost_checks "$@"; }

smoke_data
step "$N processes x $D devices; model parallelism $MP (model axis" \
     "$( ((MP > D)) && echo "spans processes" || echo "within a process"))"

# --- 1 -----------------------------------------------------------------------
MESH="{'data': $((ALL / MP)), 'model': $MP}"
step "1. MLM pre-training on $N processes, mesh $MESH (t5x.train, 4 steps)"
PRETRAIN=("${TINY[@]}" --gin_file=gin_configs/runs/pretrain_mlm.gin
  --gin_file=gin_configs/runs/t5x_cpu_tiny.gin "${TASKS[@]}"
  --gin.MIXTURE_OR_TASK_NAME="'smoke_mlm'" --alsologtostderr)
cluster pretrain "$N" t5x.train "${PRETRAIN[@]}" \
  --gin_file=gin_configs/runs/t5x_cpu_model_parallel.gin \
  --gin.MODEL_PARALLELISM="$MP" --gin.MODEL_DIR="'$WORK/pretrain'" \
  || fail "stage 1: multi-process pre-training failed"
CKPT="$WORK/pretrain/checkpoint_4"
grep -q "explicit_mesh_partitioner: mesh $MESH over $ALL devices" \
  "$WORK/logs/pretrain.0.log" || fail "stage 1: no mesh $MESH in the log"
# T5X's data layout: processes holding one row of the mesh share a shard.
SHARDS=$((ALL / (MP > D ? MP : D)))
for ((i = 0; i < N; i++)); do
  want=$((i * D / (MP > D ? MP : D) + 1))
  if (( SHARDS > 1 )); then
    grep -q "Sharding at the examples: $want of $SHARDS" \
      "$WORK/logs/pretrain.$i.log" \
      || fail "stage 1: process $i did not read shard $want of $SHARDS"
  fi
done
echo "    T5X's trainer input: each process logs its shard (1-based) of" \
     "$SHARDS: $(for ((i = 0; i < N; i++)); do grep -o \
     "Sharding at the examples: [0-9]* of [0-9]*" "$WORK/logs/pretrain.$i.log" \
     | sort -u | sed 's/.*: //' | tr '\n' ' '; done)"
[[ -f "$CKPT/state/commit_success.txt" ]] \
  || fail "stage 1: no committed $CKPT"
DIRS=$(cd "$WORK/pretrain" && ls -d checkpoint_* | tr '\n' ' ')
[[ "$DIRS" == "checkpoint_0 checkpoint_4 " ]] \
  || fail "stage 1: checkpoint directories '$DIRS', expected checkpoint_0, checkpoint_4"
EVENTS=$(find "$WORK/pretrain" -name "events.out.tfevents*" | wc -l)
(( EVENTS == 1 )) || fail "stage 1: $EVENTS TensorBoard event files, expected 1"
echo "    $CKPT: written once, stores: $(ls "$CKPT/state" | grep -o \
     'ocdbt.process_[0-9]*' | tr '\n' ' ')"

# --- 2 -----------------------------------------------------------------------
step "2. per-host input shards of smoke_pawsx_train_en (t5x.utils.get_dataset)"
cluster shards "$N" scripts.multihost_checks shards "$WORK/shards" \
  smoke_pawsx_train_en 8 "1,$MP" || fail "stage 2: the shard readers failed"
checks compare_shards "$WORK/shards" "$N" "1,$MP" \
  || fail "stage 2: per-host shards are not a partition of the task"

# --- 3 -----------------------------------------------------------------------
step "3. checkpoints across topologies (1-process pre-training, 2 steps)"
single pretrain_1proc 1 t5x.train "${PRETRAIN[@]}" --gin.TRAIN_STEPS=2 \
  --gin.MODEL_DIR="'$WORK/pretrain_1proc'" \
  || fail "stage 3: 1-process pre-training failed"
CKPT1="$WORK/pretrain_1proc/checkpoint_2"
R="$WORK/restore"
mkdir -p "$R"
checks read "$R/n_read.json" "$CKPT" && checks read "$R/1_read.json" "$CKPT1" \
  || fail "stage 3: plain read of a checkpoint failed"
single restore_1proc 1 scripts.multihost_checks restore 1 \
  "$R/n_in_1.json" "$CKPT" || fail "stage 3: restore in 1 process failed"
cluster restore "$N" scripts.multihost_checks restore "$ALL" \
  "$R/n_in_n.json" "$CKPT" "$R/1_in_n.json" "$CKPT1" \
  || fail "stage 3: restore in $N processes failed"
checks compare_restores "$R/n_read.json" "$R/n_in_1.json" "$R/n_in_n.json" \
  || fail "stage 3: the $N-process checkpoint restores differently"
checks compare_restores "$R/1_read.json" "$R/1_in_n.json" \
  || fail "stage 3: the 1-process checkpoint restores differently in $N"

# --- 4 -----------------------------------------------------------------------
FINETUNE=("${TINY[@]}" --gin_file=gin_configs/runs/finetune_pawsx.gin
  --gin_file=gin_configs/runs/t5x_cpu_tiny.gin "${TASKS[@]}"
  --gin.MIXTURE_OR_TASK_NAME="'smoke_pawsx_train_en'"
  --gin.TRAIN_EVAL_TASK="'smoke_pawsx_qla'"
  --gin.INFER_EVAL_MIXTURE="'smoke_pawsx_zeroshot'"
  --gin.INITIAL_CHECKPOINT_PATH="'$CKPT'" --alsologtostderr)
step "4a. PAWS-X fine-tuning on $N processes, unpacked, with inference eval"
cluster finetune "$N" t5x.train "${FINETUNE[@]}" \
  --gin.MODEL_DIR="'$WORK/finetune'" || fail "stage 4: fine-tuning failed"
FT="$WORK/finetune/checkpoint_4"
[[ -f "$FT/state/commit_success.txt" ]] || fail "stage 4: no committed $FT"
check_metrics "$WORK/finetune" "$WORK/logs/finetune.0.log"
step "4b. PAWS-X fine-tuning on $N processes, packed, mesh" \
     "{'data': 1, 'model': $ALL}"
cluster finetune_packed "$N" t5x.train "${FINETUNE[@]}" --gin.PACK=True \
  --gin_file=gin_configs/runs/t5x_cpu_model_parallel.gin \
  --gin.MODEL_PARALLELISM="$ALL" --gin.train.infer_eval_dataset_cfg=None \
  --gin.MODEL_DIR="'$WORK/finetune_packed'" \
  || fail "stage 4: packed fine-tuning failed"
grep -q "explicit_mesh_partitioner: mesh {'data': 1, 'model': $ALL}" \
  "$WORK/logs/finetune_packed.0.log" \
  || fail "stage 4: packed fine-tuning did not run on a 1 x $ALL mesh"
[[ -f "$WORK/finetune_packed/checkpoint_4/state/commit_success.txt" ]] \
  || fail "stage 4: packed fine-tuning wrote no checkpoint_4"

# --- 5 -----------------------------------------------------------------------
EVAL=("${TINY[@]}" --gin_file=gin_configs/runs/eval_pawsx.gin
  --gin_file=gin_configs/runs/t5x_cpu_tiny.gin "${TASKS[@]}"
  --gin.MIXTURE_OR_TASK_NAME="'smoke_pawsx_zeroshot'"
  --gin.CHECKPOINT_PATH="'$FT'" --alsologtostderr)
step "5a. t5x.eval of $FT on $N processes and on 1"
cluster eval "$N" t5x.eval "${EVAL[@]}" \
  --gin.EVAL_OUTPUT_DIR="'$WORK/eval_n'" || fail "stage 5: t5x.eval failed"
check_metrics "$WORK/eval_n" "$WORK/logs/eval.0.log"
single eval_1proc 1 t5x.eval "${EVAL[@]}" \
  --gin.EVAL_OUTPUT_DIR="'$WORK/eval_1'" || fail "stage 5: 1-process t5x.eval failed"
checks compare_metrics "$WORK/eval_n" "$WORK/eval_1" \
  || fail "stage 5: t5x.eval metrics differ between $N processes and 1"
INFER=("${TINY[@]}" --gin_file=gin_configs/runs/infer_pawsx.gin
  --gin_file=gin_configs/runs/t5x_cpu_tiny.gin "${TASKS[@]}"
  --gin.MIXTURE_OR_TASK_NAME="'smoke_pawsx_qcy'"
  --gin.CHECKPOINT_PATH="'$FT'" --alsologtostderr)
step "5b. t5x.infer of $FT on $N processes and on 1"
cluster infer "$N" t5x.infer "${INFER[@]}" \
  --gin.INFER_OUTPUT_DIR="'$WORK/infer_n'" || fail "stage 5: t5x.infer failed"
single infer_1proc 1 t5x.infer "${INFER[@]}" \
  --gin.INFER_OUTPUT_DIR="'$WORK/infer_1'" || fail "stage 5: 1-process t5x.infer failed"
checks compare_infer "$WORK/infer_n" "$WORK/infer_1" \
  "$WORK/data/xtreme/pawsx/test-qcy.tsv" \
  || fail "stage 5: t5x.infer outputs differ between $N processes and 1"

# --- 6 -----------------------------------------------------------------------
step "6. retrieval eval (eval_tatoeba.gin) from $CKPT on $N processes and on 1"
TATOEBA=("${TINY[@]}" --gin_file=gin_configs/runs/eval_tatoeba.gin
  --gin_file=gin_configs/runs/t5x_cpu_tiny.gin "${TASKS[@]}"
  --gin.MIXTURE_OR_TASK_NAME="'smoke_tatoeba_zeroshot'"
  --gin.CHECKPOINT_PATH="'$CKPT'" --alsologtostderr)
cluster tatoeba "$N" t5x.eval "${TATOEBA[@]}" \
  --gin.EVAL_OUTPUT_DIR="'$WORK/tatoeba_n'" || fail "stage 6: retrieval eval failed"
check_metrics "$WORK/tatoeba_n" "$WORK/logs/tatoeba.0.log"
# Retrieval accuracies vary with the embeddings (PAWS-X's above are one
# class everywhere): the sharper check that N processes evaluate as 1.
single tatoeba_1proc 1 t5x.eval "${TATOEBA[@]}" \
  --gin.EVAL_OUTPUT_DIR="'$WORK/tatoeba_1'" \
  || fail "stage 6: 1-process retrieval eval failed"
checks compare_metrics "$WORK/tatoeba_n" "$WORK/tatoeba_1" \
  || fail "stage 6: retrieval metrics differ between $N processes and 1"

# --- 7 -----------------------------------------------------------------------
LAST=$((N - 1))
step "7. process $LAST reads a damaged train file: every process must stop"
cp -r "$WORK/data" "$WORK/data_damaged"
printf 'a broken\trow\tmaybe\n' >> "$WORK/data_damaged/xtreme/pawsx/train-en.tsv"
declare "HOST_ENV_$LAST=REMBERT_SMOKE_DATA=$WORK/data_damaged"
if EXPECT_FAILURE=1 PROCESS_TIMEOUT=300 HEARTBEAT_TIMEOUT=10 cluster failing "$N" t5x.train \
    "${FINETUNE[@]}" --gin.MODEL_DIR="'$WORK/failing'"; then
  fail "stage 7: a run with a damaged file on process $LAST succeeded"
fi
unset "HOST_ENV_$LAST"
for ((i = 0; i < N; i++)); do
  [[ "${CLUSTER_CODES[$i]}" != 0 && "${CLUSTER_CODES[$i]}" != 124 \
     && "${CLUSTER_CODES[$i]}" != 137 ]] \
    || fail "stage 7: process $i exited ${CLUSTER_CODES[$i]} (124/137: hung)"
done
grep -q "data_damaged/xtreme/pawsx/train-en.tsv" "$WORK/logs/failing.$LAST.log" \
  || fail "stage 7: process $LAST did not report the damaged file"
echo "    process $LAST: $(grep -m1 -o "ValueError: .*train-en.tsv[^']*" \
     "$WORK/logs/failing.$LAST.log" | cut -c1-150)"
for ((i = 0; i < LAST; i++)); do
  echo "    process $i: $(grep -m1 -o \
    "Terminating process because.*\|detected fatal errors.*\|DEADLINE_EXCEEDED.*" \
    "$WORK/logs/failing.$i.log" | cut -c1-120)"
done

# --- 8 -----------------------------------------------------------------------
if [[ "$SKIP_PYTEST" == 1 ]]; then
  step "8. split-batch exactness matrix: skipped (SKIP_PYTEST=1)"
else
  step "8. split-batch exactness matrix (MULTIHOST_CASES=all pytest tests/multihost_test.py)"
  MULTIHOST_CASES=all timeout -k 10 1500 python -m pytest \
    tests/multihost_test.py -q -p no:cacheprovider \
    > "$WORK/logs/multihost_test.log" 2>&1 || {
    tail -30 "$WORK/logs/multihost_test.log" >&2
    fail "stage 8: tests/multihost_test.py failed"; }
  echo "    $(tail -1 "$WORK/logs/multihost_test.log")"
fi
step "done: T5X $(python -c 'import t5x, os; print(os.path.dirname(t5x.__file__))' 2>/dev/null)"
