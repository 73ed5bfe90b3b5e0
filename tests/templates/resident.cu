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

// kfab_ring_lag: with G blocks taking tiles b, b + G, .. of rows of S tiles (T in all), every tile's row has
// all its tiles' first passes (a tile's step: tile / G) by the step of the tile's second pass, L steps after
// its first; and one step less fails somewhere, so the check can fail.
constexpr bool ring_lag_holds(int64_t G, int64_t S, int64_t T, int64_t L) {
  for (int64_t t = 0; t < T; ++t) {
    const int64_t last = (t / S * S + S - 1 < T ? t / S * S + S - 1 : T - 1);  // the last tile of t's row
    if (last / G > t / G + L) return false;
  }
  return true;
}
constexpr bool ring_lags_hold() {
  for (int64_t G = 1; G <= 12; ++G)
    for (int64_t S = 1; S <= 40; ++S)
      if (!ring_lag_holds(G, S, 3 * S + 1, kfab_ring_lag(S, G))) return false;
  return true;
}
static_assert(ring_lags_hold(), "a ring block would wait on a later step");
static_assert(!ring_lag_holds(3, 5, 15, kfab_ring_lag(5, 3) - 1) && !ring_lag_holds(132, 512, 2560, kfab_ring_lag(512, 132) - 1),
              "the check cannot fail");

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

// the same in tiles through a ring of shared-memory slots (each block's tiles b, b + gridDim.x, .. of 512
// floats: copied in, a share stamped a tile, the row's shares taken back, the tile written out as 1s)
__global__ void fill_ring(Args a, int64_t rows, int64_t n, KfabSplit s) {
  extern __shared__ float4 ring4[];
  float* ring = reinterpret_cast<float*>(ring4);
  __shared__ unsigned long long mbar[8];
  __shared__ float sh[4 * 128];
  const int64_t T = rows * s.S, mine = (T - blockIdx.x + gridDim.x - 1) / gridDim.x;
  kfab_ring_init(mbar, s.R);
  for (int64_t j = 0; j < mine; ++j) {
    const int64_t tile = blockIdx.x + j * gridDim.x;
    kfab_ring_fetch(ring, mbar, 0, 512, a.y, n, s.S, tile);
    kfab_ring_wait(mbar, j);
    if (threadIdx.x == 0) kfab_ring_put(s.tags + tile, ring[0], s.epoch);
    unsigned long long q[4];
    kfab_ring_peek<128>(q, s.tags + tile, 1);
    kfab_ring_take<128>(q, s.tags + tile, 1, s.epoch, sh);
    int64_t lo = 0, hi = n;
    kfab_split_part<4>(n, s.S, static_cast<int>(tile % s.S), &lo, &hi);
    for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) a.y[tile / s.S * n + c] = sh[0] * 0.0f + 1.0f;
    __syncthreads();
  }
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor*, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const Args a{static_cast<float*>(out[0].data)};
  kfab_go<1>(fill, out[0].shape[0], 128, static_cast<cudaStream_t>(stream), a, out[0].shape[0], out[0].shape[1]);
  // again in clusters of 2 blocks (the second block of each finds no row of its own), where the device has them
  (void)kfab_go_cluster<2>(fill, 128, static_cast<cudaStream_t>(stream), a, out[0].shape[0], out[0].shape[1]);
  // and with each row split over 2 or more blocks of 32 values, where the device holds them at once
  (void)kfab_go_split(fill_split, 128, 32, 1, static_cast<cudaStream_t>(stream), a, out[0].shape[0], out[0].shape[1]);
  // and in tiles of 512 floats through shared memory, where the rows are of whole float4 and the device has the bulk copy
  (void)kfab_go_ring(fill_ring, 128, 512, 1, 1, static_cast<cudaStream_t>(stream), a, out[0].shape[0], out[0].shape[1]);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
