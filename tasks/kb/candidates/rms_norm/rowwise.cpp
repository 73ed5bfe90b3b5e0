// rms_norm (KernelBench format): y = x / sqrt(mean(x^2, -1) + 1e-6) * weight, x [B, F] f32.
// inputs = {x [B, F], weight [F]}, outputs = {y [B, F]}.
//
// Approach: rows are split across OpenMP threads in contiguous static blocks (a team is only woken
// when there is enough work); within a row there are two vectorised passes.
//   1. Sum of squares: four independent 16-lane (AVX-512) or 8-lane (AVX2) FMA accumulators hide the
//      FMA latency; the tail is a masked load (AVX-512) or a short scalar loop. The f32 partial sums
//      are folded into a double every kChunk elements, so very long rows keep full precision while
//      the hot loop stays in f32 (64 or 32 partial sums per chunk).
//   2. y = (x * inv_rms) * weight, in the same order as the reference, vectorised the same way.
// A row of the tuning shapes (<= 16 KiB) is still in L1 when pass 2 re-reads it, so x comes from
// memory once. Builds without AVX fall back to `omp simd` loops.
#include <kfab/candidate.h>

#include <cmath>
#include <cstdint>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace {

constexpr double kEps = 1e-6;
constexpr int64_t kChunk = 4096;  // elements summed in f32 before the partial sums go to a double

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

// Sum of squares of x[0:n] (n <= kChunk) in f32 vector accumulators, folded and returned as a double.
inline double chunk_sum_squares(const float* __restrict x, int64_t n) {
#if defined(__AVX512F__)
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    const __m512 v0 = _mm512_loadu_ps(x + j);
    const __m512 v1 = _mm512_loadu_ps(x + j + 16);
    const __m512 v2 = _mm512_loadu_ps(x + j + 32);
    const __m512 v3 = _mm512_loadu_ps(x + j + 48);
    a0 = _mm512_fmadd_ps(v0, v0, a0);
    a1 = _mm512_fmadd_ps(v1, v1, a1);
    a2 = _mm512_fmadd_ps(v2, v2, a2);
    a3 = _mm512_fmadd_ps(v3, v3, a3);
  }
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    a1 = _mm512_fmadd_ps(v, v, a1);
  }
  if (j < n) {  // 1..15 left: masked load, the masked-off lanes read as 0 and touch no memory
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + j);
    a2 = _mm512_fmadd_ps(v, v, a2);
  }
  return static_cast<double>(_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m256 v0 = _mm256_loadu_ps(x + j);
    const __m256 v1 = _mm256_loadu_ps(x + j + 8);
    const __m256 v2 = _mm256_loadu_ps(x + j + 16);
    const __m256 v3 = _mm256_loadu_ps(x + j + 24);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
    a2 = _mm256_fmadd_ps(v2, v2, a2);
    a3 = _mm256_fmadd_ps(v3, v3, a3);
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    a1 = _mm256_fmadd_ps(v, v, a1);
  }
  const __m256 t = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  float s = _mm_cvtss_f32(h);
  for (; j < n; ++j) s += x[j] * x[j];  // 0..7 left
  return static_cast<double>(s);
#else
  float a = 0.0f;
#pragma omp simd reduction(+ : a)
  for (int64_t j = 0; j < n; ++j) a += x[j] * x[j];
  return static_cast<double>(a);
#endif
}

inline double sum_squares(const float* __restrict x, int64_t n) {
  double s = 0.0;
  for (int64_t j = 0; j < n; j += kChunk) s += chunk_sum_squares(x + j, n - j < kChunk ? n - j : kChunk);
  return s;
}

// y[0:n] = (x[0:n] * inv) * w[0:n]
inline void scale_row(const float* __restrict x, const float* __restrict w, float* __restrict y, int64_t n, float inv) {
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(inv);
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);
    const __m512 w0 = _mm512_loadu_ps(w + j), w1 = _mm512_loadu_ps(w + j + 16);
    _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_mul_ps(x0, s), w0));
    _mm512_storeu_ps(y + j + 16, _mm512_mul_ps(_mm512_mul_ps(x1, s), w1));
  }
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + j), s), _mm512_loadu_ps(w + j)));
  if (j < n) {  // masked tail: lanes past n are neither read nor written
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1u);
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), s), _mm512_maskz_loadu_ps(m, w + j));
    _mm512_mask_storeu_ps(y + j, m, v);
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 s = _mm256_set1_ps(inv);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + j), x1 = _mm256_loadu_ps(x + j + 8);
    const __m256 w0 = _mm256_loadu_ps(w + j), w1 = _mm256_loadu_ps(w + j + 8);
    _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_mul_ps(x0, s), w0));
    _mm256_storeu_ps(y + j + 8, _mm256_mul_ps(_mm256_mul_ps(x1, s), w1));
  }
  for (; j < n; ++j) y[j] = x[j] * inv * w[j];
#else
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] * inv * w[j];
#endif
}

inline void rms_row(const float* __restrict x, const float* __restrict w, float* __restrict y, int64_t n) {
  const double ms = sum_squares(x, n) / static_cast<double>(n);
  const float inv = static_cast<float>(1.0 / std::sqrt(ms + kEps));
  scale_row(x, w, y, n, inv);
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs, int32_t n_outputs,
                         void* /*stream*/) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 2 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& w = inputs[1];
  const kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(w, 1) || !is_dense_f32(y, 2)) return 2;
  const int64_t B = x.shape[0];
  const int64_t F = x.shape[1];
  if (w.shape[0] != F || y.shape[0] != B || y.shape[1] != F) return 3;
  if (B == 0 || F == 0) return 0;

  const float* xp = static_cast<const float*>(x.data);
  const float* wp = static_cast<const float*>(w.data);
  float* yp = static_cast<float*>(y.data);
  // Waking the team costs a few microseconds: only worth it past ~32 K elements.
  const bool parallel = B > 1 && B * F >= (int64_t{1} << 15);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < B; ++i) rms_row(xp + i * F, wp, yp + i * F, F);
  return 0;
}
