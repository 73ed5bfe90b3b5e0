#!/usr/bin/env bash
# Issue 23's acceptance on the GPU machine, as one background job: every target built once, KernelBench's
# 54 matrix-product problems at their own sizes with torch.compile timed (suite.sh all, the grid's first
# 3 points, spread over every GPU), then the GPU test tier and the conformance suite (gpu_machine.sh's
# tests stage with KFAB_GPU_QUICK=1), after the bench so that its timings share the machine with nothing.
#   scripts/gpu_bg.sh start /tmp/o 540 bench/gemm_tf32x3/acceptance.sh     (OUTDIR: gpu_bg.sh's folder)
#   scripts/gpu_bg.sh wait /tmp/o 540                                       (each later device call)
# KFAB_ACCEPT_LEVEL=level2 (or level1) runs one level's problems only, "level2 level1" one bench after the other
# (OUTDIR/suite-level2, OUTDIR/suite-level1): the 54 in one bench with torch.compile timed may not fit one
# session's device time (without it they took 1143 s on 4 H200s), and a level that finished is a table kept.
set -uo pipefail
out=${1:-${KFAB_BG_DIR:?usage: bench/gemm_tf32x3/acceptance.sh OUTDIR (or under scripts/gpu_bg.sh)}}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,clocks.max.sm --format=csv >"$out/gpus.txt" 2>&1
# every target (the tests' programs too), once
KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$out/machine" || exit 1
levels=${KFAB_ACCEPT_LEVEL:-all}
for level in $levels; do
  dir=$out/suite; [ "$levels" = "$level" ] || dir=$out/suite-$level
  KFAB_PREBUILT=1 bench/gemm_tf32x3/suite.sh "$dir" "$level" 3
done
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem --format=csv >>"$out/gpus.txt" 2>&1
KFAB_GPU_QUICK=1 KFAB_GPU_STAGES=tests scripts/gpu_machine.sh "$out/tests"
