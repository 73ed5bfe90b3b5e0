// GPU baseline for gelu (erf form): y = 0.5 * x * (1 + erf(x / sqrt(2))), elementwise on x [M, N].
// One thread per element (grid-stride loop as a guard for huge tensors), float math with erfcf:
// 1 + erf(v) is evaluated as erfc(-v), which keeps its accuracy in the negative tail.
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

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    y[i] = 0.5f * v * erfcf(-v * 0.70710678118654752440f);
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
  const int64_t n = M * N;
  if (n == 0) return 0;

  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  gelu_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(x.data), static_cast<float*>(y.data), n);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
