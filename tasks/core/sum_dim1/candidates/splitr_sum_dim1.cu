// sum_dim1: y[b, c] = sum_{r < R} x[b, r, c] for x [B, R, C].
// A block owns CX column vectors (VEC floats each) of one b and splits R over its RY thread rows:
// thread (tx, ty) adds rows ty, ty + RY, ... (four loads in flight per step), then the RY partial sums
// are added in shared memory (fixed tree, deterministic) and thread row 0 writes.
//   - C % 4 == 0 and x, y 16-byte aligned: float4 columns, else scalar ones.
//   - RY (a power of two) grows until the grid has about 2048 threads per SM, while each thread still
//     adds at least 4 rows; CX (a power of two) is at least 128 bytes of a row (one whole line per warp
//     row) and grows to keep 128 threads per block when RY is small.
//   - at most 256 threads per block, so that several blocks share an SM (one 1024-thread block per SM
//     left half the grid for a second wave).
// One pass over x; float math. R = 0 gives zeros.
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

constexpr int kMaxThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 30;

template <int VEC>
struct Vec;
template <>
struct Vec<4> {
  static __device__ __forceinline__ void add(float (&acc)[4], const float* __restrict__ p) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p));
    acc[0] += q.x, acc[1] += q.y, acc[2] += q.z, acc[3] += q.w;
  }
};
template <>
struct Vec<1> {
  static __device__ __forceinline__ void add(float (&acc)[1], const float* __restrict__ p) { acc[0] += __ldg(p); }
};

// blockDim = (CX, RY), RY a power of two; dynamic shared memory: CX * RY * VEC floats.
template <int VEC>
__global__ void __launch_bounds__(kMaxThreads)
    sum_middle(const float* __restrict__ x, float* __restrict__ y, int64_t B, int64_t R, int64_t C, int64_t ctiles) {
  extern __shared__ float4 smem_raw[];  // float4 for 16-byte alignment
  float* sm = reinterpret_cast<float*>(smem_raw);
  const int CX = blockDim.x, RY = blockDim.y;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t cvec = C / VEC;  // column vectors per row
  const int64_t tiles = B * ctiles;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t b = tile / ctiles;
    const int64_t cv = (tile - b * ctiles) * CX + tx;
    float acc[VEC];
#pragma unroll
    for (int c = 0; c < VEC; ++c) acc[c] = 0.0f;
    if (cv < cvec) {
      const float* p = x + b * R * C + cv * VEC;
      const int64_t step = static_cast<int64_t>(RY) * C;
      int64_t r = ty;
      const float* q = p + r * C;
      for (; r + 3 * RY < R; r += 4 * RY, q += 4 * step) {
        float part[4][VEC];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int c = 0; c < VEC; ++c) part[u][c] = 0.0f;
          Vec<VEC>::add(part[u], q + u * step);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int c = 0; c < VEC; ++c) acc[c] += part[u][c];
      }
      for (; r < R; r += RY, q += step) Vec<VEC>::add(acc, q);
    }
    float* mine = sm + (ty * CX + tx) * VEC;
#pragma unroll
    for (int c = 0; c < VEC; ++c) mine[c] = acc[c];
    __syncthreads();
    for (int h = RY / 2; h > 0; h >>= 1) {
      if (ty < h) {
        const float* other = sm + ((ty + h) * CX + tx) * VEC;
#pragma unroll
        for (int c = 0; c < VEC; ++c) mine[c] += other[c];
      }
      __syncthreads();
    }
    if (ty == 0 && cv < cvec) {
      float* out = y + b * C + cv * VEC;
      if constexpr (VEC == 4)
        __stwb(reinterpret_cast<float4*>(out), make_float4(mine[0], mine[1], mine[2], mine[3]));  // one 16-byte store
      else
        out[0] = mine[0];
    }
    __syncthreads();  // shared memory is rewritten by the next tile
  }
}

int sm_count() {
  static const int count = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        n <= 0)
      return 132;
    return n;
  }();
  return count;
}

template <int VEC>
int launch(const float* x, float* y, int64_t B, int64_t R, int64_t C, cudaStream_t s) {
  constexpr int kMinCx = 32 / VEC;  // 128 bytes of a row
  const int64_t cvec = C / VEC;
  const int64_t columns = B * cvec;  // column vectors in all
  const int64_t target = int64_t{sm_count()} * 2048;
  int ry = 1;
  while (ry * 2 * kMinCx <= kMaxThreads && columns * ry < target && int64_t{ry} * 2 * 4 <= R) ry *= 2;
  int cx = kMinCx;
  while (cx * ry < 128 && cx < cvec) cx *= 2;
  const int64_t ctiles = (cvec + cx - 1) / cx;
  int64_t blocks = B * ctiles;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  const size_t smem = sizeof(float) * cx * ry * VEC;
  sum_middle<VEC><<<static_cast<unsigned>(blocks), dim3(cx, ry), smem, s>>>(x, y, B, R, C, ctiles);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 1 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 3) || !is_dense_f32(y, 2)) return 2;
  const int64_t B = x.shape[0];
  const int64_t R = x.shape[1];
  const int64_t C = x.shape[2];
  if (y.shape[0] != B || y.shape[1] != C) return 3;
  if (B == 0 || C == 0) return 0;
  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (C % 4 == 0 && aligned16(xp) && aligned16(yp)) return launch<4>(xp, yp, B, R, C, s);
  return launch<1>(xp, yp, B, R, C, s);
}
