// matmul_bias_relu (Y = relu(A @ W + bias), f32, row-major) in OpenCL C 1.2: 32 x 32 output tiles per
// work-group of 8 x 8, 4 x 4 outputs per work-item (a float4 of columns per row), A and W staged
// through local memory in slices of depth 16, f32 accumulation, bias and relu applied on the way out.
// The program is built once per (context, device) and kept.
#include <CL/cl.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "kfab/candidate.h"

namespace {

const char* kSource = R"CLC(
#define TS 32      /* output tile: TS x TS per work-group */
#define TK 16      /* depth of the staged slices of A and B */
#define WG 8       /* work-group: WG x WG work-items, each computing 4 x 4 outputs */
#define PAD 4      /* row padding of the local tiles (keeps rows 16-byte aligned) */

/* C[M, N] = A[M, K] @ B[K, N] + bias[N], then relu, row-major. Global = (WG * ceil(N / TS),
 * WG * ceil(M / TS)). Each step stages a TS x TK slice of A (transposed) and a TK x TS slice of B in local memory, with
 * zeros outside the matrices; work-item (tx, ty) accumulates rows 4ty .. 4ty+3 and columns
 * 4tx .. 4tx+3 of the tile, one float4 of columns per row. */
__kernel __attribute__((reqd_work_group_size(WG, WG, 1)))
void matmul_tiled(__global const float* restrict A, __global const float* restrict B,
                  __global const float* restrict bias,
                  __global float* restrict C, const int M, const int N, const int K) {
  __local float As[TK][TS + PAD];  /* As[k][i] = A[row0 + i, k0 + k] */
  __local float Bs[TK][TS + PAD];  /* Bs[k][j] = B[k0 + k, col0 + j] */
  const int tx = (int)get_local_id(0);
  const int ty = (int)get_local_id(1);
  const int t = ty * WG + tx;
  const int row0 = (int)get_group_id(1) * TS;
  const int col0 = (int)get_group_id(0) * TS;
  float4 acc[4] = {(float4)(0.0f), (float4)(0.0f), (float4)(0.0f), (float4)(0.0f)};
  for (int k0 = 0; k0 < K; k0 += TK) {
    for (int e = t; e < TS * TK; e += WG * WG) {
      const int ai = e / TK, ak = e % TK;      /* A: k fastest, adjacent work-items read adjacent floats */
      const int gi = row0 + ai, gk = k0 + ak;
      As[ak][ai] = (gi < M && gk < K) ? A[(long)gi * K + gk] : 0.0f;
      const int bk = e / TS, bj = e % TS;      /* B: columns fastest */
      const int gkb = k0 + bk, gj = col0 + bj;
      Bs[bk][bj] = (gkb < K && gj < N) ? B[(long)gkb * N + gj] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TK; ++k) {
      const float4 a = vload4(0, &As[k][4 * ty]);
      const float4 b = vload4(0, &Bs[k][4 * tx]);
      acc[0] += a.x * b;
      acc[1] += a.y * b;
      acc[2] += a.z * b;
      acc[3] += a.w * b;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const int c = col0 + 4 * tx;
  float4 bias4 = (float4)(0.0f);
  if (c + 4 <= N) {
    bias4 = vload4(0, bias + c);
  } else {
    if (c < N) bias4.x = bias[c];
    if (c + 1 < N) bias4.y = bias[c + 1];
    if (c + 2 < N) bias4.z = bias[c + 2];
  }
  for (int i = 0; i < 4; ++i) {
    const int r = row0 + 4 * ty + i;
    if (r < M) {
      const float4 v = acc[i] + bias4;
      const float4 out = fmax(v, (float4)(0.0f));
      if (c + 4 <= N) {
        vstore4(out, 0, C + (long)r * N + c);
      } else {
        if (c < N) C[(long)r * N + c] = out.x;
        if (c + 1 < N) C[(long)r * N + c + 1] = out.y;
        if (c + 2 < N) C[(long)r * N + c + 2] = out.z;
      }
    }
  }
}
)CLC";

const char* const kKernelNames[] = {"matmul_tiled"};
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
  if (inputs == nullptr || outputs == nullptr || n_inputs != 3 || n_outputs != 1) return 1;
  const kfab_tensor& a = inputs[0];
  const kfab_tensor& w = inputs[1];
  const kfab_tensor& bias = inputs[2];
  const kfab_tensor& c = outputs[0];
  if (!is_dense(a, KFAB_F32, 2) || !is_dense(w, KFAB_F32, 2) || !is_dense(bias, KFAB_F32, 1) ||
      !is_dense(c, KFAB_F32, 2))
    return 2;
  const int64_t M = a.shape[0], K = a.shape[1], N = w.shape[1];
  if (w.shape[0] != K || bias.shape[0] != N || c.shape[0] != M || c.shape[1] != N) return 3;
  if (stream == nullptr) return 4;
  if (M == 0 || N == 0) return 0;
  auto q = static_cast<cl_command_queue>(stream);

  std::lock_guard<std::mutex> lock(g_mu);
  Built* b = built_for(q);
  if (b == nullptr) return 5;
  constexpr size_t kTile = 32, kGroup = 8;  // TS, WG in the kernel source
  if (b->max_wg[0] < kGroup * kGroup) return 5;
  const size_t local[2] = {kGroup, kGroup};
  const size_t global[2] = {round_up(static_cast<size_t>(N), kTile) / kTile * kGroup,
                            round_up(static_cast<size_t>(M), kTile) / kTile * kGroup};
  const cl_mem am = static_cast<cl_mem>(a.data), wm = static_cast<cl_mem>(w.data);
  const cl_mem bm = static_cast<cl_mem>(bias.data), cm = static_cast<cl_mem>(c.data);
  const cl_int m = static_cast<cl_int>(M), n = static_cast<cl_int>(N), k = static_cast<cl_int>(K);
  if (!set_args(b->kernel[0], am, wm, bm, cm, m, n, k)) return 6;
  if (clEnqueueNDRangeKernel(q, b->kernel[0], 2, nullptr, global, local, 0, nullptr, nullptr) != CL_SUCCESS) return 7;
  return 0;
}
