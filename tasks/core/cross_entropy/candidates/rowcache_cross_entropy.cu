// cross_entropy: loss = mean_i(m_i + log(sum_j exp(logits[i, j] - m_i)) - logits[i, targets[i]]) for
// logits [B, C] f32, targets [B] i64; one read of the logits and a single launch.
//   - each row is held in registers while its max and its sum of exp(x - max) are reduced;
//     C % 4 == 0 and logits 16-byte aligned: float4 loads, else scalar ones.
//   - short rows (<= 512 floats vectorised, <= 256 scalar): one warp per row, 4 rows per block;
//     longer rows (<= 16384): one block per row (128 to 1024 threads, at most 16 floats per thread);
//     longer still: a block-per-row fallback that re-reads the row from global memory.
//   - at most kMaxPartials blocks (grid-stride over rows); each block adds its rows' losses (double) into
//     one partial in a static device buffer; the last block to finish (atomic ticket, which wraps back
//     to 0 for the next call) adds the partials in a fixed order (double) and writes the mean, so the
//     result is deterministic. Calls must not run concurrently (they share the static buffer).
// A target outside [0, C) cannot be reported through the return value without a synchronisation, so
// it makes the loss NaN (the CPU reference returns 4).
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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }


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

// Max (IS_MAX) or sum over the TPR threads of a row group: one warp (TPR == 32, shuffles only) or the
// whole block (TPR == blockDim.x, warp partials through shared memory; every thread of the block must
// call it).
template <int TPR, bool IS_MAX>
__device__ __forceinline__ float group_reduce(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = IS_MAX ? fmaxf(v, other) : v + other;
  }
  if constexpr (TPR > 32) {
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = scratch[0];
#pragma unroll
    for (int w = 1; w < TPR / 32; ++w) v = IS_MAX ? fmaxf(v, scratch[w]) : v + scratch[w];
    __syncthreads();  // scratch is reused by the next reduction
  }
  return v;
}

constexpr int kMaxPartials = 2048;
__device__ double g_partials[kMaxPartials];
__device__ unsigned int g_ticket = 0;

// Called by every thread of the block after its rows: acc is the sum of the losses of the rows this
// thread led (0 elsewhere). Writes the block's partial; the last block writes the mean to *loss.
template <int BLOCK>
__device__ __forceinline__ void finish_block(double acc, float* __restrict__ loss, int64_t B) {
  __shared__ double red[BLOCK / 32];
  __shared__ bool is_last;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double p = 0.0;
    for (int w = 0; w < BLOCK / 32; ++w) p += red[w];
    g_partials[blockIdx.x] = p;
    __threadfence();  // the partial is visible device-wide before the ticket is taken
    const unsigned int ticket = atomicInc(&g_ticket, gridDim.x - 1);  // wraps to 0 after the last block
    is_last = ticket == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last || threadIdx.x >= 32) return;
  __threadfence();
  double s = 0.0;  // one warp adds the partials: lane l takes l, l + 32, ...; then a fixed shuffle tree
  for (unsigned int i = threadIdx.x; i < gridDim.x; i += 32) s += __ldcg(&g_partials[i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x == 0) *loss = static_cast<float>(s / static_cast<double>(B));
}

// Thread t of a group of TPR threads holds the vectors t, t + TPR, ..., t + (ITEMS - 1) * TPR of its
// row (C / VEC vectors, C / VEC <= ITEMS * TPR). BLOCK / TPR rows per block, grid-stride over rows.
template <int VEC, int TPR, int ITEMS, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
    cross_entropy_regs(const float* __restrict__ x, const int64_t* __restrict__ targets, float* __restrict__ loss,
                       int64_t B, int C) {
  static_assert(TPR == 32 || TPR == BLOCK, "a row is one warp or the whole block");
  constexpr int RPB = BLOCK / TPR;
  __shared__ float scratch[TPR / 32];
  const int t = threadIdx.x % TPR;
  const int nv = C / VEC;
  double acc = 0.0;  // losses of the rows this thread leads (t == 0)
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * RPB + threadIdx.x / TPR; row < B;
       row += static_cast<int64_t>(gridDim.x) * RPB) {
    const float* xr = x + row * C;
    float v[ITEMS][VEC];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int i = t + k * TPR;
      if (i < nv) {
        Io<VEC>::load(xr, i, v[k]);
      } else {
#pragma unroll
        for (int c = 0; c < VEC; ++c) v[k][c] = -INFINITY;
      }
    }
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
#pragma unroll
      for (int c = 0; c < VEC; ++c) m = fmaxf(m, v[k][c]);
    m = group_reduce<TPR, true>(m, scratch);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
      if (t + k * TPR < nv)
#pragma unroll
        for (int c = 0; c < VEC; ++c) s += expf(v[k][c] - m);
    s = group_reduce<TPR, false>(s, scratch);
    if (t == 0) {
      const int64_t target = targets[row];
      if (target < 0 || target >= C)
        acc = NAN;
      else
        acc += static_cast<double>(m + logf(s)) - static_cast<double>(__ldg(xr + target));
    }
  }
  finish_block<BLOCK>(acc, loss, B);
}

// Rows too long for registers: one block per row, the row read twice from global memory.
constexpr int kLongThreads = 1024;
__global__ void __launch_bounds__(kLongThreads)
    cross_entropy_long(const float* __restrict__ x, const int64_t* __restrict__ targets, float* __restrict__ loss,
                       int64_t B, int64_t C) {
  __shared__ float scratch[kLongThreads / 32];
  double acc = 0.0;
  for (int64_t row = blockIdx.x; row < B; row += gridDim.x) {
    const float* xr = x + row * C;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += kLongThreads) m = fmaxf(m, xr[j]);
    m = group_reduce<kLongThreads, true>(m, scratch);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += kLongThreads) s += expf(xr[j] - m);
    s = group_reduce<kLongThreads, false>(s, scratch);
    if (threadIdx.x == 0) {
      const int64_t target = targets[row];
      if (target < 0 || target >= C)
        acc = NAN;
      else
        acc += static_cast<double>(m + logf(s)) - static_cast<double>(xr[target]);
    }
  }
  finish_block<kLongThreads>(acc, loss, B);
}

struct Args {
  const float* x;
  const int64_t* targets;
  float* loss;
  int64_t B;
  int64_t C;
  cudaStream_t stream;
};

template <int VEC, int TPR, int ITEMS, int BLOCK>
int launch(const Args& a) {
  constexpr int RPB = BLOCK / TPR;
  int64_t blocks = (a.B + RPB - 1) / RPB;
  if (blocks > kMaxPartials) blocks = kMaxPartials;
  cross_entropy_regs<VEC, TPR, ITEMS, BLOCK><<<static_cast<unsigned>(blocks), BLOCK, 0, a.stream>>>(
      a.x, a.targets, a.loss, a.B, static_cast<int>(a.C));
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}

int dispatch(const Args& a) {
  const int64_t C = a.C;
  if (C % 4 == 0 && aligned16(a.x)) {
    const int64_t nv = C / 4;
    if (nv <= 32) return launch<4, 32, 1, 128>(a);
    if (nv <= 64) return launch<4, 32, 2, 128>(a);
    if (nv <= 128) return launch<4, 32, 4, 128>(a);
    if (nv <= 256) return launch<4, 128, 2, 128>(a);
    if (nv <= 512) return launch<4, 256, 2, 256>(a);
    if (nv <= 1024) return launch<4, 256, 4, 256>(a);
    if (nv <= 2048) return launch<4, 512, 4, 512>(a);
    if (nv <= 4096) return launch<4, 1024, 4, 1024>(a);
  } else {
    if (C <= 32) return launch<1, 32, 1, 128>(a);
    if (C <= 64) return launch<1, 32, 2, 128>(a);
    if (C <= 128) return launch<1, 32, 4, 128>(a);
    if (C <= 256) return launch<1, 32, 8, 128>(a);
    if (C <= 512) return launch<1, 128, 4, 128>(a);
    if (C <= 1024) return launch<1, 256, 4, 256>(a);
    if (C <= 2048) return launch<1, 256, 8, 256>(a);
    if (C <= 4096) return launch<1, 512, 8, 512>(a);
    if (C <= 8192) return launch<1, 1024, 8, 1024>(a);
    if (C <= 16384) return launch<1, 1024, 16, 1024>(a);
  }
  const int64_t blocks = a.B < kMaxPartials ? a.B : kMaxPartials;
  cross_entropy_long<<<static_cast<unsigned>(blocks), kLongThreads, 0, a.stream>>>(a.x, a.targets, a.loss, a.B, a.C);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
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
  const Args a{static_cast<const float*>(logits.data), static_cast<const int64_t*>(targets.data),
               static_cast<float*>(loss.data), B, C, static_cast<cudaStream_t>(stream)};
  return dispatch(a);
}
