#!/usr/bin/env bash
# The bench of unmodified KernelBench problems on the GPU machine, across device calls: a machine goes
# back after each call, so the bench folder travels (carried there, copied back under $OUT) and each
# call resumes it (`kfab bench --resume`) until every problem has its row.
#
#   scripts/kb_bench.sh suite KB_DIR SUITE_DIR [EVERY]   here: SUITE_DIR gets every EVERY-th problem
#                                                        (default 5) of KB_DIR/level1 and level2, copied
#                                                        unmodified (keep SUITE_DIR in a git-ignored folder)
#   scripts/kb_bench.sh run SUITE_DIR BENCH_DIR OUTDIR SECONDS [BENCH ARGS...]
#                                                        there: builds kfab (scripts/gpu_machine.sh), starts
#                                                        the bench into BENCH_DIR or resumes it, stops it
#                                                        after SECONDS, and packs BENCH_DIR as OUTDIR/bench.tgz
#   scripts/kb_bench.sh table BENCH_DIR KB_DIR OUTFILE   here: the table for bench/results/, with the
#                                                        KernelBench commit
#
# One round, from this machine (carry the suite, the bench folder and .debs):
#   run(command='scripts/kb_bench.sh run kernelbench/suite kfab-bench/kb "$OUT" 540', carry=[".debs",
#       "kernelbench", "kfab-bench/kb"]); then `mkdir -p kfab-bench/kb && tar xzf FILES_AT/bench.tgz -C
#       kfab-bench/kb` here and go again until it says "finished: True".
set -uo pipefail
cd "$(dirname "$0")/.."
verb=${1:?usage: scripts/kb_bench.sh suite|run|table ...}
shift

case "$verb" in
suite)
  kb=${1:?KB_DIR}; suite=${2:?SUITE_DIR}; every=${3:-5}
  mkdir -p "$suite"
  for level in level1 level2; do
    # natural order (2 before 10), as kfab sorts them; every EVERY-th from the first
    ls "$kb/$level"/*.py | sort -V | awk -v n="$every" '(NR - 1) % n == 0' | while read -r f; do
      cp "$f" "$suite/${level}_$(basename "$f")"
    done
  done
  echo "$(ls "$suite" | wc -l) problems in $suite"
  ;;
run)
  suite=${1:?SUITE_DIR}; bench=${2:?BENCH_DIR}; out=${3:?OUTDIR}; secs=${4:?SECONDS}
  shift 4
  start=$(date +%s)
  mkdir -p "$out"
  KFAB_GPU_STAGES=none scripts/gpu_machine.sh "$out/build" >/dev/null 2>&1 || { echo "build failed: see $out/build"; exit 1; }
  left=$(( secs - ($(date +%s) - start) - 20 ))
  [ "$left" -gt 30 ] || { echo "no time left after the build"; exit 1; }
  export KFAB_CACHE_DIR=$PWD/build-gpu/cache KFAB_DATA_DIR=$PWD/build-gpu/data
  if [ -f "$bench/bench.json" ]; then
    args=(--resume "$bench")
  else
    args=("$suite" --target cuda --out "$bench" "$@")
  fi
  # SIGINT first: kfab ends its workers and keeps every finished row in bench.json
  timeout -s INT -k 15 "$left" build-gpu/kfab bench "${args[@]}" >"$out/bench_stdout.txt" 2>"$out/bench_stderr.txt"
  echo "kfab bench exit $? after $(( $(date +%s) - start )) s"
  # One archive each: what comes back from a device call is at most 8 files, 2 folders deep.
  tar czf "$out/bench.tgz" -C "$bench" .
  tar czf "$out/build_logs.tgz" -C "$out" build && rm -rf "$out/build"
  python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); print(len(b["tasks"]), "rows; finished:", b["finished"])' "$bench/bench.json"
  ;;
table)
  bench=${1:?BENCH_DIR}; kb=${2:?KB_DIR}; outfile=${3:?OUTFILE}
  commit=$(git --git-dir="$kb/.git" rev-parse HEAD 2>/dev/null || cat "$kb/COMMIT" 2>/dev/null || echo unknown)
  python3 bench/bench_table.py "$bench/bench.json" --kernelbench "$commit" >"$outfile"
  echo "wrote $outfile"
  ;;
*)
  echo "usage: scripts/kb_bench.sh suite|run|table ..." >&2
  exit 2
  ;;
esac
