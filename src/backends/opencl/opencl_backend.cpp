#include "backends/opencl/opencl_backend.h"

#include <filesystem>

#include "backends/compile_cache.h"
#include "backends/target.h"
#include "core/doctor.h"

namespace kfab {

namespace fs = std::filesystem;

OpenClBackend::OpenClBackend() : compiler_(system_cxx()), compiler_version_(system_cxx_version()) {
  const bool headers = fs::exists("/usr/include/CL/cl.h") || fs::exists("/usr/local/cuda/include/CL/cl.h");
  const auto platforms = probe_opencl();
  std::string devices;
  for (const auto& p : platforms.value("platforms", nlohmann::json::array()))
    devices += (devices.empty() ? "" : "; ") + p.value("name", "") + " (" + std::to_string(p.value("devices", 0)) + " devices)";
  usable_ = !compiler_version_.empty() && headers && platforms.value("found", false);
  if (compiler_version_.empty()) description_ = "no C++ compiler";
  else if (!headers) description_ = "no OpenCL headers (install opencl-headers)";
  else if (!platforms.value("found", false)) description_ = platforms.value("why", std::string("no OpenCL platform"));
  else description_ = devices;
}

CompileSpec OpenClBackend::spec() const {
  std::vector<std::string> include;
  if (!fs::exists("/usr/include/CL/cl.h") && fs::exists("/usr/local/cuda/include/CL/cl.h"))
    include.push_back("-I/usr/local/cuda/include");
  CompileSpec spec{"opencl", compiler_, compiler_version_, {"-std=c++20", "-O2", "-shared", "-fPIC", "-DCL_TARGET_OPENCL_VERSION=120"},
                   // The loader's versioned name: a machine may lack the -dev symlink.
                   {"-l:libOpenCL.so.1"}, 120.0};
  spec.flags.insert(spec.flags.end(), include.begin(), include.end());
  return spec;
}

std::string OpenClBackend::build_command(const std::string& source) const { return compile_command(spec(), source, source + ".so"); }

BuildOutcome<BuildResult> OpenClBackend::build(const fs::path& source) {
  if (compiler_version_.empty()) return BuildFailure{"no C++ compiler: " + compiler_ + " is not on PATH"};
  return compile_cached(spec(), source);
}

const Target& opencl_target();
std::vector<std::string> OpenClBackend::extensions() const { return opencl_target().suffixes; }

}  // namespace kfab
