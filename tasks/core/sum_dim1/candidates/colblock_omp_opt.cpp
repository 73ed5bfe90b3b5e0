// Optimized sum_dim1: y[b, c] = sum_r x[b, r, c] for x [B, R, C].
//
// The reduction runs down columns, so the work is cut into tiles of (batch b, block of up to 512
// columns): each tile keeps a float accumulator for its columns (2 KiB, stays in L1), streams the
// R row segments of x in memory order and adds four rows per step ((x0 + x1) + (x2 + x3), which
// halves the accumulator traffic and shortens the float rounding chain), then writes its slice of
// y once. Tiles are spread over OpenMP threads. When there are too few tiles to keep every thread
// busy (small B * C, long R), R is also split into segments whose partial sums go to a scratch
// buffer allocated for this call and are added up in a second, small pass.
#include <kfab/candidate.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

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

constexpr int64_t kBlock = 512;  // columns per tile

// dst[0:w] = sum over rows r0 <= r < r1 of src[r * ld + 0:w]
inline void sum_rows(const float* __restrict src, int64_t ld, int64_t r0, int64_t r1, int64_t w,
                     float* __restrict dst) {
  alignas(64) float acc[kBlock];
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) acc[j] = 0.0f;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const float* __restrict a0 = src + r * ld;
    const float* __restrict a1 = a0 + ld;
    const float* __restrict a2 = a1 + ld;
    const float* __restrict a3 = a2 + ld;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) acc[j] += (a0[j] + a1[j]) + (a2[j] + a3[j]);
  }
  for (; r < r1; ++r) {
    const float* __restrict a0 = src + r * ld;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) acc[j] += a0[j];
  }
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) dst[j] = acc[j];
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* /*stream*/) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 1 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 3) || !is_dense_f32(y, 2)) return 2;
  const int64_t B = x.shape[0];
  const int64_t R = x.shape[1];
  const int64_t C = x.shape[2];
  if (y.shape[0] != B || y.shape[1] != C) return 3;
  if (B == 0 || C == 0) return 0;

  const float* __restrict xp = static_cast<const float*>(x.data);
  float* __restrict yp = static_cast<float*>(y.data);

  const int64_t nblocks = (C + kBlock - 1) / kBlock;
  const int64_t tiles = B * nblocks;
  const int64_t threads = std::max(1, omp_get_max_threads());

  // Split R only when the tiles alone cannot feed the threads and R is long enough to be worth it.
  int64_t segs = 1;
  if (tiles < 4 * threads && R >= 64)
    segs = std::min((4 * threads + tiles - 1) / tiles, R / 32);

  if (segs <= 1) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t b = t / nblocks;
      const int64_t c0 = (t % nblocks) * kBlock;
      const int64_t w = std::min(kBlock, C - c0);
      sum_rows(xp + b * R * C + c0, C, 0, R, w, yp + b * C + c0);
    }
    return 0;
  }

  // Partial sums: part[s][b][c] over rows [s * R / segs, (s + 1) * R / segs).
  std::vector<float> part(static_cast<size_t>(segs * B * C));
  float* __restrict pp = part.data();
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles * segs; ++t) {
      const int64_t s = t / tiles;
      const int64_t b = (t % tiles) / nblocks;
      const int64_t c0 = (t % nblocks) * kBlock;
      const int64_t w = std::min(kBlock, C - c0);
      sum_rows(xp + b * R * C + c0, C, s * R / segs, (s + 1) * R / segs, w, pp + (s * B + b) * C + c0);
    }
#pragma omp for schedule(static)
    for (int64_t k = 0; k < B * C; ++k) {
      float v = 0.0f;
      for (int64_t s = 0; s < segs; ++s) v += pp[s * B * C + k];
      yp[k] = v;
    }
  }
  return 0;
}
