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
// block's share of a reduction, combined over the cluster. Each block writes its share into every
// block's `part` (CL slots, used by no other reduction), and after one cluster barrier adds them up
// locally in rank order, so every block has the same total and none reads another's memory after the
// barrier. `first`, the row's first such combine, waits before writing for every block of the cluster
// to have started (and to have read the previous row's slots). Hopper and later; elsewhere never launched.
template <int CL, int OP>
__device__ __forceinline__ float kfab_cluster_combine(float v, float* part, bool first) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  if (first) cluster.sync();
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x < CL) *cluster.map_shared_rank(&part[rank], static_cast<int>(threadIdx.x)) = v;
  cluster.sync();
  v = part[0];
#pragma unroll
  for (int r = 1; r < CL; ++r) v = kfab_combine<OP>(v, part[r]);
#endif
  return v;
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

// A row split over S blocks of the grid: v, the block's share of a reduction, goes to its slot of `sh`
// (the S slots of this reduction); after the meeting each block combines the S shares in the same order
// (thread r of B takes shares r, r + B, ..; then kfab_group), so every block has the same total. `slot`
// is the shared slot of this reduction, whose earlier reads the meeting orders before the writes here.
template <int B, int OP>
__device__ __forceinline__ float kfab_split_combine(float v, float* sh, unsigned* bar, unsigned target, int S, float* slot) {
  if (threadIdx.x == 0) __stcg(sh + blockIdx.x % S, v);
  kfab_split_meet(bar, target);
  float t = OP == 0 ? 0.0f : OP == 1 ? -INFINITY : INFINITY;
  for (int r = threadIdx.x; r < S; r += B) t = kfab_combine<OP>(t, __ldcg(sh + r));
  return kfab_group<B, OP>(t, slot);
}

// A softmax's row maximum and sum over S blocks of the grid at one meeting (program.h's softmax_pairs):
// each block brings its part's maximum *m and the sum *s of exp(x - *m) over its part; the row's maximum
// M is the largest, its sum that of s_b exp(m_b - M) (s_b alone where m_b is M: a row of -infinity keeps
// its NaN, as exp(x - M) gives it). Both are left in *m and *s, the same in every block.
template <int B>
__device__ __forceinline__ void kfab_split_softmax(float* m, float* s, float* shm, float* shs, unsigned* bar, unsigned target, int S, float* slot_m,
                                                   float* slot_s) {
  if (threadIdx.x == 0) __stcg(shm + blockIdx.x % S, *m), __stcg(shs + blockIdx.x % S, *s);
  kfab_split_meet(bar, target);
  float M = -INFINITY;
  for (int r = threadIdx.x; r < S; r += B) M = fmaxf(M, __ldcg(shm + r));
  M = kfab_group<B, 1>(M, slot_m);
  float t = 0.0f;
  for (int r = threadIdx.x; r < S; r += B) {
    const float mb = __ldcg(shm + r), sb = __ldcg(shs + r);
    t += mb == M ? sb : sb * expf(mb - M);
  }
  *s = kfab_group<B, 0>(t, slot_s);
  *m = M;
}
// A layer norm's row mean and its sum of squared deviations over S blocks of the grid at one meeting
// (program.h's moment_pairs): each block brings its part's mean *m and the sum *q of (x - *m)^2 over its
// part (parts as resident.cuh's kfab_split_part<V> cuts a row of n); the row's mean is that of the parts'
// means weighted by their lengths, its sum of squares theirs plus n_b (m_b - mean)^2 each (Chan et al.).
// Both are left in *m and *q, the same in every block.
template <int B, int V>
__device__ __forceinline__ void kfab_split_moments(float* m, float* q, int64_t n, float* shm, float* shq, unsigned* bar, unsigned target, int S,
                                                   float* slot_m, float* slot_q) {
  if (threadIdx.x == 0) __stcg(shm + blockIdx.x % S, *m), __stcg(shq + blockIdx.x % S, *q);
  kfab_split_meet(bar, target);
  const int64_t chunk = (n + static_cast<int64_t>(S) * V - 1) / (static_cast<int64_t>(S) * V) * V;
  auto part = [&](int r) {  // the length of block r's part
    const int64_t left = n - r * chunk;
    return static_cast<float>(left < 0 ? 0 : left < chunk ? left : chunk);
  };
  float t = 0.0f;
  for (int r = threadIdx.x; r < S; r += B) t += part(r) * __ldcg(shm + r);
  const float mean = kfab_group<B, 0>(t, slot_m) / static_cast<float>(n);
  float u = 0.0f;
  for (int r = threadIdx.x; r < S; r += B) {
    const float d = __ldcg(shm + r) - mean;
    u += __ldcg(shq + r) + part(r) * d * d;
  }
  *q = kfab_group<B, 0>(u, slot_q);
  *m = mean;
}
// kfab:end
