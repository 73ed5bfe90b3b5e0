#!/usr/bin/env bash
# Evaluates every hand-written C++ candidate of tasks/core (the cpu target) against its reference with kfab's default
# protocol and prints a table of dispositions and speedups, plus the geometric mean.
# Usage: bench/core_suite.sh [path/to/kfab] [extra kfab eval flags...]
set -uo pipefail
kfab=${1:-build/kfab}
shift || true
cd "$(dirname "$0")/.."
printf '%-18s %-28s %-10s %9s %8s\n' task candidate verdict speedup wall_s
log_sum=0
n=0
failed=0
for cand in tasks/core/*/candidates/*.cpp; do
  case "$cand" in *.cl.cpp) continue ;; esac  # OpenCL candidates: the opencl target, not this cpu benchmark
  task=$(dirname "$(dirname "$cand")")
  start=$(date +%s%N)
  json=$("$kfab" eval "$task" "$cand" --target cpu --json --quiet "$@")
  end=$(date +%s%N)
  read -r disp speed < <(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d.get("disposition","error"), d.get("speedup") or 0)' "$json")
  printf '%-18s %-28s %-10s %8.2fx %8.2f\n' "$(basename "$task")" "$(basename "$cand")" "$disp" "$speed" "$(( (end - start) / 1000000 ))e-3"
  if [ "$disp" = passed ]; then
    log_sum=$(python3 -c "import math; print($log_sum + math.log($speed))")
    n=$((n + 1))
  else
    failed=$((failed + 1))
  fi
done
python3 -c "import math; print(f'geometric mean speedup over {$n} passed candidates: {math.exp($log_sum / max($n, 1)):.2f}x; not passed: $failed')"
[ "$failed" -eq 0 ]
