#include "backends/cuda/cuda_backend.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "core/doctor.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/process.h"

namespace kfab {

namespace fs = std::filesystem;

namespace {
constexpr double kCompileTimeoutS = 300.0;
constexpr size_t kMaxCompilerMessage = 16000;
/// probe_gpus() initialises the driver (a few hundred ms); its answer is kept per boot and driver
/// version, so a warm `kfab eval` does not pay it. Without a driver there is nothing to cache.
nlohmann::json cached_gpu_probe() {
  auto driver = read_file("/proc/driver/nvidia/version");
  auto boot = read_file("/proc/sys/kernel/random/boot_id");
  if (!driver || !boot) return probe_gpus();
  const fs::path file = cache_dir() / "machine" / ("cuda-probe-" + hash_hex(*driver + *boot).substr(0, 16) + ".json");
  if (auto text = read_file(file)) {
    try {
      return nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception&) {
      // probed again below
    }
  }
  nlohmann::json j = probe_gpus();
  if (j.value("found", false)) (void)write_file_atomic(file, j.dump(2));
  return j;
}

}  // namespace

CudaBackend::CudaBackend() {
  nvcc_ = find_program("nvcc");
  if (nvcc_.empty() && fs::exists("/usr/local/cuda/bin/nvcc")) nvcc_ = "/usr/local/cuda/bin/nvcc";
  if (!nvcc_.empty())
    if (auto r = run_command({nvcc_, "--version"}, 20.0); r && r->status.ok()) {
      std::string o = r->output;
      while (!o.empty() && o.back() == '\n') o.pop_back();
      nvcc_version_ = o.substr(o.rfind('\n') + 1);
    }
  std::string cc;
  const auto gpus = cached_gpu_probe();
  if (gpus.value("found", false) && !gpus["devices"].empty()) {
    gpu_ = gpus["devices"][0].value("name", "GPU");
    cc = gpus["devices"][0].value("compute_capability", "");
  }
  if (const char* a = std::getenv("KFAB_CUDA_ARCH"); a && *a) {
    arch_ = a;
  } else if (!cc.empty()) {
    std::string digits;
    for (char c : cc)
      if (c != '.') digits += c;
    // Hopper's wgmma and TMA need the arch-specific target.
    arch_ = "sm_" + digits + (digits == "90" ? "a" : "");
  } else {
    arch_ = "sm_90a";
  }
}

std::string CudaBackend::describe() const {
  if (nvcc_.empty()) return "no nvcc (install the CUDA toolkit)";
  return nvcc_version_ + ", " + (gpu_.empty() ? "no GPU (builds only)" : gpu_) + ", -arch=" + arch_;
}

BuildOutcome<BuildResult> CudaBackend::build(const fs::path& source) {
  const auto start = std::chrono::steady_clock::now();
  if (nvcc_.empty()) return BuildFailure{"no nvcc: install the CUDA toolkit or put nvcc on PATH"};
  auto text = read_file(source);
  if (!text) return BuildFailure{text.error().to_string()};
  const fs::path include = abi_include_dir();
  const std::vector<std::string> flags = {"-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC",
                                          "-arch=" + arch_, "-lineinfo"};
  std::string key_material = *text + '\0' + nvcc_ + '\0' + nvcc_version_ + '\0';
  for (const auto& f : flags) key_material += f + ' ';
  if (auto header = read_file(include / "kfab/candidate.h")) key_material += *header;
  BuildResult r;
  r.key = hash_hex(key_material);
  const fs::path dir = cache_dir() / "cuda";
  r.artifact = dir / (r.key + ".so");
  std::error_code ec;
  if (fs::exists(r.artifact, ec)) {
    r.cached = true;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  fs::create_directories(dir, ec);
  if (ec) return BuildFailure{"cannot create the compile cache " + dir.string() + ": " + ec.message()};
  const fs::path tmp = dir / (r.key + ".tmp." + std::to_string(::getpid()) + ".so");
  std::vector<std::string> argv = {nvcc_};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-I" + include.string(), "-o", tmp.string(), fs::absolute(source).string()});
  auto run = run_command(argv, kCompileTimeoutS, fs::absolute(source).parent_path());
  if (!run) return BuildFailure{run.error().to_string()};
  if (run->timed_out || !run->status.ok()) {
    fs::remove(tmp, ec);
    std::string msg = run->output;
    if (msg.size() > kMaxCompilerMessage) msg = msg.substr(0, kMaxCompilerMessage) + "\n[... compiler output truncated]";
    if (run->timed_out) return BuildFailure{"nvcc ran past " + std::to_string(static_cast<int>(kCompileTimeoutS)) + " s\n" + msg, true};
    if (msg.empty()) msg = "nvcc " + run->status.describe();
    return BuildFailure{msg};
  }
  fs::rename(tmp, r.artifact, ec);
  if (ec) return BuildFailure{"cannot move the build into the cache: " + ec.message()};
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace kfab
