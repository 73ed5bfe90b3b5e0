// scale_shift_gelu: y[i, j] = gelu_tanh(x[i, j] * a[j] + b[j]) on x [M, N], x and y treated as one
// flat array. gelu_tanh(z) = 0.5 * z * (1 + tanh(u)) = z / (1 + exp(-2u)), u = sqrt(2/pi) (z + 0.044715 z^3)
// (the sigmoid form: no cancellation in 1 + tanh(u) for negative u; exp overflowing to inf gives -0).
//   - x and y 16-byte aligned: float4 loads and stores of x and y, 256 threads per block, two float4
//     per thread (loads issued before the math) when that still gives at least 4 blocks per SM, else one. A float4 may straddle two rows when N % 4 != 0: the
//     column of each element is tracked (incremented, wrapped at N). When N % 4 == 0 and a, b are
//     16-byte aligned, a and b are read as float4 too (they stay in L1/L2: 8 N bytes).
//   - the numel % 4 trailing elements: the first threads of block 0.
//   - x or y not 16-byte aligned: one thread per element.
// 32-bit index math when numel < 2^31 (the column needs a modulo per float4), 64-bit otherwise.
// Float math with the accurate expf.
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

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 30;

__device__ __forceinline__ float gelu_tanh(float z) {
  const float u = 0.79788456080286535588f * (z + 0.044715f * z * z * z);
  return z / (1.0f + expf(-2.0f * u));
}

// I: index type (uint32_t when numel < 2^31, else int64_t). VEC_AB: a and b read as float4.
// kUnroll: float4 per thread.
template <typename I, bool VEC_AB, int kUnroll>
__global__ void __launch_bounds__(kThreads)
    ssg_vec4(const float4* __restrict__ x, const float* __restrict__ a, const float* __restrict__ b,
             float4* __restrict__ y, I n4, I N, const float* __restrict__ xt, float* __restrict__ yt, int tail,
             I tail_col) {
  const I stride = static_cast<I>(gridDim.x) * (kThreads * kUnroll);
  for (I base = static_cast<I>(blockIdx.x) * (kThreads * kUnroll) + threadIdx.x; base < n4; base += stride) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const I i = base + u * kThreads;
      if (i < n4) v[u] = __ldg(x + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const I i = base + u * kThreads;
      if (i >= n4) continue;
      const I col = (i * 4) % N;
      float av[4], bv[4];
      if constexpr (VEC_AB) {  // N % 4 == 0: the 4 elements are columns col .. col + 3 of one row
        const float4 a4 = __ldg(reinterpret_cast<const float4*>(a) + col / 4);
        const float4 b4 = __ldg(reinterpret_cast<const float4*>(b) + col / 4);
        av[0] = a4.x, av[1] = a4.y, av[2] = a4.z, av[3] = a4.w;
        bv[0] = b4.x, bv[1] = b4.y, bv[2] = b4.z, bv[3] = b4.w;
      } else {
        I j = col;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          av[c] = __ldg(a + j);
          bv[c] = __ldg(b + j);
          if (++j == N) j = 0;
        }
      }
      y[i] = make_float4(gelu_tanh(v[u].x * av[0] + bv[0]), gelu_tanh(v[u].y * av[1] + bv[1]),
                         gelu_tanh(v[u].z * av[2] + bv[2]), gelu_tanh(v[u].w * av[3] + bv[3]));
    }
  }
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < tail) {
    I j = tail_col;
    for (int c = 0; c < static_cast<int>(threadIdx.x); ++c)
      if (++j == N) j = 0;
    yt[threadIdx.x] = gelu_tanh(xt[threadIdx.x] * a[j] + b[j]);
  }
}

__global__ void __launch_bounds__(kThreads)
    ssg_scalar(const float* __restrict__ x, const float* __restrict__ a, const float* __restrict__ b,
               float* __restrict__ y, int64_t n, int64_t N) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const int64_t j = i % N;
    y[i] = gelu_tanh(x[i] * a[j] + b[j]);
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

template <typename I, bool VEC_AB>
void launch_vec4(const float* x, const float* a, const float* b, float* y, int64_t n, int64_t N, cudaStream_t s) {
  const int64_t n4 = n / 4;
  const int tail = static_cast<int>(n - n4 * 4);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  const I tail_col = static_cast<I>((n4 * 4) % N);
  int64_t blocks = (n4 + kThreads * 2 - 1) / (kThreads * 2);
  if (blocks >= 4 * sm_count()) {
    if (blocks > kMaxBlocks) blocks = kMaxBlocks;
    ssg_vec4<I, VEC_AB, 2><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        x4, a, b, y4, static_cast<I>(n4), static_cast<I>(N), x + n4 * 4, y + n4 * 4, tail, tail_col);
  } else {
    blocks = (n4 + kThreads - 1) / kThreads;
    if (blocks < 1) blocks = 1;  // n < 4: only the tail
    ssg_vec4<I, VEC_AB, 1><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        x4, a, b, y4, static_cast<I>(n4), static_cast<I>(N), x + n4 * 4, y + n4 * 4, tail, tail_col);
  }
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 3 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& a = inputs[1];
  const kfab_tensor& b = inputs[2];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(a, 1) || !is_dense_f32(b, 1) || !is_dense_f32(y, 2)) return 2;
  const int64_t M = x.shape[0];
  const int64_t N = x.shape[1];
  if (a.shape[0] != N || b.shape[0] != N) return 3;
  if (y.shape[0] != M || y.shape[1] != N) return 3;
  const int64_t n = M * N;
  if (n == 0) return 0;
  const float* xp = static_cast<const float*>(x.data);
  const float* ap = static_cast<const float*>(a.data);
  const float* bp = static_cast<const float*>(b.data);
  float* yp = static_cast<float*>(y.data);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);

  if (aligned16(xp) && aligned16(yp)) {
    const bool vec_ab = N % 4 == 0 && aligned16(ap) && aligned16(bp);
    const bool small = n < (int64_t{1} << 31);  // i * 4 and base + stride stay below 2^32
    if (small && vec_ab) launch_vec4<uint32_t, true>(xp, ap, bp, yp, n, N, s);
    else if (small) launch_vec4<uint32_t, false>(xp, ap, bp, yp, n, N, s);
    else if (vec_ab) launch_vec4<int64_t, true>(xp, ap, bp, yp, n, N, s);
    else launch_vec4<int64_t, false>(xp, ap, bp, yp, n, N, s);
  } else {
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > kMaxBlocks) blocks = kMaxBlocks;
    ssg_scalar<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(xp, ap, bp, yp, n, N);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
