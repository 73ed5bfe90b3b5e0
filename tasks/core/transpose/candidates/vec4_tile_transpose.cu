// transpose (permute 0, 2, 1): x [B, M, N] -> y [B, N, M], y[b, j, i] = x[b, i, j], bit-exact.
// 32 x 32 tiles through shared memory (33-float pitch), 256 threads per block, one or two tiles side by
// side per block iteration; grid x over the tile groups of N, y over the tiles of M, z over B (y and z
// capped at 65535, the blocks loop; no integer division in the kernel). Bounds checked everywhere.
//   - M % 4 == 0, N % 4 == 0, x and y 16-byte aligned: float4 loads and float4 stores (a warp moves
//     4 rows x 128 bytes per instruction), two tiles per iteration.
//   - else N % 4 == 0 and x 16-byte aligned: float4 loads, scalar stores, two tiles per iteration.
//   - else: scalar loads and stores, one tile per iteration (the classic 32 x 8-thread transpose).
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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

constexpr int kTile = 32;
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 30;

// TJ tiles of 32 x 32 side by side along N (a 32 x 32 * TJ block of x) per iteration: all loads are
// issued before the shared-memory stores. Shared layout: tile[t][row of x][column of x], 33-float pitch.
//   VLOAD: thread (r = tid / 8, q = tid % 8) loads the float4 at row r, columns 4q .. 4q + 3 of each
//          tile (N % 4 == 0, x 16-byte aligned); else thread (tx = tid % 32, ty = tid / 32) loads rows
//          ty + 8k, column tx (scalar).
//   VSTORE: thread (r, q) stores the float4 of y at row r, columns 4q .. 4q + 3 of each transposed tile
//          (M % 4 == 0, y 16-byte aligned); else thread (tx, ty) stores rows ty + 8k, column tx.
// All four shared-memory access patterns are free of bank conflicts with the 33-float pitch.
template <bool VLOAD, bool VSTORE, int TJ>
__global__ void __launch_bounds__(kThreads) transpose_tiles(const float* __restrict__ x, float* __restrict__ y,
                                                            int64_t B, int64_t M, int64_t N) {
  __shared__ float tile[TJ][kTile][kTile + 1];
  const int r = threadIdx.x / 8, q = threadIdx.x % 8;
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  for (int64_t b = blockIdx.z; b < B; b += gridDim.z) {
    const float* xs = x + b * M * N;
    float* ys = y + b * N * M;
    for (int64_t i0 = static_cast<int64_t>(blockIdx.y) * kTile; i0 < M; i0 += static_cast<int64_t>(gridDim.y) * kTile) {
      for (int64_t j0 = static_cast<int64_t>(blockIdx.x) * kTile * TJ; j0 < N;
           j0 += static_cast<int64_t>(gridDim.x) * kTile * TJ) {
        if constexpr (VLOAD) {
          float4 v[TJ];
#pragma unroll
          for (int t = 0; t < TJ; ++t) {
            const int64_t i = i0 + r, j = j0 + t * kTile + 4 * q;
            v[t] = (i < M && j < N) ? __ldg(reinterpret_cast<const float4*>(xs + i * N + j))
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          }
#pragma unroll
          for (int t = 0; t < TJ; ++t) {
            tile[t][r][4 * q + 0] = v[t].x;
            tile[t][r][4 * q + 1] = v[t].y;
            tile[t][r][4 * q + 2] = v[t].z;
            tile[t][r][4 * q + 3] = v[t].w;
          }
        } else {
          float v[TJ][kTile / 8];
#pragma unroll
          for (int t = 0; t < TJ; ++t)
#pragma unroll
            for (int k = 0; k < kTile / 8; ++k) {
              const int64_t i = i0 + ty + 8 * k, j = j0 + t * kTile + tx;
              v[t][k] = (i < M && j < N) ? __ldg(xs + i * N + j) : 0.0f;
            }
#pragma unroll
          for (int t = 0; t < TJ; ++t)
#pragma unroll
            for (int k = 0; k < kTile / 8; ++k) tile[t][ty + 8 * k][tx] = v[t][k];
        }
        __syncthreads();
        if constexpr (VSTORE) {
#pragma unroll
          for (int t = 0; t < TJ; ++t) {
            const int64_t j = j0 + t * kTile + r, i = i0 + 4 * q;
            // __stwb: an explicit 16-byte store (a plain float4 assignment here was split into four
            // 4-byte stores by the compiler, which could not prove the alignment).
            if (j < N && i < M)
              __stwb(reinterpret_cast<float4*>(ys + j * M + i),
                     make_float4(tile[t][4 * q + 0][r], tile[t][4 * q + 1][r], tile[t][4 * q + 2][r], tile[t][4 * q + 3][r]));
          }
        } else {
#pragma unroll
          for (int t = 0; t < TJ; ++t)
#pragma unroll
            for (int k = 0; k < kTile / 8; ++k) {
              const int64_t j = j0 + t * kTile + ty + 8 * k, i = i0 + tx;
              if (j < N && i < M) ys[j * M + i] = tile[t][tx][ty + 8 * k];
            }
        }
        __syncthreads();  // the tiles are refilled by the next iteration
      }
    }
  }
}

template <bool VLOAD, bool VSTORE, int TJ>
int launch(const float* x, float* y, int64_t B, int64_t M, int64_t N, cudaStream_t s) {
  auto cap = [](int64_t v, int64_t limit) { return static_cast<unsigned>(v < limit ? v : limit); };
  const dim3 grid(cap((N + kTile * TJ - 1) / (kTile * TJ), kMaxBlocks), cap((M + kTile - 1) / kTile, 65535),
                  cap(B, 65535));
  transpose_tiles<VLOAD, VSTORE, TJ><<<grid, kThreads, 0, s>>>(x, y, B, M, N);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
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
  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);

  if (M % 4 == 0 && N % 4 == 0 && aligned16(xp) && aligned16(yp)) return launch<true, true, 2>(xp, yp, B, M, N, s);
  if (N % 4 == 0 && aligned16(xp)) return launch<true, false, 2>(xp, yp, B, M, N, s);
  return launch<false, false, 1>(xp, yp, B, M, N, s);
}
