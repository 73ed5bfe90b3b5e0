// rms_norm over the last dimension of x [M, N] (eps = 1e-6), one read of x: the row is held in
// registers while its sum of squares is reduced, then scaled and written.
//   - N % 4 == 0 and x, y, weight 16-byte aligned: float4 loads and stores, else scalar ones.
//   - short rows (<= 512 floats vectorised, <= 256 scalar): one warp per row, 4 rows per block,
//     shuffle-only reductions; longer rows (<= 16384 vectorised, <= 8192 scalar): one block per row
//     (128 to 1024 threads, at most 16 floats per thread), block reductions.
//   - longer rows still: a block-per-row fallback that re-reads the row from global memory.
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
constexpr float kEps = 1e-6f;

// VEC consecutive floats at vector index i of p (p must be VEC * 4-byte aligned).
template <int VEC>
struct Io;
template <>
struct Io<4> {
  static __device__ __forceinline__ void load(const float* __restrict__ p, int i, float (&v)[4]) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p) + i);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  }
  static __device__ __forceinline__ void store(float* __restrict__ p, int i, const float (&v)[4]) {
    reinterpret_cast<float4*>(p)[i] = make_float4(v[0], v[1], v[2], v[3]);
  }
};
template <>
struct Io<1> {
  static __device__ __forceinline__ void load(const float* __restrict__ p, int i, float (&v)[1]) { v[0] = __ldg(p + i); }
  static __device__ __forceinline__ void store(float* __restrict__ p, int i, const float (&v)[1]) { p[i] = v[0]; }
};

// Sum over the TPR threads of a row group: one warp (TPR == 32, shuffles only) or the whole block
// (TPR == blockDim.x, warp partials through shared memory; every thread of the block must call it).
template <int TPR>
__device__ __forceinline__ float group_sum(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (TPR > 32) {
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = 0.0f;
#pragma unroll
    for (int w = 0; w < TPR / 32; ++w) v += scratch[w];
    __syncthreads();  // scratch is reused by the next reduction
  }
  return v;
}

// Thread t of a group of TPR threads holds the vectors t, t + TPR, ..., t + (ITEMS - 1) * TPR of its
// row (N / VEC vectors, N / VEC <= ITEMS * TPR). BLOCK / TPR rows per block, grid-stride over rows.
template <int VEC, int TPR, int ITEMS, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
    rms_norm_regs(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int64_t M, int N) {
  static_assert(TPR == 32 || TPR == BLOCK, "a row is one warp or the whole block");
  constexpr int RPB = BLOCK / TPR;
  __shared__ float scratch[TPR / 32];
  const int t = threadIdx.x % TPR;
  const int nv = N / VEC;
  const float inv_n = 1.0f / static_cast<float>(N);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * RPB + threadIdx.x / TPR; row < M;
       row += static_cast<int64_t>(gridDim.x) * RPB) {
    const float* xr = x + row * N;
    float* yr = y + row * N;
    float v[ITEMS][VEC], wv[ITEMS][VEC];  // weight loads overlap those of x
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int i = t + k * TPR;
      if (i < nv) {
        Io<VEC>::load(xr, i, v[k]);
        Io<VEC>::load(w, i, wv[k]);
      } else {
#pragma unroll
        for (int c = 0; c < VEC; ++c) v[k][c] = wv[k][c] = 0.0f;
      }
    }
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
#pragma unroll
      for (int c = 0; c < VEC; ++c) q += v[k][c] * v[k][c];
    const float rinv = rsqrtf(group_sum<TPR>(q, scratch) * inv_n + kEps);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int i = t + k * TPR;
      if (i < nv) {
        float o[VEC];
#pragma unroll
        for (int c = 0; c < VEC; ++c) o[c] = v[k][c] * rinv * wv[k][c];
        Io<VEC>::store(yr, i, o);
      }
    }
  }
}

// Rows too long for registers: one block per row, two passes over the row from global memory.
constexpr int kLongThreads = 1024;
__global__ void __launch_bounds__(kLongThreads)
    rms_norm_long(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int64_t M, int64_t N) {
  __shared__ float scratch[kLongThreads / 32];
  const float inv_n = 1.0f / static_cast<float>(N);
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const float* xr = x + row * N;
    float* yr = y + row * N;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < N; j += kLongThreads) q += xr[j] * xr[j];
    const float rinv = rsqrtf(group_sum<kLongThreads>(q, scratch) * inv_n + kEps);
    for (int64_t j = threadIdx.x; j < N; j += kLongThreads) yr[j] = xr[j] * rinv * w[j];
  }
}

struct Args {
  const float* x;
  const float* w;
  float* y;
  int64_t M;
  int64_t N;
  cudaStream_t stream;
};

template <int VEC, int TPR, int ITEMS, int BLOCK>
int launch(const Args& a) {
  constexpr int RPB = BLOCK / TPR;
  int64_t blocks = (a.M + RPB - 1) / RPB;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  rms_norm_regs<VEC, TPR, ITEMS, BLOCK><<<static_cast<unsigned>(blocks), BLOCK, 0, a.stream>>>(
      a.x, a.w, a.y, a.M, static_cast<int>(a.N));
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}

int dispatch(const Args& a) {
  const int64_t N = a.N;
  const bool vec = N % 4 == 0 && aligned16(a.x) && aligned16(a.y) && aligned16(a.w);
  if (vec) {
    const int64_t nv = N / 4;
    if (nv <= 32) return launch<4, 32, 1, 128>(a);
    if (nv <= 64) return launch<4, 32, 2, 128>(a);
    if (nv <= 128) return launch<4, 32, 4, 128>(a);
    if (nv <= 256) return launch<4, 128, 2, 128>(a);
    if (nv <= 512) return launch<4, 256, 2, 256>(a);
    if (nv <= 1024) return launch<4, 256, 4, 256>(a);
    if (nv <= 2048) return launch<4, 512, 4, 512>(a);
    if (nv <= 4096) return launch<4, 1024, 4, 1024>(a);
  } else {
    if (N <= 32) return launch<1, 32, 1, 128>(a);
    if (N <= 64) return launch<1, 32, 2, 128>(a);
    if (N <= 128) return launch<1, 32, 4, 128>(a);
    if (N <= 256) return launch<1, 32, 8, 128>(a);
    if (N <= 512) return launch<1, 128, 4, 128>(a);
    if (N <= 1024) return launch<1, 256, 4, 256>(a);
    if (N <= 2048) return launch<1, 256, 8, 256>(a);
    if (N <= 4096) return launch<1, 512, 8, 512>(a);
    if (N <= 8192) return launch<1, 1024, 8, 1024>(a);
  }
  const int64_t blocks = a.M < kMaxBlocks ? a.M : kMaxBlocks;
  rms_norm_long<<<static_cast<unsigned>(blocks), kLongThreads, 0, a.stream>>>(a.x, a.w, a.y, a.M, a.N);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 2 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& w = inputs[1];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(w, 1) || !is_dense_f32(y, 2)) return 2;
  const int64_t M = x.shape[0];
  const int64_t N = x.shape[1];
  if (w.shape[0] != N || y.shape[0] != M || y.shape[1] != N) return 3;
  if (M == 0 || N == 0) return 0;
  const Args a{static_cast<const float*>(x.data), static_cast<const float*>(w.data), static_cast<float*>(y.data), M, N,
               static_cast<cudaStream_t>(stream)};
  return dispatch(a);
}
