// GPU baseline for log_softmax over the last dimension of x [M, N]:
//   y[i, j] = (x[i, j] - m_i) - log(sum_k exp(x[i, k] - m_i)),  m_i = max_k x[i, k]
// One 256-thread block per row (grid-stride over rows), three passes over the row from global memory
// (max, sum of exp, output). Block reductions: warp shuffles, then the per-warp partials through
// shared memory. Float math with the accurate expf and logf.
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

// True when t is an f32 tensor of the given rank laid out contiguously in row-major order.
bool is_dense_f32(const kfab_tensor& t, int32_t ndim) {
  if (t.dtype != KFAB_F32 || t.ndim != ndim || t.data == nullptr) return false;
  if (ndim > 0 && t.shape == nullptr) return false;
  int64_t expect = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0) return false;
    if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 1 << 30;

// Max (is_max) or sum of v over the block; every thread gets the result. scratch holds kWarps floats.
__device__ float block_reduce(float v, bool is_max, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = is_max ? fmaxf(r, scratch[w]) : r + scratch[w];
  __syncthreads();  // scratch is reused by the next reduction
  return r;
}

__global__ void __launch_bounds__(kThreads) log_softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                             int64_t M, int64_t N) {
  __shared__ float scratch[kWarps];
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const float* xr = x + row * N;
    float* yr = y + row * N;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < N; j += kThreads) m = fmaxf(m, xr[j]);
    m = block_reduce(m, true, scratch);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < N; j += kThreads) s += expf(xr[j] - m);
    s = block_reduce(s, false, scratch);
    const float log_s = logf(s);
    for (int64_t j = threadIdx.x; j < N; j += kThreads) yr[j] = (xr[j] - m) - log_s;
  }
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 1 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(y, 2)) return 2;
  const int64_t M = x.shape[0];
  const int64_t N = x.shape[1];
  if (y.shape[0] != M || y.shape[1] != N) return 3;
  if (M == 0 || N == 0) return 0;

  const int64_t blocks = M < kMaxBlocks ? M : kMaxBlocks;
  log_softmax_rows<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(x.data), static_cast<float*>(y.data), M, N);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
