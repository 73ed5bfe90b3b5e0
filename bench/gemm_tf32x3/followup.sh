#!/usr/bin/env bash
# What session 10 built for issue 23 without a GPU to run it on, in one background job on the GPU machine
# (KernelBench checkout in kernelbench/KernelBench and the nvidia-cutlass wheel in .whl/, both carried):
#   1. level 1's 17 matrix-product problems again (suite.sh level1: the acceptance's own bench), now with
#      the SM80 3xTF32 point with K in slices for few output tiles and a long K (level1_6, 0.498x eager on
#      an H100), the padded sm90 3xTF32 path for K or N not a multiple of 4 (level1_8), the ping-pong point
#      for short K (level1_7, 9), swizzled tile orders, and the exported ModelNew's leaner forward (level1_12);
#   2. half precision: tasks/half/matmul_bf16 (bf16 on 16-bit tensor cores against cuBLAS's bf16 GEMM), and
#      KernelBench's level1_1, 2 and 17 at --dtype bf16 and f16 (a plain product, each operand read as given);
#   3. the GPU tests of KernelBench tasks and of the new GEMM points (KbGpu.*, CudaBuild.*), after the benches
#      so that their timings share the machine with nothing.
#   scripts/gpu_bg.sh start OUT 560 bench/gemm_tf32x3/followup.sh     then: scripts/gpu_bg.sh wait OUT 570
# KFAB_FOLLOWUP="level1 half tests" (the default) picks the parts.
set -uo pipefail
out=${1:-${KFAB_BG_DIR:?usage: bench/gemm_tf32x3/followup.sh OUTDIR (or under scripts/gpu_bg.sh)}}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
parts=" ${KFAB_FOLLOWUP:-level1 half tests} "
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,clocks.max.sm --format=csv >"$out/gpus.txt" 2>&1
KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$out/machine" || exit 1
[ -d /tmp/site/cutlass_library/source/include ] && export KFAB_CUTLASS_INCLUDE=/tmp/site/cutlass_library/source/include
kb=${KFAB_KB_DIR:-kernelbench/KernelBench}
if [[ $parts == *" level1 "* ]]; then
  KFAB_PREBUILT=1 bench/gemm_tf32x3/suite.sh "$out/suite-level1" level1 3
  grep -h "^level1:" "$out/suite-level1/table.md" | tee "$out/summary.txt"
fi
if [[ $parts == *" half "* ]]; then
  build-gpu/kfab optimize tasks/half/matmul_bf16 --target cuda --points 4 --fresh --json --out "$out/half_native" >"$out/half_native.json" 2>"$out/half_native.err"
  echo "tasks/half/matmul_bf16 exit $?: $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j.get("disposition"), j.get("detail", "")[:300])' "$out/half_native.json" 2>&1)" | tee -a "$out/summary.txt"
  half=build-gpu/followup_half && rm -rf "$half" && mkdir -p "$half"
  for n in 1 2 17; do for f in "$kb"/level1/${n}_*.py; do ln -s "$PWD/$f" "$half/level1_$(basename "$f")"; done; done
  for dt in bf16 f16; do
    build-gpu/kfab bench "$half" --target cuda --points 3 --fresh --dtype "$dt" --out "$out/half_$dt" 2>"$out/half_$dt.err"
    echo "level 1 at --dtype $dt: bench exit $?" | tee -a "$out/summary.txt"
    python3 bench/matmul_table.py "$out/half_$dt/bench.json" --kernelbench "$(cat "$kb/COMMIT" 2>/dev/null)" >"$out/half_$dt.md"
    grep -h "^level1" "$out/half_$dt.md" | tee -a "$out/summary.txt"
  done
fi
if [[ $parts == *" tests "* ]]; then
  (cd build-gpu && KFAB_BUILD_EVERY_TC_POINT=1 ctest -R 'KbGpu|CudaBuild' --output-on-failure -j 4 >"$out/ctest.log" 2>&1)
  echo "tests exit $?" | tee -a "$out/summary.txt"
  grep -E "tests passed|\(Failed\)|\*\*\*" "$out/ctest.log" | tail -12 >>"$out/summary.txt"
fi
