#!/usr/bin/env bash
# Issue 23 on the GPU machine: the built-in tuner with its 3xTF32 points (CUTLASS's headers from the
# nvidia-cutlass wheel in .whl/, carried) on KernelBench GEMM problems at their own sizes, through kfab bench
# (the winner's verdict against torch eager and torch.compile, and the exported ModelNew end to end).
#   bench/gemm_tf32x3/tune.sh OUTDIR [FILTER] [POINTS]
set -uo pipefail
out=${1:?usage: bench/gemm_tf32x3/tune.sh OUTDIR [FILTER] [POINTS]}
filter=${2:-level2_76|level2_86}
points=${3:-3}
mkdir -p "$out"
KFAB_GPU_TARGETS="kfab kfab-runner" KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$out/machine" || exit 1
# gpu_machine.sh unpacked CUTLASS's headers there (its own export does not reach this shell)
[ -d /tmp/site/cutlass_library/source/include ] && export KFAB_CUTLASS_INCLUDE=/tmp/site/cutlass_library/source/include
build-gpu/kfab bench kernelbench/suite --target cuda --points "$points" --fresh --filter "$filter" --out "$out/bench" 2>"$out/bench.err"
echo "bench exit $?"
python3 - "$out/bench/bench.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
for t in b.get("tasks", []):
    steps = (t.get("report") or {}).get("steps", [])
    tried = "; ".join(f"{s.get('disposition')} {s.get('detail', '')[:90]}" for s in steps)
    print(f"{t.get('path', '').split('/')[-1]}: {t.get('disposition')} {t.get('speedup')} | {t.get('detail')}")
    print(f"   tried: {tried}")
PY
