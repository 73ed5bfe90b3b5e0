#pragma once
// The built-in tuner's CUDA group norm (tuner/group_norm.cpp): a block per (sample, group), or a
// cluster of blocks where the group is large, its values kept in registers or shared memory. The text
// between the kfab:begin and kfab:end lines is spliced into the candidates the tuner writes.
//
// Before it, a candidate defines `constexpr int B` (threads per block), `IMAX` (the most float4 a
// thread keeps) and `HOLD_SMEM` (a group longer than a block holds goes to a cluster's shared memory
// before its registers), and includes <cooperative_groups.h>, <cuda_runtime.h>, <cstdint>, <mutex>,
// <utility>, <vector> and kfab/candidate.h, then resident.cuh (its cluster launches);
// tests/templates/group_norm.cu compiles it on its own.
// kfab:begin
struct Gn {
  const float* __restrict__ x;
  const float* __restrict__ w;
  const float* __restrict__ b;
  float* __restrict__ y;
  int64_t L, HW, CG;
  int G;
  float eps;
};

// Writes V normalised values at element c of a group: (v - mean) * rstd * weight + bias, or without
// weights (a.w null: an instance norm) (v - mean) * rstd. A vector within one channel (the usual case)
// reads its weight and bias once; one 32-bit division a vector finds the channel (a 64-bit one per
// element would make the kernel compute-bound).
template <int V>
__device__ __forceinline__ void kfab_write(const Gn& a, float* yr, int64_t c, int64_t c0base, const float* vals, float mean, float rstd) {
  float o[V];
  if (a.w == nullptr) {
#pragma unroll
    for (int k = 0; k < V; ++k) o[k] = (vals[k] - mean) * rstd;
  } else {
    const uint32_t hw = static_cast<uint32_t>(a.HW);
    uint32_t q = static_cast<uint32_t>(c) / hw;
    uint32_t r = static_cast<uint32_t>(c) - q * hw;
    if (r + V <= hw) {
      const float sc = rstd * __ldg(a.w + c0base + q), sh = __ldg(a.b + c0base + q);
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = (vals[k] - mean) * sc + sh;
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        o[k] = (vals[k] - mean) * rstd * __ldg(a.w + c0base + q) + __ldg(a.b + c0base + q);
        if (++r == hw) r = 0, ++q;
      }
    }
  }
  if constexpr (V == 4) __stcs(reinterpret_cast<float4*>(yr + c), make_float4(o[0], o[1], o[2], o[3]));
  else __stcs(yr + c, o[0]);
}

// The block's totals of (sum, sum of squares): warp shuffles, then one barrier.
__device__ __forceinline__ float2 kfab_block_sum2(float2 v, float2* red) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, off);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, off);
  }
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float2 s = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int k = 0; k < B / 32; ++k) s.x += red[k].x, s.y += red[k].y;
  return s;
}

// mean and 1 / sqrt(var + eps) from the totals of d = x - shift over L values
__device__ __forceinline__ float2 kfab_stats(float2 t, float shift, int64_t L, float eps) {
  const float md = t.x / static_cast<float>(L);
  const float var = fmaxf(t.y / static_cast<float>(L) - md * md, 0.0f);
  return make_float2(shift + md, rsqrtf(var + eps));
}

// IT vectors of V values of a group, from element lo + (it * B + thread) * V below hi, into v;
// returns the thread's (sum, sum of squares) of v - shift.
template <int V, int IT>
__device__ __forceinline__ float2 kfab_load(const float* xr, int64_t lo, int64_t hi, float shift, float* v) {
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int64_t c = lo + (static_cast<int64_t>(it) * B + threadIdx.x) * V;
    if (c < hi) {
      if constexpr (V == 4) {
        const float4 q = __ldcs(reinterpret_cast<const float4*>(xr + c));
        v[it * 4] = q.x, v[it * 4 + 1] = q.y, v[it * 4 + 2] = q.z, v[it * 4 + 3] = q.w;
      } else {
        v[it] = __ldcs(xr + c);
      }
    }
  }
  float2 sq = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int64_t c = lo + (static_cast<int64_t>(it) * B + threadIdx.x) * V;
    if (c < hi)
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = v[it * V + k] - shift;
        sq.x += d;
        sq.y += d * d;
      }
  }
  return sq;
}

// MODE 0: the group in registers (IT vectors of V a thread); 1: in dynamic shared memory; 2: read
// from global memory (L2) again for the output.
template <int MODE, int V, int IT>
__global__ void __launch_bounds__(B) kfab_group_norm(Gn a) {
  __shared__ float2 red[B / 32];
  extern __shared__ float4 cache4[];
  float* cache = reinterpret_cast<float*>(cache4);
  const int64_t row = blockIdx.x;
  const int64_t c0base = static_cast<int64_t>(row % a.G) * a.CG;  // the group's first channel
  const float* xr = a.x + row * a.L;
  float* yr = a.y + row * a.L;
  const int64_t L = a.L;
  const float shift = __ldg(xr);
  float v[MODE == 0 ? IT * V : 1];
  (void)v, (void)cache;
  float2 sq = make_float2(0.0f, 0.0f);
  if constexpr (MODE == 0) {
    sq = kfab_load<V, IT>(xr, 0, L, shift, v);
  } else {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < L; c += static_cast<int64_t>(B) * V) {
      float q[V];
      if constexpr (V == 4) {
        const float4 f = MODE == 1 ? __ldcs(reinterpret_cast<const float4*>(xr + c)) : __ldg(reinterpret_cast<const float4*>(xr + c));
        if constexpr (MODE == 1) cache4[c / 4] = f;
        q[0] = f.x, q[1] = f.y, q[2] = f.z, q[3] = f.w;
      } else {
        q[0] = MODE == 1 ? __ldcs(xr + c) : __ldg(xr + c);
        if constexpr (MODE == 1) cache[c] = q[0];
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = q[k] - shift;
        sq.x += d;
        sq.y += d * d;
      }
    }
  }
  const float2 st = kfab_stats(kfab_block_sum2(sq, red), shift, L, a.eps);
  if constexpr (MODE == 0) {
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int64_t c = (static_cast<int64_t>(it) * B + threadIdx.x) * V;
      if (c < L) kfab_write<V>(a, yr, c, c0base, v + it * V, st.x, st.y);
    }
  } else {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < L; c += static_cast<int64_t>(B) * V) {
      float vals[V];
#pragma unroll
      for (int k = 0; k < V; ++k) vals[k] = MODE == 1 ? cache[c + k] : __ldg(xr + c + k);
      kfab_write<V>(a, yr, c, c0base, vals, st.x, st.y);
    }
  }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The group's mean and 1 / sqrt(var + eps) from each block's totals `sq`: after the barrier that says
// every block has started, each writes its totals into every block's `part`; one cluster barrier later
// every block adds them up locally in rank order (the same sum in each).
template <int CL>
__device__ __forceinline__ float2 kfab_cluster_stats(cooperative_groups::cluster_group& cluster, float2* part, int rank, float2 sq,
                                                     float shift, int64_t L, float eps) {
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");  // every block of the cluster has started
  if (threadIdx.x < CL) *cluster.map_shared_rank(&part[rank], static_cast<int>(threadIdx.x)) = sq;
  cluster.sync();
  float2 tot = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int r = 0; r < CL; ++r) tot.x += part[r].x, tot.y += part[r].y;
  return kfab_stats(tot, shift, L, eps);
}
#endif

// A launch of `rows` clusters of `cl` blocks of B threads with `smem` bytes of dynamic shared memory;
// `attr` holds the cluster's dimension.
inline cudaLaunchConfig_t kfab_cluster_config(int64_t rows, int cl, size_t smem, cudaStream_t stream, cudaLaunchAttribute* attr) {
  return kfab_cluster_launch(rows * cl, cl, B, smem, stream, attr);
}

// A group split across the CL blocks of a cluster, each keeping its part in registers (IT vectors of V a
// thread) or, with SMEM, in dynamic shared memory (up to the 227 KB an H100 block may have: a 512 x 512
// instance norm's 1 MB over 8 blocks, where the registers of a portable cluster cannot hold it), so the
// group is read once. Each block writes its totals into every block's shared memory (after a barrier
// that says all have started, whose arrival is made before the loads); one cluster barrier later every
// block reads them locally, so no block waits for the others to finish reading before it leaves.
template <int CL, int V, int IT, bool SMEM = false>
__global__ void __launch_bounds__(B) kfab_group_norm_cluster(Gn a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");  // this block has started
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float2 red[B / 32];
  __shared__ float2 part[CL];
  extern __shared__ float4 cache4[];
  float* cache = reinterpret_cast<float*>(cache4);
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / CL;
  int64_t lo = 0, hi = 0;
  kfab_cluster_part<CL, V>(a.L, rank, &lo, &hi);
  const int64_t c0base = static_cast<int64_t>(row % a.G) * a.CG;
  const float* xr = a.x + row * a.L;
  float* yr = a.y + row * a.L;
  const float shift = __ldg(xr);
  float v[SMEM ? 1 : IT * V];
  float2 sq = make_float2(0.0f, 0.0f);
  if constexpr (SMEM) {
#pragma unroll 4
    for (int64_t c = lo + static_cast<int64_t>(threadIdx.x) * V; c < hi; c += static_cast<int64_t>(B) * V) {
      float q[V];
      if constexpr (V == 4) {
        const float4 f = __ldcs(reinterpret_cast<const float4*>(xr + c));
        cache4[(c - lo) / 4] = f;
        q[0] = f.x, q[1] = f.y, q[2] = f.z, q[3] = f.w;
      } else {
        q[0] = __ldcs(xr + c);
        cache[c - lo] = q[0];
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = q[k] - shift;
        sq.x += d;
        sq.y += d * d;
      }
    }
  } else {
    sq = kfab_load<V, IT>(xr, lo, hi, shift, v);
  }
  const float2 st = kfab_cluster_stats<CL>(cluster, part, rank, kfab_block_sum2(sq, red), shift, a.L, a.eps);
  if constexpr (SMEM) {
    for (int64_t c = lo + static_cast<int64_t>(threadIdx.x) * V; c < hi; c += static_cast<int64_t>(B) * V)
      kfab_write<V>(a, yr, c, c0base, cache + (c - lo), st.x, st.y);
  } else {
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int64_t c = lo + (static_cast<int64_t>(it) * B + threadIdx.x) * V;
      if (c < hi) kfab_write<V>(a, yr, c, c0base, v + it * V, st.x, st.y);
    }
  }
#endif
}

// Launches kfab_group_norm_cluster with SMEM, with the smallest portable cluster whose blocks' shared
// memory holds the group (at most `smem_max` bytes a block); *done false where none does.
template <int V>
int kfab_launch_cluster_smem(const Gn& a, int64_t rows, cudaStream_t stream, int64_t smem_max, bool* done) {
  *done = false;
  for (int cl : {2, 4, 8}) {
    const int64_t chunk = (a.L + static_cast<int64_t>(cl) * V - 1) / (static_cast<int64_t>(cl) * V) * V;
    const int64_t bytes = chunk * static_cast<int64_t>(sizeof(float));
    if (bytes + 4096 > smem_max || rows * cl > 2147483647) continue;
    const void* fn = cl == 2 ? reinterpret_cast<const void*>(kfab_group_norm_cluster<2, V, 1, true>)
                   : cl == 4 ? reinterpret_cast<const void*>(kfab_group_norm_cluster<4, V, 1, true>)
                             : reinterpret_cast<const void*>(kfab_group_norm_cluster<8, V, 1, true>);
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = kfab_cluster_config(rows, cl, static_cast<size_t>(bytes), stream, attr);
    *done = true;
    cudaError_t e = cl == 2 ? cudaLaunchKernelEx(&cfg, kfab_group_norm_cluster<2, V, 1, true>, a)
                  : cl == 4 ? cudaLaunchKernelEx(&cfg, kfab_group_norm_cluster<4, V, 1, true>, a)
                            : cudaLaunchKernelEx(&cfg, kfab_group_norm_cluster<8, V, 1, true>, a);
    return e == cudaSuccess ? 0 : 5;
  }
  return 0;
}

template <int CL, int V, int IT>
int kfab_launch_cluster(const Gn& a, int64_t rows, cudaStream_t stream) {
  if (rows * CL > 2147483647) return 6;
  if constexpr (CL > 8) {  // a non-portable cluster size: allowed once per kernel
    static const bool allowed = [] {
      const bool ok = cudaFuncSetAttribute(kfab_group_norm_cluster<CL, V, IT>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
      if (!ok) (void)cudaGetLastError();  // not this call's error: the caller falls back
      return ok;
    }();
    if (!allowed) return 7;
  }
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = kfab_cluster_config(rows, CL, 0, stream, attr);
  if constexpr (CL > 8) {  // whether a cluster of CL such blocks fits the device at all
    static int fits = -1;
    if (fits < 0) {
      int n = 0;
      fits = cudaOccupancyMaxActiveClusters(&n, kfab_group_norm_cluster<CL, V, IT>, &cfg) == cudaSuccess && n > 0 ? 1 : 0;
      (void)cudaGetLastError();
    }
    if (!fits) return 7;
  }
  return cudaLaunchKernelEx(&cfg, kfab_group_norm_cluster<CL, V, IT>, a) == cudaSuccess ? 0 : 5;
}

// The smallest cluster (then the fewest registers) whose blocks hold the group: CL blocks of B
// threads, IT vectors of V a thread. 7: this cluster size cannot be launched here.
template <int CL, int V>
int kfab_try_cluster(const Gn& a, int64_t rows, cudaStream_t stream, bool* done) {
  const int64_t per = static_cast<int64_t>(CL) * B * V;
  *done = true;
  if (a.L <= per * 1) return kfab_launch_cluster<CL, V, 1>(a, rows, stream);
  if (a.L <= per * 2 && IMAX >= 2) return kfab_launch_cluster<CL, V, 2>(a, rows, stream);
  if (a.L <= per * 4 && IMAX >= 4) return kfab_launch_cluster<CL, V, 4>(a, rows, stream);
  if (a.L <= per * 8 && IMAX >= 8) return kfab_launch_cluster<CL, V, 8>(a, rows, stream);
  if constexpr (V == 4 && IMAX >= 16)
    if (a.L <= per * 16) return kfab_launch_cluster<CL, V, 16>(a, rows, stream);
  *done = false;
  return 0;
}

template <int MODE, int V, int IT>
int kfab_launch(const Gn& a, int64_t rows, size_t smem, cudaStream_t stream) {
  static size_t allowed = 48 * 1024;  // raised once per larger request, not on every call
  if (smem > allowed) {
    if (cudaFuncSetAttribute(kfab_group_norm<MODE, V, IT>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess)
      return 4;
    allowed = smem;
  }
  kfab_group_norm<MODE, V, IT><<<static_cast<unsigned>(rows), B, smem, stream>>>(a);
  return 0;
}

template <int V>
int kfab_dispatch(const Gn& a, int64_t rows, cudaStream_t stream) {
  const int64_t per = static_cast<int64_t>(B) * V;  // elements a block covers per register vector
  if (a.L <= per * 1) return kfab_launch<0, V, 1>(a, rows, 0, stream);
  if (a.L <= per * 2 && IMAX >= 2) return kfab_launch<0, V, 2>(a, rows, 0, stream);
  if (a.L <= per * 4 && IMAX >= 4) return kfab_launch<0, V, 4>(a, rows, 0, stream);
  if (V == 4 && a.L <= per * 8 && IMAX >= 8) return kfab_launch<0, V, 8>(a, rows, 0, stream);
  static int clusters = -1;  // whether the device launches clusters (Hopper and later)
  if (clusters < 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, dev) != cudaSuccess)
      clusters = 0;
  }
  static int smem_max = -1;
  if (smem_max < 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      smem_max = 48 * 1024;
  }
  if (clusters > 0 && HOLD_SMEM) {  // the group in a cluster's shared memory, where it fits
    bool done = false;
    const int rc = kfab_launch_cluster_smem<V>(a, rows, stream, smem_max, &done);
    if (done) return rc;
  }
  if (clusters > 0) {
    bool done = false;
    int rc = kfab_try_cluster<2, V>(a, rows, stream, &done);
    if (!done) rc = kfab_try_cluster<4, V>(a, rows, stream, &done);
    if (!done) rc = kfab_try_cluster<8, V>(a, rows, stream, &done);
    if (!done) rc = kfab_try_cluster<16, V>(a, rows, stream, &done);
    if (done && rc != 7) return rc;
  }
  const int64_t bytes = a.L * static_cast<int64_t>(sizeof(float));
  if (bytes + static_cast<int64_t>(sizeof(float2)) * (B / 32) <= smem_max) return kfab_launch<1, V, 1>(a, rows, static_cast<size_t>(bytes), stream);
  return kfab_launch<2, V, 1>(a, rows, 0, stream);
}

// kfab:end
