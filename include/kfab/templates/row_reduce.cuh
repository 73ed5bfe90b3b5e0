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
// kfab:end
