// GPU baseline for group_norm over x [N, C, H, W], 8 groups of C/8 consecutive channels, eps = 1e-5,
// biased variance: y = (x - mean_g) / sqrt(var_g + eps) * weight[c] + bias[c].
// One 256-thread block per (sample, group), three passes over the group's values from global memory:
// sum -> mean, sum of squared deviations -> variance (two-pass, as the CPU reference), then the output.
// Block reductions: warp shuffles, then the per-warp partials through shared memory. Float math.
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

constexpr int64_t kGroups = 8;

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

// Block g of sample n: the group's values are x[(n * C + g * cg) * hw ...] for count = cg * hw.
__global__ void __launch_bounds__(kThreads) group_norm_groups(const float* __restrict__ x, const float* __restrict__ w,
                                                              const float* __restrict__ b, float* __restrict__ y,
                                                              int64_t cg, int64_t hw) {
  __shared__ float scratch[kWarps];
  const int64_t group = blockIdx.x;  // n * kGroups + g
  const int64_t count = cg * hw;
  const float* xg = x + group * count;
  float* yg = y + group * count;
  const int64_t c0 = (group % kGroups) * cg;
  const float inv = 1.0f / static_cast<float>(count);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) s += xg[i];
  const float mean = block_sum(s, scratch) * inv;
  float q = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) {
    const float d = xg[i] - mean;
    q += d * d;
  }
  const float rstd = 1.0f / sqrtf(block_sum(q, scratch) * inv + 1e-5f);
  for (int64_t i = threadIdx.x; i < count; i += kThreads) {
    const int64_t c = c0 + i / hw;
    yg[i] = (xg[i] - mean) * rstd * w[c] + b[c];
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
  if (!is_dense_f32(x, 4) || !is_dense_f32(w, 1) || !is_dense_f32(b, 1) || !is_dense_f32(y, 4)) return 2;
  const int64_t N = x.shape[0], C = x.shape[1], hw = x.shape[2] * x.shape[3];
  for (int d = 0; d < 4; ++d)
    if (y.shape[d] != x.shape[d]) return 3;
  if (w.shape[0] != C || b.shape[0] != C || C % kGroups != 0) return 3;
  const int64_t groups = N * kGroups;
  if (groups == 0 || C == 0 || hw == 0) return 0;
  if (groups > 2147483647) return 4;
  group_norm_groups<<<static_cast<unsigned>(groups), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(x.data), static_cast<const float*>(w.data), static_cast<const float*>(b.data),
      static_cast<float*>(y.data), C / kGroups, hw);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
