// sum_dim1 (y[b, c] = sum over r of x[b, r, c]) in OpenCL C 1.2: a work-group covers 128 columns of one
// b (4 adjacent columns per work-item, as a float4), with the r range split eight ways; partial sums
// are combined in local memory. The program is built once per (context, device) and kept.
#include <CL/cl.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "kfab/candidate.h"

namespace {

const char* kSource = R"CLC(
#define COLS 32   /* work-items across columns (local dimension 0), 4 adjacent columns each */
#define SPLIT 8   /* slices of r per column (local dimension 1) */

/* Work-group: COLS x SPLIT work-items for 4 * COLS columns of one b; global = (COLS * ceil(C / (4 *
 * COLS)), SPLIT * B). Work-item (c, s) sums rows r = s, s + SPLIT, ... of its 4 columns (a float4;
 * the last, partial run of columns one by one), then the SPLIT partial sums are added in local
 * memory. */
__kernel __attribute__((reqd_work_group_size(COLS, SPLIT, 1)))
void sum_dim1(__global const float* restrict x, __global float* restrict y, const int B, const int R,
              const int C) {
  __local float4 part[SPLIT][COLS];
  const int lc = (int)get_local_id(0);
  const int ls = (int)get_local_id(1);
  const int c = 4 * ((int)get_group_id(0) * COLS + lc);
  const int b = (int)get_group_id(1);
  float4 acc = (float4)(0.0f);
  if (b < B && c + 4 <= C) {
    __global const float* col = x + (long)b * R * C + c;
    for (int r = ls; r < R; r += SPLIT) acc += vload4(0, col + (long)r * C);
  } else if (b < B && c < C) {
    __global const float* col = x + (long)b * R * C + c;
    for (int r = ls; r < R; r += SPLIT) {
      __global const float* p = col + (long)r * C;
      acc.x += p[0];
      if (c + 1 < C) acc.y += p[1];
      if (c + 2 < C) acc.z += p[2];
    }
  }
  part[ls][lc] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (ls == 0 && b < B && c < C) {
    float4 s = part[0][lc];
    for (int k = 1; k < SPLIT; ++k) s += part[k][lc];
    __global float* out = y + (long)b * C + c;
    if (c + 4 <= C) {
      vstore4(s, 0, out);
    } else {
      out[0] = s.x;
      if (c + 1 < C) out[1] = s.y;
      if (c + 2 < C) out[2] = s.z;
    }
  }
}
)CLC";

const char* const kKernelNames[] = {"sum_dim1"};
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
  if (!is_dense(x, KFAB_F32, 3) || !is_dense(y, KFAB_F32, 2)) return 2;
  const int64_t B = x.shape[0], R = x.shape[1], C = x.shape[2];
  if (y.shape[0] != B || y.shape[1] != C) return 3;
  if (stream == nullptr) return 4;
  if (B == 0 || C == 0) return 0;
  auto q = static_cast<cl_command_queue>(stream);

  std::lock_guard<std::mutex> lock(g_mu);
  Built* b = built_for(q);
  if (b == nullptr) return 5;
  constexpr size_t kCols = 32, kSplit = 8;  // COLS, SPLIT in the kernel source
  if (b->max_wg[0] < kCols * kSplit) return 5;
  const size_t local[2] = {kCols, kSplit};
  const size_t global[2] = {round_up(static_cast<size_t>(C), 4 * kCols) / 4, static_cast<size_t>(B) * kSplit};
  const cl_mem xm = static_cast<cl_mem>(x.data), ym = static_cast<cl_mem>(y.data);
  const cl_int nb = static_cast<cl_int>(B), nr = static_cast<cl_int>(R), nc = static_cast<cl_int>(C);
  if (!set_args(b->kernel[0], xm, ym, nb, nr, nc)) return 6;
  if (clEnqueueNDRangeKernel(q, b->kernel[0], 2, nullptr, global, local, 0, nullptr, nullptr) != CL_SUCCESS) return 7;
  return 0;
}
