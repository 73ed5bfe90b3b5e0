// transpose (x [B, M, N] -> y [B, N, M]) in OpenCL C 1.2: 32 x 32 tiles staged in local memory so that
// both the reads and the writes are along rows. The program is built once per (context, device) and
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
#define TILE 32
#define ROWS 8   /* local dimension 1: each work-item moves TILE / ROWS elements */

/* Work-group (TILE, ROWS, 1) moves one TILE x TILE block of one matrix b through local memory (padded
 * row against bank conflicts): reads along rows of x, writes along rows of y. Global =
 * (TILE * ceil(N / TILE), ROWS * ceil(M / TILE), B). */
__kernel __attribute__((reqd_work_group_size(TILE, ROWS, 1)))
void transpose(__global const float* restrict x, __global float* restrict y, const int M, const int N) {
  __local float tile[TILE][TILE + 1];
  const int tx = (int)get_local_id(0);
  const int ty = (int)get_local_id(1);
  const int j0 = (int)get_group_id(0) * TILE;  /* column block of x */
  const int i0 = (int)get_group_id(1) * TILE;  /* row block of x */
  const long base = (long)get_global_id(2) * M * N;
  for (int r = ty; r < TILE; r += ROWS) {
    const int i = i0 + r, j = j0 + tx;
    if (i < M && j < N) tile[r][tx] = x[base + (long)i * N + j];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int r = ty; r < TILE; r += ROWS) {
    const int j = j0 + r, i = i0 + tx;
    if (j < N && i < M) y[base + (long)j * M + i] = tile[tx][r];
  }
}
)CLC";

const char* const kKernelNames[] = {"transpose"};
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
  if (!is_dense(x, KFAB_F32, 3) || !is_dense(y, KFAB_F32, 3)) return 2;
  const int64_t B = x.shape[0], M = x.shape[1], N = x.shape[2];
  if (y.shape[0] != B || y.shape[1] != N || y.shape[2] != M) return 3;
  if (stream == nullptr) return 4;
  if (B == 0 || M == 0 || N == 0) return 0;
  auto q = static_cast<cl_command_queue>(stream);

  std::lock_guard<std::mutex> lock(g_mu);
  Built* b = built_for(q);
  if (b == nullptr) return 5;
  constexpr size_t kTile = 32, kRows = 8;  // TILE, ROWS in the kernel source
  if (b->max_wg[0] < kTile * kRows) return 5;
  const size_t local[3] = {kTile, kRows, 1};
  const size_t global[3] = {round_up(static_cast<size_t>(N), kTile),
                            round_up(static_cast<size_t>(M), kTile) / kTile * kRows, static_cast<size_t>(B)};
  const cl_mem xm = static_cast<cl_mem>(x.data), ym = static_cast<cl_mem>(y.data);
  const cl_int m = static_cast<cl_int>(M), n = static_cast<cl_int>(N);
  if (!set_args(b->kernel[0], xm, ym, m, n)) return 6;
  if (clEnqueueNDRangeKernel(q, b->kernel[0], 3, nullptr, global, local, 0, nullptr, nullptr) != CL_SUCCESS) return 7;
  return 0;
}
