// include/kfab/templates/resident.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it, and a kernel launched through it.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kfab/candidate.h"

namespace {

#include "kfab/templates/resident.cuh"

struct Args {
  float* y;
};

__global__ void fill(Args a, int64_t rows, int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    if (threadIdx.x < n) a.y[r * n + threadIdx.x] = 1.0f;
}

// the same with each row split over blocks of the grid (each block fills its part)
__global__ void fill_split(Args a, int64_t rows, int64_t n, KfabSplit s) {
  int64_t lo = 0, hi = n;
  kfab_split_part<1>(n, s.S, static_cast<int>(blockIdx.x % s.S), &lo, &hi);
  for (int64_t r = blockIdx.x / s.S; r < rows; r += gridDim.x / s.S)
    for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) a.y[r * n + c] = 1.0f;
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor*, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const Args a{static_cast<float*>(out[0].data)};
  kfab_go<1>(fill, out[0].shape[0], 128, static_cast<cudaStream_t>(stream), a, out[0].shape[0], out[0].shape[1]);
  // again in clusters of 2 blocks (the second block of each finds no row of its own), where the device has them
  (void)kfab_go_cluster<2>(fill, 128, static_cast<cudaStream_t>(stream), a, out[0].shape[0], out[0].shape[1]);
  // and with each row split over 2 or more blocks of 32 values, where the device holds them at once
  (void)kfab_go_split(fill_split, 128, 32, 1, static_cast<cudaStream_t>(stream), a, out[0].shape[0], out[0].shape[1]);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
