#!/usr/bin/env bash
# Builds kfab from a clean tree on a machine with no package registry (the GPU machine), runs the test
# tiers and the benchmark, and writes every log to the folder named on the command line.
#
#   scripts/gpu_machine.sh OUTDIR
#
# The headers that machine lacks (toml++, xxhash, sqlite3) come as Debian .deb files in .debs/
# (fetch them here with `scripts/fetch_debs.sh`), unpacked with dpkg -x into .deps/: nothing is
# installed system-wide. CUTLASS's headers come as the nvidia-cutlass wheel in .whl/ (the same script).
set -uo pipefail
out=${1:?usage: scripts/gpu_machine.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
root=$PWD/.deps/root
lib=$root/usr/lib/x86_64-linux-gnu
log() { echo "== $*" | tee -a "$out/summary.txt"; }
# A redis-server on loopback (Debian's, from .debs, else one on PATH), as $redis: PORT LOGFILE.
start_redis() {
  local server=$root/usr/bin/redis-server
  [ -x "$server" ] || server=$(command -v redis-server)
  LD_LIBRARY_PATH=$lib "$server" --port "$1" --bind 127.0.0.1 --save '' --appendonly no >"$2" 2>&1 &
  redis=$!
  sleep 1
}

{
  date -u
  uname -a
  g++ --version | head -1
  cmake --version | head -1
  nvcc --version | tail -1
  nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1
} >"$out/machine.txt" 2>&1

rm -rf .deps && mkdir -p "$root"
for deb in .debs/*.deb; do dpkg -x "$deb" "$root"; done
# The .pc files say prefix=/usr; point them at the unpacked tree. The -dev symlink of sqlite3 points
# at a runtime the machine already has.
# Debian's hiredis.pc names its folders outright (includedir=/usr/include/hiredis, libdir=/usr/lib)
sed -i -e "s|^prefix=/usr|prefix=$root/usr|" -e "s|^includedir=/usr|includedir=$root/usr|" -e "s|^libdir=/usr/lib\$|libdir=$lib|" \
  "$lib"/pkgconfig/*.pc
ln -sf /usr/lib/x86_64-linux-gnu/libsqlite3.so.0 "$lib/libsqlite3.so"

# The machine's ICD list may name only PoCL: add NVIDIA's OpenCL driver when it is there.
nv_ocl=$(ls /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/lib/libnvidia-opencl.so* 2>/dev/null | head -1)
if [ -n "$nv_ocl" ]; then
  mkdir -p "$PWD/.deps/vendors"
  cp /etc/OpenCL/vendors/*.icd "$PWD/.deps/vendors/" 2>/dev/null
  echo "$nv_ocl" >"$PWD/.deps/vendors/nvidia.icd"
  export OCL_ICD_VENDORS=$PWD/.deps/vendors
fi

# CUTLASS's headers (the tuner's 3xTF32 GEMM points, candidates that include CUTLASS): the nvidia-cutlass
# wheel from .whl/ (scripts/fetch_debs.sh downloads it; carry .whl), unpacked under /tmp/site.
if [ -z "${KFAB_CUTLASS_INCLUDE:-}" ] && ls .whl/nvidia_cutlass-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvidia_cutlass-*.whl &&
    export KFAB_CUTLASS_INCLUDE=/tmp/site/cutlass_library/source/include
fi
echo "cutlass: ${KFAB_CUTLASS_INCLUDE:-none (carry .whl with the nvidia-cutlass wheel)}" >>"$out/machine.txt"

log "configure"
PKG_CONFIG_PATH=$lib/pkgconfig cmake -S . -B build-gpu -DCMAKE_PREFIX_PATH="$root/usr" \
  -DCMAKE_BUILD_RPATH="$lib" >"$out/build.log" 2>&1 || { log "configure failed"; tail -30 "$out/build.log"; exit 1; }
log "build"
cmake --build build-gpu -j "$(nproc)" ${KFAB_GPU_TARGETS:+--target $KFAB_GPU_TARGETS} >>"$out/build.log" 2>&1 || { log "build failed"; grep -E "error" "$out/build.log" | head -30; exit 1; }
log "doctor"
build-gpu/kfab doctor 2>&1 | tee -a "$out/summary.txt"

# KFAB_GPU_STAGES picks what runs after the build (default: all of them, in this order):
#   tests      ctest, labels unit|integration|python|gpu (KFAB_GPU_QUICK=1: gpu only, then the conformance suite)
#   kb         tasks/kb/rms_norm.py with its CUDA and Triton candidates against torch eager and
#              torch.compile, each exported as a ModelNew and checked by bench/modelnew_allclose.py
#   evals      every bundled CUDA candidate, cold then warm cache, and a table of % of copy bandwidth
#   tune       kfab optimize (the built-in tuner) of the tasks in KFAB_TUNE_TASKS (default: every
#              bundled task it has a CUDA template for), then bench/tune_table.py
#   kbbig      kfab optimize of KernelBench problems at their own sizes (KFAB_KB_DIR, default
#              kernelbench/KernelBench, git-ignored and carried; KFAB_KB_PROBLEMS picks them), each best
#              exported as a ModelNew and measured by bench/modelnew_allclose.py
#   devices    kfab bench of KFAB_DEVICES_SUITE (default tasks/kb) with KFAB_DEVICES_ARGS, three ways: in
#              one process on GPU 0, on two processes sharing GPU 0 (--devices 0,0), and on every GPU
#              (--devices 0,1,...; with several), compile caches emptied before each (KFAB_DEVICES_WAYS,
#              e.g. "one: two:0,1 four:0,1,2,3", names other ways); then
#              bench/devices_compare.py: the verdicts side by side and evaluations per hour
#   queue      the same suite through a Redis job queue on loopback (redis-server from .debs): a bench
#              --redis with a kfab worker per GPU, then with two workers sharing GPU 0; compared with
#              the one-process bench of stage devices when it ran before, else with its own
#   optq       kfab optimize of KFAB_OPTQ_TASK (default kernelbench/suite/level2_76_Gemm_Add_ReLU.py) with
#              --redis: a kfab worker per GPU takes its points and its final check (redis-server from
#              .debs on loopback)
#   profile    kfab eval --profile of the bundled CUDA softmax
#   overhead   bench/cuda_overhead.py: kfab against torch load_inline
#   stability  bench/timing_stability.sh: 5 medians and ncu
#   cpu        bench/core_suite.sh on the cpu target (skipped with KFAB_SKIP_CPU_BENCH=1)
#   beforeafter  scripts/before_after.sh with the build of KFAB_BEFORE_TREE (a source tree of another
#              commit, e.g. `git archive REV | tar x -C before-tree`, carried) and this one
stages=${KFAB_GPU_STAGES:-tests kb evals profile overhead stability cpu}
want() { [[ " $stages " == *" $1 "* ]]; }
export KFAB_CACHE_DIR=$PWD/build-gpu/cache KFAB_DATA_DIR=$PWD/build-gpu/data
rc=0
if want tests; then
  log "tests (unit, integration, python, fault, gpu)"
  labels='unit|integration|python|fault|gpu'
  [ -n "${KFAB_GPU_QUICK:-}" ] && labels='gpu'
  ctest --test-dir build-gpu -L "$labels" --output-on-failure -j 8 >"$out/ctest.log" 2>&1
  rc=$?
  tail -8 "$out/ctest.log" | tee -a "$out/summary.txt"
  if [ -n "${KFAB_GPU_QUICK:-}" ]; then
    log "conformance suite (tests/integration/suite_test.cpp: every broken candidate on every target)"
    ctest --test-dir build-gpu -R Conformance --output-on-failure -j 8 >"$out/conformance.log" 2>&1 || rc=1
    tail -4 "$out/conformance.log" | tee -a "$out/summary.txt"
  fi
fi
if want beforeafter; then
  log "beforeafter: the built-in tuner's benches with the build of $KFAB_BEFORE_TREE (before) and this one (after)"
  tree=${KFAB_BEFORE_TREE:?KFAB_BEFORE_TREE names the source tree of the build before}
  # built outside the tree: a carried folder replaces what a call built in it
  bb=/tmp/kfab-before-build
  PKG_CONFIG_PATH=$lib/pkgconfig cmake -S "$tree" -B "$bb" -DCMAKE_PREFIX_PATH="$root/usr" \
    -DCMAKE_BUILD_RPATH="$lib" >"$out/before_build.log" 2>&1 &&
    cmake --build "$bb" -j "$(nproc)" --target kfab kfab-runner >>"$out/before_build.log" 2>&1 ||
    { log "the before build failed"; tail -20 "$out/before_build.log"; }
  [ -x build-gpu/kfab-runner ] || cmake --build build-gpu -j "$(nproc)" --target kfab kfab-runner >>"$out/build.log" 2>&1
  # KFAB_BEFORE_SUITES: SUITE:ARGS entries separated by ';' (default: scripts/before_after.sh's)
  IFS=';' read -ra specs <<<"${KFAB_BEFORE_SUITES:-}"
  scripts/before_after.sh "$bb/kfab" build-gpu/kfab "$out/before_after" "${specs[@]}"
fi
if want kb; then
  log "kb: tasks/kb/rms_norm.py, CUDA and Triton candidates, torch eager and torch.compile, exported ModelNew"
  for cand in tasks/kb/candidates/rms_norm/rowwise.cu tasks/kb/candidates/rms_norm/rowwise_triton.py; do
    build-gpu/kfab eval tasks/kb/rms_norm.py "$cand" --target cuda 2>&1 | tee -a "$out/summary.txt"
    mn=build-gpu/modelnew_$(basename "$cand" | tr . _).py
    build-gpu/kfab export "$cand" --task tasks/kb/rms_norm.py --modelnew "$mn" 2>&1 | tee -a "$out/summary.txt"
    python3 bench/modelnew_allclose.py tasks/kb/rms_norm.py "$mn" --device cuda 2>&1 | tee -a "$out/summary.txt"
  done
  build-gpu/kfab tasks tasks/kb --check --target cuda 2>&1 | tail -3 | tee -a "$out/summary.txt"
fi
if want evals && [ -z "${KFAB_GPU_QUICK:-}" ]; then
  log "cuda: evaluations of the bundled CUDA candidates (cold cache, then warm)"
  for cand in tasks/core/*/candidates/*.cu; do
    task=$(dirname "$(dirname "$cand")")
    for pass in cold warm; do
      [ "$pass" = cold ] && rm -rf "$KFAB_CACHE_DIR/cuda" "$KFAB_CACHE_DIR/cpu"
      start=$(date +%s%N)
      build-gpu/kfab eval "$task" "$cand" --target cuda --json --quiet >>"$out/cuda_evals.jsonl" 2>>"$out/summary.txt"
      echo "$cand $pass: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$out/summary.txt"
    done
  done
  python3 bench/eval_table.py "$out/cuda_evals.jsonl" 2>&1 | tee -a "$out/summary.txt"
fi
if want tune; then
  log "tune: the built-in tuner on cuda"
  default_tasks="tasks/core/softmax tasks/core/log_softmax tasks/core/rms_norm tasks/core/layer_norm tasks/core/gelu
    tasks/core/scale_shift_gelu tasks/core/cross_entropy tasks/core/cumsum tasks/core/transpose tasks/core/sum_dim1
    tasks/core/group_norm tasks/core/matmul tasks/core/matmul_bias_relu
    tasks/kb/rms_norm.py tasks/kb/l1_relu.py tasks/kb/l1_gelu_tanh.py tasks/kb/l1_mish.py tasks/kb/l1_softmax.py
    tasks/kb/l1_log_softmax.py tasks/kb/l1_layer_norm.py tasks/kb/l1_amax_dim.py tasks/kb/l1_cross_entropy.py
    tasks/kb/l1_mse_loss.py tasks/kb/l1_huber_loss.py tasks/kb/l1_kl_div.py tasks/kb/l1_cumsum.py tasks/kb/l1_permute.py
    tasks/kb/l1_sum_dim.py tasks/kb/l1_group_norm.py tasks/kb/l1_matmul.py tasks/kb/l2_linear_gelu_scale.py"
  for task in ${KFAB_TUNE_TASKS:-$default_tasks}; do
    start=$(date +%s)
    timeout 900 build-gpu/kfab optimize "$task" --target cuda --json --quiet ${KFAB_TUNE_ARGS:-} >>"$out/tune.jsonl" 2>>"$out/tune.err"
    echo "$task: exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
  done
  python3 bench/tune_table.py "$out/tune.jsonl" 2>&1 | tee -a "$out/summary.txt"
fi
if want kbbig; then
  log "kbbig: kfab optimize of KernelBench problems at their own sizes"
  kb=${KFAB_KB_DIR:-kernelbench/KernelBench}
  problems=${KFAB_KB_PROBLEMS:-"level1/19_ReLU level1/23_Softmax level1/95_CrossEntropyLoss level1/40_LayerNorm
    level1/89_cumsum level1/26_GELU_ level1/39_L2Norm_ level1/45_Average_Pooling_2D"}
  for p in $problems; do
    f=$kb/$p.py
    name=$(basename "$p")
    [ -f "$f" ] || { echo "$p: no $f (carry a KernelBench checkout)" | tee -a "$out/summary.txt"; continue; }
    start=$(date +%s)
    timeout "${KFAB_KB_TIMEOUT:-600}" build-gpu/kfab optimize "$f" --target cuda --json --quiet --out "build-gpu/kbbig/$name" \
      ${KFAB_KB_ARGS:-} >"$out/kbbig_$name.json" 2>"$out/kbbig_$name.err"
    code=$?
    echo "$p: exit $code in $(( $(date +%s) - start )) s; $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); v=j.get("verdict") or {}; m=(v.get("device_memory") or {}).get("peak_bytes"); print(v.get("disposition"), "speedup", v.get("speedup"), "end to end", v.get("speedup_end_to_end"), "peak device GiB", m and round(m / 2**30, 2), "wall", v.get("wall_s"), v.get("detail") or j.get("error") or j)' "$out/kbbig_$name.json" 2>&1 | tail -1)" | tee -a "$out/summary.txt"
    best=$(ls build-gpu/kbbig/$name/best.* 2>/dev/null | head -1)
    if [ -n "$best" ]; then
      build-gpu/kfab export "$best" --task "$f" --modelnew "build-gpu/kbbig/$name/modelnew.py" >>"$out/kbbig_$name.err" 2>&1 &&
        timeout 300 python3 bench/modelnew_allclose.py "$f" "build-gpu/kbbig/$name/modelnew.py" --device cuda 2>&1 | tail -4 | tee -a "$out/summary.txt"
    fi
  done
fi
if want devices; then
  log "devices: one suite in one process, on two processes sharing GPU 0, and on every GPU"
  suite=${KFAB_DEVICES_SUITE:-tasks/kb}
  args=${KFAB_DEVICES_ARGS:-"--sample 10 --points 2 --no-compile"}
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  rm -rf build-gpu/devices
  if [ -n "${KFAB_DEVICES_WAYS:-}" ]; then
    read -ra ways <<<"$KFAB_DEVICES_WAYS"  # LABEL:DEVICES ... ("one:" is one process on GPU 0)
  else
    ways=("one:" "shared:0,0")
    [ "$gpus" -gt 1 ] && ways+=("all:$(seq -s, 0 $((gpus - 1)))")
  fi
  compare=()
  for way in "${ways[@]}"; do
    label=${way%%:*}
    devs=${way#*:}
    rm -rf "$KFAB_CACHE_DIR/cuda" "$KFAB_CACHE_DIR/cpu"
    start=$(date +%s)
    if [ -z "$devs" ]; then
      CUDA_VISIBLE_DEVICES=0 build-gpu/kfab bench "$suite" --target cuda --fresh $args --out "build-gpu/devices/$label" >"$out/devices_$label.txt" 2>&1
    else
      build-gpu/kfab bench "$suite" --target cuda --fresh $args --devices "$devs" --out "build-gpu/devices/$label" >"$out/devices_$label.txt" 2>&1
    fi
    echo "devices $label (${devs:-one process on GPU 0}): exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
    compare+=("$label=build-gpu/devices/$label")
  done
  python3 bench/devices_compare.py "${compare[@]}" 2>&1 | tee -a "$out/summary.txt"
  (cd build-gpu && find devices -name bench.json -o -name log.txt | tar czf "$out/devices.tgz" -T -)
fi
if want queue; then
  log "queue: the suite through a Redis job queue, a worker per GPU, then two workers sharing GPU 0"
  suite=${KFAB_DEVICES_SUITE:-tasks/kb}
  args=${KFAB_DEVICES_ARGS:-"--sample 10 --points 2 --no-compile"}
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  start_redis 6390 "$out/redis.log"
  compare=()
  [ -f build-gpu/devices/one/bench.json ] || {
    CUDA_VISIBLE_DEVICES=0 build-gpu/kfab bench "$suite" --target cuda --fresh $args --out build-gpu/devices/one >"$out/queue_one.txt" 2>&1; }
  compare+=("one=build-gpu/devices/one")
  for way in "pergpu:$(seq -s, 0 $((gpus - 1)))" "shared:0,0"; do
    label=${way%%:*}
    pids=()
    for d in $(echo "${way#*:}" | tr , ' '); do
      build-gpu/kfab worker --redis redis://127.0.0.1:6390 --queue "$label" --device "$d" >>"$out/queue_workers_$label.txt" 2>&1 &
      pids+=($!)
    done
    rm -rf "$KFAB_CACHE_DIR/cuda" "$KFAB_CACHE_DIR/cpu" "build-gpu/devices/q_$label"
    start=$(date +%s)
    build-gpu/kfab bench "$suite" --target cuda --fresh $args --redis redis://127.0.0.1:6390 --queue "$label" \
      --out "build-gpu/devices/q_$label" >"$out/queue_$label.txt" 2>&1
    echo "queue $label (workers on ${way#*:}): exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
    kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
    compare+=("$label=build-gpu/devices/q_$label")
  done
  kill "$redis"
  python3 bench/devices_compare.py "${compare[@]}" 2>&1 | tee -a "$out/summary.txt"
fi
if want optq; then
  log "optq: kfab optimize --redis, a worker per GPU taking the points"
  task=${KFAB_OPTQ_TASK:-kernelbench/suite/level2_76_Gemm_Add_ReLU.py}
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  start_redis 6391 "$out/redis_optq.log"
  pids=()
  for d in $(seq 0 $((gpus - 1))); do
    build-gpu/kfab worker --redis redis://127.0.0.1:6391 --queue optq --device "$d" >>"$out/optq_workers.txt" 2>&1 &
    pids+=($!)
  done
  start=$(date +%s)
  build-gpu/kfab optimize "$task" --target cuda --points "${KFAB_OPTQ_POINTS:-8}" --fresh --redis redis://127.0.0.1:6391 --queue optq \
    --out build-gpu/optq --json >"$out/optq.json" 2>"$out/optq.err"
  echo "optq: exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); b=j["best"]; v=j.get("verdict",{})
print("best", b["disposition"], b.get("speedup"), "final check by", v.get("worker"), "device", v.get("device"))
for p in j.get("points", []): print(" ", p["template"], p["params"], p["disposition"], p.get("speedup"))' "$out/optq.json" 2>&1 | tee -a "$out/summary.txt"
  grep -cE '^kfab: job .*: [a-z_]+ in [0-9.]+ s' "$out/optq_workers.txt" | sed 's/^/jobs done by the workers: /' | tee -a "$out/summary.txt"
  kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
  kill "$redis"
fi
if want profile; then
  log "profile: kfab eval --profile of the bundled CUDA softmax"
  build-gpu/kfab eval tasks/core/softmax tasks/core/softmax/candidates/block_softmax.cu --target cuda --profile --quiet 2>&1 | tee -a "$out/summary.txt"
fi
if want overhead; then
  log "bench: compile + verify + time of a small CUDA candidate, kfab against torch load_inline"
  python3 bench/cuda_overhead.py --kfab build-gpu/kfab --out "$out/cuda_overhead.json" ${KFAB_OVERHEAD_ARGS:-} 2>&1 | tee -a "$out/summary.txt"
fi
if want stability; then
  log "bench: timing stability and agreement with ncu"
  bench/timing_stability.sh build-gpu/kfab "$out" 2>&1 | tail -20 | tee -a "$out/summary.txt"
fi
if want cpu && [ -z "${KFAB_SKIP_CPU_BENCH:-}" ]; then
  log "bench: tasks/core on the cpu target"
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} bench/core_suite.sh build-gpu/kfab 2>&1 | tee "$out/bench_core.txt"
fi
exit $rc
