#!/usr/bin/env bash
# `kfab bench` on the GPU machine, outlasting one device call (10 minutes): `start` builds
# (scripts/gpu_machine.sh with no stage) and starts the bench in a process session of its own, so the
# call may return while it goes on; `wait` waits for it up to a deadline and copies what there is so
# far into OUTDIR (bench.json, tasks.csv, scores.csv and report.html are rewritten after every task,
# and bench.log holds its progress lines).
#
#   scripts/gpu_bench_bg.sh start OUTDIR SECONDS [SUITE [kfab bench flags...]]   (default: tasks/kb --target cuda)
#   scripts/gpu_bench_bg.sh wait OUTDIR SECONDS
set -uo pipefail
cd "$(dirname "$0")/.."
work=/tmp/kfab_bench_bg
verb=${1:?usage: scripts/gpu_bench_bg.sh start|wait OUTDIR SECONDS [SUITE [flags...]]}
out=${2:?OUTDIR}
secs=${3:?SECONDS}
shift 3
deadline=$(( $(date +%s) + secs ))
mkdir -p "$out"

if [ "$verb" = start ]; then
  [ $# -eq 0 ] && set -- tasks/kb --target cuda
  KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$work/build" >/dev/null 2>&1
  tail -4 "$work/build/summary.txt"
  [ -x build-gpu/kfab ] || { echo "build failed"; cp "$work/build/build.log" "$out/" 2>/dev/null; exit 1; }
  rm -rf "$work/bench" "$work/done" "$work/bench.log"
  export KFAB_CACHE_DIR=$PWD/build-gpu/cache KFAB_DATA_DIR=$PWD/build-gpu/data
  setsid bash -c 'build-gpu/kfab bench "$@" --out "'"$work"'/bench" >"'"$work"'/bench.out" 2>"'"$work"'/bench.log"
    echo "exit $?" >"'"$work"'/done"' bash "$@" </dev/null >/dev/null 2>&1 &
elif [ "$verb" = wait ] && [ ! -f "$work/bench.log" ]; then
  echo "nothing to wait for: no bench was started on this machine (a fresh machine after the last one went back?)"
  exit 3
elif [ "$verb" != wait ]; then
  echo "usage: scripts/gpu_bench_bg.sh start|wait OUTDIR SECONDS [SUITE [flags...]]" >&2
  exit 2
fi

while [ ! -f "$work/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
cp "$work"/bench/{bench.json,tasks.csv,scores.csv,report.html} "$work/bench.log" "$work/bench.out" "$out/" 2>/dev/null
grep -v '^  ' "$work/bench.log" | tail -40
[ -f "$work/done" ] && { echo "bench done: $(cat "$work/done")"; cat "$work/bench.out"; } || echo "still running"
