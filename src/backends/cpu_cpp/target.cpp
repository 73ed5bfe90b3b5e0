// The cpu target: C++ candidates built by the system compiler, called on the host in host memory.
#include <thread>

#include <fmt/format.h>

#include "backends/cpu_cpp/cpu_backend.h"
#include "backends/target.h"

namespace kfab {

const Target& cpu_target() {
  static const Target t = [] {
    Target t;
    t.name = "cpu";
    t.dsl = "cpp";
    t.suffix = ".cpp";
    t.dsl_rules = "C++20 for the CPU, one file exporting kfab_run (KFAB_EXPORT), built with g++ -O3 -march=native -fopenmp; "
                  "OpenMP and SIMD intrinsics are allowed.";
    t.suffixes = {".cpp", ".cc", ".cxx"};
    t.on_host = true;
    t.torch_device = "cpu";
    t.flush = "clflushopt of every operand before each timed call";
    t.timer = "steady_clock around the call";
    t.tuner_min_time_s = 0.15;
    t.make_backend = []() -> std::unique_ptr<Backend> { return std::make_unique<CpuBackend>(); };
    t.prompt_facts = [] { return fmt::format("{} hardware threads", std::thread::hardware_concurrency()); };
    return t;
  }();
  return t;
}

}  // namespace kfab
