#!/usr/bin/env bash
# Side-by-side evaluations on the GPU machine: builds kfab (kfab and kfab-runner only), tunes each task
# once, then evaluates its winner alternately under arm A and arm B, ROUNDS times each, and prints one
# line per evaluation (median, min, quartiles, % of copy, eager, torch.compile, clocks, and the Python
# worker's launch evidence). An arm is `kfab eval` options, optionally preceded by VAR=value settings
# of the environment. Then tunes the EXTRA tasks while the deadline allows. Candidates and the build
# stay under /tmp/kfab_ab (the device tool brings back a limited number of files from OUTDIR).
#
#   scripts/gpu_ab.sh OUTDIR SECONDS ROUNDS "TASK..." ["EXTRA..."]
#
# The arms come from KFAB_AB_A and KFAB_AB_B; by default --no-compile against --fresh-baselines (does
# timing torch.compile in the candidate's rotation move the candidate's time?). For the launch hold:
#   KFAB_AB_A="KFAB_LAUNCH_HOLD=0 --fresh-baselines" KFAB_AB_B="--fresh-baselines" scripts/gpu_ab.sh ...
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUTDIR}; secs=${2:?SECONDS}; rounds=${3:?ROUNDS}; tasks=${4:?TASKS}; extra=${5:-}
deadline=$(( $(date +%s) + secs ))
arm_a=${KFAB_AB_A:---no-compile}; arm_b=${KFAB_AB_B:---fresh-baselines}
left() { echo $(( deadline - $(date +%s) )); }
mkdir -p "$out"
KFAB_GPU_TARGETS="kfab kfab-runner" KFAB_GPU_STAGES=none scripts/gpu_machine.sh /tmp/kfab_ab/build >/dev/null 2>&1
[ -x build-gpu/kfab ] || { echo "build failed"; tail -20 /tmp/kfab_ab/build/build.log; exit 1; }
echo "built in $(( secs - $(left) )) s; arm A: $arm_a; arm B: $arm_b"
export KFAB_CACHE_DIR=$PWD/build-gpu/cache KFAB_DATA_DIR=$PWD/build-gpu/data
line() {  # one evaluation's figures at the tuning shape
  python3 - "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[2]))
v = j.get("verdict", j)
s = next((s for s in v.get("shapes", []) if s.get("time_ms")), None)
if s is None:
    print(f"{sys.argv[1]:<28} {v.get('disposition')} {v.get('detail', '')[:200]}")
else:
    t = s["time_ms"]; c = s.get("compile_ms") or {}
    print(f"{sys.argv[1]:<28} cand median {t['median']:.4f} min {t['min']:.4f} q1 {t['q1']:.4f} q3 {t['q3']:.4f} ms  "
          f"{s.get('percent_of_copy_bandwidth', 0):5.1f}% copy  eager {s['baseline_ms']['median']:.4f}"
          + (f"  compile median {c['median']:.4f} min {c['min']:.4f}" if c else "")
          + (f"  SM {k['sm_mhz_min']}-{k['sm_mhz_max']} MHz ({k['reasons']})" if (k := s.get("clocks", {})).get("recorded") else "")
          + (f"  hold {l['hold_ms']:.2f} ms, late {l['late_starts']}, host ms "
             + " ".join(f"{a} {b:.3f}" for a, b in l["host_ms"].items()) if (l := s.get("launch")) else ""))
PY
}
for t in $tasks; do
  n=$(basename "$t" .py)
  [ "$(left)" -gt 60 ] || { echo "deadline: stop before $n"; break; }
  build-gpu/kfab optimize "$t" --target cuda --json --fresh --out "/tmp/kfab_ab/runs/$n" >"$out/$n.optimize.json" 2>>"$out/err.log"
  line "$n optimize (final)" "$out/$n.optimize.json"
  best=$(ls "/tmp/kfab_ab/runs/$n"/best.* 2>/dev/null | head -1)
  [ -n "$best" ] || continue
  for r in $(seq "$rounds"); do
    for arm in A B; do
      [ "$(left)" -gt 40 ] || break 2
      spec=$arm_a; [ "$arm" = B ] && spec=$arm_b
      envs=(); opts=()
      for w in $spec; do if [[ ${#opts[@]} -eq 0 && $w == *=* ]]; then envs+=("$w"); else opts+=("$w"); fi; done
      env "${envs[@]}" build-gpu/kfab eval "$t" "$best" --target cuda --json "${opts[@]}" >"$out/$n.$arm.$r.json" 2>>"$out/err.log"
      line "$n $arm $r" "$out/$n.$arm.$r.json"
    done
  done
done
for t in $extra; do
  n=$(basename "$t" .py); s=$(date +%s)
  [ "$(left)" -gt 70 ] || { echo "deadline: stop before $n"; break; }
  timeout $(( $(left) - 5 )) build-gpu/kfab optimize "$t" --target cuda --json --fresh --out "/tmp/kfab_ab/runs/$n" >>"$out/tune.jsonl" 2>>"$out/err.log"
  echo "$t: exit $? in $(( $(date +%s) - s )) s"
done
[ -s "$out/tune.jsonl" ] && python3 bench/tune_table.py "$out/tune.jsonl" --points
exit 0
