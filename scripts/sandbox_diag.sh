#!/usr/bin/env bash
# Which part of the candidate sandbox a driver or library cannot live with: evaluates one small
# candidate with every part, then with each part left out in turn (KFAB_SANDBOX_SKIP), and prints
# the disposition of each run.
#
#   scripts/sandbox_diag.sh KFAB TARGET [TASK CANDIDATE]
#   scripts/sandbox_diag.sh build/kfab cuda
set -uo pipefail
kfab=${1:?usage: scripts/sandbox_diag.sh KFAB TARGET [TASK CANDIDATE]}
target=${2:?usage: scripts/sandbox_diag.sh KFAB TARGET [TASK CANDIDATE]}
root=$(cd "$(dirname "$0")/.." && pwd)
case $target in
  cuda) cand=candidates/good.cu ;;
  opencl) cand=candidates/good.cl.cpp ;;
  *) cand=candidates/good.cpp ;;
esac
task=${3:-$root/tests/fixtures/tasks/affine}
cand=${4:-$task/$cand}
"$kfab" doctor | grep '^sandbox'
for skip in "" net mounts landlock caps seccomp net,mounts,landlock,caps,seccomp; do
  out=$(KFAB_SANDBOX_SKIP=$skip "$kfab" eval "$task" "$cand" --target "$target" --json --quiet --min-time 0.02 2>&1)
  disp=$(printf '%s' "$out" | python3 -c 'import json,sys
try:
    j = json.load(sys.stdin); print(j.get("disposition"), "-", j.get("detail", "")[:160])
except Exception as e:
    print("no JSON")' 2>&1)
  printf '%-42s %s\n' "skip: ${skip:-nothing}" "$disp"
done
