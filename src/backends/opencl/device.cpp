#include "backends/opencl/device.h"

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace kfab {

namespace {

// The ICD loader's entry points kfab uses, each bound to the symbol "cl" followed by its name.
#define KFAB_CL_ENTRY_POINTS(X) \
  X(GetPlatformIDs) X(GetPlatformInfo) X(GetDeviceIDs) X(GetDeviceInfo) X(CreateContext) X(CreateCommandQueue) \
  X(CreateBuffer) X(ReleaseMemObject) X(EnqueueWriteBuffer) X(EnqueueReadBuffer) X(EnqueueCopyBuffer) \
  X(EnqueueFillBuffer) X(EnqueueMarkerWithWaitList) X(GetEventProfilingInfo) X(ReleaseEvent) X(Finish)

struct ClApi {
#define KFAB_CL_MEMBER(name) decltype(&cl##name) name;
  KFAB_CL_ENTRY_POINTS(KFAB_CL_MEMBER)
#undef KFAB_CL_MEMBER
};
ClApi cl;

template <typename F>
bool bind(void* h, F& fn, const char* name) {
  fn = reinterpret_cast<F>(::dlsym(h, name));
  return fn != nullptr;
}

/// Binds every entry point of `cl`; false if the library lacks one.
bool bind_all(void* h) {
  bool ok = true;
#define KFAB_CL_BIND(name) ok = ok && bind(h, cl.name, "cl" #name);
  KFAB_CL_ENTRY_POINTS(KFAB_CL_BIND)
#undef KFAB_CL_BIND
  return ok;
}

std::string info_string(cl_device_id d, cl_device_info what) {
  char buf[512] = {0};
  cl.GetDeviceInfo(d, what, sizeof buf - 1, buf, nullptr);
  return buf;
}

}  // namespace

std::string OpenClDevice::open() {
  if (queue_ != nullptr) return {};
  void* h = ::dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) return "libOpenCL.so.1 not found (install ocl-icd-libopencl1 and a platform such as pocl-opencl-icd)";
  if (!bind_all(h)) return "libOpenCL.so.1 lacks an OpenCL 1.2 entry point";
  cl_uint np = 0;
  if (cl.GetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) return "no OpenCL platform is installed";
  std::vector<cl_platform_id> plats(np);
  cl.GetPlatformIDs(np, plats.data(), nullptr);
  const char* want = std::getenv("KFAB_OPENCL_PLATFORM");
  cl_device_id chosen = nullptr;
  for (const cl_device_type type : {cl_device_type{CL_DEVICE_TYPE_GPU}, cl_device_type{CL_DEVICE_TYPE_ALL}}) {
    for (auto p : plats) {
      char pname[256] = {0};
      cl.GetPlatformInfo(p, CL_PLATFORM_NAME, sizeof pname - 1, pname, nullptr);
      if (want && *want && std::string(pname).find(want) == std::string::npos) continue;
      cl_device_id d = nullptr;
      cl_uint nd = 0;
      if (cl.GetDeviceIDs(p, type, 1, &d, &nd) == CL_SUCCESS && nd > 0) {
        chosen = d;
        platform_ = pname;
        break;
      }
    }
    if (chosen) break;
  }
  if (chosen == nullptr)
    return want ? std::string("no OpenCL device on a platform matching KFAB_OPENCL_PLATFORM=") + want : "no OpenCL device";
  device_ = chosen;
  name_ = info_string(chosen, CL_DEVICE_NAME);
  cl_device_type type = 0;
  cl.GetDeviceInfo(chosen, CL_DEVICE_TYPE, sizeof type, &type, nullptr);
  is_gpu_ = (type & CL_DEVICE_TYPE_GPU) != 0;
  cl_int rc = CL_SUCCESS;
  context_ = cl.CreateContext(nullptr, 1, &chosen, nullptr, nullptr, &rc);
  if (rc != CL_SUCCESS) return "clCreateContext: " + error(rc);
  queue_ = cl.CreateCommandQueue(static_cast<cl_context>(context_), chosen, CL_QUEUE_PROFILING_ENABLE, &rc);
  if (rc != CL_SUCCESS) return "clCreateCommandQueue: " + error(rc);
  if (is_gpu_) {
    cl_ulong cache = 0;
    cl.GetDeviceInfo(chosen, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache, nullptr);
    scratch_bytes_ = 2 * static_cast<size_t>(cache);
    if (scratch_bytes_ > 0) {
      scratch_ = cl.CreateBuffer(static_cast<cl_context>(context_), CL_MEM_READ_WRITE, scratch_bytes_, nullptr, &rc);
      if (rc != CL_SUCCESS) return "clCreateBuffer (cache flush buffer): " + error(rc);
    }
  }
  return {};
}

int OpenClDevice::alloc(void** handle, size_t bytes) {
  cl_int rc = CL_SUCCESS;
  *handle = cl.CreateBuffer(static_cast<cl_context>(context_), CL_MEM_READ_WRITE, bytes == 0 ? 64 : bytes, nullptr, &rc);
  return rc;
}
int OpenClDevice::release(void* handle) { return cl.ReleaseMemObject(static_cast<cl_mem>(handle)); }
int OpenClDevice::upload(void* handle, const void* src, size_t bytes, size_t offset) {
  if (bytes == 0) return CL_SUCCESS;
  return cl.EnqueueWriteBuffer(static_cast<cl_command_queue>(queue_), static_cast<cl_mem>(handle), CL_TRUE, offset, bytes, src,
                               0, nullptr, nullptr);
}
int OpenClDevice::download(void* dst, void* handle, size_t bytes) {
  if (bytes == 0) return CL_SUCCESS;
  return cl.EnqueueReadBuffer(static_cast<cl_command_queue>(queue_), static_cast<cl_mem>(handle), CL_TRUE, 0, bytes, dst,
                              0, nullptr, nullptr);
}
int OpenClDevice::fill(void* handle, unsigned char byte, size_t bytes) {
  if (bytes == 0) return CL_SUCCESS;
  return cl.EnqueueFillBuffer(static_cast<cl_command_queue>(queue_), static_cast<cl_mem>(handle), &byte, 1, 0, bytes, 0,
                              nullptr, nullptr);
}
int OpenClDevice::synchronize() { return cl.Finish(static_cast<cl_command_queue>(queue_)); }
int OpenClDevice::flush_cache() {
  if (scratch_ == nullptr) return CL_SUCCESS;
  static cl_uchar value = 0;
  ++value;
  return cl.EnqueueFillBuffer(static_cast<cl_command_queue>(queue_), static_cast<cl_mem>(scratch_), &value, 1, 0,
                              scratch_bytes_, 0, nullptr, nullptr);
}

int OpenClDevice::mark_start() {
  if (start_) cl.ReleaseEvent(static_cast<cl_event>(start_));
  start_ = nullptr;
  return cl.EnqueueMarkerWithWaitList(static_cast<cl_command_queue>(queue_), 0, nullptr, reinterpret_cast<cl_event*>(&start_));
}
int OpenClDevice::mark_end() {
  if (end_) cl.ReleaseEvent(static_cast<cl_event>(end_));
  end_ = nullptr;
  return cl.EnqueueMarkerWithWaitList(static_cast<cl_command_queue>(queue_), 0, nullptr, reinterpret_cast<cl_event*>(&end_));
}
int OpenClDevice::elapsed_ms(double* ms) {
  cl_ulong a = 0, b = 0;
  cl_int rc = cl.GetEventProfilingInfo(static_cast<cl_event>(start_), CL_PROFILING_COMMAND_END, sizeof a, &a, nullptr);
  if (rc == CL_SUCCESS) rc = cl.GetEventProfilingInfo(static_cast<cl_event>(end_), CL_PROFILING_COMMAND_END, sizeof b, &b, nullptr);
  *ms = b > a ? static_cast<double>(b - a) * 1e-6 : 0.0;
  return rc;
}

double OpenClDevice::copy_bandwidth() {
  constexpr size_t kBytes = size_t{256} << 20;
  void* a = nullptr;
  void* b = nullptr;
  if (alloc(&a, kBytes) != CL_SUCCESS) return 0.0;
  if (alloc(&b, kBytes) != CL_SUCCESS) {
    release(a);
    return 0.0;
  }
  double best = 0.0;
  for (int pass = 0; pass < 5; ++pass) {
    mark_start();
    cl.EnqueueCopyBuffer(static_cast<cl_command_queue>(queue_), static_cast<cl_mem>(a), static_cast<cl_mem>(b), 0, 0,
                         kBytes, 0, nullptr, nullptr);
    mark_end();
    if (synchronize() != CL_SUCCESS) break;
    double ms = 0.0;
    if (elapsed_ms(&ms) == CL_SUCCESS && ms > 0.0 && pass > 0) best = std::max(best, 2.0 * kBytes / (ms * 1e-3));
  }
  release(a);
  release(b);
  return best;
}

nlohmann::json OpenClDevice::describe() const {
  return {{"device", name_}, {"platform", platform_}, {"type", is_gpu_ ? "gpu" : "other"},
          {"cache_flush", is_gpu_ ? "fill of twice the global-memory cache" : "none (the device shares the host's caches)"}};
}

bool OpenClDevice::fatal(int rc) const {
  return rc == CL_OUT_OF_RESOURCES || rc == CL_INVALID_COMMAND_QUEUE || rc == CL_INVALID_CONTEXT;
}

std::string OpenClDevice::error(int rc) const {
  static const std::pair<int, const char*> kNames[] = {
      {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
      {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
      {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
      {CL_OUT_OF_HOST_MEMORY, "CL_OUT_OF_HOST_MEMORY"},
      {CL_BUILD_PROGRAM_FAILURE, "CL_BUILD_PROGRAM_FAILURE"},
      {CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"},
      {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
      {CL_INVALID_CONTEXT, "CL_INVALID_CONTEXT"},
      {CL_INVALID_COMMAND_QUEUE, "CL_INVALID_COMMAND_QUEUE"},
      {CL_INVALID_MEM_OBJECT, "CL_INVALID_MEM_OBJECT"},
      {CL_INVALID_PROGRAM_EXECUTABLE, "CL_INVALID_PROGRAM_EXECUTABLE"},
      {CL_INVALID_KERNEL_ARGS, "CL_INVALID_KERNEL_ARGS"},
      {CL_INVALID_WORK_GROUP_SIZE, "CL_INVALID_WORK_GROUP_SIZE"},
      {CL_INVALID_GLOBAL_WORK_SIZE, "CL_INVALID_GLOBAL_WORK_SIZE"},
      {CL_INVALID_EVENT, "CL_INVALID_EVENT"},
      {CL_INVALID_BUFFER_SIZE, "CL_INVALID_BUFFER_SIZE"},
  };
  for (const auto& [code, name] : kNames)
    if (code == rc) return name;
  return "OpenCL error " + std::to_string(rc);
}

}  // namespace kfab
