#!/usr/bin/env bash
# Issue 23's probes, on the GPU machine: hand-written CUTLASS candidates in this folder against torch eager
# and torch.compile on KernelBench's level2_76_Gemm_Add_ReLU at its own size, through `kfab eval` (5 seeds,
# KernelBench's tolerance), side by side in one run:
#   - level2_76_cutlass_3xtf32.cu: CUTLASS 2's 3xTF32 GEMM on the SM80 mma.sync path (tile 128x64x16, 4 stages);
#   - level2_76_sm90_3tf32.cu: three TF32 products from CUTLASS 3's sm90 GEMM (TMA, wgmma, warp-specialised),
#     the operands split here, at the tiles, clusters and schedules listed below.
# CUTLASS's headers come from the nvidia-cutlass wheel in .whl/ (carried), which scripts/gpu_machine.sh
# installs under /tmp/site.
#   bench/gemm_tf32x3/run.sh OUTDIR [SM90 VARIANTS...]   (a variant: "TM TN TK CM coop|pingpong [x1|kS]", x1: one TF32
#   product, kS: the big x big product in S slices of K added in fp32)
set -uo pipefail
out=${1:?usage: bench/gemm_tf32x3/run.sh OUTDIR [VARIANTS...]}
shift
variants=("$@")
[ ${#variants[@]} -eq 0 ] && variants=("128 128 32 1 coop" "128 256 32 1 coop" "128 128 32 2 coop" "64 128 32 1 pingpong" "64 256 32 1 pingpong" "128 256 32 1 coop x1")
mkdir -p "$out"
# KFAB_PREBUILT=1: build-gpu/kfab is built already (another of these scripts running beside this one built it)
[ -n "${KFAB_PREBUILT:-}" ] || KFAB_GPU_TARGETS="kfab kfab-runner" KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$out/machine" || exit 1
# gpu_machine.sh unpacked CUTLASS's headers there (its own export does not reach this shell)
[ -d /tmp/site/cutlass_library/source/include ] && export KFAB_CUTLASS_INCLUDE=/tmp/site/cutlass_library/source/include
task=kernelbench/suite/level2_76_Gemm_Add_ReLU.py
here=bench/gemm_tf32x3

verdict() {  # NAME: one line from the candidate's verdict
  python3 - "$out/$1.json" "$1" <<'PY'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[2], "no verdict:", e); sys.exit(0)
errs = [s.get("max_abs_err") for s in v.get("shapes", [])]
print(f"{sys.argv[2]}: {v.get('disposition')} {v.get('speedup')} | max_abs_err {errs} | {v.get('detail')}")
PY
}

cp "$here/level2_76_cutlass_3xtf32.cu" "$out/sm80_tb128x64_s4.cu"
build-gpu/kfab eval "$task" "$out/sm80_tb128x64_s4.cu" --target cuda --json >"$out/sm80_tb128x64_s4.json" 2>"$out/sm80_tb128x64_s4.err"
verdict sm80_tb128x64_s4
for v in "${variants[@]}"; do
  read -r tm tn tk cm sched one <<<"$v"
  name=sm90_${tm}x${tn}x${tk}_c${cm}_$sched${one:+_$one}
  if [ "$sched" = coop ]; then
    ks=cutlass::gemm::KernelTmaWarpSpecializedCooperative es=cutlass::epilogue::TmaWarpSpecializedCooperative
  else
    ks=cutlass::gemm::KernelTmaWarpSpecializedPingpong es=cutlass::epilogue::TmaWarpSpecialized
  fi
  { printf '#define KFAB_TM %s\n#define KFAB_TN %s\n#define KFAB_TK %s\n#define KFAB_CM %s\n#define KFAB_SCHED %s\n#define KFAB_ESCHED %s\n' \
      "$tm" "$tn" "$tk" "$cm" "$ks" "$es"
    case "$one" in x1) echo '#define KFAB_ONE_PRODUCT 1' ;; k[0-9]*) echo "#define KFAB_KSPLIT ${one#k}" ;; esac
    cat "$here/level2_76_sm90_3tf32.cu"; } >"$out/$name.cu"
  build-gpu/kfab eval "$task" "$out/$name.cu" --target cuda --json >"$out/$name.json" 2>"$out/$name.err"
  verdict "$name"
done
