#!/usr/bin/env bash
# The adversarial classes of issue 20 on a task large enough to time (bench/adversarial/affine_large),
# each beside its honest twin, in one run: the reference-patching and stashing cheats must not pass, and
# the reference-slowing one must read a speedup close to its twin's (within 20% is the bar).
# Usage: bench/adversarial_speedups.sh [path/to/kfab] [extra kfab eval flags...]
# A benchmark, not a test: its figures depend on the machine and on what else runs on it.
set -uo pipefail
kfab=${1:-build/kfab}
shift || true
cd "$(dirname "$0")/.."
task=bench/adversarial/affine_large
eval_one() {
  local cand=$1
  shift
  "$kfab" eval "$task" "$cand" --target cpu --json --quiet "$@" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("disposition","error"), "%.3f" % (d.get("speedup") or 0))'
}
printf '%-48s %-10s %8s\n' candidate verdict speedup
declare -A speed
for cand in bench/adversarial/twins/slows_reference.cpp tests/fixtures/broken/slows_reference.cpp \
            tests/fixtures/broken/patches_reference.cpp tests/fixtures/broken/stashes_by_count.cpp \
            tests/fixtures/broken/stashes_by_time.cpp tests/fixtures/broken/stashes_by_value.cpp \
            tests/fixtures/broken/stashes_when_cold.cpp; do
  read -r disp s < <(eval_one "$cand" "$@")
  printf '%-48s %-10s %7sx\n' "$cand" "$disp" "$s"
  speed[$cand]=$s
done
python3 -c "import sys; h, c = float(sys.argv[1]), float(sys.argv[2]); print(f'slows_reference / honest twin: {c / h if h else 0:.3f} (within 20%: {abs(c / h - 1) <= 0.2 if h else False})')" \
  "${speed[bench/adversarial/twins/slows_reference.cpp]}" "${speed[tests/fixtures/broken/slows_reference.cpp]}"
