// GPU baseline for sum_dim1: y[b, c] = sum_{r < R} x[b, r, c] for x [B, R, C].
// One thread per output element (grid-stride as a guard for huge outputs), walking r with a float
// accumulator; neighbouring threads read neighbouring columns, so every load is coalesced.
// R = 0 gives zeros, as the CPU reference.
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
constexpr int64_t kMaxBlocks = 1 << 30;

__global__ void __launch_bounds__(kThreads) sum_middle(const float* __restrict__ x, float* __restrict__ y,
                                                       int64_t B, int64_t R, int64_t C) {
  const int64_t n = B * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += stride) {
    const int64_t b = o / C;
    const int64_t c = o - b * C;
    const float* p = x + b * R * C + c;
    float acc = 0.0f;
    for (int64_t r = 0; r < R; ++r) acc += p[r * C];
    y[o] = acc;
  }
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 1 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 3) || !is_dense_f32(y, 2)) return 2;
  const int64_t B = x.shape[0];
  const int64_t R = x.shape[1];
  const int64_t C = x.shape[2];
  if (y.shape[0] != B || y.shape[1] != C) return 3;
  const int64_t n = B * C;
  if (n == 0) return 0;

  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  sum_middle<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(x.data), static_cast<float*>(y.data), B, R, C);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
