#include "backends/cpu_cpp/cpu_backend.h"

#include <cstdlib>

#include "backends/compile_cache.h"
#include "backends/target.h"
#include "core/hash.h"

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

bool CpuBackend::blas_available() {
  static const bool here = [] {
    if (std::getenv("KFAB_NO_BLAS") != nullptr) return false;
    std::error_code ec;
    const auto any = [&](std::initializer_list<const char*> paths) {
      for (const char* p : paths)
        if (fs::exists(p, ec)) return true;
      return false;
    };
    return any({"/usr/include/x86_64-linux-gnu/cblas.h", "/usr/include/aarch64-linux-gnu/cblas.h", "/usr/include/cblas.h",
                "/usr/include/openblas/cblas.h"}) &&
           any({"/usr/lib/x86_64-linux-gnu/libopenblas.so", "/usr/lib/aarch64-linux-gnu/libopenblas.so", "/usr/lib64/libopenblas.so",
                "/usr/lib/libopenblas.so"});
  }();
  return here;
}

BuildOutcome<BuildResult> CpuBackend::build(const fs::path& source) {
  if (compiler_version_.empty()) return BuildFailure{"no C++ compiler: " + compiler_ + " is not on PATH (set CXX or install g++)"};
  CompileSpec spec{"cpu", compiler_, compiler_version_, flags(), {}, 120.0};
  // A candidate built on the host's BLAS (`#include <cblas.h>`: the tuner's GEMM point blas=openblas) links
  // OpenBLAS; nothing else is linked implicitly.
  auto text = read_file(source);
  if (!text) return BuildFailure{text.error().to_string()};
  if (text->find("#include <cblas.h>") != std::string::npos) spec.link_flags.push_back("-lopenblas");
  return compile_cached(spec, source);
}

std::string CpuBackend::build_command(const std::string& source) const {
  return compile_command({"cpu", compiler_, compiler_version_, flags(), {}, 120.0}, source, source + ".so") +
         " (and -lopenblas where it includes <cblas.h>)";
}

const Target& cpu_target();
std::vector<std::string> CpuBackend::extensions() const { return cpu_target().suffixes; }

}  // namespace kfab
