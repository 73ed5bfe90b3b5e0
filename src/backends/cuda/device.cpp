#include "backends/cuda/device.h"

#include <dlfcn.h>

#include "backends/cuda/l2_flush_ptx.h"

#include <algorithm>
#include <utility>

namespace kfab::cuda {

namespace {

// Entry points of libcuda.so.1 (CUDA driver API, stable C ABI).
struct Api {
  int (*cuInit)(unsigned);
  int (*cuDeviceGet)(int*, int);
  int (*cuDeviceGetAttribute)(int*, int, int);
  int (*cuDeviceGetName)(char*, int, int);
  int (*cuDevicePrimaryCtxRetain)(void**, int);
  int (*cuCtxSetCurrent)(void*);
  int (*cuCtxSynchronize)();
  int (*cuStreamCreate)(void**, unsigned);
  int (*cuMemAlloc)(DevPtr*, size_t);
  int (*cuMemFree)(DevPtr);
  int (*cuMemcpyHtoD)(DevPtr, const void*, size_t);
  int (*cuMemcpyDtoH)(void*, DevPtr, size_t);
  int (*cuMemsetD8Async)(DevPtr, unsigned char, size_t, void*);
  int (*cuEventCreate)(void**, unsigned);
  int (*cuEventRecord)(void*, void*);
  int (*cuEventElapsedTime)(float*, void*, void*);
  int (*cuGetErrorName)(int, const char**);
  int (*cuGetErrorString)(int, const char**);
  int (*cuMemcpyDtoDAsync)(DevPtr, DevPtr, size_t, void*);
  int (*cuModuleLoadData)(void**, const void*);
  int (*cuModuleGetFunction)(void**, void*, const char*);
  int (*cuLaunchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
  int (*cuMemsetD8)(DevPtr, unsigned char, size_t);
  int (*cuDeviceGetPCIBusId)(char*, int, int);  // optional: NVML finds the same device by it
  // CUDA graphs (optional: replay is skipped where they are missing)
  int (*cuStreamBeginCapture)(void*, int);
  int (*cuStreamEndCapture)(void*, void**);
  int (*cuGraphInstantiateWithFlags)(void**, void*, unsigned long long);
  int (*cuGraphLaunch)(void*, void*);
  int (*cuGraphExecDestroy)(void*);
  int (*cuGraphDestroy)(void*);
};

Api g_api;

template <typename F>
bool bind(void* h, F& fn, const char* name) {
  fn = reinterpret_cast<F>(::dlsym(h, name));
  return fn != nullptr;
}

constexpr int kAttrComputeMajor = 75;
constexpr int kAttrComputeMinor = 76;
constexpr int kAttrL2CacheSize = 38;
constexpr int kAttrMultiprocessorCount = 16;

}  // namespace

std::string CudaDevice::open() {
  if (stream_ != nullptr) return {};
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) return "libcuda.so.1 not found: no NVIDIA driver on this machine";
  bool ok = bind(h, g_api.cuInit, "cuInit") && bind(h, g_api.cuDeviceGet, "cuDeviceGet") &&
            bind(h, g_api.cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
            bind(h, g_api.cuDeviceGetName, "cuDeviceGetName") &&
            bind(h, g_api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
            bind(h, g_api.cuCtxSetCurrent, "cuCtxSetCurrent") && bind(h, g_api.cuCtxSynchronize, "cuCtxSynchronize") &&
            bind(h, g_api.cuStreamCreate, "cuStreamCreate") && bind(h, g_api.cuMemAlloc, "cuMemAlloc_v2") &&
            bind(h, g_api.cuMemFree, "cuMemFree_v2") && bind(h, g_api.cuMemcpyHtoD, "cuMemcpyHtoD_v2") &&
            bind(h, g_api.cuMemcpyDtoH, "cuMemcpyDtoH_v2") && bind(h, g_api.cuMemsetD8Async, "cuMemsetD8Async") &&
            bind(h, g_api.cuEventCreate, "cuEventCreate") && bind(h, g_api.cuEventRecord, "cuEventRecord") &&
            bind(h, g_api.cuGetErrorName, "cuGetErrorName") && bind(h, g_api.cuGetErrorString, "cuGetErrorString") &&
            bind(h, g_api.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2") &&
            bind(h, g_api.cuModuleLoadData, "cuModuleLoadData") && bind(h, g_api.cuModuleGetFunction, "cuModuleGetFunction") &&
            bind(h, g_api.cuLaunchKernel, "cuLaunchKernel") && bind(h, g_api.cuMemsetD8, "cuMemsetD8_v2");
  if (!bind(h, g_api.cuEventElapsedTime, "cuEventElapsedTime_v2")) ok = ok && bind(h, g_api.cuEventElapsedTime, "cuEventElapsedTime");
  if (!ok) return "libcuda.so.1 lacks an expected entry point";
  if (!bind(h, g_api.cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId")) g_api.cuDeviceGetPCIBusId = nullptr;
  graphs_ = bind(h, g_api.cuStreamBeginCapture, "cuStreamBeginCapture_v2") &&
            bind(h, g_api.cuStreamEndCapture, "cuStreamEndCapture") &&
            bind(h, g_api.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags") &&
            bind(h, g_api.cuGraphLaunch, "cuGraphLaunch") && bind(h, g_api.cuGraphExecDestroy, "cuGraphExecDestroy") &&
            bind(h, g_api.cuGraphDestroy, "cuGraphDestroy");
  int rc = g_api.cuInit(0);
  if (rc != 0) return "cuInit: " + error(rc);
  int dev = 0;
  if ((rc = g_api.cuDeviceGet(&dev, 0)) != 0) return "cuDeviceGet: " + error(rc);
  int major = 0, minor = 0, l2 = 0;
  g_api.cuDeviceGetAttribute(&major, kAttrComputeMajor, dev);
  g_api.cuDeviceGetAttribute(&minor, kAttrComputeMinor, dev);
  g_api.cuDeviceGetAttribute(&l2, kAttrL2CacheSize, dev);
  cc_ = major * 10 + minor;
  l2_bytes_ = static_cast<size_t>(l2);
  char buf[256] = {0};
  g_api.cuDeviceGetName(buf, sizeof buf - 1, dev);
  name_ = buf;
  // The primary context is the one the CUDA runtime inside a candidate uses: pointers are shared.
  void* ctx = nullptr;
  if ((rc = g_api.cuDevicePrimaryCtxRetain(&ctx, dev)) != 0) return "cuDevicePrimaryCtxRetain: " + error(rc);
  if ((rc = g_api.cuCtxSetCurrent(ctx)) != 0) return "cuCtxSetCurrent: " + error(rc);
  void* s = nullptr;
  if ((rc = g_api.cuStreamCreate(&s, 0)) != 0) return "cuStreamCreate: " + error(rc);
  if (l2_bytes_ > 0) {
    if ((rc = g_api.cuMemAlloc(&scratch_, 2 * l2_bytes_ + 64)) != 0) return "cuMemAlloc (L2 flush buffer): " + error(rc);
    g_api.cuMemsetD8(scratch_, 0, 2 * l2_bytes_ + 64);
    // The reading flush kernel; without it (a driver too old for the PTX) a memset does the flush.
    void* mod = nullptr;
    if (g_api.cuModuleLoadData(&mod, kL2FlushPtx) == 0) g_api.cuModuleGetFunction(&flush_fn_, mod, "kfab_l2_flush");
    int sms = 0;
    g_api.cuDeviceGetAttribute(&sms, kAttrMultiprocessorCount, dev);
    sms_ = sms > 0 ? sms : 132;
  }
  if ((rc = g_api.cuEventCreate(&start_, 0)) != 0 || (rc = g_api.cuEventCreate(&end_, 0)) != 0)
    return "cuEventCreate: " + error(rc);
  stream_ = s;
  return {};
}

namespace {
DevPtr ptr(void* h) { return static_cast<DevPtr>(reinterpret_cast<uintptr_t>(h)); }
}  // namespace

int CudaDevice::alloc(void** handle, size_t bytes) {
  DevPtr p = 0;
  const int rc = g_api.cuMemAlloc(&p, bytes == 0 ? 256 : bytes);
  *handle = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  return rc;
}
int CudaDevice::release(void* handle) { return g_api.cuMemFree(ptr(handle)); }
int CudaDevice::upload(void* handle, const void* src, size_t bytes, size_t offset) {
  return g_api.cuMemcpyHtoD(ptr(handle) + offset, src, bytes);
}
int CudaDevice::download(void* dst, void* handle, size_t bytes) { return g_api.cuMemcpyDtoH(dst, ptr(handle), bytes); }
int CudaDevice::fill(void* handle, unsigned char byte, size_t bytes) {
  return g_api.cuMemsetD8Async(ptr(handle), byte, bytes, stream_);
}
int CudaDevice::flush_cache() {
  if (scratch_ == 0) return 0;
  if (flush_fn_ == nullptr) return g_api.cuMemsetD8Async(scratch_, ++flush_value_, 2 * l2_bytes_, stream_);
  DevPtr data = scratch_;
  unsigned long long n = 2 * l2_bytes_ / 16;
  DevPtr sink = scratch_ + 2 * l2_bytes_;
  void* args[] = {&data, &n, &sink};
  return g_api.cuLaunchKernel(flush_fn_, static_cast<unsigned>(sms_ * 4), 1, 1, 512, 1, 1, 0, stream_, args, nullptr);
}
int CudaDevice::synchronize() { return g_api.cuCtxSynchronize(); }
int CudaDevice::mark_start() { return g_api.cuEventRecord(start_, stream_); }
int CudaDevice::mark_end() { return g_api.cuEventRecord(end_, stream_); }
int CudaDevice::elapsed_ms(double* ms) {
  float f = 0.0f;
  const int rc = g_api.cuEventElapsedTime(&f, start_, end_);
  *ms = f;
  return rc;
}
nlohmann::json CudaDevice::describe() const {
  return {{"device", name_}, {"compute_capability", cc_}, {"l2_bytes", l2_bytes_}};
}

int CudaDevice::capture_begin() {
  if (!graphs_) return kNoReplay;
  constexpr int kCaptureModeThreadLocal = 1;  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
  return g_api.cuStreamBeginCapture(stream_, kCaptureModeThreadLocal);
}

int CudaDevice::capture_end(void** replay) {
  *replay = nullptr;
  if (!graphs_) return kNoReplay;
  void* graph = nullptr;
  int rc = g_api.cuStreamEndCapture(stream_, &graph);
  if (rc != 0) return rc;
  if (graph == nullptr) return kNoReplay;
  rc = g_api.cuGraphInstantiateWithFlags(replay, graph, 0);
  g_api.cuGraphDestroy(graph);
  return rc;
}

int CudaDevice::launch_replay(void* replay) { return graphs_ ? g_api.cuGraphLaunch(replay, stream_) : kNoReplay; }

void CudaDevice::release_replay(void* replay) {
  if (graphs_ && replay != nullptr) g_api.cuGraphExecDestroy(replay);
}

double CudaDevice::copy_bandwidth() {
  constexpr size_t kBytes = size_t{1} << 30;
  DevPtr a = 0, b = 0;
  if (g_api.cuMemAlloc(&a, kBytes) != 0) return 0.0;
  if (g_api.cuMemAlloc(&b, kBytes) != 0) {
    g_api.cuMemFree(a);
    return 0.0;
  }
  double best = 0.0;
  for (int pass = 0; pass < 8; ++pass) {
    mark_start();
    g_api.cuMemcpyDtoDAsync(b, a, kBytes, stream_);
    mark_end();
    if (synchronize() != 0) break;
    double ms = 0.0;
    if (elapsed_ms(&ms) == 0 && ms > 0.0 && pass > 0) best = std::max(best, 2.0 * static_cast<double>(kBytes) / (ms * 1e-3));
  }
  g_api.cuMemFree(a);
  g_api.cuMemFree(b);
  return best;
}

namespace {

struct Nvml {
  bool loaded = false;
  void* dev = nullptr;
  int (*get_clock)(void*, int, unsigned*) = nullptr;
  int (*get_reasons)(void*, unsigned long long*) = nullptr;
};

Nvml& nvml() {
  static Nvml n = [] {
    Nvml r;
    void* h = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return r;
    auto init = reinterpret_cast<int (*)()>(::dlsym(h, "nvmlInit_v2"));
    auto by_index = reinterpret_cast<int (*)(unsigned, void**)>(::dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
    r.get_clock = reinterpret_cast<int (*)(void*, int, unsigned*)>(::dlsym(h, "nvmlDeviceGetClockInfo"));
    r.get_reasons = reinterpret_cast<int (*)(void*, unsigned long long*)>(::dlsym(h, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (r.get_reasons == nullptr)
      r.get_reasons = reinterpret_cast<int (*)(void*, unsigned long long*)>(::dlsym(h, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(::dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2"));
    if (!init || !by_index || !r.get_clock || init() != 0) return r;
    // The device this runner uses is CUDA's device 0, which is NVML's device 0 only when nothing
    // reorders or hides devices (CUDA_VISIBLE_DEVICES, as `kfab bench --devices` pins its processes):
    // found by its PCI bus id where the driver gives one.
    char bus[64] = {0};
    int dev = 0;
    const bool by_pci = by_bus && g_api.cuDeviceGetPCIBusId && g_api.cuDeviceGet && g_api.cuDeviceGet(&dev, 0) == 0 &&
                        g_api.cuDeviceGetPCIBusId(bus, sizeof bus - 1, dev) == 0 && by_bus(bus, &r.dev) == 0;
    if (!by_pci && by_index(0, &r.dev) != 0) return r;
    r.loaded = true;
    return r;
  }();
  return n;
}

}  // namespace

ClockReading CudaDevice::read_clocks() {
  ClockReading c;
  Nvml& n = nvml();
  if (!n.loaded) return c;
  constexpr int kClockSm = 1, kClockMem = 2;
  c.ok = n.get_clock(n.dev, kClockSm, &c.sm_mhz) == 0 && n.get_clock(n.dev, kClockMem, &c.mem_mhz) == 0;
  if (n.get_reasons) n.get_reasons(n.dev, &c.reasons);
  return c;
}

std::string CudaDevice::clock_reasons(unsigned long long mask) const {
  static const std::pair<unsigned long long, const char*> kNames[] = {
      {0x1, "gpu_idle"},        {0x2, "applications_clocks"}, {0x4, "sw_power_cap"}, {0x8, "hw_slowdown"},
      {0x10, "sync_boost"},     {0x20, "sw_thermal"},         {0x40, "hw_thermal"},  {0x80, "hw_power_brake"},
      {0x100, "display_clocks"}};
  std::string s;
  for (const auto& [bit, name] : kNames)
    if (mask & bit) s += (s.empty() ? "" : ",") + std::string(name);
  return s.empty() ? "none" : s;
}

std::string CudaDevice::error(int rc) const {
  if (rc == kNoReplay) return "CUDA graphs are not available";
  const char* name = nullptr;
  const char* text = nullptr;
  if (g_api.cuGetErrorName) g_api.cuGetErrorName(rc, &name);
  if (g_api.cuGetErrorString) g_api.cuGetErrorString(rc, &text);
  std::string s = name ? name : "CUDA error " + std::to_string(rc);
  if (text) s += std::string(": ") + text;
  return s;
}


}  // namespace kfab::cuda
