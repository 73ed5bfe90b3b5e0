#pragma once
/// The CPU target with C++ candidates: built by the system C++ compiler into a shared object.

#include <string>
#include <vector>

#include "backends/backend.h"

namespace kfab {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  std::string_view target() const override { return "cpu"; }
  std::string_view dsl() const override { return "cpp"; }
  std::vector<std::string> extensions() const override;  ///< its Target's suffixes
  int probe() const override { return compiler_version_.empty() ? 0 : 10; }
  std::string describe() const override;
  BuildOutcome<BuildResult> build(const std::filesystem::path& source) override;
  std::string build_command(const std::string& source) const override;

  /// The flags every candidate and reference is compiled with (before -I and -o).
  static const std::vector<std::string>& flags();
  /// Whether the host's BLAS is here for a candidate to link (`#include <cblas.h>`, then -lopenblas): OpenBLAS's
  /// header and library in the system's folders (Debian's libopenblas-openmp-dev, which `make` installs), and
  /// KFAB_NO_BLAS unset. Asked once per process.
  static bool blas_available();

 private:
  std::string compiler_;          ///< $CXX, else g++
  std::string compiler_version_;  ///< first line of `compiler --version`; empty if absent
};

}  // namespace kfab
