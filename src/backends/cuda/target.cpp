// The cuda target: CUDA C++ candidates built by nvcc, run by kfab-runner on an NVIDIA GPU.
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>

#include "backends/cuda/cuda_backend.h"
#include "backends/target.h"
#include "core/doctor.h"
#include "core/text.h"

namespace kfab {

namespace {

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

/// The timing lock's name for the GPU a process with `env` on top of this one's uses as its device 0:
/// its PCI address where NVML gives it, else the CUDA_VISIBLE_DEVICES entry as written.
std::string gpu_lock_key(const std::map<std::string, std::string>& env) {
  std::string visible;
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) {
    visible = it->second;
  } else if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) {
    visible = v;
  }
  // device 0 of the process: the first entry; unset, NVML's device 0 (CUDA counts fastest first,
  // which on a host of one kind of GPU is PCI order too)
  std::string first = visible.empty() ? "0" : split(visible, ',').front();
  if (all_digits(first)) {
    // NVML's start costs tens of ms: each index is asked once per process
    static std::mutex mu;
    static std::map<std::string, std::string> known;
    std::lock_guard<std::mutex> hold(mu);
    auto it = known.find(first);
    if (it == known.end()) it = known.emplace(first, gpu_pci_address(static_cast<unsigned>(std::stoul(first)))).first;
    if (!it->second.empty()) return "gpu-" + it->second;
  }
  std::string key = "gpu-";
  for (char c : first) key += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  return key;
}

}  // namespace

const Target& cuda_target() {
  static const Target t{
      .name = "cuda",
      .suffixes = {".cu"},
      .dsl = "cuda",
      .dsl_rules = "CUDA C++ for an NVIDIA GPU, one .cu file exporting kfab_run (KFAB_EXPORT), built with nvcc -O3 for the "
                   "GPU's architecture; enqueue all work on the given stream; no device-wide synchronization, no allocation "
                   "per call.",
      .gpu = true,
      .torch_device = "cuda",
      .triton = true,
      .task_baseline = "cuda",
      .flush = "a read of 2x L2 on the stream before each timed call",
      .timer = "CUDA events on the runner's stream; context synchronized after each call",
      .profiler = "ncu",
      .make_backend = []() -> std::unique_ptr<Backend> { return std::make_unique<CudaBackend>(); },
      .pin = [](int index) -> Expected<DeviceEnv> { return cuda_device_env(index); },
      .lock_key = gpu_lock_key,
  };
  return t;
}

}  // namespace kfab
