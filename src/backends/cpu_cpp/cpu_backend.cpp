#include "backends/cpu_cpp/cpu_backend.h"



#include "backends/compile_cache.h"
#include "backends/target.h"

namespace kfab {

namespace fs = std::filesystem;

const std::vector<std::string>& CpuBackend::flags() {
  static const std::vector<std::string> f = {"-std=c++20", "-O3", "-march=native", "-fopenmp", "-fno-trapping-math", "-shared", "-fPIC"};
  return f;
}

CpuBackend::CpuBackend() : compiler_(system_cxx()), compiler_version_(system_cxx_version()) {}

std::string CpuBackend::describe() const {
  if (compiler_version_.empty()) return "no C++ compiler (" + compiler_ + " not found)";
  return compiler_version_;
}

BuildOutcome<BuildResult> CpuBackend::build(const fs::path& source) {
  if (compiler_version_.empty()) return BuildFailure{"no C++ compiler: " + compiler_ + " is not on PATH (set CXX or install g++)"};
  return compile_cached({"cpu", compiler_, compiler_version_, flags(), {}, 120.0}, source);
}

std::string CpuBackend::build_command(const std::string& source) const {
  return compile_command({"cpu", compiler_, compiler_version_, flags(), {}, 120.0}, source, source + ".so");
}

const Target& cpu_target();
std::vector<std::string> CpuBackend::extensions() const { return cpu_target().suffixes; }

}  // namespace kfab
