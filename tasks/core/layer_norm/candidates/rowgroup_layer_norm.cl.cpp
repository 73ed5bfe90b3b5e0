// layer_norm over the last dimension in OpenCL C 1.2 (eps = 1e-5, biased variance): one work-group per
// row, three passes over the row (mean, mean squared deviation, write) on runs of 8 adjacent elements
// (float8), the two row sums in local memory. The program is built once per (context, device) and
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
#define MAX_WG 256

/* Work-group reductions in local memory (local size: a multiple of 16, at most MAX_WG): every
 * work-item stores its value, the first 16 fold one strided slice each, then every work-item folds
 * those 16. Three barriers whatever the size; the last one makes the scratch reusable at once.
 * Every work-item of the group must call them. */
float group_sum(float v, __local float* s, __local float* s16) {
  const int lid = (int)get_local_id(0);
  const int nl = (int)get_local_size(0);
  s[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < 16) {
    float a = s[lid];
    for (int i = lid + 16; i < nl; i += 16) a += s[i];
    s16[lid] = a;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float r = s16[0];
  for (int i = 1; i < 16; ++i) r += s16[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

float hsum8(float8 v) {
  const float4 a = v.lo + v.hi;
  return (a.x + a.y) + (a.z + a.w);
}

/* One work-group per row; global size = rows * local size (a power of two, 16..MAX_WG). Each
 * work-item takes runs of 8 adjacent elements (vload8 needs only float alignment, so any row start
 * works), then the tail elements one by one. */
__kernel void layer_norm_rows(__global const float* restrict x, __global const float* restrict w,
                              __global const float* restrict b, __global float* restrict y,
                              const int rows, const int n) {
  __local float scratch[MAX_WG];
  __local float scratch16[16];
  const int row = (int)get_group_id(0);
  const int lid = (int)get_local_id(0);
  const int nl = (int)get_local_size(0);
  if (row >= rows) return;                     /* uniform over the work-group */
  __global const float* xr = x + (long)row * n;
  const int n8 = n >> 3;                       /* full runs of 8; the n % 8 tail is scalar */
  __global float* yr = y + (long)row * n;

  float8 s8 = (float8)(0.0f);
  for (int q = lid; q < n8; q += nl) s8 += vload8(q, xr);
  float s = hsum8(s8);
  for (int j = 8 * n8 + lid; j < n; j += nl) s += xr[j];
  const float mean = group_sum(s, scratch, scratch16) / (float)n;

  /* Two passes (sum of squared deviations from the mean), as the reference: no cancellation. */
  float8 d8 = (float8)(0.0f);
  for (int q = lid; q < n8; q += nl) {
    const float8 d = vload8(q, xr) - mean;
    d8 += d * d;
  }
  float d2 = hsum8(d8);
  for (int j = 8 * n8 + lid; j < n; j += nl) {
    const float d = xr[j] - mean;
    d2 += d * d;
  }
  const float var = group_sum(d2, scratch, scratch16) / (float)n;
  const float rstd = 1.0f / sqrt(var + 1e-5f);

  for (int q = lid; q < n8; q += nl)
    vstore8((vload8(q, xr) - mean) * rstd * vload8(q, w) + vload8(q, b), q, yr);
  for (int j = 8 * n8 + lid; j < n; j += nl) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
}
)CLC";

const char* const kKernelNames[] = {"layer_norm_rows"};
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

constexpr size_t kMaxWorkGroup = 256;  // MAX_WG in the kernel source

// A power-of-two work-group size for a row of n elements: 64, doubled while every work-item still
// gets 32 elements or more, at most 256 and the kernel's limit; 0 when that limit is below 16 (the
// reductions fold 16 partial results).
size_t row_local_size(int64_t n, size_t kernel_max) {
  size_t l = 64;
  while (l < kMaxWorkGroup && static_cast<int64_t>(l) * 64 <= n) l <<= 1;
  while (l > 16 && l > kernel_max) l >>= 1;
  return l <= kernel_max ? l : 0;
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs, int32_t n_outputs,
                         void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 3 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& w = inputs[1];
  const kfab_tensor& bias = inputs[2];
  const kfab_tensor& y = outputs[0];
  if (!is_dense(x, KFAB_F32, 2) || !is_dense(w, KFAB_F32, 1) || !is_dense(bias, KFAB_F32, 1) ||
      !is_dense(y, KFAB_F32, 2))
    return 2;
  const int64_t M = x.shape[0], N = x.shape[1];
  if (w.shape[0] != N || bias.shape[0] != N || y.shape[0] != M || y.shape[1] != N) return 3;
  if (stream == nullptr) return 4;
  if (M == 0 || N == 0) return 0;
  auto q = static_cast<cl_command_queue>(stream);

  std::lock_guard<std::mutex> lock(g_mu);
  Built* b = built_for(q);
  if (b == nullptr) return 5;
  const size_t local = row_local_size(N, b->max_wg[0]);
  if (local == 0) return 5;
  const size_t global = static_cast<size_t>(M) * local;
  const cl_mem xm = static_cast<cl_mem>(x.data), wm = static_cast<cl_mem>(w.data);
  const cl_mem bm = static_cast<cl_mem>(bias.data), ym = static_cast<cl_mem>(y.data);
  const cl_int rows = static_cast<cl_int>(M), n = static_cast<cl_int>(N);
  if (!set_args(b->kernel[0], xm, wm, bm, ym, rows, n)) return 6;
  if (clEnqueueNDRangeKernel(q, b->kernel[0], 1, nullptr, &global, &local, 0, nullptr, nullptr) != CL_SUCCESS) return 7;
  return 0;
}
