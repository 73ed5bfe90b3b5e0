# kfab: the two entry points a newcomer needs are `make run` and `make test`.
# `make` installs the Debian packages kfab builds with (when missing) and builds build/kfab.

BUILD      ?= build
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
# Warnings are errors in CI, which builds without debug information (a third of its build time).
ifeq ($(CI),true)
CMAKE_ARGS += -DKFAB_WERROR=ON -DKFAB_DEBUG_INFO=OFF
endif

DEB_PACKAGES := cmake g++ make pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev \
                libtomlplusplus-dev libxxhash-dev libsqlite3-dev libgtest-dev \
                opencl-headers ocl-icd-opencl-dev pocl-opencl-icd libcurl4-openssl-dev ninja-build \
                libhiredis-dev redis-server libopenblas-openmp-dev

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps configure build tools test test-slow test-deps test-all run bench clean venv fuzz

# The Python worker (KernelBench-format tasks) needs torch: a virtual environment in .venv with the
# torch of the GPU machine (2.11) from PyPI, made once. kfab finds it by itself (KFAB_PYTHON overrides).
PYTHON     ?= python3
TORCH_PIN  ?= torch==2.11.0
# CUTLASS's headers (the package's cutlass_library/source/include; its Python needs are not installed).
CUTLASS_PIN ?= nvidia-cutlass==4.2.0.0

all: build

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "kfab: installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

configure: deps
	cmake -S . -B $(BUILD) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# kfab and its runner alone (what `make run` needs): the test programs are not built first
tools: configure
	cmake --build $(BUILD) -j $(JOBS) --target kfab kfab-runner

# torch for KernelBench-format tasks, and what KernelBench's own problem files import beside it (einops:
# two level-3 problems). torch with its CUDA libraries is about 4.7 GB installed; --no-cache-dir keeps pip
# from keeping a second copy of the wheels (about 3.5 GB) in ~/.cache/pip.
venv:
	@if .venv/bin/python -c "import torch, einops" 2>/dev/null; then :; else \
	  echo "kfab: installing $(TORCH_PIN) and einops into .venv (for KernelBench-format tasks)"; \
	  $(PYTHON) -m venv .venv && .venv/bin/pip install -q --no-cache-dir --disable-pip-version-check "$(TORCH_PIN)" numpy einops==0.8.1; \
	fi
	@.venv/bin/python -c "import cutlass_library" 2>/dev/null || { \
	  echo "kfab: installing $(CUTLASS_PIN) into .venv (CUTLASS's headers, for CUDA candidates built on CUTLASS)"; \
	  .venv/bin/pip install -q --no-cache-dir --disable-pip-version-check --no-deps "$(CUTLASS_PIN)"; }

# Debian's chromium, which the report test renders kfab's HTML page in (headless).
test-deps:
	@command -v chromium >/dev/null 2>&1 || { echo "kfab: installing chromium (the report test renders in it)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core; }

# Every CPU test (labels unit, integration, python and fault), then a short run of each fuzzer; gpu and
# perf tests are not run here. KFAB_REQUIRE_TORCH, KFAB_REQUIRE_CHROMIUM: a test fails, rather than
# skips, when torch or chromium is missing.
# SLOW_TESTS (a ctest regular expression): the slowest tests whose ground others partly cover (the cpu
# core suite's bench and its HTML page in chromium, the tuner's cache reuse, a traced Model tuned with
# torch.compile timed, every dedicated CUDA template built at every point, the CUTLASS headers built on their
# own, and a row-reducing epilogue after CUTLASS's sm90 3xTF32 product at the stream-K point, 46 s of nvcc:
# CI checks that source's text and builds the epilogue at the first SIMT point; the native GEMMs at every
# SIMT point: their first stays in CI; a cached torch.compile time carried over to a second run's eager time:
# NativeCpp* times torch.compile in CI; three of the six forms of a matrix product tuned on the cpu: the
# other three stay in CI, and TracingFinds* traces all six; the traced GEMM programs built at their SIMT point,
# about 6 s of nvcc each: TracingFinds* still traces and checks them in CI). CI (CI=true), which must stay
# under 20 minutes on 2 cores, leaves them out; `make test` anywhere else runs them, `make test-slow` runs
# them alone, and the GPU machine's test stage (scripts/gpu_machine.sh) runs every test.
SLOW_TESTS := Bench\.TheCoreSuiteOnTheCpuIsScoredAndReportedAndChromiumRendersIt|KbEval\.TheTunerRunsPlansOfSeveralPrograms|Tuner\.SearchesThenReusesItsCachedResult|KbEval\.TheTunerTracesAKernelBenchModelAndTunesItsProgram|CudaBuild\.CudaTemplatesCompileAtEveryPoint|CudaBuild\.TheCutlassHeadersCompileOnTheirOwn|CudaBuild\.GemmSimtPointsCompileAtEveryPoint|CudaBuild\.TheGemmEpilogueOnCutlassCompiles|KbEval\.ACachedCompileTimeIsReadAgainstThisRunsEagerTime|KbEval\.TheTunerTakesMoreFormsOfAMatrixProduct|KbEval\.TracedGemmProgramsCompileAtTheirSimtPoint
ifeq ($(CI),true)
CTEST_SKIP := -E '$(SLOW_TESTS)'
endif
test: build venv test-deps
	KFAB_REQUIRE_TORCH=1 KFAB_REQUIRE_CHROMIUM=1 ctest --test-dir $(BUILD) -L 'unit|integration|python|fault' $(CTEST_SKIP) --output-on-failure -j $(JOBS)
	$(MAKE) fuzz

test-slow: build venv test-deps
	KFAB_REQUIRE_TORCH=1 KFAB_REQUIRE_CHROMIUM=1 ctest --test-dir $(BUILD) -R '$(SLOW_TESTS)' --output-on-failure -j $(JOBS)

# The fuzzers (libFuzzer under clang, with ASan and UBSan) of the manifest parser, the runner
# protocol's decoder and the LLM reply parser: FUZZ_SECONDS each from the corpus in tests/fuzz/corpus
# (new inputs go to build-fuzz/, not the repository). A crash stops make with the input's path.
# (5 in CI, which must stay under 20 minutes: the ten-minute runs are in the README.)
ifeq ($(CI),true)
FUZZ_SECONDS ?= 5
else
FUZZ_SECONDS ?= 20
endif
fuzz:
	@{ command -v clang++ >/dev/null && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; } || { \
	  echo "kfab: installing clang and libFuzzer (the fuzzers)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev; }
	CC=clang CXX=clang++ cmake -S tests/fuzz -B build-fuzz >/dev/null
	cmake --build build-fuzz -j $(JOBS)
	@for f in manifest protocol reply; do \
	  mkdir -p build-fuzz/corpus-$$f; \
	  build-fuzz/fuzz_$$f build-fuzz/corpus-$$f tests/fuzz/corpus/$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=build-fuzz/crash-$$f- >build-fuzz/fuzz_$$f.log 2>&1 \
	    || { tail -40 build-fuzz/fuzz_$$f.log; echo "kfab: fuzz_$$f failed; the input is build-fuzz/crash-$$f-*"; exit 1; }; \
	  echo "fuzz_$$f: $$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' build-fuzz/fuzz_$$f.log), no crash"; \
	done

# The main job: kfab optimize on a bundled task with the built-in tuner (no LLM), on the best target
# present that the tuner has templates for; prints the best kernel's verdict. Exit 4 (a correct kernel,
# none faster than the baseline: the output says so) is not a failure of the job.
run: tools
	$(BUILD)/kfab optimize tasks/core/softmax || [ $$? -eq 4 ]

# Every bundled candidate of tasks/core, with its speedup over the reference (a benchmark, not a test).
bench: build
	bench/core_suite.sh $(BUILD)/kfab

clean:
	rm -rf $(BUILD)
