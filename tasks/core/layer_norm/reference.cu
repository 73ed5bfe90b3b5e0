// GPU baseline for layer_norm over the last dimension of x [M, N], eps = 1e-5, biased variance:
//   y[i, j] = (x[i, j] - mean_i) / sqrt(var_i + eps) * weight[j] + bias[j]
// One 256-thread block per row (grid-stride over rows), three passes over the row from global memory:
// sum -> mean, sum of squared deviations -> variance (two-pass, as the CPU reference), then the output.
// Block reductions: warp shuffles, then the per-warp partials through shared memory. Float math.
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

// Sum of v over the block; every thread gets the result. scratch holds kWarps floats.
__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < kWarps; ++w) r += scratch[w];
  __syncthreads();  // scratch is reused by the next reduction
  return r;
}

__global__ void __launch_bounds__(kThreads) layer_norm_rows(const float* __restrict__ x, const float* __restrict__ w,
                                                            const float* __restrict__ b, float* __restrict__ y,
                                                            int64_t M, int64_t N) {
  __shared__ float scratch[kWarps];
  const float inv_n = 1.0f / static_cast<float>(N);
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const float* xr = x + row * N;
    float* yr = y + row * N;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < N; j += kThreads) s += xr[j];
    const float mean = block_sum(s, scratch) * inv_n;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < N; j += kThreads) {
      const float d = xr[j] - mean;
      q += d * d;
    }
    const float var = block_sum(q, scratch) * inv_n;
    const float rstd = 1.0f / sqrtf(var + 1e-5f);
    for (int64_t j = threadIdx.x; j < N; j += kThreads) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
  }
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 3 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& w = inputs[1];
  const kfab_tensor& b = inputs[2];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(w, 1) || !is_dense_f32(b, 1) || !is_dense_f32(y, 2)) return 2;
  const int64_t M = x.shape[0];
  const int64_t N = x.shape[1];
  if (w.shape[0] != N || b.shape[0] != N || y.shape[0] != M || y.shape[1] != N) return 3;
  if (M == 0 || N == 0) return 0;

  const int64_t blocks = M < kMaxBlocks ? M : kMaxBlocks;
  layer_norm_rows<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(x.data), static_cast<const float*>(w.data), static_cast<const float*>(b.data),
      static_cast<float*>(y.data), M, N);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
