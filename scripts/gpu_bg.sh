#!/usr/bin/env bash
# Any command on the GPU machine that may outlast one device call (10 minutes): `start` runs it in a
# process session of its own, its output in a log, and waits as `wait` does; `wait` waits for it up to
# a deadline, then copies the log and everything the command wrote in its folder into OUTDIR.
#
#   scripts/gpu_bg.sh start OUTDIR SECONDS CMD...   start CMD (with $KFAB_BG_DIR, its folder, exported)
#   scripts/gpu_bg.sh wait OUTDIR SECONDS           wait at most SECONDS, then copy (the log, the tables, files.tgz)
#
# Example: the test tiers, then the conformance suite's GPU classes alone:
#   scripts/gpu_bg.sh start "$OUT" 560 bash -c 'KFAB_GPU_STAGES=tests scripts/gpu_machine.sh "$KFAB_BG_DIR"'
#
# CMD runs in a snapshot of the repository (/tmp/kfab_bg_tree, build-gpu kept there between starts on one
# machine), not in the repository: each device call copies the working tree in again, and a `wait` call
# that came while a background build ran replaced its sources under it (session 21: "No rule to make
# target src/cli/main.cpp"). `start` itself waits SECONDS as `wait` does: give the call's own limit.
set -uo pipefail
cd "$(dirname "$0")/.."
work=/tmp/kfab_bg
verb=${1:?usage: scripts/gpu_bg.sh start|wait OUTDIR SECONDS [CMD...]}
out=${2:?OUTDIR}
secs=${3:?SECONDS}
shift 3
deadline=$(( $(date +%s) + secs ))
mkdir -p "$out"

if [ "$verb" = start ]; then
  [ $# -gt 0 ] || { echo "usage: scripts/gpu_bg.sh start OUTDIR SECONDS CMD..." >&2; exit 2; }
  rm -rf "$work" && mkdir -p "$work/files"
  export KFAB_BG_DIR=$work/files
  snap=/tmp/kfab_bg_tree
  mkdir -p "$snap" && find "$snap" -mindepth 1 -maxdepth 1 ! -name build-gpu -exec rm -rf {} +
  tar -cf - --exclude=./build-gpu --exclude=./build --exclude=./.venv --exclude=./.deps . | tar -xf - -C "$snap" || { echo "could not copy the tree to $snap" >&2; exit 2; }
  (cd "$snap" && setsid bash -c '"$@"; echo "exit $?" >"'"$work"'/done"' bash "$@" </dev/null >"$work/log.txt" 2>&1 &)
elif [ "$verb" = wait ] && [ ! -d "$work" ]; then
  echo "nothing to wait for: no command was started on this machine (a fresh machine after the last one went back?)"
  exit 3
elif [ "$verb" != wait ]; then
  echo "usage: scripts/gpu_bg.sh start|wait OUTDIR SECONDS [CMD...]" >&2
  exit 2
fi

while [ ! -f "$work/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
# At most 8 files come back from a device call (16 MiB each, 2 folders down; the device tool's README): the
# log, up to 5 tables and summaries (*.md, summary.txt) with their folders in their names, and the rest as
# one archive (files.tgz; its builds and candidates' binaries left out, and where it is still over 15 MiB, all
# but the JSON, text and logs).
cp "$work/log.txt" "$out/" 2>/dev/null
(cd "$work/files" && find . -maxdepth 4 \( -name '*.md' -o -name summary.txt \) | sort | head -5) | while read -r f; do
  cp "$work/files/$f" "$out/$(echo "${f#./}" | tr '/' '_')" 2>/dev/null
done
tar czf "$out/files.tgz" -C "$work/files" --exclude='*.so' --exclude='*.o' --exclude='build-*' . 2>/dev/null
if [ "$(stat -c %s "$out/files.tgz" 2>/dev/null || echo 0)" -gt 15000000 ]; then
  (cd "$work/files" && find . \( -name '*.json' -o -name '*.txt' -o -name '*.md' -o -name '*.log' -o -name '*.err' -o -name '*.csv' \) -size -20M |
     tar czf "$out/files.tgz" -T -) 2>/dev/null
fi
if [ -f "$work/done" ]; then echo "done: $(cat "$work/done")"; else echo "still running"; fi
tail -30 "$work/log.txt"
