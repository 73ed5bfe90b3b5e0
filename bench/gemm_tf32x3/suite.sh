#!/usr/bin/env bash
# Issue 23's acceptance run, on the GPU machine: the built-in tuner over KernelBench's matrix-product
# problems at their own sizes, unmodified (KernelBench checkout in kernelbench/KernelBench, git-ignored and
# carried): the 37 level-2 GEMM/Matmul/BMM problems, level 1's matrix products (1-4, 6-18), or both (all),
# in one bench spread over every GPU of the machine (kfab bench's default --devices); kfab bench
# runs each through its tuner, the winner's final check on 5 seeds and the held-out shapes, against torch
# eager and torch.compile, and its exported ModelNew end to end; then bench/matmul_table.py writes the
# per-problem table (time, TFLOP/s, precision, x eager, x compile, end to end) with the geometric means.
#   bench/gemm_tf32x3/suite.sh OUTDIR [level2|level1|all] [POINTS] [extra kfab bench arguments...]
# KFAB_LEVEL1="37 41 ..." takes those level-1 problems instead of the matrix products (issue 25's).
# A run longer than one device call goes through scripts/gpu_bg.sh; `kfab bench --resume OUTDIR/bench`
# goes on from where an interrupted one stopped.
set -uo pipefail
out=${1:?usage: bench/gemm_tf32x3/suite.sh OUTDIR [level2|level1] [POINTS] [ARGS...]}
level=${2:-level2}
points=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
case "$level" in level1|level2|all) ;; *) echo "suite.sh: level1, level2 or all, not $level" >&2; exit 2 ;; esac
mkdir -p "$out"
# KFAB_PREBUILT=1: build-gpu/kfab is built already (another of these scripts running beside this one built it)
[ -n "${KFAB_PREBUILT:-}" ] || KFAB_GPU_TARGETS="kfab kfab-runner" KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$out/machine" || exit 1
# gpu_machine.sh unpacked CUTLASS's headers there (its own export does not reach this shell)
[ -d /tmp/site/cutlass_library/source/include ] && export KFAB_CUTLASS_INCLUDE=/tmp/site/cutlass_library/source/include
kb=${KFAB_KB_DIR:-kernelbench/KernelBench}
suite=build-gpu/matmul_$level
rm -rf "$suite" && mkdir -p "$suite"
if [ "$level" != level1 ]; then
  for f in "$kb"/level2/*.py; do
    case "$(basename "$f")" in *Gemm*|*Matmul*|*BMM*) ln -s "$PWD/$f" "$suite/level2_$(basename "$f")" ;; esac
  done
fi
if [ "$level" != level2 ]; then
  for n in ${KFAB_LEVEL1:-1 2 3 4 6 7 8 9 10 11 12 13 14 15 16 17 18}; do
    for f in "$kb"/level1/${n}_*.py; do ln -s "$PWD/$f" "$suite/level1_$(basename "$f")"; done
  done
fi
echo "$(ls "$suite" | wc -l) problems in $suite" | tee "$out/summary.txt"
if [ -f "$out/bench/bench.json" ]; then  # a bench stopped in this folder: go on with its own settings
  build-gpu/kfab bench --resume "$out/bench" 2>>"$out/bench.err"
else
  build-gpu/kfab bench "$suite" --target cuda --points "$points" --out "$out/bench" "$@" 2>"$out/bench.err"
fi
echo "bench exit $?" | tee -a "$out/summary.txt"
python3 bench/matmul_table.py "$out/bench/bench.json" --kernelbench "$(cat "$kb/COMMIT" 2>/dev/null)" | tee "$out/table.md"
python3 bench/points_table.py "$out/bench/bench.json" >"$out/points.md"  # every point each search measured
