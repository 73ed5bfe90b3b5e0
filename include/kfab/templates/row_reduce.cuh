#pragma once
// The reductions of the tuner's generated row kernels (tuner/print_cuda.cpp): a value combined over
// the G threads that own a row, with shuffles inside a warp and, when G is a whole block of more
// than one warp, through a shared slot per warp and one barrier. The text between the kfab:begin
// and kfab:end lines is spliced into the candidates the tuner writes, inside an unnamed namespace;
// tests/templates/row_reduce.cu compiles it on its own. Candidates include <cooperative_groups.h>
// before it.
// kfab:begin
// op 0: sum, 1: max, 2: min
template <int OP>
__device__ __forceinline__ float kfab_combine(float x, float y) {
  return OP == 0 ? x + y : OP == 1 ? fmaxf(x, y) : fminf(x, y);
}
// The reduction of v over the G threads of a row. With G > 32 (a whole block) the warps meet in
// `slot`, which no other reduction uses, so one barrier suffices.
template <int G, int OP>
__device__ __forceinline__ float kfab_group(float v, float* slot) {
#pragma unroll
  for (int off = (G < 32 ? G : 32) / 2; off > 0; off /= 2) v = kfab_combine<OP>(v, __shfl_xor_sync(0xffffffffu, v, off));
  if constexpr (G > 32) {
    if (threadIdx.x % 32 == 0) slot[threadIdx.x / 32] = v;
    __syncthreads();
    v = slot[0];
#pragma unroll
    for (int w = 1; w < G / 32; ++w) v = kfab_combine<OP>(v, slot[w]);
  }
  return v;
}
// A row split over the CL blocks of a cluster (rows longer than one block's registers hold): v, the
// block's share of a reduction, combined over the cluster. Threads r < CL send the share to block r's
// slot `part[rank]` with st.async, which counts its 4 bytes on block r's mbarrier `bar`; every block
// waits there for the CL shares of this use (`parity`: the use's count modulo 2 on that mbarrier) and adds
// them up locally in rank order, so every block has the same total. `start`, the block's first combine,
// first waits for the cluster barrier kfab_cluster_begin arrived at (every block's mbarriers set up).
// No cluster barrier a row: the barrier-based exchange had two (cluster.sync before the shares and
// after), each with a MEMBAR.ALL.GPU before its arrival, which waits for the block's global stores. The
// caller keeps two sets of slots and mbarriers and uses them turn about, row by row: a block sends into a
// set only after every block's shares of the row between arrived, each sent after its sender had read
// that set's last shares. Hopper and later; elsewhere never launched.
template <int CL, int OP>
__device__ __forceinline__ float kfab_cluster_combine(float v, float* part, unsigned long long* bar, unsigned parity, bool start) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (start) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  unsigned rank = 0;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  const unsigned slot = static_cast<unsigned>(__cvta_generic_to_shared(part + rank));
  const unsigned mb = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  if (threadIdx.x < CL) {
    unsigned to = 0, to_bar = 0;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to) : "r"(slot), "r"(threadIdx.x));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to_bar) : "r"(mb), "r"(threadIdx.x));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(to), "r"(__float_as_uint(v)), "r"(to_bar)
                 : "memory");
  }
  if (threadIdx.x == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mb), "r"(CL * 4) : "memory");
  unsigned done = 0;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(mb), "r"(parity)
                 : "memory");
  } while (done == 0);
  v = part[0];
#pragma unroll
  for (int r = 1; r < CL; ++r) v = kfab_combine<OP>(v, part[r]);
#endif
  return v;
}
// The N mbarriers of kfab_cluster_combine, each expecting one arrival a use, set up and made visible to
// the cluster's other blocks, and this block's arrival at a cluster barrier, whose wait comes with the
// block's first combine (its loads are in flight by then, where a barrier here held them back).
template <int N>
__device__ __forceinline__ void kfab_cluster_begin(unsigned long long* bars) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x < N) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(bars + threadIdx.x))) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();  // the block's mbarriers, before any thread's arrival stands for them
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
// A cluster's row read a float4 at a time from the 16-byte boundary at or before its start (U: rows whose
// length is not a multiple of 4): the float4 at p, of which `left` floats lie in the block's part (the
// others, past the row, are not read: the last row's would lie past the tensor).
template <bool U>
__device__ __forceinline__ float4 kfab_ld4(const float* p, int left) {
  if (U && left < 4) {
    float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (left > 0) q.x = __ldcs(p);
    if (left > 1) q.y = __ldcs(p + 1);
    if (left > 2) q.z = __ldcs(p + 2);
    return q;
  }
  return __ldcs(reinterpret_cast<const float4*>(p));
}
// The float4 of outputs q at p, whose first is column c of a row of n (U: n < 2^31, a cluster holds the
// row): with U, only the columns that lie in the row are written (the others belong to the rows before
// and after it).
template <bool U>
__device__ __forceinline__ void kfab_st4(float* p, float4 q, int c, int n) {
  if (U && static_cast<unsigned>(c) > static_cast<unsigned>(n - 4)) {  // c < 0 too
    if (static_cast<unsigned>(c) < static_cast<unsigned>(n)) __stcs(p, q.x);
    if (static_cast<unsigned>(c + 1) < static_cast<unsigned>(n)) __stcs(p + 1, q.y);
    if (static_cast<unsigned>(c + 2) < static_cast<unsigned>(n)) __stcs(p + 2, q.z);
    if (static_cast<unsigned>(c + 3) < static_cast<unsigned>(n)) __stcs(p + 3, q.w);
    return;
  }
  __stcs(reinterpret_cast<float4*>(p), q);
}
// A row split over blocks of the grid fetching its next row's part while its row's blocks meet: a 16-byte
// copy from global into this thread's own slot of shared memory (past L1), the copies issued so far made
// one group, and the wait for all of this thread's groups. A thread reads only the slots it copied into,
// so no barrier is needed; it issues a slot's next copy only after its values were used (the kernel's
// first reduction reads every one), so no copy overwrites a value not yet read.
__device__ __forceinline__ void kfab_cp16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))), "l"(src) : "memory");
}
__device__ __forceinline__ void kfab_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void kfab_cp_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Thread 0 of each of S blocks of the grid (resident.cuh's kfab_go_split: all of them resident at once)
// that wrote their shares: the blocks meet at `bar`, which counts arrivals (`target`: S times the number
// of this meeting among the block's meetings of the launch); then the block's threads wait for thread 0.
// The shares are read from L2 (__ldcg) after it: other SMs wrote them.
__device__ __forceinline__ void kfab_split_meet(unsigned* bar, unsigned target) {
  if (threadIdx.x == 0) {
    __threadfence();  // the shares, before the arrival is counted
    atomicAdd(bar, 1u);
    while (*static_cast<volatile unsigned*>(bar) < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

// A share of a row reduction, from shared memory (SH: resident.cuh's kfab_ring_take left it there) or from
// global memory, read from L2 (other SMs wrote it).
template <bool SH>
__device__ __forceinline__ float kfab_share(const float* p) {
  if constexpr (SH) return *p;
  else return __ldcg(p);
}

// The row's total of a reduction from the S blocks' shares `sh` (thread r of B takes shares r, r + B, ..;
// then kfab_group over `slot`), in the same order in every block, so every block has the same total.
template <int B, int OP, bool SH = false>
__device__ __forceinline__ float kfab_split_gather(const float* sh, int S, float* slot) {
  float t = OP == 0 ? 0.0f : OP == 1 ? -INFINITY : INFINITY;
  for (int r = threadIdx.x; r < S; r += B) t = kfab_combine<OP>(t, kfab_share<SH>(sh + r));
  return kfab_group<B, OP>(t, slot);
}

// A row split over S blocks of the grid: v, the block's share of a reduction, goes to its slot of `sh`
// (the S slots of this reduction); after the meeting each block gathers the S shares. `slot` is the shared
// slot of this reduction, whose earlier reads the meeting orders before the writes here.
template <int B, int OP>
__device__ __forceinline__ float kfab_split_combine(float v, float* sh, unsigned* bar, unsigned target, int S, float* slot) {
  if (threadIdx.x == 0) __stcg(sh + blockIdx.x % S, v);
  kfab_split_meet(bar, target);
  return kfab_split_gather<B, OP>(sh, S, slot);
}

// A softmax's row maximum and sum from S parts' maxima `shm` and sums `shs` of exp(x - the part's maximum)
// (program.h's softmax_pairs): the row's maximum M is the largest, its sum that of s_b exp(m_b - M) (s_b
// alone where m_b is M: a row of -infinity keeps its NaN, as exp(x - M) gives it); left in *m and *s, the
// same in every block.
template <int B, bool SH = false>
__device__ __forceinline__ void kfab_softmax_gather(float* m, float* s, const float* shm, const float* shs, int S, float* slot_m, float* slot_s) {
  float M = -INFINITY;
  for (int r = threadIdx.x; r < S; r += B) M = fmaxf(M, kfab_share<SH>(shm + r));
  M = kfab_group<B, 1>(M, slot_m);
  float t = 0.0f;
  for (int r = threadIdx.x; r < S; r += B) {
    const float mb = kfab_share<SH>(shm + r), sb = kfab_share<SH>(shs + r);
    t += mb == M ? sb : sb * expf(mb - M);
  }
  *s = kfab_group<B, 0>(t, slot_s);
  *m = M;
}

// The same over S blocks of the grid at one meeting: each block brings its part's maximum *m and the sum
// *s of exp(x - *m) over its part.
template <int B>
__device__ __forceinline__ void kfab_split_softmax(float* m, float* s, float* shm, float* shs, unsigned* bar, unsigned target, int S, float* slot_m,
                                                   float* slot_s) {
  if (threadIdx.x == 0) __stcg(shm + blockIdx.x % S, *m), __stcg(shs + blockIdx.x % S, *s);
  kfab_split_meet(bar, target);
  kfab_softmax_gather<B>(m, s, shm, shs, S, slot_m, slot_s);
}

// A layer norm's row mean and its sum of squared deviations from S parts' means `shm` and sums `shq` of
// (x - the part's mean)^2 (program.h's moment_pairs; parts as resident.cuh's kfab_split_part<V> cuts a row
// of n): the row's mean is that of the parts' means weighted by their lengths, its sum of squares theirs
// plus n_b (m_b - mean)^2 each (Chan et al.); left in *m and *q, the same in every block.
template <int B, int V, bool SH = false>
__device__ __forceinline__ void kfab_moments_gather(float* m, float* q, int64_t n, const float* shm, const float* shq, int S, float* slot_m,
                                                    float* slot_q) {
  const int64_t chunk = (n + static_cast<int64_t>(S) * V - 1) / (static_cast<int64_t>(S) * V) * V;
  auto part = [&](int r) {  // the length of block r's part
    const int64_t left = n - r * chunk;
    return static_cast<float>(left < 0 ? 0 : left < chunk ? left : chunk);
  };
  float t = 0.0f;
  for (int r = threadIdx.x; r < S; r += B) t += part(r) * kfab_share<SH>(shm + r);
  const float mean = kfab_group<B, 0>(t, slot_m) / static_cast<float>(n);
  float u = 0.0f;
  for (int r = threadIdx.x; r < S; r += B) {
    const float d = kfab_share<SH>(shm + r) - mean;
    u += kfab_share<SH>(shq + r) + part(r) * d * d;
  }
  *q = kfab_group<B, 0>(u, slot_q);
  *m = mean;
}

// The same over S blocks of the grid at one meeting: each block brings its part's mean *m and the sum *q
// of (x - *m)^2 over its part.
template <int B, int V>
__device__ __forceinline__ void kfab_split_moments(float* m, float* q, int64_t n, float* shm, float* shq, unsigned* bar, unsigned target, int S,
                                                   float* slot_m, float* slot_q) {
  if (threadIdx.x == 0) __stcg(shm + blockIdx.x % S, *m), __stcg(shq + blockIdx.x % S, *q);
  kfab_split_meet(bar, target);
  kfab_moments_gather<B, V>(m, q, n, shm, shq, S, slot_m, slot_q);
}

// Rows split into parts (tiles) read twice, the second time from L2 (resident.cuh's kfab_go_l2): ticket t of
// 2T (T tiles) is the tile's first pass (its row reductions' shares: *second false) or its second (the
// outputs), first passes running D tiles ahead of second ones: D first passes, then one of each in turn,
// then the last second passes. A row's second passes come after all its first passes where D is at least
// a row's parts. The blocks take tickets from one counter, each its next while it works on one: the
// smallest ticket not done is a block's current one, and waits on none but smaller ones, so no block
// waits forever; and first passes never run more than D and the grid's blocks tiles ahead of second ones.
// (Tickets dealt round the grid, t, t + the grid's blocks, ..: with an even grid half the blocks took first
// passes only, which wait for nothing, and ran ahead of the others' second passes without bound: level1/23's
// second passes found none of their tiles in L2, 12.7 GB read for 6.4.)
// (constexpr: tests/templates/row_reduce.cu checks the schedule at compile time.)
__host__ __device__ constexpr void kfab_l2_ticket(int64_t t, int64_t T, int64_t D, int64_t* tile, bool* second) {
  const int64_t u = t - D, L = T - D;
  if (t < D) *tile = t, *second = false;
  else if (u < 2 * L) *tile = u / 2 + (u % 2 == 0 ? D : 0), *second = u % 2 != 0;
  else *tile = u - L, *second = true;
}

// A tile's first pass, its shares written (by thread 0): it is counted at its row's counter `bar`; true in
// every thread of the block whose tile is its row's last to be counted (`parts` of them), which then makes
// the row's reductions from the shares and calls kfab_l2_publish.
__device__ __forceinline__ bool kfab_l2_arrive(unsigned* bar, unsigned parts) {
  __shared__ unsigned kfab_last;
  __syncthreads();  // (kfab_last's last reads)
  if (threadIdx.x == 0) {
    __threadfence();  // the shares, before the tile is counted
    kfab_last = atomicAdd(bar, 1u) == parts - 1 ? 1u : 0u;
    if (kfab_last) __threadfence();  // every part's shares, before they are read
  }
  __syncthreads();
  return kfab_last != 0;
}

// The row's reductions written (by thread 0): its counter goes one past its parts, which second passes wait for.
__device__ __forceinline__ void kfab_l2_publish(unsigned* bar) {
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(bar, 1u);
  }
}

// A tile's second pass waits (thread 0, then the block) until its row's counter reaches `target`; the row's
// reductions are read from L2 (__ldcg) after it.
__device__ __forceinline__ void kfab_l2_wait(const unsigned* bar, unsigned target) {
  if (threadIdx.x == 0) {
    unsigned v = 0;
    for (;;) {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar) : "memory");
      if (v >= target) break;
      __nanosleep(100);
    }
  }
  __syncthreads();
}
// kfab:end
