#!/usr/bin/env bash
# Session 12's run for issue 23, on the GPU machine, in one background job (KernelBench checkout in
# kernelbench/KernelBench and the nvidia-cutlass wheel in .whl/, both carried):
#   1. probe: the new tf32+bf16 point (one TF32 product and one bf16 product of the cross terms) against the
#      sm90 3xTF32 point, as the tuner generates them (bench/gemm_tf32x3/probe/*.cu, written by
#      scripts/gen_dump.cpp), through `kfab eval` (5 seeds, KernelBench's tolerance) on level1_1, level1_3 and
#      level2_76 at their own sizes, one candidate per GPU at a time;
#   2. level 1's 17 matrix-product problems (suite.sh level1, the acceptance's own bench);
#   3. the 37 level-2 GEMM/Matmul/BMM problems (suite.sh level2), now with the float64 judge (kfab's default,
#      --judge float64) where torch eager's own answer is outside the tolerance (level2_14, 18);
#   4. the GPU test that met eager's rounding in session 11 (KbGpu.TheTunerFoldsARowSumOfTheProductAndItPasses).
#   scripts/gpu_bg.sh start OUT 560 bench/gemm_tf32x3/mixed.sh     then: scripts/gpu_bg.sh wait OUT 570
# KFAB_MIXED="probe level1 level2 tests" (the default) picks the parts.
set -uo pipefail
shopt -s nullglob  # no probe candidates here (they are written by scripts/gen_dump.cpp, not committed): no probe
out=${1:-${KFAB_BG_DIR:?usage: bench/gemm_tf32x3/mixed.sh OUTDIR (or under scripts/gpu_bg.sh)}}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
parts=" ${KFAB_MIXED:-probe level1 level2 tests} "
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,clocks.max.sm --format=csv >"$out/gpus.txt" 2>&1
KFAB_GPU_TARGETS="kfab kfab-runner" KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$out/machine" || exit 1
[ -d /tmp/site/cutlass_library/source/include ] && export KFAB_CUTLASS_INCLUDE=/tmp/site/cutlass_library/source/include
kb=${KFAB_KB_DIR:-kernelbench/KernelBench}
say() { echo "$*" | tee -a "$out/summary.txt"; }

if [[ $parts == *" probe "* ]]; then
  # NAME TASK: one line from the candidate's verdict
  verdict() {
    python3 - "$out/probe/$1.json" "$1" <<'PY'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[2], "no verdict:", e); sys.exit(0)
sh = v.get("shapes") or [{}]
t = (sh[0].get("time_ms") or {}).get("median")
print(f"{sys.argv[2]}: {v.get('disposition')} speedup {v.get('speedup')} ms {t} tolerance_used {[s.get('tolerance_used') for s in sh]} | {str(v.get('detail'))[:400]}")
PY
  }
  mkdir -p "$out/probe"
  pids=() gpu=0
  for c in bench/gemm_tf32x3/probe/*.cu; do
    name=$(basename "$c" .cu)
    IFS=- read -r lv pr _ <<<"$name"  # l1-3-mixed: level1's problem 3
    task=$(ls "$kb/level${lv#l}/${pr}"_*.py 2>/dev/null | head -1)
    [ -n "$task" ] || { say "probe $name: no task"; continue; }
    CUDA_VISIBLE_DEVICES=$gpu build-gpu/kfab eval "$task" "$c" --target cuda --json --no-compile >"$out/probe/$name.json" 2>"$out/probe/$name.err" &
    pids+=($!)
    gpu=$(( (gpu + 1) % 4 ))
    if [ ${#pids[@]} -eq 4 ]; then wait "${pids[@]}"; pids=(); fi
  done
  wait "${pids[@]}" 2>/dev/null
  for c in bench/gemm_tf32x3/probe/*.cu; do say "$(verdict "$(basename "$c" .cu)")"; done
fi
for level in level1 level2; do
  [[ $parts == *" $level "* ]] || continue
  KFAB_PREBUILT=1 bench/gemm_tf32x3/suite.sh "$out/suite-$level" "$level" 3
  grep -h "^$level:" "$out/suite-$level/table.md" | tee -a "$out/summary.txt"
done
if [[ $parts == *" tests "* ]]; then
  cmake --build build-gpu -j "$(nproc)" --target kfab_gpu_tests >>"$out/machine/build.log" 2>&1
  (cd build-gpu && ctest -R 'KbGpu.TheTunerFoldsARowSumOfTheProductAndItPasses' --output-on-failure >"$out/ctest.log" 2>&1)
  say "tests exit $?"
  grep -E "tests passed|\(Failed\)|\*\*\*" "$out/ctest.log" | tail -12 >>"$out/summary.txt"
fi
