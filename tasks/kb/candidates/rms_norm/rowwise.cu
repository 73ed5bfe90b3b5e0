// rms_norm (KernelBench format): y = x / sqrt(mean(x^2, -1) + 1e-6) * weight, x [B, F] f32.
// inputs = {x [B, F], weight [F]}, outputs = {y [B, F]}; everything runs on the given stream.
//
// Approach: a group of G threads owns a row and keeps the whole row in registers, so x is read from
// HBM exactly once and y written once (8 bytes per element, the copy-bandwidth floor):
//   - F % 4 == 0 and x, weight, y 16-byte aligned: float4 loads and stores (VEC = 4), else scalar
//     ones (VEC = 1; any F, any 4-byte alignment, e.g. the held-out 33 x 1001).
//   - short rows: G = 4 .. 32 lanes of one warp per row (several rows per warp for tiny F, e.g.
//     1 x 1), reductions by xor shuffles inside the G-lane group only.
//   - longer rows: G = the block (128 .. 1024 threads), one row per block; warp sums meet in a
//     double-buffered shared array, so each row costs one __syncthreads.
//   - each thread holds ITEMS vectors of its row (<= 32 floats); while it holds <= 16 floats the
//     matching weight vectors are loaded together with x (their latency overlaps), otherwise the
//     weight is loaded at write time (it is L1/L2-resident: every row reads the same F floats).
//   - x is loaded with the evict-first hint and y stored with it, so the weight stays cached.
//   - rows longer than the register kernels take (F > 32768 vectorised, > 16384 scalar): one block
//     per row and two passes over the row from global memory (the second mostly hits L2).
// Row loops are block-uniform (a row index past B only masks loads and stores), so every shuffle
// and barrier is reached by all the threads it names. The 8192 x 4096 tuning shape uses 256 threads
// x 4 float4 per row (56 registers, no spills: 4 blocks per SM, 16 KiB of x in flight per block).
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

constexpr float kEps = 1e-6f;
constexpr int64_t kMaxGrid = int64_t{1} << 30;

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

// One vector of VEC consecutive floats: element i of a float4 (VEC = 4) or float (VEC = 1) array.
template <int VEC>
struct Vec;

template <>
struct Vec<4> {
  float v[4];
  __device__ __forceinline__ void zero() { v[0] = v[1] = v[2] = v[3] = 0.0f; }
  __device__ __forceinline__ void load_stream(const float* __restrict__ p, int64_t i) {  // evict-first
    const float4 q = __ldcs(reinterpret_cast<const float4*>(p) + i);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  }
  __device__ __forceinline__ void load_cached(const float* __restrict__ p, int64_t i) {  // read-only path
    const float4 q = __ldg(reinterpret_cast<const float4*>(p) + i);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  }
  __device__ __forceinline__ void store_stream(float* __restrict__ p, int64_t i) const {
    __stcs(reinterpret_cast<float4*>(p) + i, make_float4(v[0], v[1], v[2], v[3]));
  }
};

template <>
struct Vec<1> {
  float v[1];
  __device__ __forceinline__ void zero() { v[0] = 0.0f; }
  __device__ __forceinline__ void load_stream(const float* __restrict__ p, int64_t i) { v[0] = __ldcs(p + i); }
  __device__ __forceinline__ void load_cached(const float* __restrict__ p, int64_t i) { v[0] = __ldg(p + i); }
  __device__ __forceinline__ void store_stream(float* __restrict__ p, int64_t i) const { __stcs(p + i, v[0]); }
};

// Sum of v over the G threads that share a row. G <= 32: an aligned group of G lanes of one warp
// (xor offsets < G never leave the group); every lane of the warp must call it. G == blockDim.x:
// the whole block; every thread must call it, `parity` alternates between consecutive calls so
// that one barrier per call suffices (a buffer is rewritten only after the next call's barrier,
// which every thread reaches after it has read that buffer).
template <int G>
__device__ __forceinline__ float group_sum(float v, float (*scratch)[G > 32 ? G / 32 : 1], int parity) {
  constexpr int kFirst = G < 32 ? G / 2 : 16;
#pragma unroll
  for (int o = kFirst; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (G > 32) {
    constexpr int kWarps = G / 32;
    if ((threadIdx.x & 31) == 0) scratch[parity][threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += scratch[parity][w];  // same order in every thread
    return s;
  } else {
    (void)scratch;
    (void)parity;
    return v;
  }
}

// Row kernel: BLOCK threads, groups of G threads per row (G <= 32 or G == BLOCK), BLOCK / G rows
// per block and per step of a grid-stride loop. Thread t of a group holds vectors t, t + G, ...,
// t + (ITEMS - 1) * G of its row, which has nv = F / VEC vectors (nv <= ITEMS * G).
template <int VEC, int G, int ITEMS, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
    rms_rows(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int64_t B, int F) {
  static_assert(BLOCK % 32 == 0 && (G == BLOCK || (G <= 32 && 32 % G == 0)), "bad row grouping");
  constexpr int kRowsPerBlock = BLOCK / G;
  constexpr bool kPreloadW = ITEMS * VEC <= 16;
  __shared__ float scratch[2][G > 32 ? G / 32 : 1];

  const int t = static_cast<int>(threadIdx.x) % G;
  const int nv = F / VEC;
  const float inv_f = 1.0f / static_cast<float>(F);
  int parity = 0;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; base < B;
       base += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t row = base + static_cast<int>(threadIdx.x) / G;
    const bool live = row < B;  // false only for the spare groups of the block's last rows
    const float* xr = x + (live ? row : 0) * static_cast<int64_t>(F);
    float* yr = y + (live ? row : 0) * static_cast<int64_t>(F);

    Vec<VEC> xv[ITEMS];
    Vec<VEC> wv[kPreloadW ? ITEMS : 1];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int i = t + k * G;
      if (live && i < nv) {
        xv[k].load_stream(xr, i);
        if constexpr (kPreloadW) wv[k].load_cached(w, i);
      } else {
        xv[k].zero();
      }
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
#pragma unroll
      for (int c = 0; c < VEC; ++c) ss = fmaf(xv[k].v[c], xv[k].v[c], ss);
    const float r = rsqrtf(group_sum<G>(ss, scratch, parity) * inv_f + kEps);
    parity ^= 1;

#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int i = t + k * G;
      if (live && i < nv) {
        Vec<VEC> wk;
        if constexpr (kPreloadW) {
          wk = wv[k];
        } else {
          wk.load_cached(w, i);
        }
        Vec<VEC> o;
#pragma unroll
        for (int c = 0; c < VEC; ++c) o.v[c] = (xv[k].v[c] * r) * wk.v[c];
        o.store_stream(yr, i);
      }
    }
  }
}

// Rows too long for registers: one block per row, pass 1 sums squares, pass 2 re-reads x and writes.
constexpr int kLongBlock = 1024;
template <int VEC>
__global__ void __launch_bounds__(kLongBlock)
    rms_long_rows(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int64_t B, int64_t F) {
  __shared__ float scratch[2][kLongBlock / 32];
  const int64_t nv = F / VEC;
  const float inv_f = 1.0f / static_cast<float>(F);
  int parity = 0;
  for (int64_t row = blockIdx.x; row < B; row += gridDim.x) {
    const float* xr = x + row * F;
    float* yr = y + row * F;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < nv; i += kLongBlock) {
      Vec<VEC> a;
      a.load_cached(xr, i);
#pragma unroll
      for (int c = 0; c < VEC; ++c) ss = fmaf(a.v[c], a.v[c], ss);
    }
    const float r = rsqrtf(group_sum<kLongBlock>(ss, scratch, parity) * inv_f + kEps);
    parity ^= 1;
    for (int64_t i = threadIdx.x; i < nv; i += kLongBlock) {
      Vec<VEC> a, b, o;
      a.load_stream(xr, i);
      b.load_cached(w, i);
#pragma unroll
      for (int c = 0; c < VEC; ++c) o.v[c] = (a.v[c] * r) * b.v[c];
      o.store_stream(yr, i);
    }
  }
}

struct Problem {
  const float* x;
  const float* w;
  float* y;
  int64_t B;
  int64_t F;
  cudaStream_t stream;
};

int launched() { return cudaGetLastError() == cudaSuccess ? 0 : 5; }

template <int VEC, int G, int ITEMS, int BLOCK>
int launch_rows(const Problem& p) {
  constexpr int64_t kRowsPerBlock = BLOCK / G;
  int64_t grid = (p.B + kRowsPerBlock - 1) / kRowsPerBlock;
  if (grid > kMaxGrid) grid = kMaxGrid;
  rms_rows<VEC, G, ITEMS, BLOCK>
      <<<static_cast<unsigned>(grid), BLOCK, 0, p.stream>>>(p.x, p.w, p.y, p.B, static_cast<int>(p.F));
  return launched();
}

template <int VEC>
int launch_long(const Problem& p) {
  const int64_t grid = p.B < kMaxGrid ? p.B : kMaxGrid;
  rms_long_rows<VEC><<<static_cast<unsigned>(grid), kLongBlock, 0, p.stream>>>(p.x, p.w, p.y, p.B, p.F);
  return launched();
}

// Picks the grouping from the row length: up to 128 float4 (512 floats) or 256 floats a row is one
// warp or a slice of one; longer rows take a block of 128 .. 1024 threads holding up to 4 float4 or
// 8 floats each (8 float4 or 16 floats at 1024 threads), past that the two-pass kernel.
int dispatch(const Problem& p) {
  const int64_t F = p.F;
  if (F % 4 == 0 && aligned16(p.x) && aligned16(p.w) && aligned16(p.y)) {
    const int64_t nv = F / 4;
    if (nv <= 4) return launch_rows<4, 4, 1, 128>(p);
    if (nv <= 8) return launch_rows<4, 8, 1, 128>(p);
    if (nv <= 16) return launch_rows<4, 16, 1, 128>(p);
    if (nv <= 32) return launch_rows<4, 32, 1, 128>(p);
    if (nv <= 64) return launch_rows<4, 32, 2, 128>(p);
    if (nv <= 128) return launch_rows<4, 32, 4, 128>(p);
    if (nv <= 256) return launch_rows<4, 128, 2, 128>(p);
    if (nv <= 512) return launch_rows<4, 128, 4, 128>(p);
    if (nv <= 1024) return launch_rows<4, 256, 4, 256>(p);  // F = 4096: the tuning shape
    if (nv <= 2048) return launch_rows<4, 512, 4, 512>(p);
    if (nv <= 4096) return launch_rows<4, 1024, 4, 1024>(p);
    if (nv <= 8192) return launch_rows<4, 1024, 8, 1024>(p);
    return launch_long<4>(p);
  }
  if (F <= 4) return launch_rows<1, 4, 1, 128>(p);
  if (F <= 8) return launch_rows<1, 8, 1, 128>(p);
  if (F <= 16) return launch_rows<1, 16, 1, 128>(p);
  if (F <= 32) return launch_rows<1, 32, 1, 128>(p);
  if (F <= 64) return launch_rows<1, 32, 2, 128>(p);
  if (F <= 128) return launch_rows<1, 32, 4, 128>(p);
  if (F <= 256) return launch_rows<1, 32, 8, 128>(p);
  if (F <= 512) return launch_rows<1, 128, 4, 128>(p);
  if (F <= 1024) return launch_rows<1, 128, 8, 128>(p);  // F = 1001: the held-out shape
  if (F <= 2048) return launch_rows<1, 256, 8, 256>(p);
  if (F <= 4096) return launch_rows<1, 512, 8, 512>(p);
  if (F <= 8192) return launch_rows<1, 1024, 8, 1024>(p);
  if (F <= 16384) return launch_rows<1, 1024, 16, 1024>(p);
  return launch_long<1>(p);
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs, int32_t n_outputs,
                         void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 2 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& w = inputs[1];
  const kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(w, 1) || !is_dense_f32(y, 2)) return 2;
  const int64_t B = x.shape[0];
  const int64_t F = x.shape[1];
  if (w.shape[0] != F || y.shape[0] != B || y.shape[1] != F) return 3;
  if (B == 0 || F == 0) return 0;
  if (F > INT32_MAX) return 4;
  const Problem p{static_cast<const float*>(x.data), static_cast<const float*>(w.data), static_cast<float*>(y.data),
                  B, F, static_cast<cudaStream_t>(stream)};
  return dispatch(p);
}
