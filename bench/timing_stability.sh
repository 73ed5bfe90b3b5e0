#!/usr/bin/env bash
# How stable kfab's CUDA timings are, and how they compare with Nsight Compute's, on a memory-bound
# kernel of more than a hundred microseconds (tests/fixtures/tasks/copy_big, candidates/copy.cu:
# 256 MiB in, 256 MiB out).
#
#   bench/timing_stability.sh KFAB OUTDIR
#
# 1. `kfab eval ... --target cuda --json --seeds 1`, 5 times: the median of each (the tuning shape,
#    N = 67108864) and their spread, (max - min) / min of the five medians, in %; beside each, what
#    kfab reports of the run: IQR, calls, GB/s, timer, SM clock range and reasons, warnings.
# 2. Nsight Compute once, on the same evaluation with 10 timed calls:
#      ncu --clock-control none --target-processes all -k regex:kfab_copy_kernel --launch-count 20
#          --metrics gpu__time_duration.sum --csv  kfab eval ... --seeds 1 --min-calls 10 --min-time 0
#    the median of gpu__time_duration over the tuning shape's launches (the held-out shape's launches,
#    told apart by their grid size, are left out), and kfab's median (of the five runs' medians) over
#    ncu's median - 1, in %.
# Everything goes to OUTDIR/timing_stability.txt (the only file written there) and to stdout.
# GPU clocks and settings are never changed (ncu runs with --clock-control none; nvidia-smi only reads).
# Environment: NCU (default /usr/local/cuda/bin/ncu, else ncu on PATH); KFAB_CACHE_DIR and
# KFAB_DATA_DIR are used when set, else temporary folders. Exits 1 if any step fails.
set -uo pipefail

usage="usage: bench/timing_stability.sh KFAB OUTDIR"
[ $# -eq 2 ] || { echo "$usage" >&2; exit 2; }
kfab=$1
outdir=$2
case $kfab in /*) ;; *) kfab=$PWD/$kfab ;; esac
[ -x "$kfab" ] && [ -f "$kfab" ] || { echo "timing_stability: kfab not found or not executable: $kfab" >&2; exit 2; }
mkdir -p "$outdir" || { echo "timing_stability: cannot create $outdir" >&2; exit 2; }
outdir=$(cd "$outdir" && pwd)
report=$outdir/timing_stability.txt
cd "$(dirname "$0")/.." || exit 2

task=tests/fixtures/tasks/copy_big
cand=$task/candidates/copy.cu
runs=5
for f in "$task/task.toml" "$cand"; do
  [ -f "$f" ] || { echo "timing_stability: missing $PWD/$f" >&2; exit 2; }
done
ncu=${NCU:-/usr/local/cuda/bin/ncu}
if [ ! -x "$ncu" ]; then ncu=$(command -v ncu || true); fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kfab-timing-stability.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
export KFAB_CACHE_DIR=${KFAB_CACHE_DIR:-$work/cache} KFAB_DATA_DIR=${KFAB_DATA_DIR:-$work/data}
export LC_ALL=C  # ncu formats numbers by locale: keep "1,234.5"

: >"$report"
say() { printf '%s\n' "$*" | tee -a "$report"; }
fail() {
  say "FAILED: $*"
  exit 1
}
# The last lines of a file, indented, into the report.
excerpt() { tail -n "${2:-25}" "$1" 2>/dev/null | sed 's/^/    /' | tee -a "$report"; }

say "timing stability: $cand on $task, target cuda"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')   kfab: $kfab"
if command -v nvidia-smi >/dev/null; then
  say "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv,noheader 2>&1 | head -1)  (name, driver, sm MHz, max sm MHz, mem MHz, C, W)"
fi
say ""

# --- 1. five evaluations --------------------------------------------------------------------------
medians=()
say "1. kfab eval --target cuda --json --seeds 1, $runs times (median of the tuning shape N=67108864)"
say "$(printf '   %-4s %10s %9s %5s %7s %7s %-7s %-11s %-6s %7s' run 'median ms' 'iqr ms' n 'GB/s' '% copy' timer 'SM MHz' cached wall_s)"
for i in $(seq 1 "$runs"); do
  json=$work/eval_$i.json
  err=$work/eval_$i.err
  "$kfab" eval "$task" "$cand" --target cuda --json --quiet --seeds 1 --timeout 300 >"$json" 2>"$err"
  rc=$?
  # Two lines back: the median alone, then the row of the table (and any warning kfab gave).
  out=$(python3 - "$json" "$rc" "$i" 2>&1 <<'EOF'
import json, sys
path, rc, run = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    d = json.load(open(path))
except Exception as e:
    sys.exit(f"kfab's output is not JSON ({e})")
if "error" in d:
    sys.exit(f"kfab: {d['error']} ({d.get('hint', '')})")
if rc != 0 or d.get("disposition") != "passed":
    sys.exit(f"exit {rc}, disposition {d.get('disposition')}: {d.get('detail', '')}")
tune = [s for s in d.get("shapes", []) if not s.get("heldout")]
if len(tune) != 1 or not isinstance(tune[0].get("time_ms"), dict):
    sys.exit(f"expected one timed tuning shape, got {len(tune)}")
s = tune[0]
t = s["time_ms"]
def f(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"
timer = s.get("timer", "-")
timer = "events" if timer == "cuda events" else ("wall" if timer.startswith("wall") else timer)
c = s.get("clocks") or {}
sm = f"{c['sm_mhz_min']}-{c['sm_mhz_max']}" if c.get("recorded") else "-"
print(t["median"])
print(f"   {run:<4} {t['median']:>10.5f} {f(t.get('iqr'), '.5f'):>9} {f(t.get('n'), 'd'):>5} "
      f"{f(s.get('achieved_GBps'), '.0f'):>7} {f(s.get('percent_of_copy_bandwidth'), '.1f'):>7} {timer:<7} {sm:<11} "
      f"{str((d.get('build') or {}).get('cached')):<6} {f(d.get('wall_s'), '.1f'):>7}")
if c.get("recorded") and c.get("reasons") not in (None, "", "none"):
    print(f"        clock reasons: {c['reasons']}")
if s.get("warning"):
    print(f"        WARNING from kfab: {s['warning']}")
EOF
  ) || {
    say "   run $i: $out"
    say "   kfab's stderr:"
    excerpt "$err"
    fail "kfab eval run $i"
  }
  medians+=("$(head -1 <<<"$out")")
  say "$(tail -n +2 <<<"$out")"
done
read -r kfab_median spread_line < <(python3 - "${medians[@]}" <<'EOF'
import statistics, sys
m = [float(v) for v in sys.argv[1:]]
spread = (max(m) - min(m)) / min(m) * 100.0
print(statistics.median(m), f"min {min(m):.5f} ms, max {max(m):.5f} ms, spread (max-min)/min = {spread:.2f}%")
EOF
) || fail "could not summarize the medians"
say "   medians: $spread_line; median of the $runs medians: $(printf '%.5f' "$kfab_median") ms"
say ""

# --- 2. Nsight Compute ----------------------------------------------------------------------------
say "2. Nsight Compute: gpu__time_duration.sum of kfab_copy_kernel (clocks not locked: --clock-control none)"
[ -n "$ncu" ] && [ -x "$ncu" ] || fail "ncu not found (looked at ${NCU:-/usr/local/cuda/bin/ncu} and on PATH; set NCU=/path/to/ncu)"
say "   ncu: $ncu ($("$ncu" --version 2>&1 | tail -1))"
ncu_log=$work/ncu.log
"$ncu" --clock-control none --target-processes all -k regex:kfab_copy_kernel --launch-count 20 \
  --metrics gpu__time_duration.sum --csv --log-file "$ncu_log" \
  "$kfab" eval "$task" "$cand" --target cuda --json --quiet --seeds 1 --min-calls 10 --min-time 0 --timeout 300 \
  >"$work/ncu_eval.json" 2>"$work/ncu_eval.err"
rc=$?
if grep -q "ERR_NVGPUCTRPERM" "$ncu_log" "$work/ncu_eval.err" 2>/dev/null; then
  say "   ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): run as root, or allow"
  say "   profiling for all users (NVreg_RestrictProfilingToAdminUsers=0)"
fi
if grep -q "==ERROR==" "$ncu_log" 2>/dev/null; then
  say "   ncu reported errors:"
  grep "==ERROR==" "$ncu_log" | head -10 | sed 's/^/    /' | tee -a "$report"
fi
if [ "$rc" -ne 0 ]; then
  say "   ncu / kfab eval exited $rc; ncu's log:"
  excerpt "$ncu_log"
  say "   kfab's stderr:"
  excerpt "$work/ncu_eval.err"
  excerpt "$work/ncu_eval.json" 10
  fail "the evaluation under ncu"
fi
python3 - "$ncu_log" "$work/ncu_eval.json" "$kfab_median" "$runs" >"$work/ncu_summary.txt" 2>&1 <<'EOF'
import csv, json, statistics, sys

log_path, eval_path, kfab_median, runs = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "\u00b5s": 1.0, "ms": 1e3, "msecond": 1e3,
         "s": 1e6, "second": 1e6}

def csv_start(lines):
    return next((i for i, l in enumerate(lines) if l.startswith('"ID"') and '"Metric Value"' in l), None)

# ncu writes its report to --log-file; should a version print it on stdout anyway, look there too.
for path in (log_path, eval_path):
    lines = open(path, errors="replace").read().splitlines()
    start = csv_start(lines)
    if start is not None:
        break
else:
    sys.exit("no CSV header (\"ID\",...,\"Metric Value\") in ncu's output: was any kernel profiled?")
rows = list(csv.DictReader([l for l in lines[start:] if l.startswith('"')]))
launches = []
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum" or "kfab_copy_kernel" not in r.get("Kernel Name", ""):
        continue
    unit = (r.get("Metric Unit") or "").strip()
    if unit not in TO_US:
        sys.exit(f"unknown unit {unit!r} for gpu__time_duration.sum (row: {r})")
    try:
        value = float(r["Metric Value"].replace(",", ""))
    except ValueError:
        sys.exit(f"unreadable value {r['Metric Value']!r} for gpu__time_duration.sum")
    launches.append({"id": r.get("ID", "?"), "grid": r.get("Grid Size", ""), "block": r.get("Block Size", ""),
                     "us": value * TO_US[unit], "unit": unit})
if not launches:
    sys.exit(f"ncu's CSV has {len(rows)} rows but none is gpu__time_duration.sum of kfab_copy_kernel")

def grid_product(g):
    try:
        p = 1
        for v in g.strip("() ").split(","):
            p *= int(v)
        return p
    except ValueError:
        return None

grids = {l["grid"] for l in launches}
print(f"   {len(launches)} launches profiled (ncu's unit: {', '.join(sorted({l['unit'] for l in launches}))}):")
print(f"   {'id':>4} {'grid':>16} {'block':>14} {'us':>10}")
for l in launches:
    print(f"   {l['id']:>4} {l['grid']:>16} {l['block']:>14} {l['us']:>10.2f}")
products = {g: grid_product(g) for g in grids}
if len(grids) > 1 and all(v is not None for v in products.values()):
    tune_grid = max(grids, key=lambda g: products[g])
    kept = [l for l in launches if l["grid"] == tune_grid]
    dropped = [l for l in launches if l["grid"] != tune_grid]
    print(f"   kept the {len(kept)} launches of the largest grid {tune_grid} (the tuning shape, N=67108864); "
          f"left out {len(dropped)} of other grids (the held-out shape N=1000003, median "
          f"{statistics.median(l['us'] for l in dropped):.2f} us)")
else:
    kept = launches
    print(f"   WARNING: one grid size ({', '.join(grids) or 'no Grid Size column'}): the held-out shape's launches "
          f"cannot be told apart and are included in the median")
ncu_median_us = statistics.median(l["us"] for l in kept)
print(f"   ncu median: {ncu_median_us:.2f} us over {len(kept)} launches (min {min(l['us'] for l in kept):.2f}, "
      f"max {max(l['us'] for l in kept):.2f})")
try:
    d = json.load(open(eval_path))
    t = [s for s in d.get("shapes", []) if not s.get("heldout")][0]["time_ms"]
    print(f"   (kfab's own median in that profiled run: {t['median'] * 1e3:.2f} us over {t.get('n')} calls, "
          f"disposition {d.get('disposition')}; inflated by the profiler, not compared)")
except Exception as e:  # the profiled run's own verdict is informative only
    print(f"   (kfab's verdict of the profiled run is unreadable: {e})")
kfab_us = kfab_median * 1e3
print(f"   kfab median (of the {runs} runs' medians): {kfab_us:.2f} us")
print(f"   kfab median / ncu median - 1 = {(kfab_us / ncu_median_us - 1.0) * 100.0:+.2f}%")
EOF
rc=$?
tee -a "$report" <"$work/ncu_summary.txt"
if [ "$rc" -ne 0 ]; then
  say "   ncu's log (last lines):"
  excerpt "$ncu_log"
  fail "could not read gpu__time_duration from ncu's output"
fi
say ""
say "summary: spread of the $runs kfab medians ${spread_line##*= }; kfab median / ncu median - 1 = $(sed -n 's/^   kfab median \/ ncu median - 1 = //p' "$work/ncu_summary.txt")"
say "report: $report"
