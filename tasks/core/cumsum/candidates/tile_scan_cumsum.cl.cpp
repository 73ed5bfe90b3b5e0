// cumsum along the last dimension in OpenCL C 1.2: each row is walked by a slice of a work-group in
// tiles of 8 adjacent elements per work-item, each tile scanned in local memory with its total
// carried into the next; short rows share a work-group. The program is built once per
// (context, device) and kept.
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
#define MAX_ROWS (MAX_WG / 16)

/* 2-D work-group (lx, ly): ly picks one of the group's rows, lx (a power of two, 16..MAX_WG) walks
 * that row in tiles of 8 * local_size(0) elements. Global = (local_size(0), local_size(1) *
 * ceil(rows / local_size(1))); work-items of rows past the end only take part in the barriers.
 * Per tile: each work-item scans its run of 8 adjacent elements, the row's per-work-item totals are
 * scanned in local memory (16 segments serially by 16 work-items, then the 16 segment totals by
 * one), and the carry from the row's earlier tiles is added. */
__kernel void cumsum_rows(__global const float* restrict x, __global float* restrict y, const int rows,
                          const int n) {
  __local float part[MAX_WG];
  __local float seg_sum[MAX_ROWS][16];
  __local float seg_before[MAX_ROWS][17];
  const int lx = (int)get_local_id(0);
  const int ly = (int)get_local_id(1);
  const int nx = (int)get_local_size(0);
  const int row = (int)get_global_id(1);
  const bool valid = row < rows;
  __global const float* xr = x + (long)(valid ? row : 0) * n;
  __global float* yr = y + (long)(valid ? row : 0) * n;
  __local float* p = part + ly * nx;           /* this row's per-work-item totals */
  const int seg = nx / 16;                     /* work-items per segment */
  float carry = 0.0f;
  for (int base = 0; base < n; base += 8 * nx) {   /* same trip count for the whole group */
    const int j = base + 8 * lx;
    float8 v = (float8)(0.0f);
    if (valid && j + 8 <= n) {
      v = vload8(0, xr + j);
    } else if (valid && j < n) {               /* the row's last, partial run */
      float t[8];
      for (int k = 0; k < 8; ++k) t[k] = j + k < n ? xr[j + k] : 0.0f;
      v = vload8(0, t);
    }
    v.s1 += v.s0;
    v.s2 += v.s1;
    v.s3 += v.s2;
    v.s4 += v.s3;
    v.s5 += v.s4;
    v.s6 += v.s5;
    v.s7 += v.s6;
    p[lx] = v.s7;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lx < 16) {                             /* inclusive scan of segment lx, in place */
      float run = 0.0f;
      for (int i = lx * seg; i < (lx + 1) * seg; ++i) {
        run += p[i];
        p[i] = run;
      }
      seg_sum[ly][lx] = run;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lx == 0) {                             /* exclusive scan of the 16 segment totals */
      float run = 0.0f;
      for (int s = 0; s < 16; ++s) {
        seg_before[ly][s] = run;
        run += seg_sum[ly][s];
      }
      seg_before[ly][16] = run;                /* the tile's total */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float before = carry + seg_before[ly][lx / seg] + (lx % seg != 0 ? p[lx - 1] : 0.0f);
    const float tile = seg_before[ly][16];
    barrier(CLK_LOCAL_MEM_FENCE);              /* the scratch is rewritten for the next tile */
    v += before;
    if (valid && j + 8 <= n) {
      vstore8(v, 0, yr + j);
    } else if (valid && j < n) {
      float t[8];
      vstore8(v, 0, t);
      for (int k = 0; j + k < n; ++k) yr[j + k] = t[k];
    }
    carry += tile;
  }
}
)CLC";

const char* const kKernelNames[] = {"cumsum_rows"};
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
  if (M == 0 || N == 0) return 0;
  auto q = static_cast<cl_command_queue>(stream);

  std::lock_guard<std::mutex> lock(g_mu);
  Built* b = built_for(q);
  if (b == nullptr) return 5;
  // Work-items per row: enough for the row to fit one tile of 8 per work-item, 16 at least, 256 at
  // most; rows per group: up to 256 work-items in all, within the kernel's limit.
  size_t lx = 16;
  while (lx < kMaxWorkGroup && static_cast<int64_t>(lx) * 8 < N) lx <<= 1;
  size_t ly = kMaxWorkGroup / lx;
  while (ly > 1 && lx * ly > b->max_wg[0]) ly >>= 1;
  while (lx > 16 && lx * ly > b->max_wg[0]) lx >>= 1;
  if (lx * ly > b->max_wg[0]) return 5;
  const size_t local[2] = {lx, ly};
  const size_t global[2] = {lx, round_up(static_cast<size_t>(M), ly)};
  const cl_mem xm = static_cast<cl_mem>(x.data), ym = static_cast<cl_mem>(y.data);
  const cl_int rows = static_cast<cl_int>(M), n = static_cast<cl_int>(N);
  if (!set_args(b->kernel[0], xm, ym, rows, n)) return 6;
  if (clEnqueueNDRangeKernel(q, b->kernel[0], 2, nullptr, global, local, 0, nullptr, nullptr) != CL_SUCCESS) return 7;
  return 0;
}
