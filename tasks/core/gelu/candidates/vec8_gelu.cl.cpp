// gelu (erf form) in OpenCL C 1.2: y = 0.5 x erfc(-x / sqrt 2), eight adjacent elements per work-item
// (float8, the built-in erfc at full precision). The program is built once per (context, device) and
// kept.
#include <CL/cl.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "kfab/candidate.h"

namespace {

const char* kSource = R"CLC(
/* Work-item i handles elements 8i .. 8i+7 (vload8 needs only float alignment); the last, partial
 * run element by element; work-items past the end do nothing. 1 + erf(v / sqrt 2) is computed as
 * erfc(-v / sqrt 2), which keeps its accuracy in the negative tail. */
__kernel void gelu(__global const float* restrict x, __global float* restrict y, const long n) {
  const long i = (long)get_global_id(0);
  const long j = 8 * i;
  if (j + 8 <= n) {
    const float8 v = vload8(i, x);
    vstore8(0.5f * v * erfc(-v * M_SQRT1_2_F), i, y);
  } else {
    for (long k = j; k < n; ++k) {
      const float v = x[k];
      y[k] = 0.5f * v * erfc(-v * M_SQRT1_2_F);
    }
  }
}
)CLC";

const char* const kKernelNames[] = {"gelu"};
constexpr int kKernels = sizeof kKernelNames / sizeof kKernelNames[0];

// A program built for one (context, device). The context is retained so that its handle cannot be
// reused for another context while the entry lives (entries live as long as the library).
struct Built {
  cl_context ctx = nullptr;
  cl_device_id dev = nullptr;
  cl_program prog = nullptr;
  cl_kernel kernel[kKernels] = {};
  size_t max_wg[kKernels] = {};  // CL_KERNEL_WORK_GROUP_SIZE
  ~Built() {
    for (cl_kernel k : kernel)
      if (k != nullptr) clReleaseKernel(k);
    if (prog != nullptr) clReleaseProgram(prog);
    if (ctx != nullptr) clReleaseContext(ctx);
  }
};

std::mutex g_mu;  // guards g_built and every clSetKernelArg ... clEnqueueNDRangeKernel sequence
std::vector<std::unique_ptr<Built>> g_built;

void print_build_log(cl_program prog, cl_device_id dev) {
  size_t len = 0;
  if (clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &len) != CL_SUCCESS || len == 0) return;
  std::vector<char> log(len + 1, '\0');
  if (clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, len, log.data(), nullptr) == CL_SUCCESS)
    std::fprintf(stderr, "OpenCL build log:\n%s\n", log.data());
}

// The kernels for the queue's context and device, built on first use; nullptr on any failure.
// Called with g_mu held.
Built* built_for(cl_command_queue q) {
  cl_context ctx = nullptr;
  cl_device_id dev = nullptr;
  if (clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, nullptr) != CL_SUCCESS || ctx == nullptr)
    return nullptr;
  if (clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, nullptr) != CL_SUCCESS || dev == nullptr)
    return nullptr;
  for (const auto& b : g_built)
    if (b->ctx == ctx && b->dev == dev) return b.get();
  auto b = std::make_unique<Built>();
  if (clRetainContext(ctx) != CL_SUCCESS) return nullptr;
  b->ctx = ctx;
  b->dev = dev;
  cl_int rc = CL_SUCCESS;
  b->prog = clCreateProgramWithSource(ctx, 1, &kSource, nullptr, &rc);
  if (rc != CL_SUCCESS) return nullptr;
  rc = clBuildProgram(b->prog, 1, &dev, "-cl-std=CL1.2", nullptr, nullptr);
  if (rc != CL_SUCCESS) {
    print_build_log(b->prog, dev);
    return nullptr;
  }
  for (int i = 0; i < kKernels; ++i) {
    b->kernel[i] = clCreateKernel(b->prog, kKernelNames[i], &rc);
    if (rc != CL_SUCCESS) return nullptr;
    if (clGetKernelWorkGroupInfo(b->kernel[i], dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof b->max_wg[i], &b->max_wg[i],
                                 nullptr) != CL_SUCCESS)
      return nullptr;
  }
  g_built.push_back(std::move(b));
  return g_built.back().get();
}

// Sets the kernel's arguments in order; false at the first one OpenCL refuses.
template <typename... Args>
bool set_args(cl_kernel k, const Args&... args) {
  cl_uint i = 0;
  return ((clSetKernelArg(k, i++, sizeof(Args), &args) == CL_SUCCESS) && ...);
}

// True when t has the dtype and rank, is laid out contiguously in row-major order and every
// extent fits an OpenCL int.
bool is_dense(const kfab_tensor& t, kfab_dtype dtype, int32_t ndim) {
  if (t.dtype != dtype || t.ndim != ndim || t.data == nullptr) return false;
  if (ndim > 0 && t.shape == nullptr) return false;
  int64_t expect = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0 || t.shape[d] > INT32_MAX) return false;
    if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs, int32_t n_outputs,
                         void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 1 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& y = outputs[0];
  if (!is_dense(x, KFAB_F32, 2) || !is_dense(y, KFAB_F32, 2)) return 2;
  const int64_t M = x.shape[0], N = x.shape[1];
  if (y.shape[0] != M || y.shape[1] != N) return 3;
  if (stream == nullptr) return 4;
  const int64_t total = M * N;
  if (total == 0) return 0;
  auto q = static_cast<cl_command_queue>(stream);

  std::lock_guard<std::mutex> lock(g_mu);
  Built* b = built_for(q);
  if (b == nullptr) return 5;
  const size_t local = b->max_wg[0] >= 256 ? 256 : 64;
  if (b->max_wg[0] < local) return 5;
  const size_t global = round_up(static_cast<size_t>((total + 7) / 8), local);
  const cl_mem xm = static_cast<cl_mem>(x.data), ym = static_cast<cl_mem>(y.data);
  const cl_long n = total;
  if (!set_args(b->kernel[0], xm, ym, n)) return 6;
  if (clEnqueueNDRangeKernel(q, b->kernel[0], 1, nullptr, &global, &local, 0, nullptr, nullptr) != CL_SUCCESS) return 7;
  return 0;
}
