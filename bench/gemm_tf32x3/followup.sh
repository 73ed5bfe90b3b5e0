#!/usr/bin/env bash
# What session 10 built for issue 23 without a GPU to run it on, in one background job on the GPU machine
# (KernelBench checkout in kernelbench/KernelBench and the nvidia-cutlass wheel in .whl/, both carried):
#   1. level1_6 (256 x 256 x 524288: few tiles, a long K), where the SM80 3xTF32 point with K in slices is
#      now the first fp32-accurate point (it was 0.498x eager on an H100), and level1_8 and level1_3;
#   2. half precision: tasks/half/matmul_bf16 (bf16 on 16-bit tensor cores against cuBLAS's bf16 GEMM), and
#      KernelBench's level1_1, 2 and 17 at --dtype bf16 and f16 (a plain product, each operand read as given);
#   3. the GPU tests of KernelBench tasks (KbGpu.*: the fold's test now judges a failure by the float64 run).
#   scripts/gpu_bg.sh start OUT 560 bench/gemm_tf32x3/followup.sh     then: scripts/gpu_bg.sh wait OUT 570
set -uo pipefail
out=${1:-${KFAB_BG_DIR:?usage: bench/gemm_tf32x3/followup.sh OUTDIR (or under scripts/gpu_bg.sh)}}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,clocks.max.sm --format=csv >"$out/gpus.txt" 2>&1
KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$out/machine" || exit 1
[ -d /tmp/site/cutlass_library/source/include ] && export KFAB_CUTLASS_INCLUDE=/tmp/site/cutlass_library/source/include
kb=${KFAB_KB_DIR:-kernelbench/KernelBench}
suite=build-gpu/followup && rm -rf "$suite" && mkdir -p "$suite"
for n in 3 6 8; do for f in "$kb"/level1/${n}_*.py; do ln -s "$PWD/$f" "$suite/level1_$(basename "$f")"; done; done
build-gpu/kfab bench "$suite" --target cuda --points 3 --fresh --out "$out/long_k" 2>"$out/long_k.err"
echo "long-K bench exit $?" | tee "$out/summary.txt"
python3 bench/matmul_table.py "$out/long_k/bench.json" --kernelbench "$(cat "$kb/COMMIT" 2>/dev/null)" >"$out/long_k.md"
build-gpu/kfab optimize tasks/half/matmul_bf16 --target cuda --points 4 --fresh --json --out "$out/half_native" >"$out/half_native.json" 2>"$out/half_native.err"
echo "tasks/half/matmul_bf16 exit $?" | tee -a "$out/summary.txt"
half=build-gpu/followup_half && rm -rf "$half" && mkdir -p "$half"
for n in 1 2 17; do for f in "$kb"/level1/${n}_*.py; do ln -s "$PWD/$f" "$half/level1_$(basename "$f")"; done; done
for dt in bf16 f16; do
  build-gpu/kfab bench "$half" --target cuda --points 3 --fresh --dtype "$dt" --out "$out/half_$dt" 2>"$out/half_$dt.err"
  echo "level 1 at --dtype $dt: bench exit $?" | tee -a "$out/summary.txt"
  python3 bench/matmul_table.py "$out/half_$dt/bench.json" --kernelbench "$(cat "$kb/COMMIT" 2>/dev/null)" >"$out/half_$dt.md"
done
(cd build-gpu && ctest -R 'KbGpu|HalfPrecision|AFewTileProduct' --output-on-failure -j 4 >"$out/ctest.log" 2>&1)
echo "tests exit $?" | tee -a "$out/summary.txt"
tail -5 "$out/ctest.log" >>"$out/summary.txt"
