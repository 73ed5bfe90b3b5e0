// GPU baseline for cumsum along the last dimension of x [M, N]: y[i, j] = sum_{k <= j} x[i, k].
// One 256-thread block per row (grid-stride over rows). The row is walked in chunks of 256 elements,
// one element per thread: a block-wide inclusive scan (warp shuffle scan, then the warp totals through
// shared memory) plus the running total of the previous chunks. Float math.
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

__global__ void __launch_bounds__(kThreads) cumsum_rows(const float* __restrict__ x, float* __restrict__ y,
                                                        int64_t M, int64_t N) {
  __shared__ float warp_total[kWarps];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const float* xr = x + row * N;
    float* yr = y + row * N;
    float carry = 0.0f;  // sum of the previous chunks of this row
    for (int64_t base = 0; base < N; base += kThreads) {
      const int64_t j = base + threadIdx.x;
      float v = j < N ? xr[j] : 0.0f;
      for (int o = 1; o < 32; o <<= 1) {
        const float n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += n;
      }
      if (lane == 31) warp_total[warp] = v;
      __syncthreads();
      float before = 0.0f, chunk = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        const float t = warp_total[w];
        if (w < warp) before += t;
        chunk += t;
      }
      if (j < N) yr[j] = carry + (before + v);
      carry += chunk;
      __syncthreads();  // warp_total is rewritten by the next chunk
    }
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
  cumsum_rows<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(x.data), static_cast<float*>(y.data), M, N);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
