// transpose candidate (permute 0, 2, 1): x [B, M, N] -> y [B, N, M], f32.
// The (batch, row tile, column tile) grid is split across OpenMP threads. A TILE x TILE tile is
// read and written while both sides sit in L1, so every cache line of x and y moves once; inside
// a tile, full 8 x 8 blocks are transposed in registers (AVX unpack / shuffle / lane permute) and
// the ragged edges fall back to scalar copies.
#include <kfab/candidate.h>

#include <algorithm>
#include <cstdint>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t TILE = 32;

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

#if defined(__AVX__)
// dst[c * ldd + r] = src[r * lds + c] for r, c < 8.
inline void transpose8x8(const float* __restrict src, int64_t lds, float* __restrict dst, int64_t ldd) {
  const __m256 r0 = _mm256_loadu_ps(src + 0 * lds), r1 = _mm256_loadu_ps(src + 1 * lds);
  const __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
  const __m256 r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
  const __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
  // Interleave row pairs: t0 = a0 b0 a1 b1 | a4 b4 a5 b5, t1 = a2 b2 a3 b3 | a6 b6 a7 b7, ...
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  // Gather four rows per column: s0 = a0 b0 c0 d0 | a4 b4 c4 d4, s1 = column 1 | column 5, ...
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  // Join the rows 0-3 and 4-7 halves of each column.
  _mm256_storeu_ps(dst + 0 * ldd, _mm256_permute2f128_ps(s0, s4, 0x20));
  _mm256_storeu_ps(dst + 1 * ldd, _mm256_permute2f128_ps(s1, s5, 0x20));
  _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(s2, s6, 0x20));
  _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(s3, s7, 0x20));
  _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(s0, s4, 0x31));
  _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(s1, s5, 0x31));
  _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(s2, s6, 0x31));
  _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(s3, s7, 0x31));
}
#endif

// y[j, i] = x[i, j] for i in [0, rows), j in [0, cols); x has row stride ldx, y has row stride ldy.
inline void transpose_tile(const float* __restrict x, int64_t ldx, float* __restrict y, int64_t ldy,
                           int64_t rows, int64_t cols) {
  int64_t i8 = 0, j8 = 0;
#if defined(__AVX__)
  i8 = rows & ~int64_t{7};
  j8 = cols & ~int64_t{7};
  for (int64_t i = 0; i < i8; i += 8)
    for (int64_t j = 0; j < j8; j += 8) transpose8x8(x + i * ldx + j, ldx, y + j * ldy + i, ldy);
#endif
  // Right strip (columns j8..cols of every row) and bottom strip (rows i8..rows, columns < j8).
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = j8; j < cols; ++j) y[j * ldy + i] = x[i * ldx + j];
  for (int64_t j = 0; j < j8; ++j)
    for (int64_t i = i8; i < rows; ++i) y[j * ldy + i] = x[i * ldx + j];
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* /*stream*/) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 1 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 3) || !is_dense_f32(y, 3)) return 2;
  const int64_t B = x.shape[0];
  const int64_t M = x.shape[1];
  const int64_t N = x.shape[2];
  if (y.shape[0] != B || y.shape[1] != N || y.shape[2] != M) return 3;
  if (B == 0 || M == 0 || N == 0) return 0;

  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  const int64_t ti = (M + TILE - 1) / TILE;
  const int64_t tj = (N + TILE - 1) / TILE;
  const int64_t tiles = B * ti * tj;
  const bool parallel = tiles > 1 && B * M * N >= (int64_t{1} << 15);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t b = t / (ti * tj);
    const int64_t i0 = (t / tj) % ti * TILE;
    const int64_t j0 = t % tj * TILE;
    transpose_tile(xp + b * M * N + i0 * N + j0, N, yp + b * N * M + j0 * M + i0, M,
                   std::min(TILE, M - i0), std::min(TILE, N - j0));
  }
  return 0;
}
