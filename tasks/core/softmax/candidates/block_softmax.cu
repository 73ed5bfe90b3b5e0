// softmax over the last dimension on the GPU: one block per row, three passes over the row held in
// registers when it fits (max, sum of exp, scale), warp shuffles for the block reductions.
#include <cuda_runtime.h>

#include <cfloat>

#include "kfab/candidate.h"

namespace {

constexpr int kThreads = 512;

__device__ float block_reduce(float v, bool is_max, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? scratch[lane] : (is_max ? -FLT_MAX : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  const float r = scratch[0];
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kThreads) softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  __shared__ float scratch[kThreads / 32];
  const float* row = x + blockIdx.x * n;
  float* out = y + blockIdx.x * n;
  float m = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) m = fmaxf(m, row[j]);
  m = block_reduce(m, true, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) sum += __expf(row[j] - m);
  sum = block_reduce(sum, false, scratch);
  const float inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) out[j] = __expf(row[j] - m) * inv;
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void* stream) {
  if (n_in != 1 || n_out != 1 || in[0].ndim != 2 || in[0].dtype != KFAB_F32) return 1;
  const int64_t m = in[0].shape[0], n = in[0].shape[1];
  softmax_rows<<<static_cast<unsigned>(m), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(in[0].data), static_cast<float*>(out[0].data), n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
