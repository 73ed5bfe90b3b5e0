// include/kfab/templates/row_reduce.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it, and a kernel that uses it.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kfab/candidate.h"

namespace {

#include "kfab/templates/row_reduce.cuh"

__global__ void row_max(const float* x, float* y) {
  __shared__ float slot[256 / 32];
  const float v = kfab_group<256, 1>(x[threadIdx.x], slot);
  if (threadIdx.x == 0) *y = kfab_group<32, 0>(v, slot);
}

// a row of n over a cluster of 2 blocks: each block's sum of its part, combined
__global__ void row_sum_cluster(const float* x, float* y, int64_t n) {
  __shared__ float slot[256 / 32];
  __shared__ float part[2];
  __shared__ unsigned long long bar[1];
  kfab_cluster_begin<1>(bar);
  const int64_t lo = blockIdx.x % 2 == 0 ? 0 : n / 2, hi = blockIdx.x % 2 == 0 ? n / 2 : n;
  float s = 0.0f;
  for (int64_t c = lo + threadIdx.x; c < hi; c += 256) s += x[c];
  s = kfab_cluster_combine<2, 0>(kfab_group<256, 0>(s, slot), part, bar, 0u, true);
  if (threadIdx.x == 0 && blockIdx.x == 0) *y = s;
}

// a row of n over the 4 blocks of a grid (a cooperative launch: all resident): each block's sum of its
// part, combined through global memory and a counter of arrivals (zero at launch)
__global__ void row_sum_split(const float* x, float* y, int64_t n, float* shares, unsigned* bar) {
  __shared__ float slot[256 / 32];
  const int64_t lo = n * blockIdx.x / 4, hi = n * (blockIdx.x + 1) / 4;
  float s = 0.0f;
  for (int64_t c = lo + threadIdx.x; c < hi; c += 256) s += x[c];
  s = kfab_split_combine<256, 0>(kfab_group<256, 0>(s, slot), shares, bar, 4u, 4, slot);
  if (threadIdx.x == 0 && blockIdx.x == 0) *y = s;
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  row_max<<<1, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const float*>(in[0].data), static_cast<float*>(out[0].data));
  (void)row_sum_cluster, (void)row_sum_split;
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
