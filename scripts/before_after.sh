#!/usr/bin/env bash
# The same benches with two builds of kfab, one after the other on this machine (a refactor's
# before/after): each suite with the built-in tuner, --fresh, compile and tuner caches emptied before
# every bench; then bench/before_after.py prints the winners' speedups side by side.
#
#   scripts/before_after.sh BEFORE_KFAB AFTER_KFAB OUTDIR [SUITE:ARGS ...]
#
# default suites: tasks/kb and kernelbench/suite on cuda, tasks/core on cpu, each with --points 3.
set -uo pipefail
before=${1:?usage: scripts/before_after.sh BEFORE_KFAB AFTER_KFAB OUTDIR [SUITE:ARGS ...]}
after=${2:?}
out=${3:?}
shift 3
suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=("tasks/kb:--target cuda --points 3 --no-compile"
                                   "kernelbench/suite:--target cuda --points 3 --no-compile"
                                   "tasks/core:--target cpu --points 3")
mkdir -p "$out"
cache=${KFAB_CACHE_DIR:-$HOME/.cache/kfab}
for entry in "${suites[@]}"; do
  suite=${entry%%:*}
  args=${entry#*:}
  [ -e "$suite" ] || { echo "$suite: absent, skipped" | tee -a "$out/summary.txt"; continue; }
  for side in before after; do
    kfab=$before
    [ "$side" = after ] && kfab=$after
    name=$(echo "$suite" | tr '/' '_')-$side
    rm -rf "$cache/cuda" "$cache/cpu" "$cache/tuner"
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$kfab" bench "$suite" --fresh --quiet --out "$out/$name" $args >"$out/$name.log" 2>&1
    echo "$suite ($side, $args): exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
  done
  python3 "$(dirname "$0")/../bench/before_after.py" "$out/$(echo "$suite" | tr '/' '_')-before/bench.json" \
    "$out/$(echo "$suite" | tr '/' '_')-after/bench.json" 2>&1 | tee -a "$out/summary.txt"
done
