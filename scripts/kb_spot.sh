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
# KFAB_SPOT_PROFILE=1: each winner's exported ModelNew called on the problem's inputs (scripts/kb_ncu.py)
# under ncu, its second call's kernels whose names start kfab_: duration, DRAM, SM, L1 and L2 throughput,
# occupancy, registers, warp instructions executed (smsp__inst_executed.sum) and the stall reasons (cycles
# a warp waits per instruction issued), in profile.txt.
# (kfab eval --profile takes native tasks only.) Clocks are not set (--clock-control none).
# KFAB_SPOT_PROFILE_POINTS="00 02": the candidates of those points too (bench/runs/NAME/*_00.cu, ..), after the winner.
if [ "${KFAB_SPOT_PROFILE:-0}" = 1 ]; then
  metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum
  metrics+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
  metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,smsp__inst_executed.sum
  for st in long_scoreboard short_scoreboard barrier mio_throttle lg_throttle wait membar drain no_instruction branch_resolving; do
    metrics+=,smsp__average_warps_issue_stalled_${st}_per_issue_active.ratio
  done
  for f in "$suite"/*.py; do
    name=$(basename "$f" .py)
    picks=("$out/bench/runs/$name"*/best.cu)
    for pt in ${KFAB_SPOT_PROFILE_POINTS:-}; do picks+=("$out/bench/runs/$name"*/*_"$pt".cu); done
    for best in "${picks[@]}"; do
      [ -f "$best" ] || continue
      echo "== $name $(basename "$best"): $(head -1 "$best" | grep -o '([^)]*)' | head -1)" >>"$out/profile.txt"
      build-gpu/kfab export "$best" --task "$f" --modelnew "$out/modelnew_$name.py" >>"$out/profile.txt" 2>&1 || continue
      ncu --clock-control none -k regex:kfab_ --launch-skip 1 --launch-count 2 --metrics "$metrics" \
        python3 scripts/kb_ncu.py "$f" "$out/modelnew_$name.py" 2 >>"$out/profile.txt" 2>&1
    done
  done
  grep -E "^==|kfab_|duration|throughput|warps_active|issue_active|registers|stalled|bytes|inst_executed" "$out/profile.txt" | head -200
fi
