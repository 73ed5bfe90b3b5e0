#include "runner/cuda_driver.h"

#include <dlfcn.h>

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

}  // namespace

std::string Device::open() {
  if (is_open()) return {};
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
            bind(h, g_api.cuGetErrorName, "cuGetErrorName") && bind(h, g_api.cuGetErrorString, "cuGetErrorString");
  if (!bind(h, g_api.cuEventElapsedTime, "cuEventElapsedTime_v2")) ok = ok && bind(h, g_api.cuEventElapsedTime, "cuEventElapsedTime");
  if (!ok) return "libcuda.so.1 lacks an expected entry point";
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
  if (l2_bytes_ > 0 && (rc = g_api.cuMemAlloc(&scratch_, 2 * l2_bytes_)) != 0) return "cuMemAlloc (L2 flush buffer): " + error(rc);
  stream_ = s;
  return {};
}

int Device::alloc(DevPtr* p, size_t bytes) { return g_api.cuMemAlloc(p, bytes == 0 ? 256 : bytes); }
int Device::free(DevPtr p) { return g_api.cuMemFree(p); }
int Device::upload(DevPtr dst, const void* src, size_t bytes) { return g_api.cuMemcpyHtoD(dst, src, bytes); }
int Device::download(void* dst, DevPtr src, size_t bytes) { return g_api.cuMemcpyDtoH(dst, src, bytes); }
int Device::flush_l2() {
  if (scratch_ == 0) return 0;
  return g_api.cuMemsetD8Async(scratch_, ++flush_value_, 2 * l2_bytes_, stream_);
}
int Device::synchronize() { return g_api.cuCtxSynchronize(); }
int Device::event_create(Event* e) { return g_api.cuEventCreate(e, 0); }
int Device::event_record(Event e, Stream s) { return g_api.cuEventRecord(e, s); }
int Device::event_elapsed_ms(float* ms, Event a, Event b) { return g_api.cuEventElapsedTime(ms, a, b); }

std::string Device::error(int rc) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (g_api.cuGetErrorName) g_api.cuGetErrorName(rc, &name);
  if (g_api.cuGetErrorString) g_api.cuGetErrorString(rc, &text);
  std::string s = name ? name : "CUDA error " + std::to_string(rc);
  if (text) s += std::string(": ") + text;
  return s;
}

Device& device() {
  static Device d;
  return d;
}

}  // namespace kfab::cuda
