// cumsum along the last dimension of x [M, N], one read of x and one write of y.
// A row is scanned in chunks of TPR * ITEMS vectors (VEC floats each) held in registers: thread t of
// the row's group holds the vectors t, t + TPR, ..., t + (ITEMS - 1) * TPR of the chunk; each vector is
// scanned in the thread, the vector totals are scanned across the warp with shuffles and, for a
// block-wide group, the warp totals through shared memory; a running carry links the chunks.
//   - N % 4 == 0 and x, y 16-byte aligned: float4 loads and stores, else scalar ones.
//   - short rows (<= 1024 floats vectorised, <= 512 scalar): one warp per row, 4 rows per block,
//     shuffles only; longer rows: one 256-thread block per row, chunks of 4096 (vectorised) or 2048
//     (scalar) floats.
// Float math; the scan order is a tree within a chunk, sequential across chunks.
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

constexpr int64_t kMaxBlocks = 1 << 30;

// VEC consecutive floats at vector index i of p (p must be VEC * 4-byte aligned).
template <int VEC>
struct Io;
template <>
struct Io<4> {
  static __device__ __forceinline__ void load(const float* __restrict__ p, int64_t i, float (&v)[4]) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p) + i);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  }
  static __device__ __forceinline__ void store(float* __restrict__ p, int64_t i, const float (&v)[4]) {
    reinterpret_cast<float4*>(p)[i] = make_float4(v[0], v[1], v[2], v[3]);
  }
};
template <>
struct Io<1> {
  static __device__ __forceinline__ void load(const float* __restrict__ p, int64_t i, float (&v)[1]) {
    v[0] = __ldg(p + i);
  }
  static __device__ __forceinline__ void store(float* __restrict__ p, int64_t i, const float (&v)[1]) { p[i] = v[0]; }
};

// TPR == 32: one warp per row (BLOCK / 32 rows per block); TPR == BLOCK: one block per row.
template <int VEC, int TPR, int ITEMS, int BLOCK>
__global__ void __launch_bounds__(BLOCK) cumsum_rows(const float* __restrict__ x, float* __restrict__ y, int64_t M,
                                                     int64_t N) {
  static_assert(TPR == 32 || TPR == BLOCK, "a row is one warp or the whole block");
  constexpr int RPB = BLOCK / TPR;
  constexpr int W = TPR / 32;                   // warps per row group
  constexpr int64_t CHUNK = int64_t{TPR} * ITEMS;  // vectors per chunk
  __shared__ float warp_total[ITEMS * W];       // used when TPR > 32
  const int lane = threadIdx.x % 32;
  const int t = threadIdx.x % TPR;
  const int warp = t / 32;  // warp within the row group
  const int64_t nv = N / VEC;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * RPB + threadIdx.x / TPR; row < M;
       row += static_cast<int64_t>(gridDim.x) * RPB) {
    const float* xr = x + row * N;
    float* yr = y + row * N;
    float carry = 0.0f;  // sum of the previous chunks of this row
    for (int64_t base = 0; base < nv; base += CHUNK) {
      float v[ITEMS][VEC];
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int64_t i = base + t + k * TPR;
        if (i < nv) {
          Io<VEC>::load(xr, i, v[k]);
        } else {
#pragma unroll
          for (int c = 0; c < VEC; ++c) v[k][c] = 0.0f;
        }
      }
      float incl[ITEMS], excl[ITEMS];  // scan of the vector totals over the warp
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
#pragma unroll
        for (int c = 1; c < VEC; ++c) v[k][c] += v[k][c - 1];
        incl[k] = v[k][VEC - 1];
      }
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
          const float n = __shfl_up_sync(0xffffffffu, incl[k], o);
          if (lane >= o) incl[k] += n;
        }
      }
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const float e = __shfl_up_sync(0xffffffffu, incl[k], 1);
        excl[k] = lane == 0 ? 0.0f : e;
      }
      if constexpr (TPR == 32) {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
          const float chunk_total = __shfl_sync(0xffffffffu, incl[k], 31);
          const int64_t i = base + t + k * TPR;
          if (i < nv) {
            const float prefix = carry + excl[k];
            float o[VEC];
#pragma unroll
            for (int c = 0; c < VEC; ++c) o[c] = prefix + v[k][c];
            Io<VEC>::store(yr, i, o);
          }
          carry += chunk_total;
        }
      } else {
        if (lane == 31)
#pragma unroll
          for (int k = 0; k < ITEMS; ++k) warp_total[k * W + warp] = incl[k];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
          float before = 0.0f, total = 0.0f;
#pragma unroll
          for (int w = 0; w < W; ++w) {
            const float s = warp_total[k * W + w];
            if (w < warp) before += s;
            total += s;
          }
          const int64_t i = base + t + k * TPR;
          if (i < nv) {
            const float prefix = carry + (before + excl[k]);
            float o[VEC];
#pragma unroll
            for (int c = 0; c < VEC; ++c) o[c] = prefix + v[k][c];
            Io<VEC>::store(yr, i, o);
          }
          carry += total;
        }
        __syncthreads();  // warp_total is rewritten by the next chunk
      }
    }
  }
}

template <int VEC, int TPR, int ITEMS, int BLOCK>
int launch(const float* x, float* y, int64_t M, int64_t N, cudaStream_t stream) {
  constexpr int RPB = BLOCK / TPR;
  int64_t blocks = (M + RPB - 1) / RPB;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  cumsum_rows<VEC, TPR, ITEMS, BLOCK><<<static_cast<unsigned>(blocks), BLOCK, 0, stream>>>(x, y, M, N);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
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
  if (M == 0 || N == 0) return 0;
  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (N % 4 == 0 && aligned16(xp) && aligned16(yp)) {
    const int64_t nv = N / 4;
    if (nv <= 32) return launch<4, 32, 1, 128>(xp, yp, M, N, s);
    if (nv <= 64) return launch<4, 32, 2, 128>(xp, yp, M, N, s);
    if (nv <= 128) return launch<4, 32, 4, 128>(xp, yp, M, N, s);
    if (nv <= 256) return launch<4, 32, 8, 128>(xp, yp, M, N, s);
    return launch<4, 256, 4, 256>(xp, yp, M, N, s);
  }
  if (N <= 32) return launch<1, 32, 1, 128>(xp, yp, M, N, s);
  if (N <= 64) return launch<1, 32, 2, 128>(xp, yp, M, N, s);
  if (N <= 128) return launch<1, 32, 4, 128>(xp, yp, M, N, s);
  if (N <= 256) return launch<1, 32, 8, 128>(xp, yp, M, N, s);
  if (N <= 512) return launch<1, 32, 16, 128>(xp, yp, M, N, s);
  return launch<1, 256, 8, 256>(xp, yp, M, N, s);
}
