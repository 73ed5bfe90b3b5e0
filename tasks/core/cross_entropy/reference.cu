// GPU baseline for cross_entropy: logits [B, C] f32, targets [B] i64 in [0, C), loss [] f32:
//   loss = (1 / B) * sum_i (m_i + log(sum_j exp(logits[i, j] - m_i)) - logits[i, targets[i]])
// Kernel 1: one 256-thread block per row (grid-stride over rows, at most kMaxBlocks blocks), three
// reads of the row from global memory (max, sum of exp) with block reductions (warp shuffles, then
// shared memory); thread 0 adds the row's loss to the block's partial (double), stored in a static
// device buffer. Kernel 2: one block adds the partials in a fixed order (double) and writes the mean.
// Deterministic. A target outside [0, C) cannot be reported through the return value without a
// synchronisation, so it makes the loss NaN (the CPU reference returns 4).
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

// True when t has the given dtype and rank and is laid out contiguously in row-major order.
bool is_dense(const kfab_tensor& t, kfab_dtype dtype, int32_t ndim) {
  if (t.dtype != dtype || t.ndim != ndim || t.data == nullptr) return false;
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
constexpr int kMaxBlocks = 1024;

__device__ double g_partials[kMaxBlocks];

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

__global__ void __launch_bounds__(kThreads) row_losses(const float* __restrict__ x, const int64_t* __restrict__ t,
                                                       int64_t B, int64_t C) {
  __shared__ float scratch[kWarps];
  double acc = 0.0;  // meaningful in thread 0 only
  for (int64_t row = blockIdx.x; row < B; row += gridDim.x) {
    const float* xr = x + row * C;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += kThreads) m = fmaxf(m, xr[j]);
    m = block_reduce(m, true, scratch);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += kThreads) s += expf(xr[j] - m);
    s = block_reduce(s, false, scratch);
    if (threadIdx.x == 0) {
      const int64_t target = t[row];
      if (target < 0 || target >= C) {
        acc = NAN;
      } else {
        acc += static_cast<double>(m + logf(s)) - static_cast<double>(xr[target]);
      }
    }
  }
  if (threadIdx.x == 0) g_partials[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kThreads) finish(float* __restrict__ loss, int n_partials, int64_t B) {
  __shared__ double sums[kThreads];
  double s = 0.0;
  for (int i = threadIdx.x; i < n_partials; i += kThreads) s += g_partials[i];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int h = kThreads / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) sums[threadIdx.x] += sums[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = static_cast<float>(sums[0] / static_cast<double>(B));
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 2 || n_outputs != 1) return 1;
  const kfab_tensor& logits = inputs[0];
  const kfab_tensor& targets = inputs[1];
  kfab_tensor& loss = outputs[0];
  if (!is_dense(logits, KFAB_F32, 2) || !is_dense(targets, KFAB_I64, 1) || !is_dense(loss, KFAB_F32, 0))
    return 2;
  const int64_t B = logits.shape[0];
  const int64_t C = logits.shape[1];
  if (targets.shape[0] != B || B == 0 || C == 0) return 3;

  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int blocks = static_cast<int>(B < kMaxBlocks ? B : kMaxBlocks);
  row_losses<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(logits.data),
                                         static_cast<const int64_t*>(targets.data), B, C);
  if (cudaGetLastError() != cudaSuccess) return 5;
  finish<<<1, kThreads, 0, s>>>(static_cast<float*>(loss.data), blocks, B);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
