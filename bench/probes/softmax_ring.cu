// A probe, not part of kfab: softmax over level1/23's rows (4096 x 393216 fp32) with each block's tiles
// brought into a ring of shared-memory slots by the Hopper bulk copy (cp.async.bulk, completed on an
// mbarrier), reduced from there, and written out from there once their row's reductions have met, so
// each element is read from DRAM once and no thread holds a tile in registers. Compared side by side
// with a float4 copy of the same bytes and cudaMemcpy.
//
//   nvcc -arch=sm_90a -O3 -std=c++17 -o /tmp/ring bench/probes/softmax_ring.cu && /tmp/ring [rows n]
//
// Tiles: block b takes tiles b, b + G, b + 2G, .. (G blocks, a row is S tiles); at step j it reduces tile
// j and writes tile j - L. Tile j - L's row ends at most one step after it when S <= G + 1, so the block
// at the least step never waits on a later one: no deadlock for L >= 1 with every block resident.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cmath>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("%s: %s\n", #x, cudaGetErrorString(e_)); std::exit(1); } } while (0)

__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(b);
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}\n" ::"r"(a), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   (unsigned)__cvta_generic_to_shared(dst)),
               "l"(src), "r"(bytes), "r"((unsigned)__cvta_generic_to_shared(b))
               : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <int T>
__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = red[0];
  for (int i = 1; i < T / 32; ++i) v = is_max ? fmaxf(v, red[i]) : v + red[i];
  __syncthreads();
  return v;
}

// shares: (max, sum of exp(x - max)) of every tile, all bits set before the launch (a sum is never
// negative, so a share whose sum has every bit set is not written yet): a tile's share is one 8-byte store,
// no fence, no counter; the writer of tile w loads its row's shares at the start of the step, before it
// reduces tile j = w + L, and uses them after (one L2 round trip, hidden behind the reduction).
__device__ __forceinline__ float2 ld_share(const float2* p) {
  float2 v;
  asm volatile("ld.relaxed.gpu.global.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_share(float2* p, float2 v) {
  asm volatile("st.relaxed.gpu.global.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(v.x), "f"(v.y) : "memory");
}
__device__ __forceinline__ bool unset(float2 q) { return __float_as_uint(q.y) == 0xffffffffu; }

// ACC: expf (as kfab's generated kernels call it) where the others call __expf.
template <bool ACC>
__device__ __forceinline__ float kexp(float x) {
  return ACC ? expf(x) : __expf(x);
}

template <int T, int TILE, int R, int L, bool LOG, bool ACC = false>
__global__ void __launch_bounds__(T, 1) ring_softmax(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t tiles,
                                                    float2* shares, unsigned* cnt) {
  extern __shared__ __align__(128) float4 ring[];
  __shared__ uint64_t bar[R];
  __shared__ float2 red[T / 32];
  __shared__ float fin[2];
  constexpr int QS = 8;  // shares a lane of warp 0 loads: rows of up to 256 tiles
  const int S = static_cast<int>(n / TILE);
  const int64_t G = gridDim.x;
  constexpr int V = TILE / 4 / T;  // float4 a thread a tile
  (void)cnt;
  if (threadIdx.x == 0) {
    for (int k = 0; k < R; ++k) mbar_init(&bar[k], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int64_t mine = (tiles - blockIdx.x + G - 1) / G;  // this block's tiles
  auto issue = [&](int64_t j) {
    if (threadIdx.x == 0 && j < mine) {
      const int64_t t = blockIdx.x + j * G;
      uint64_t* b = &bar[j % R];
      mbar_expect(b, TILE * 4);
      bulk_load(ring + (j % R) * (TILE / 4), x + t * TILE, TILE * 4, b);
    }
  };
  for (int k = 0; k < R && k < mine; ++k) issue(k);
  for (int64_t j = 0; j < mine + L; ++j) {
    const int64_t w = j - L;
    const bool writes = w >= 0 && w < mine;
    const int64_t tw = blockIdx.x + w * G;
    float2 q[QS];
    if (writes && threadIdx.x < 32) {
#pragma unroll
      for (int i = 0; i < QS; ++i)
        q[i] = i * 32 + static_cast<int>(threadIdx.x) < S ? ld_share(&shares[tw / S * S + i * 32 + threadIdx.x]) : make_float2(-INFINITY, 0.f);
    }
    if (j < mine) {  // reduce tile j: a running maximum and the sum of exp(x - it), one pass
      mbar_wait(&bar[j % R], static_cast<unsigned>((j / R) & 1));
      const float4* s = ring + (j % R) * (TILE / 4);
      float m = -INFINITY, e = 0.f;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float4 a = s[v * T + threadIdx.x];
        const float mm = fmaxf(m, fmaxf(fmaxf(a.x, a.y), fmaxf(a.z, a.w)));
        e = e * kexp<ACC>(m - mm) + kexp<ACC>(a.x - mm) + kexp<ACC>(a.y - mm) + kexp<ACC>(a.z - mm) + kexp<ACC>(a.w - mm);
        m = mm;
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), e2 = __shfl_xor_sync(0xffffffffu, e, o);
        const float mm = fmaxf(m, m2);
        e = (m == -INFINITY ? 0.f : e * kexp<ACC>(m - mm)) + (m2 == -INFINITY ? 0.f : e2 * kexp<ACC>(m2 - mm));
        m = mm;
      }
      if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = make_float2(m, e);
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int i = 1; i < T / 32; ++i) {
          const float mm = fmaxf(m, red[i].x);
          e = (m == -INFINITY ? 0.f : e * kexp<ACC>(m - mm)) + (red[i].x == -INFINITY ? 0.f : red[i].y * kexp<ACC>(red[i].x - mm));
          m = mm;
        }
        st_share(&shares[blockIdx.x + j * G], make_float2(m, e));
      }
    }
    if (writes) {  // write tile w
      if (threadIdx.x < 32) {
        for (;;) {
          bool missing = false;
#pragma unroll
          for (int i = 0; i < QS; ++i) missing = missing || (i * 32 + static_cast<int>(threadIdx.x) < S && unset(q[i]));
          if (!__any_sync(0xffffffffu, missing)) break;
          __nanosleep(64);
#pragma unroll
          for (int i = 0; i < QS; ++i)
            if (i * 32 + static_cast<int>(threadIdx.x) < S && unset(q[i])) q[i] = ld_share(&shares[tw / S * S + i * 32 + threadIdx.x]);
        }
        float M = -INFINITY;
#pragma unroll
        for (int i = 0; i < QS; ++i) M = fmaxf(M, q[i].x);
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        float Z = 0.f;
#pragma unroll
        for (int i = 0; i < QS; ++i) Z += q[i].y == 0.f ? 0.f : q[i].y * kexp<ACC>(q[i].x - M);
        for (int o = 16; o > 0; o >>= 1) Z += __shfl_xor_sync(0xffffffffu, Z, o);
        if (threadIdx.x == 0) fin[0] = M, fin[1] = LOG ? logf(Z) : 1.f / Z;
      }
      __syncthreads();
      const float M = fin[0], k = fin[1];
      const float4* s = ring + (w % R) * (TILE / 4);
      float4* o = reinterpret_cast<float4*>(y + tw * TILE);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        float4 a = s[v * T + threadIdx.x];
        if (LOG) a = make_float4(a.x - M - k, a.y - M - k, a.z - M - k, a.w - M - k);
        else a = make_float4(kexp<ACC>(a.x - M) * k, kexp<ACC>(a.y - M) * k, kexp<ACC>(a.z - M) * k, kexp<ACC>(a.w - M) * k);
        __stcs(o + v * T + threadIdx.x, a);
      }
      __syncthreads();  // every thread done with slot w % R (and fin) before the bulk copy refills it
      if (threadIdx.x == 0) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(w + R);
    } else if (j < mine) {
      __syncthreads();  // red reused
    }
  }
}

__global__ void copy4(const float4* __restrict__ a, float4* __restrict__ b, int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) b[i] = a[i];
}

__global__ void fill(float* a, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32) * 40503u;
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    a[i] = (h & 0xffffff) / 16777216.0f * 8.f - 4.f;
  }
}

template <typename F>
float time_ms(F f, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();
  CK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    best = ms < best ? ms : best;
  }
  return best;
}

struct Ctx {
  int64_t rows, n;
  float *x, *y;
  float2* shares;
  unsigned* cnt;
  int sms;
  double copy_ms;
};

template <int T, int TILE, int R, int L, bool LOG, bool ACC = false>
void run(Ctx& c, int per_sm) {
  auto k = ring_softmax<T, TILE, R, L, LOG, ACC>;
  const int smem = R * TILE * 4;
  if (c.n % TILE != 0) return;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int fit = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k, T, smem));
  if (fit < per_sm) { std::printf("T=%d TILE=%d R=%d L=%d per_sm=%d: only %d fit\n", T, TILE, R, L, per_sm, fit); return; }
  const int64_t tiles = c.rows * (c.n / TILE);
  const int G = c.sms * per_sm;
  auto go = [&] {
    CK(cudaMemsetAsync(c.shares, 0xff, tiles * sizeof(float2)));
    k<<<G, T, smem>>>(c.x, c.y, c.n, tiles, c.shares, c.cnt);
  };
  const float ms = time_ms(go, 10);
  CK(cudaGetLastError());
  // check a few rows against double precision
  double worst = 0;
  std::vector<float> xr(c.n), yr(c.n);
  for (int64_t r : {int64_t(0), c.rows / 2, c.rows - 1}) {
    CK(cudaMemcpy(xr.data(), c.x + r * c.n, c.n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(yr.data(), c.y + r * c.n, c.n * 4, cudaMemcpyDeviceToHost));
    double M = -1e30, Z = 0;
    for (float v : xr) M = v > M ? v : M;
    for (float v : xr) Z += std::exp(v - M);
    for (int64_t i = 0; i < c.n; ++i) {
      const double ref = LOG ? xr[i] - M - std::log(Z) : std::exp(xr[i] - M) / Z;
      const double d = std::fabs(ref - yr[i]) * (LOG ? 1.0 : static_cast<double>(c.n));  // softmax: in units of 1/n
      worst = d > worst ? d : worst;
    }
  }
  std::printf("%s%s T=%d TILE=%dKB R=%d L=%d per_sm=%d: %.3f ms, %.1f%% of the float4 copy, err %.2e\n", LOG ? "logsoftmax" : "softmax", ACC ? " (expf)" : "", T,
              TILE * 4 / 1024, R, L, per_sm, ms, 100.0 * c.copy_ms / ms, worst);
}

int main(int argc, char** argv) {
  Ctx c{};
  c.rows = argc > 2 ? std::atoll(argv[1]) : 4096;
  c.n = argc > 2 ? std::atoll(argv[2]) : 393216;
  CK(cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t total = c.rows * c.n;
  CK(cudaMalloc(&c.x, total * 4));
  CK(cudaMalloc(&c.y, total * 4));
  CK(cudaMalloc(&c.shares, total / 1024 * sizeof(float2) + 4096));
  CK(cudaMalloc(&c.cnt, c.rows * sizeof(unsigned)));
  fill<<<4096, 256>>>(c.x, total);
  CK(cudaDeviceSynchronize());
  const double gb = 2.0 * total * 4 / 1e9;
  c.copy_ms = time_ms([&] { copy4<<<c.sms * 8, 512>>>((const float4*)c.x, (float4*)c.y, total / 4); }, 10);
  const float memcpy_ms = time_ms([&] { CK(cudaMemcpyAsync(c.y, c.x, total * 4, cudaMemcpyDeviceToDevice)); }, 10);
  std::printf("rows %lld n %lld: float4 copy %.3f ms (%.0f GB/s), cudaMemcpy %.3f ms (%.0f GB/s)\n", (long long)c.rows, (long long)c.n,
              c.copy_ms, gb / c.copy_ms * 1e3, memcpy_ms, gb / memcpy_ms * 1e3);
  run<256, 8192, 6, 1, false>(c, 1);
  run<256, 8192, 6, 2, false>(c, 1);
  run<256, 8192, 6, 3, false>(c, 1);
  run<512, 8192, 6, 2, false>(c, 1);
  run<256, 16384, 3, 1, false>(c, 1);
  run<512, 16384, 3, 1, false>(c, 1);
  run<256, 4096, 12, 2, false>(c, 1);
  run<256, 4096, 12, 4, false>(c, 1);
  run<256, 4096, 6, 2, false>(c, 2);
  run<256, 8192, 3, 1, false>(c, 2);
  run<128, 4096, 6, 2, false>(c, 2);
  run<256, 8192, 6, 2, true>(c, 1);
  run<256, 4096, 6, 2, true>(c, 2);
  run<256, 8192, 3, 1, false, true>(c, 2);
  run<256, 16384, 3, 1, false, true>(c, 1);
  return 0;
}
