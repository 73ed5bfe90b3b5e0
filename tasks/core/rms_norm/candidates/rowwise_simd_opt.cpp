// rms_norm candidate: rows split across OpenMP threads; within a row, one vectorised pass for the
// sum of squares (f32, four vector accumulators; AVX-512 / AVX2 intrinsics, an `omp simd` reduction
// otherwise) and one vectorised pass that scales by 1/rms and the weight. A row of the tuning shapes
// (<= 32 KiB) stays in L1 between the two passes, so x is read from memory once.
#include <kfab/candidate.h>

#include <cmath>
#include <cstdint>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

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

// Sum of squares of x[0:n] in f32 with four independent vector accumulators (hides the FMA latency).
inline float sum_squares(const float* __restrict x, int64_t n) {
  int64_t j = 0;
  float s = 0.0f;
#if defined(__AVX512F__)
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; j + 64 <= n; j += 64) {
    const __m512 v0 = _mm512_loadu_ps(x + j), v1 = _mm512_loadu_ps(x + j + 16);
    const __m512 v2 = _mm512_loadu_ps(x + j + 32), v3 = _mm512_loadu_ps(x + j + 48);
    a0 = _mm512_fmadd_ps(v0, v0, a0);
    a1 = _mm512_fmadd_ps(v1, v1, a1);
    a2 = _mm512_fmadd_ps(v2, v2, a2);
    a3 = _mm512_fmadd_ps(v3, v3, a3);
  }
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    a0 = _mm512_fmadd_ps(v, v, a0);
  }
  s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; j + 32 <= n; j += 32) {
    const __m256 v0 = _mm256_loadu_ps(x + j), v1 = _mm256_loadu_ps(x + j + 8);
    const __m256 v2 = _mm256_loadu_ps(x + j + 16), v3 = _mm256_loadu_ps(x + j + 24);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
    a2 = _mm256_fmadd_ps(v2, v2, a2);
    a3 = _mm256_fmadd_ps(v3, v3, a3);
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    a0 = _mm256_fmadd_ps(v, v, a0);
  }
  const __m256 t = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  s = _mm_cvtss_f32(h);
#else
#pragma omp simd reduction(+ : s)
  for (int64_t k = 0; k < n; ++k) s += x[k] * x[k];
  j = n;
#endif
  for (; j < n; ++j) s += x[j] * x[j];
  return s;
}

inline void rms_row(const float* __restrict x, const float* __restrict w, float* __restrict y,
                    int64_t n) {
  const float inv = 1.0f / std::sqrt(sum_squares(x, n) / static_cast<float>(n) + 1e-6f);
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) y[k] = x[k] * inv * w[k];
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* /*stream*/) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 2 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& w = inputs[1];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(w, 1) || !is_dense_f32(y, 2)) return 2;
  const int64_t M = x.shape[0];
  const int64_t N = x.shape[1];
  if (w.shape[0] != N || y.shape[0] != M || y.shape[1] != N) return 3;
  if (M == 0 || N == 0) return 0;

  const float* xp = static_cast<const float*>(x.data);
  const float* wp = static_cast<const float*>(w.data);
  float* yp = static_cast<float*>(y.data);
  // Small problems are not worth waking the thread team.
  const bool parallel = M > 1 && M * N >= (int64_t{1} << 15);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < M; ++i) rms_row(xp + i * N, wp, yp + i * N, N);
  return 0;
}
