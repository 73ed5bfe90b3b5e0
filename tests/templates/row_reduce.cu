// include/kfab/templates/row_reduce.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it, and a kernel that uses it.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kfab/candidate.h"

namespace {

#include "kfab/templates/row_reduce.cuh"

// kfab_l2_ticket's schedule over `rows` rows of S tiles with first passes D tiles ahead: each tile's first and
// second pass come once each; every second pass comes after all its row's first passes (no block waits on a
// later ticket); a tile's two passes lie at most 2D + 1 tickets apart (what L2 must hold).
constexpr bool l2_schedule_holds(int64_t rows, int64_t S, int64_t D) {
  constexpr int kMax = 64;
  const int64_t T = rows * S;
  if (T > kMax || D > T) return false;
  int64_t first[kMax] = {}, second[kMax] = {};  // each tile's passes' tickets, plus one
  for (int64_t t = 0; t < 2 * T; ++t) {
    int64_t tile = -1;
    bool is_second = false;
    kfab_l2_ticket(t, T, D, &tile, &is_second);
    if (tile < 0 || tile >= T) return false;
    int64_t& at = is_second ? second[tile] : first[tile];
    if (at != 0) return false;
    at = t + 1;
  }
  for (int64_t tile = 0; tile < T; ++tile) {
    if (first[tile] == 0 || second[tile] == 0 || second[tile] - first[tile] > 2 * D + 1) return false;
    for (int64_t p = tile / S * S; p < tile / S * S + S; ++p)
      if (first[p] > second[tile]) return false;
  }
  return true;
}
constexpr bool l2_schedules_hold(int64_t rows, int64_t S) {
  for (int64_t D = S; D <= rows * S; ++D)
    if (!l2_schedule_holds(rows, S, D)) return false;
  return true;
}
static_assert(l2_schedules_hold(1, 1) && l2_schedules_hold(1, 7) && l2_schedules_hold(3, 4) && l2_schedules_hold(5, 7) && l2_schedules_hold(8, 8),
              "a second pass before its row's first passes");
// fewer than a row's tiles ahead: a row's first second pass comes before its last first pass
static_assert(!l2_schedule_holds(2, 4, 2) && !l2_schedule_holds(4, 8, 6), "the check cannot fail");

__global__ void row_max(const float* x, float* y) {
  __shared__ float slot[256 / 32];
  const float v = kfab_group<256, 1>(x[threadIdx.x], slot);
  if (threadIdx.x == 0) *y = kfab_group<32, 0>(v, slot);
}

// a row of n over a cluster of 2 blocks: each block's sum of its part, combined
__global__ void row_sum_cluster(const float* x, float* y, int64_t n) {
  __shared__ float slot[256 / 32];
  __shared__ float part[2];
  __shared__ unsigned long long bar[1];
  kfab_cluster_begin<1>(bar);
  const int64_t lo = blockIdx.x % 2 == 0 ? 0 : n / 2, hi = blockIdx.x % 2 == 0 ? n / 2 : n;
  float s = 0.0f;
  for (int64_t c = lo + threadIdx.x; c < hi; c += 256) s += x[c];
  s = kfab_cluster_combine<2, 0>(kfab_group<256, 0>(s, slot), part, bar, 0u, true);
  if (threadIdx.x == 0 && blockIdx.x == 0) *y = s;
}

// a row of n over the 4 blocks of a grid (a cooperative launch: all resident): each block's sum of its
// part, combined through global memory and a counter of arrivals (zero at launch)
__global__ void row_sum_split(const float* x, float* y, int64_t n, float* shares, unsigned* bar) {
  __shared__ float slot[256 / 32];
  const int64_t lo = n * blockIdx.x / 4, hi = n * (blockIdx.x + 1) / 4;
  float s = 0.0f;
  for (int64_t c = lo + threadIdx.x; c < hi; c += 256) s += x[c];
  s = kfab_split_combine<256, 0>(kfab_group<256, 0>(s, slot), shares, bar, 4u, 4, slot);
  if (threadIdx.x == 0 && blockIdx.x == 0) *y = s;
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  row_max<<<1, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const float*>(in[0].data), static_cast<float*>(out[0].data));
  (void)row_sum_cluster, (void)row_sum_split;
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
