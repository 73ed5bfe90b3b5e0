#pragma once
/// The CUDA target with CUDA C++ candidates: one .cu file built by nvcc into a shared object (device
/// code for the GPU's own architecture, sm_90a on Hopper) and run by a runner on device pointers.
///
/// nvcc -shared rather than NVRTC + host glue: a candidate's host code (launch configuration, several
/// kernels, streams) is C++ that NVRTC cannot compile, and nvcc's compile of one small file is about
/// 2 s, paid once per content hash thanks to the compile cache.

#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/compile_cache.h"

namespace kfab {

/// What a process pinned to GPU `device` (as this kfab counts them: within its own CUDA_VISIBLE_DEVICES,
/// in PCI bus order as nvidia-smi counts them) is given: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER.
/// An Error for a device past this kfab's own CUDA_VISIBLE_DEVICES.
Expected<std::vector<std::pair<std::string, std::string>>> cuda_device_env(int device);

/// CUTLASS's headers, for candidates that include them (the PyPI package nvidia-cutlass holds them
/// under cutlass_library/source/include): $KFAB_CUTLASS_INCLUDE, else where the worker's Python finds
/// that package (asked once per process); empty where neither has them.
const std::string& cutlass_include_dir();

/// The -arch candidates are built for: $KFAB_CUDA_ARCH, else device 0's compute capability (sm_90a
/// for 9.0: Hopper's wgmma and TMA need the arch-specific target), else sm_90a. Asked once per process.
const std::string& cuda_candidate_arch();


class CudaBackend final : public Backend {
 public:
  CudaBackend();
  std::string_view target() const override { return "cuda"; }
  std::string_view dsl() const override { return "cuda"; }
  std::vector<std::string> extensions() const override;  ///< its Target's suffixes
  /// 30 with nvcc and a GPU, else 0 (builds still work with nvcc alone, e.g. in CI).
  int probe() const override { return nvcc_.empty() || gpu_.empty() ? 0 : 30; }
  std::string describe() const override;
  std::string build_command(const std::string& source) const override;
  BuildOutcome<BuildResult> build(const std::filesystem::path& source) override;

  /// The -arch value: from $KFAB_CUDA_ARCH, else the GPU's compute capability (sm_90a for 9.0),
  /// else sm_90a.
  const std::string& arch() const { return arch_; }
  bool has_compiler() const { return !nvcc_.empty(); }
  /// The GPUs this process sees (CUDA_VISIBLE_DEVICES applies); 0 without one.
  int device_count() const override { return devices_; }

 private:
  /// The build's flags before any the source asks for (cuBLAS, CUTLASS).
  CompileSpec base_spec() const;
  std::string nvcc_;
  std::string nvcc_version_;
  std::string gpu_;  ///< name of device 0; empty without a GPU
  std::string arch_;
  int devices_ = 0;
};

}  // namespace kfab
