#!/usr/bin/env bash
# Built-in tuner runs on the GPU machine that outlast one device call (10 minutes): `start` builds
# (scripts/gpu_machine.sh with no stage) and tunes the tasks one after another in a process session
# of their own, so the call may return while they go on; `wait` waits for them up to a deadline and
# copies what there is so far into OUTDIR (tune.jsonl, tune.err, progress.log and the table with
# every parameter point). Tasks run one at a time: two tuners at once would time each other.
#
#   scripts/gpu_tune_bg.sh start OUTDIR SECONDS [TASK...] build, start, then wait as below (no TASK:
#                                                         every bundled task with a CUDA template)
#   scripts/gpu_tune_bg.sh wait OUTDIR SECONDS            wait at most SECONDS, then copy
#
# KFAB_TUNE_ARGS is passed to every `kfab optimize` (default: --fresh).
set -uo pipefail
cd "$(dirname "$0")/.."
work=/tmp/kfab_tune_bg
verb=${1:?usage: scripts/gpu_tune_bg.sh start|wait OUTDIR SECONDS [TASK...]}
out=${2:?OUTDIR}
secs=${3:?SECONDS}
shift 3
deadline=$(( $(date +%s) + secs ))
mkdir -p "$out"

if [ "$verb" = start ]; then
  if [ $# -eq 0 ]; then
    set -- tasks/core/{softmax,log_softmax,rms_norm,layer_norm,gelu,scale_shift_gelu,cross_entropy,cumsum,transpose,sum_dim1,group_norm} \
      tasks/kb/rms_norm.py tasks/kb/l1_{relu,gelu_tanh,mish,softmax,log_softmax,layer_norm,amax_dim,cross_entropy,mse_loss}.py \
      tasks/kb/l1_{huber_loss,kl_div,cumsum,permute,sum_dim,group_norm}.py \
      tasks/core/{matmul,matmul_bias_relu} tasks/kb/{l1_matmul,l2_linear_gelu_scale}.py
  fi
  KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$work/build" >/dev/null 2>&1
  tail -4 "$work/build/summary.txt"
  [ -x build-gpu/kfab ] || { echo "build failed"; cp "$work/build/build.log" "$out/" 2>/dev/null; exit 1; }
  rm -f "$work/done" "$work/tune.jsonl" "$work/tune.err" "$work/progress.log"
  export KFAB_CACHE_DIR=$PWD/build-gpu/cache KFAB_DATA_DIR=$PWD/build-gpu/data
  setsid bash -c '
    for t in "$@"; do
      n=$(basename "$t" .py); s=$(date +%s)
      timeout 900 build-gpu/kfab optimize "$t" --target cuda --json ${KFAB_TUNE_ARGS:---fresh} --out "'"$work"'/runs/$n" \
        >>"'"$work"'/tune.jsonl" 2>>"'"$work"'/tune.err"
      echo "$t: exit $? in $(( $(date +%s) - s )) s" >>"'"$work"'/progress.log"
    done
    touch "'"$work"'/done"' bash "$@" </dev/null >/dev/null 2>&1 &
elif [ "$verb" = wait ] && [ ! -f "$work/progress.log" ] && [ ! -f "$work/tune.err" ]; then
  echo "nothing to wait for: no tuner was started on this machine (a fresh machine after the last one went back?)"
  exit 3
elif [ "$verb" != wait ]; then
  echo "usage: scripts/gpu_tune_bg.sh start|wait OUTDIR SECONDS [TASK...]" >&2
  exit 2
fi

while [ ! -f "$work/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
cp "$work/tune.jsonl" "$work/tune.err" "$work/progress.log" "$out/" 2>/dev/null
cat "$work/progress.log" 2>/dev/null
[ -f "$work/done" ] && echo "all tasks done" || echo "still running"
python3 bench/tune_table.py "$work/tune.jsonl" --points 2>&1 | tee "$out/table.txt"
