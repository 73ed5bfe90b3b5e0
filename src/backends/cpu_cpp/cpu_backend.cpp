#include "backends/cpu_cpp/cpu_backend.h"


#include <cstdlib>

#include "backends/compile_cache.h"
#include "core/process.h"

namespace kfab {

namespace fs = std::filesystem;

const std::vector<std::string>& CpuBackend::flags() {
  static const std::vector<std::string> f = {"-std=c++20", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"};
  return f;
}

CpuBackend::CpuBackend() {
  const char* cxx = std::getenv("CXX");
  compiler_ = cxx && *cxx ? cxx : "g++";
  if (auto r = run_command({compiler_, "--version"}, 10.0); r && r->status.ok()) {
    compiler_version_ = r->output.substr(0, r->output.find('\n'));
  }
}

std::string CpuBackend::describe() const {
  if (compiler_version_.empty()) return "no C++ compiler (" + compiler_ + " not found)";
  return compiler_version_;
}

BuildOutcome<BuildResult> CpuBackend::build(const fs::path& source) {
  if (compiler_version_.empty()) return BuildFailure{"no C++ compiler: " + compiler_ + " is not on PATH (set CXX or install g++)"};
  return compile_cached({"cpu", compiler_, compiler_version_, flags(), {}, 120.0}, source);
}

}  // namespace kfab
