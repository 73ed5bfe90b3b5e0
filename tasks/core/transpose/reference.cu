// GPU baseline for transpose (permute 0, 2, 1): x [B, M, N] -> y [B, N, M], y[b, j, i] = x[b, i, j].
// The classic shared-memory tiled transpose: 32 x 32 tiles, 32 x 8 threads, each thread moving four
// elements; a padded tile (33 columns) avoids bank conflicts; reads and writes are both coalesced.
// Grid: x over tiles of N, y over tiles of M, z over B (y and z capped at 65535, the blocks loop).
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

constexpr int kTile = 32;
constexpr int kRows = 8;  // threadIdx.y extent; each thread moves kTile / kRows elements

__global__ void __launch_bounds__(kTile * kRows) transpose_tiles(const float* __restrict__ x, float* __restrict__ y,
                                                                 int64_t B, int64_t M, int64_t N) {
  __shared__ float tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t b = blockIdx.z; b < B; b += gridDim.z) {
    const float* xs = x + b * M * N;
    float* ys = y + b * N * M;
    for (int64_t i0 = static_cast<int64_t>(blockIdx.y) * kTile; i0 < M; i0 += static_cast<int64_t>(gridDim.y) * kTile) {
      for (int64_t j0 = static_cast<int64_t>(blockIdx.x) * kTile; j0 < N;
           j0 += static_cast<int64_t>(gridDim.x) * kTile) {
        for (int k = 0; k < kTile; k += kRows) {
          const int64_t i = i0 + ty + k, j = j0 + tx;
          if (i < M && j < N) tile[ty + k][tx] = xs[i * N + j];
        }
        __syncthreads();
        for (int k = 0; k < kTile; k += kRows) {
          const int64_t j = j0 + ty + k, i = i0 + tx;
          if (j < N && i < M) ys[j * M + i] = tile[tx][ty + k];
        }
        __syncthreads();  // the tile is refilled by the next iteration
      }
    }
  }
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 1 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 3) || !is_dense_f32(y, 3)) return 2;
  const int64_t B = x.shape[0];
  const int64_t M = x.shape[1];
  const int64_t N = x.shape[2];
  if (y.shape[0] != B || y.shape[1] != N || y.shape[2] != M) return 3;
  if (B == 0 || M == 0 || N == 0) return 0;

  auto cap = [](int64_t v, int64_t limit) { return static_cast<unsigned>(v < limit ? v : limit); };
  const dim3 grid(cap((N + kTile - 1) / kTile, 1 << 30), cap((M + kTile - 1) / kTile, 65535), cap(B, 65535));
  const dim3 block(kTile, kRows);
  transpose_tiles<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const float*>(x.data),
                                                                         static_cast<float*>(y.data), B, M, N);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
