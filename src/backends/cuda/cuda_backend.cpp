#include "backends/cuda/cuda_backend.h"

#include <fmt/format.h>

#include <cstdlib>
#include <future>
#include <filesystem>

#include "backends/compile_cache.h"
#include "backends/target.h"
#include "core/doctor.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/process.h"
#include "core/text.h"

namespace kfab {

namespace fs = std::filesystem;

namespace {
/// The devices, through NVML where it can answer for CUDA's device 0 (no CUDA initialisation: a cold
/// `kfab eval` waits for this before nvcc starts), else probe_gpus(), which initialises the driver (a
/// few hundred ms). The answer is kept per boot and driver version, so a warm `kfab eval` pays
/// neither. Without a driver there is nothing to cache.
nlohmann::json gpu_probe() {
  nlohmann::json j = probe_gpus_nvml();
  return j.value("found", false) ? j : probe_gpus();
}

nlohmann::json cached_gpu_probe() {
  auto driver = read_file("/proc/driver/nvidia/version");
  auto boot = read_file("/proc/sys/kernel/random/boot_id");
  if (!driver || !boot) return gpu_probe();
  // A process pinned to one device (CUDA_VISIBLE_DEVICES, as `kfab bench --devices` starts them) sees
  // another list than kfab does unpinned: each setting has its own answer.
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string key = *driver + *boot + '\0' + (visible ? std::string("visible=") + visible : std::string("all"));
  const fs::path file = cache_dir() / "machine" / ("cuda-probe-" + hash_hex(key).substr(0, 16) + ".json");
  if (auto text = read_file(file)) {
    try {
      return nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception&) {
      // probed again below
    }
  }
  nlohmann::json j = gpu_probe();
  if (j.value("found", false)) (void)write_file_atomic(file, j.dump(2));
  return j;
}

/// The last line of `nvcc --version` (tens of ms: nvcc is a driver script), kept per nvcc binary
/// (its path, size and modification time): it is part of every compile-cache key.
std::string cached_nvcc_version(const std::string& nvcc) {
  std::error_code ec;
  const fs::path real = fs::canonical(nvcc, ec);
  const auto size = ec ? 0 : fs::file_size(real, ec);
  const auto mtime = ec ? 0 : fs::last_write_time(real, ec).time_since_epoch().count();
  const fs::path file = cache_dir() / "machine" /
                        ("nvcc-" + hash_hex(real.string() + '\0' + std::to_string(size) + '\0' + std::to_string(mtime)).substr(0, 16) + ".txt");
  if (!ec)
    if (auto text = read_file(file); text && !text->empty()) return *text;
  auto r = run_command({nvcc, "--version"}, 20.0);
  if (!r || !r->status.ok()) return {};
  std::string o = r->output;
  while (!o.empty() && o.back() == '\n') o.pop_back();
  std::string version = o.substr(o.rfind('\n') + 1);
  if (!ec && !version.empty()) (void)write_file_atomic(file, version);
  return version;
}

/// The -arch value for a GPU of compute capability `cc` ("9.0"; empty without a GPU).
std::string arch_for(const std::string& cc) {
  if (const char* a = std::getenv("KFAB_CUDA_ARCH"); a && *a) return a;
  if (cc.empty()) return "sm_90a";
  std::string digits;
  for (char c : cc)
    if (c != '.') digits += c;
  // Hopper's wgmma and TMA need the arch-specific target.
  return "sm_" + digits + (digits == "90" ? "a" : "");
}

std::string first_compute_capability(const nlohmann::json& gpus) {
  if (!gpus.value("found", false) || !gpus.contains("devices") || gpus["devices"].empty()) return {};
  return gpus["devices"][0].value("compute_capability", "");
}

}  // namespace

const std::string& cuda_candidate_arch() {
  static const std::string arch = arch_for(first_compute_capability(cached_gpu_probe()));
  return arch;
}

Expected<std::vector<std::pair<std::string, std::string>>> cuda_device_env(int device) {
  std::string visible = std::to_string(device);
  if (const char* given = std::getenv("CUDA_VISIBLE_DEVICES"); given && *given) {
    const auto ids = split(given, ',');
    if (device < 0 || device >= static_cast<int>(ids.size()))
      return make_error(fmt::format("device {}: CUDA_VISIBLE_DEVICES={} gives kfab {} GPUs", device, given, ids.size()));
    visible = ids[static_cast<size_t>(device)];
  }
  const char* order = std::getenv("CUDA_DEVICE_ORDER");
  return std::vector<std::pair<std::string, std::string>>{{"CUDA_VISIBLE_DEVICES", visible},
                                                          {"CUDA_DEVICE_ORDER", order && *order ? order : "PCI_BUS_ID"}};
}

CudaBackend::CudaBackend() {
  nvcc_ = find_program("nvcc");
  if (nvcc_.empty() && fs::exists("/usr/local/cuda/bin/nvcc")) nvcc_ = "/usr/local/cuda/bin/nvcc";
  // With an empty cache both are asked at once: nvcc's version (a driver script) while the driver
  // initialises for the probe.
  auto version = std::async(std::launch::async, [this] { return nvcc_.empty() ? std::string() : cached_nvcc_version(nvcc_); });
  const auto gpus = cached_gpu_probe();
  nvcc_version_ = version.get();
  if (gpus.value("found", false) && !gpus["devices"].empty()) {
    devices_ = static_cast<int>(gpus["devices"].size());
    gpu_ = gpus["devices"][0].value("name", "GPU");
  }
  arch_ = arch_for(first_compute_capability(gpus));
}

const std::string& cutlass_include_dir() {
  static const std::string dir = [] {
    if (const char* given = std::getenv("KFAB_CUTLASS_INCLUDE"); given && *given) return std::string(given);
    auto r = run_command({python_interpreter(), "-c",
                          "import os, cutlass_library as c; print(os.path.join(os.path.dirname(c.__file__), 'source', 'include'))"},
                         30.0);
    if (!r || !r->status.ok()) return std::string();
    std::string out = r->output;
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    out = out.substr(out.rfind('\n') + 1);
    std::error_code ec;
    return fs::exists(fs::path(out) / "cutlass" / "cutlass.h", ec) ? out : std::string();
  }();
  return dir;
}

std::string CudaBackend::describe() const {
  if (nvcc_.empty()) return "no nvcc (install the CUDA toolkit)";
  return nvcc_version_ + ", " + (gpu_.empty() ? "no GPU (builds only)" : gpu_) + ", -arch=" + arch_;
}

CompileSpec CudaBackend::base_spec() const {
  // Machine code for the one architecture that runs it, and no PTX beside it: `-arch=sm_90a` also
  // embeds PTX, which costs nvcc a second cicc pass (about a quarter of a small kernel's cold build)
  // for a JIT fallback the device the arch was read from never needs.
  std::vector<std::string> arch_flags{"-arch=" + arch_};
  if (arch_.rfind("sm_", 0) == 0) arch_flags = {"-gencode", "arch=compute_" + arch_.substr(3) + ",code=" + arch_};
  CompileSpec spec{"cuda", nvcc_, nvcc_version_, {"-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC"}, {}, 300.0};
  spec.flags.insert(spec.flags.end(), arch_flags.begin(), arch_flags.end());
  spec.flags.push_back("-lineinfo");
  return spec;
}

std::string CudaBackend::build_command(const std::string& source) const {
  return compile_command(base_spec(), source, source + ".so") +
         " (and -lcublas where it includes cublas_v2.h; -I" + (cutlass_include_dir().empty() ? std::string("<CUTLASS, not installed>") : cutlass_include_dir()) +
         " --expt-relaxed-constexpr where it includes CUTLASS or CuTe)";
}

BuildOutcome<BuildResult> CudaBackend::build(const fs::path& source) {
  if (nvcc_.empty()) return BuildFailure{"no nvcc: install the CUDA toolkit or put nvcc on PATH"};
  auto text = read_file(source);
  if (!text) return BuildFailure{text.error().to_string()};
  CompileSpec spec = base_spec();
  // A baseline or candidate built on cuBLAS links it; nothing else is linked implicitly.
  if (text->find("cublas_v2.h") != std::string::npos) spec.link_flags.push_back("-lcublas");
  // One that includes CUTLASS's headers gets their folder (the folder is part of the cache key).
  if (text->find("#include \"cutlass/") != std::string::npos || text->find("#include <cutlass/") != std::string::npos ||
      text->find("#include \"cute/") != std::string::npos || text->find("#include <cute/") != std::string::npos) {
    if (cutlass_include_dir().empty())
      return BuildFailure{"the candidate includes CUTLASS, whose headers are not here: pip install nvidia-cutlass in the worker's Python "
                          "(make does, in .venv), or set KFAB_CUTLASS_INCLUDE to a folder holding cutlass/cutlass.h"};
    spec.flags.insert(spec.flags.end(), {"-I" + cutlass_include_dir(), "--expt-relaxed-constexpr"});  // as CUTLASS's own build
  }
  return compile_cached(spec, source);
}

const Target& cuda_target();
std::vector<std::string> CudaBackend::extensions() const { return cuda_target().suffixes; }

}  // namespace kfab
