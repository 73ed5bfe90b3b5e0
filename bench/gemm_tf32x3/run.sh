#!/usr/bin/env bash
# Issue 23's first probe, on the GPU machine: CUTLASS's 3xTF32 GEMM (hand-written candidates in this folder)
# against torch eager and torch.compile on KernelBench's level2_76_Gemm_Add_ReLU at its own size, through
# `kfab eval` (5 seeds, KernelBench's tolerance). CUTLASS's headers come from the nvidia-cutlass wheel in .whl/
# (carried), which scripts/gpu_machine.sh installs under /tmp/site.
#   bench/gemm_tf32x3/run.sh OUTDIR
set -uo pipefail
out=${1:?usage: bench/gemm_tf32x3/run.sh OUTDIR}
mkdir -p "$out"
KFAB_GPU_TARGETS="kfab kfab-runner" KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$out/machine" || exit 1
# gpu_machine.sh unpacked CUTLASS's headers there (its own export does not reach this shell)
[ -d /tmp/site/cutlass_library/source/include ] && export KFAB_CUTLASS_INCLUDE=/tmp/site/cutlass_library/source/include
task=kernelbench/suite/level2_76_Gemm_Add_ReLU.py
# the candidate at each tile it measured: threadblock, warp, stages
src=bench/gemm_tf32x3/level2_76_cutlass_3xtf32.cu
for tile in "128, 64, 16|64, 32, 16|4" "128, 128, 16|64, 64, 16|3" "256, 128, 16|64, 64, 16|3"; do
  IFS='|' read -r tb warp stages <<<"$tile"
  name=level2_76_cutlass_3xtf32_tb${tb//, /x}_w${warp//, /x}_s$stages
  f=$out/$name.cu
  sed -e "s/GemmShape<128, 64, 16>/GemmShape<$tb>/" -e "s/GemmShape<64, 32, 16>/GemmShape<$warp>/" \
      -e "s/GemmIdentityThreadblockSwizzle<>, 4,/GemmIdentityThreadblockSwizzle<>, $stages,/" "$src" >"$f"
  build-gpu/kfab eval "$task" "$f" --target cuda --json >"$out/$name.json" 2>"$out/$name.err"
  python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[2], "no verdict:", e); sys.exit(0)
print(f"{sys.argv[2]}: {v.get('disposition')} {v.get('speedup')} | {v.get('detail')}")
PY
done
