#!/usr/bin/env bash
# A few KernelBench problems through `kfab bench` on the GPU machine, with every point the tuner measured (its
# time, share of the copy bandwidth and speedup; bench/points_table.py) in points.md beside the table: for
# probes between the acceptance runs.
#
#   scripts/kb_spot.sh OUTDIR POINTS PROBLEM... [-- kfab bench arguments...]
#
# PROBLEM: level1/23, level2/76 (the file whose name starts with that number, in KFAB_KB_DIR, default
# kernelbench/KernelBench). build-gpu/kfab must be built (scripts/gpu_machine.sh); CUTLASS's headers are taken
# from /tmp/site where gpu_machine.sh unpacked them.
set -uo pipefail
out=${1:?usage: scripts/kb_spot.sh OUTDIR POINTS PROBLEM... [-- ARGS...]}
points=${2:?POINTS}
shift 2
kb=${KFAB_KB_DIR:-kernelbench/KernelBench}
suite=$out/suite
mkdir -p "$suite"
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  level=${1%%/*} num=${1##*/}
  found=0
  for f in "$kb/$level/${num}"_*.py; do
    [ -f "$f" ] && ln -sf "$PWD/$f" "$suite/${level}_$(basename "$f")" && found=1
  done
  [ $found = 1 ] || echo "kb_spot.sh: no $kb/$level/${num}_*.py" >&2
  shift
done
[ "${1:-}" = "--" ] && shift
[ -d /tmp/site/cutlass_library/source/include ] && export KFAB_CUTLASS_INCLUDE=/tmp/site/cutlass_library/source/include
build-gpu/kfab bench "$suite" --target cuda --points "$points" --out "$out/bench" "$@" 2>"$out/bench.err"
echo "bench exit $?" | tee "$out/summary.txt"
python3 bench/matmul_table.py "$out/bench/bench.json" --kernelbench "$(cat "$kb/COMMIT" 2>/dev/null)" | tee "$out/table.md"
python3 bench/points_table.py "$out/bench/bench.json" >"$out/points.md"
# KFAB_SPOT_PROFILE=1: each winner once more under ncu (kfab eval --profile, the tuning shape, one seed): its
# DRAM and SM throughput, occupancy, registers and top stall reasons, in profile.txt.
if [ "${KFAB_SPOT_PROFILE:-0}" = 1 ]; then
  for f in "$suite"/*.py; do
    name=$(basename "$f" .py)
    for best in "$out/bench/runs/$name"*/best.cu; do
      [ -f "$best" ] || continue
      echo "== $name" >>"$out/profile.txt"
      build-gpu/kfab eval "$f" "$best" --target cuda --profile --no-heldout --seeds 1 --no-compile --no-end-to-end \
        --no-store -q >>"$out/profile.txt" 2>&1
    done
  done
  grep -E "^(==|profile)" "$out/profile.txt"
fi
