// The cpu target: C++ candidates built by the system compiler, called on the host in host memory.
#include <thread>

#include <fmt/format.h>

#include "backends/cpu_cpp/cpu_backend.h"
#include "backends/target.h"

namespace kfab {

const Target& cpu_target() {
  static const Target t{
      .name = "cpu",
      .suffixes = {".cpp", ".cc", ".cxx"},
      .dsl = "cpp",
      .dsl_rules = "C++20 for the CPU, one file exporting kfab_run (KFAB_EXPORT), built with g++ -O3 -march=native -fopenmp -fno-trapping-math; "
                   "OpenMP and SIMD intrinsics are allowed.",
      .on_host = true,
      .torch_device = "cpu",
      .flush = "clflushopt of every operand before each timed call",
      .timer = "steady_clock around the call",
      .tuner_min_time_s = 0.15,
      .make_backend = []() -> std::unique_ptr<Backend> { return std::make_unique<CpuBackend>(); },
      .prompt_facts = [] { return fmt::format("{} hardware threads", std::thread::hardware_concurrency()); },
  };
  return t;
}

}  // namespace kfab
