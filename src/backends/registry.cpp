#include <algorithm>

#include "backends/backend.h"
#include "backends/cpu_cpp/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/opencl/opencl_backend.h"

namespace kfab {

std::vector<std::unique_ptr<Backend>> make_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<CpuBackend>());
  v.push_back(std::make_unique<CudaBackend>());
  v.push_back(std::make_unique<OpenClBackend>());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a->probe() > b->probe(); });
  return v;
}

std::unique_ptr<Backend> make_backend(std::string_view target) {
  if (target == "cpu") return std::make_unique<CpuBackend>();
  if (target == "cuda") return std::make_unique<CudaBackend>();
  if (target == "opencl") return std::make_unique<OpenClBackend>();
  return nullptr;
}

}  // namespace kfab
