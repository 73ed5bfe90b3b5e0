#pragma once
/// The OpenCL target: a candidate is one C++ file (`*.cl.cpp`) holding its OpenCL C kernels as
/// strings and a host entry point implementing the ABI, where `data` is a cl_mem and `stream` the
/// cl_command_queue to enqueue on. It is built by the system C++ compiler against the ICD loader.

#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/compile_cache.h"

namespace kfab {

class OpenClBackend final : public Backend {
 public:
  OpenClBackend();
  std::string_view target() const override { return "opencl"; }
  std::string_view dsl() const override { return "opencl"; }
  std::vector<std::string> extensions() const override;  ///< its Target's suffixes
  /// 20 with a C++ compiler, the OpenCL headers and a platform with a device; else 0.
  int probe() const override { return usable_ ? 20 : 0; }
  std::string describe() const override { return description_; }
  BuildOutcome<BuildResult> build(const std::filesystem::path& source) override;
  std::string build_command(const std::string& source) const override;

 private:
  CompileSpec spec() const;  ///< the compiler, its flags and the loader it links
  std::string compiler_;
  std::string compiler_version_;
  bool usable_ = false;
  std::string description_;
};

}  // namespace kfab
