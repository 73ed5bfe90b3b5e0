// GPU baseline for scale_shift_gelu: y[i, j] = gelu_tanh(x[i, j] * a[j] + b[j]),
// gelu_tanh(z) = 0.5 * z * (1 + tanh(sqrt(2/pi) * (z + 0.044715 * z^3))).
// One thread per element of x [M, N] (grid-stride loop as a guard for huge tensors), float math.
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

__global__ void scale_shift_gelu_kernel(const float* __restrict__ x, const float* __restrict__ a,
                                        const float* __restrict__ b, float* __restrict__ y, int64_t n,
                                        int64_t cols) {
  const float k = 0.79788456080286535588f;  // sqrt(2 / pi)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t j = i % cols;
    const float z = x[i] * a[j] + b[j];
    y[i] = 0.5f * z * (1.0f + tanhf(k * (z + 0.044715f * z * z * z)));
  }
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 3 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& a = inputs[1];
  const kfab_tensor& b = inputs[2];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(a, 1) || !is_dense_f32(b, 1) || !is_dense_f32(y, 2)) return 2;
  const int64_t M = x.shape[0];
  const int64_t N = x.shape[1];
  if (a.shape[0] != N || b.shape[0] != N) return 3;
  if (y.shape[0] != M || y.shape[1] != N) return 3;
  const int64_t n = M * N;
  if (n == 0) return 0;

  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  scale_shift_gelu_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(x.data), static_cast<const float*>(a.data), static_cast<const float*>(b.data),
      static_cast<float*>(y.data), n, N);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
