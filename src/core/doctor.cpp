#include "core/doctor.h"

#include "core/sandbox.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/paths.h"
#include "core/process.h"

namespace kfab {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

/// The line of `--version` output that carries the version (nvcc puts it last).
json tool(const std::string& name, const std::string& path_hint = {}) {
  std::string path = find_program(name);
  if (path.empty() && !path_hint.empty() && fs::exists(path_hint)) path = path_hint;
  if (path.empty()) return {{"name", name}, {"found", false}, {"why", "not on PATH"}};
  auto r = run_command({path, "--version"}, 20.0);
  std::string version;
  if (r && !r->output.empty()) {
    version = first_line(r->output);
    for (size_t pos = 0; pos < r->output.size();) {
      size_t end = r->output.find('\n', pos);
      std::string line = r->output.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      if (line.find("release") != std::string::npos || line.find("Version") != std::string::npos) version = line;
      if (end == std::string::npos) break;
      pos = end + 1;
    }
  }
  return {{"name", name}, {"found", true}, {"path", path}, {"version", version}};
}

json probe_python() {
  // the interpreter kfab's Python worker runs (KFAB_PYTHON, else the build's .venv, else python3 on PATH)
  std::string py = python_interpreter();
  if (py == "python3") py = find_program("python3");
  if (py.empty()) return {{"found", false}, {"why", "python3 not on PATH (make venv installs torch in .venv; KFAB_PYTHON names another)"}};
  json out = {{"found", true}, {"path", py}};
  const char* script =
      "import sys, importlib\n"
      "print('python', sys.version.split()[0])\n"
      "for m in ('torch', 'triton'):\n"
      "    try:\n"
      "        mod = importlib.import_module(m)\n"
      "        extra = ''\n"
      "        if m == 'torch': extra = ' cuda=' + str(mod.cuda.is_available())\n"
      "        print(m, mod.__version__ + extra)\n"
      "    except Exception as e:\n"
      "        print(m, 'absent:', type(e).__name__)\n";
  auto r = run_command({py, "-c", script}, 60.0);
  if (!r || !r->status.ok()) {
    out["why"] = "python3 did not run the probe";
    return out;
  }
  size_t pos = 0;
  const std::string& o = r->output;
  while (pos < o.size()) {
    size_t end = o.find('\n', pos);
    std::string line = o.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    auto sp = line.find(' ');
    if (sp != std::string::npos) out[line.substr(0, sp)] = line.substr(sp + 1);
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return out;
}

}  // namespace

json probe_opencl() {
  json out = {{"library", "libOpenCL.so.1"}, {"platforms", json::array()}};
  void* h = ::dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    out["found"] = false;
    out["why"] = "libOpenCL.so.1 not found (install ocl-icd-libopencl1 and a platform such as pocl-opencl-icd)";
    return out;
  }
  using PlatFn = int (*)(unsigned, void**, unsigned*);
  using InfoFn = int (*)(void*, unsigned, size_t, void*, size_t*);
  using DevFn = int (*)(void*, uint64_t, unsigned, void**, unsigned*);
  auto plats = reinterpret_cast<PlatFn>(::dlsym(h, "clGetPlatformIDs"));
  auto info = reinterpret_cast<InfoFn>(::dlsym(h, "clGetPlatformInfo"));
  auto devs = reinterpret_cast<DevFn>(::dlsym(h, "clGetDeviceIDs"));
  unsigned n = 0;
  if (!plats || !info || plats(0, nullptr, &n) != 0 || n == 0) {
    out["found"] = false;
    out["why"] = "no OpenCL platform is installed";
    return out;
  }
  std::vector<void*> ids(n);
  plats(n, ids.data(), nullptr);
  constexpr unsigned kPlatformName = 0x0902, kPlatformVersion = 0x0901;
  constexpr uint64_t kDeviceTypeAll = 0xFFFFFFFF;
  for (void* p : ids) {
    char name[256] = {0}, version[256] = {0};
    info(p, kPlatformName, sizeof name - 1, name, nullptr);
    info(p, kPlatformVersion, sizeof version - 1, version, nullptr);
    unsigned nd = 0;
    if (devs) devs(p, kDeviceTypeAll, 0, nullptr, &nd);
    out["platforms"].push_back({{"name", name}, {"version", version}, {"devices", nd}});
  }
  out["found"] = true;
  return out;
}

json probe_gpus() {
  json out = {{"driver", "libcuda.so.1"}, {"devices", json::array()}};
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    out["found"] = false;
    out["why"] = "libcuda.so.1 not found (no NVIDIA driver here)";
    return out;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  using GetFn = int (*)(int*, int);
  using NameFn = int (*)(char*, int, int);
  using MemFn = int (*)(size_t*, int);
  using AttrFn = int (*)(int*, int, int);
  using DrvFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(h, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(h, "cuDeviceGetCount"));
  auto get = reinterpret_cast<GetFn>(::dlsym(h, "cuDeviceGet"));
  auto name = reinterpret_cast<NameFn>(::dlsym(h, "cuDeviceGetName"));
  auto mem = reinterpret_cast<MemFn>(::dlsym(h, "cuDeviceTotalMem_v2"));
  auto attr = reinterpret_cast<AttrFn>(::dlsym(h, "cuDeviceGetAttribute"));
  auto drv = reinterpret_cast<DrvFn>(::dlsym(h, "cuDriverGetVersion"));
  if (!init || !count || !get || !name) {
    out["found"] = false;
    out["why"] = "libcuda.so.1 lacks the expected entry points";
    return out;
  }
  if (int rc = init(0); rc != 0) {
    out["found"] = false;
    out["why"] = "cuInit failed with CUDA error " + std::to_string(rc);
    return out;
  }
  int v = 0;
  if (drv && drv(&v) == 0) out["driver_version"] = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  int n = 0;
  count(&n);
  for (int i = 0; i < n; ++i) {
    int dev = 0;
    if (get(&dev, i) != 0) continue;
    char buf[256] = {0};
    name(buf, sizeof buf - 1, dev);
    json d = {{"index", i}, {"name", buf}};
    size_t bytes = 0;
    if (mem && mem(&bytes, dev) == 0) d["memory_GiB"] = static_cast<double>(bytes) / (1ull << 30);
    int major = 0, minor = 0;
    if (attr && attr(&major, 75, dev) == 0 && attr(&minor, 76, dev) == 0)
      d["compute_capability"] = std::to_string(major) + "." + std::to_string(minor);
    out["devices"].push_back(d);
  }
  out["found"] = n > 0;
  if (n == 0) out["why"] = "the driver reports no device";
  return out;
}

json probe_gpus_nvml() {
  json out = {{"driver", "libnvidia-ml.so.1"}, {"via", "nvml"}, {"devices", json::array()}, {"found", false}};
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr) {
    out["why"] = "CUDA_VISIBLE_DEVICES is set: CUDA's device list is not NVML's";
    return out;
  }
  void* h = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    out["why"] = "libnvidia-ml.so.1 not found";
    return out;
  }
  struct Memory {
    unsigned long long total, free, used;
  };
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned*);
  using HandleFn = int (*)(unsigned, void**);
  using NameFn = int (*)(void*, char*, unsigned);
  using CcFn = int (*)(void*, int*, int*);
  using MemFn = int (*)(void*, Memory*);
  using DrvFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(h, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<InitFn>(::dlsym(h, "nvmlShutdown"));
  auto count = reinterpret_cast<CountFn>(::dlsym(h, "nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<HandleFn>(::dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
  auto name = reinterpret_cast<NameFn>(::dlsym(h, "nvmlDeviceGetName"));
  auto cc = reinterpret_cast<CcFn>(::dlsym(h, "nvmlDeviceGetCudaComputeCapability"));
  auto mem = reinterpret_cast<MemFn>(::dlsym(h, "nvmlDeviceGetMemoryInfo"));
  auto drv = reinterpret_cast<DrvFn>(::dlsym(h, "nvmlSystemGetCudaDriverVersion_v2"));
  if (!init || !shutdown || !count || !handle || !name || !cc) {
    out["why"] = "libnvidia-ml.so.1 lacks the expected entry points";
    return out;
  }
  if (int rc = init(); rc != 0) {
    out["why"] = "nvmlInit failed with NVML error " + std::to_string(rc);
    return out;
  }
  int v = 0;
  if (drv && drv(&v) == 0) out["driver_version"] = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  unsigned n = 0;
  bool uniform = count(&n) == 0 && n > 0;
  for (unsigned i = 0; i < n && uniform; ++i) {
    void* dev = nullptr;
    char buf[256] = {0};
    int major = 0, minor = 0;
    if (handle(i, &dev) != 0 || name(dev, buf, sizeof buf - 1) != 0 || cc(dev, &major, &minor) != 0) {
      uniform = false;
      break;
    }
    json d = {{"index", i}, {"name", buf}, {"compute_capability", std::to_string(major) + "." + std::to_string(minor)}};
    Memory m{};
    if (mem && mem(dev, &m) == 0) d["memory_GiB"] = static_cast<double>(m.total) / (1ull << 30);
    if (!out["devices"].empty() &&
        (out["devices"][0]["name"] != d["name"] || out["devices"][0]["compute_capability"] != d["compute_capability"]))
      uniform = false;
    out["devices"].push_back(d);
  }
  shutdown();
  if (!uniform) {
    out["why"] = n == 0 ? "NVML reports no device" : "NVML's devices differ (or one cannot be read): CUDA's order is not NVML's";
    out["devices"] = json::array();
    return out;
  }
  out["found"] = true;
  return out;
}

std::string gpu_pci_address(unsigned index) {
  void* h = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return {};
  // nvmlPciInfo_t begins with busIdLegacy[16], then domain, bus and device as unsigned ints: the layout
  // every NVML since 2012 shares (nvml.h).
  struct PciInfo {
    char legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
  };
  using InitFn = int (*)();
  using HandleFn = int (*)(unsigned, void**);
  using PciFn = int (*)(void*, PciInfo*);
  auto init = reinterpret_cast<InitFn>(::dlsym(h, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<InitFn>(::dlsym(h, "nvmlShutdown"));
  auto handle = reinterpret_cast<HandleFn>(::dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
  auto pci = reinterpret_cast<PciFn>(::dlsym(h, "nvmlDeviceGetPciInfo_v3"));
  if (!init || !shutdown || !handle || !pci || init() != 0) return {};
  std::string out;
  void* dev = nullptr;
  PciInfo info{};
  if (handle(index, &dev) == 0 && pci(dev, &info) == 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.0", info.domain, info.bus, info.device);
    out = buf;
  }
  shutdown();
  return out;
}

json probe_system() {
  json out;
  const char* cxx = std::getenv("CXX");
  out["compilers"] = json::array({tool(cxx && *cxx ? cxx : "g++"), tool("clang++"),
                                  tool("nvcc", "/usr/local/cuda/bin/nvcc")});
  json cuda = tool("nvcc", "/usr/local/cuda/bin/nvcc");
  for (const char* home : std::initializer_list<const char*>{std::getenv("CUDA_HOME"), std::getenv("CUDA_PATH"), "/usr/local/cuda"}) {
    if (home && fs::exists(fs::path(home) / "include/cuda.h")) {
      cuda["home"] = home;
      break;
    }
  }
  out["cuda_toolkit"] = cuda;
  out["gpus"] = probe_gpus();
  out["python"] = probe_python();
  out["opencl"] = probe_opencl();
  out["ncu"] = tool("ncu", "/usr/local/cuda/bin/ncu");
  const SandboxSupport sb = probe_sandbox();
  const char* mode = sandbox_mode() == SandboxMode::Off ? "off" : sandbox_mode() == SandboxMode::Require ? "require" : "best effort";
  out["sandbox"] = {{"found", sandbox_mode() != SandboxMode::Off}, {"mode", mode}, {"landlock_abi", sb.landlock_abi},
                    {"net_namespace", sb.net_namespace}, {"mount_namespace", sb.mount_namespace},
                    {"seccomp", sb.seccomp}, {"summary", sb.describe()}};
  if (sandbox_mode() == SandboxMode::Off) out["sandbox"]["why"] = "KFAB_SANDBOX=off";
  return out;
}

}  // namespace kfab
