// Optimized log_softmax over the last dimension of x [M, N].
//
// Rows are independent and are dealt out to OpenMP threads. Each row takes three vectorized passes;
// x comes from DRAM once and y is written once, the later passes only touch L1/L2:
//   1. m = max_j x[j]
//   2. s = sum_j exp(x[j] - m)              (nothing stored)
//   3. y[j] = (x[j] - m) - log(s)           (one scalar log per row)
// Keeping x - m apart from log(s) avoids rounding a large m + log(s) before the subtraction.
// exp is a polynomial (Cody-Waite reduction by ln2, degree-6 series, ~1e-7 relative error) written
// with AVX-512 or AVX2+FMA intrinsics, chosen at compile time from what -march=native enables, with a
// plain scalar fallback. Row tails are handled with masked loads/stores. The sum is kept in two
// float accumulators per vector lane, which keeps the rounding chains short: the absolute error of
// log(s) (and so of y) stays at a few 1e-6 on the task's shapes.
#include <kfab/candidate.h>

#include <cmath>
#include <cstdint>
#include <cstring>

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

// Constants of the exp approximation: exp(v) = 2^k e^r, k = round(v / ln2), r = v - k ln2.
constexpr float kExpLo = -87.0f;  // clamp so that 2^k stays a normal float
constexpr float kExpHi = 88.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;  // ln2 split: k * hi is exact for |k| < 2^10
constexpr float kLn2Lo = 1.428606765330187e-06f;
constexpr float kC6 = 1.0f / 720.0f, kC5 = 1.0f / 120.0f, kC4 = 1.0f / 24.0f, kC3 = 1.0f / 6.0f;

inline float exp_scalar(float v) {
  v = v < kExpLo ? kExpLo : v;  // NaN passes through both clamps
  v = v > kExpHi ? kExpHi : v;
  const float kf = std::nearbyint(v * kLog2e);
  const float r = (v - kf * kLn2Hi) - kf * kLn2Lo;
  const float p = ((((((kC6 * r + kC5) * r + kC4) * r + kC3) * r + 0.5f) * r + 1.0f) * r + 1.0f);
  const int32_t bits = (static_cast<int32_t>(kf) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

#if defined(__AVX512F__)

inline __m512 exp16(__m512 v) {
  v = _mm512_max_ps(_mm512_set1_ps(kExpLo), v);  // second operand returned for NaN: NaN kept
  v = _mm512_min_ps(_mm512_set1_ps(kExpHi), v);
  const __m512 kf = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(kLog2e)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(kLn2Hi), v);
  r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kC6), r, _mm512_set1_ps(kC5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, kf);  // p * 2^k
}

void log_softmax_row(const float* __restrict x, float* __restrict y, int64_t n) {
  const int64_t nv = n & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - nv)) - 1u);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);

  __m512 vm0 = neg_inf, vm1 = neg_inf;
  int64_t j = 0;
  for (; j + 32 <= nv; j += 32) {
    vm0 = _mm512_max_ps(vm0, _mm512_loadu_ps(x + j));
    vm1 = _mm512_max_ps(vm1, _mm512_loadu_ps(x + j + 16));
  }
  for (; j < nv; j += 16) vm0 = _mm512_max_ps(vm0, _mm512_loadu_ps(x + j));
  if (tail) vm1 = _mm512_max_ps(vm1, _mm512_mask_loadu_ps(neg_inf, tail, x + nv));
  const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(vm0, vm1)));

  __m512 vs0 = _mm512_setzero_ps(), vs1 = _mm512_setzero_ps();
  for (j = 0; j + 32 <= nv; j += 32) {
    vs0 = _mm512_add_ps(vs0, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm)));
    vs1 = _mm512_add_ps(vs1, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j + 16), vm)));
  }
  for (; j < nv; j += 16) vs0 = _mm512_add_ps(vs0, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm)));
  if (tail) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + nv), vm));
    vs1 = _mm512_mask_add_ps(vs1, tail, vs1, e);
  }
  const __m512 log_s = _mm512_set1_ps(std::log(_mm512_reduce_add_ps(_mm512_add_ps(vs0, vs1))));

  for (j = 0; j < nv; j += 16)
    _mm512_storeu_ps(y + j, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm), log_s));
  if (tail)
    _mm512_mask_storeu_ps(y + nv, tail, _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + nv), vm), log_s));
}

#elif defined(__AVX2__) && defined(__FMA__)

inline __m256 exp8(__m256 v) {
  v = _mm256_max_ps(_mm256_set1_ps(kExpLo), v);  // second operand returned for NaN: NaN kept
  v = _mm256_min_ps(_mm256_set1_ps(kExpHi), v);
  const __m256 kf = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(kLog2e)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(kLn2Hi), v);
  r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kC6), r, _mm256_set1_ps(kC5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(kf), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

void log_softmax_row(const float* __restrict x, float* __restrict y, int64_t n) {
  const int64_t nv = n & ~int64_t{7};
  const int rem = static_cast<int>(n - nv);
  // Lane i of the tail mask is active when i < rem.
  const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256 tailf = _mm256_castsi256_ps(tail);
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);

  __m256 vm0 = neg_inf, vm1 = neg_inf;
  int64_t j = 0;
  for (; j + 16 <= nv; j += 16) {
    vm0 = _mm256_max_ps(vm0, _mm256_loadu_ps(x + j));
    vm1 = _mm256_max_ps(vm1, _mm256_loadu_ps(x + j + 8));
  }
  for (; j < nv; j += 8) vm0 = _mm256_max_ps(vm0, _mm256_loadu_ps(x + j));
  if (rem) vm1 = _mm256_max_ps(vm1, _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(x + nv, tail), tailf));
  const __m256 vm = _mm256_set1_ps(hmax8(_mm256_max_ps(vm0, vm1)));

  __m256 vs0 = _mm256_setzero_ps(), vs1 = _mm256_setzero_ps();
  for (j = 0; j + 16 <= nv; j += 16) {
    vs0 = _mm256_add_ps(vs0, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm)));
    vs1 = _mm256_add_ps(vs1, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), vm)));
  }
  for (; j < nv; j += 8) vs0 = _mm256_add_ps(vs0, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm)));
  if (rem) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(x + nv, tail), vm));
    vs1 = _mm256_add_ps(vs1, _mm256_and_ps(e, tailf));
  }
  const __m256 log_s = _mm256_set1_ps(std::log(hsum8(_mm256_add_ps(vs0, vs1))));

  for (j = 0; j < nv; j += 8)
    _mm256_storeu_ps(y + j, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm), log_s));
  if (rem)
    _mm256_maskstore_ps(y + nv, tail, _mm256_sub_ps(_mm256_sub_ps(_mm256_maskload_ps(x + nv, tail), vm), log_s));
}

#else

void log_softmax_row(const float* __restrict x, float* __restrict y, int64_t n) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // a few partial sums: shorter rounding chains
  for (int64_t j = 0; j < n; ++j) s[j & 3] += exp_scalar(x[j] - m);
  const float log_s = std::log((s[0] + s[1]) + (s[2] + s[3]));
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) - log_s;
}

#endif

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* /*stream*/) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 1 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(y, 2)) return 2;
  const int64_t M = x.shape[0];
  const int64_t N = x.shape[1];
  if (y.shape[0] != M || y.shape[1] != N) return 3;
  if (M == 0 || N == 0) return 0;

  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) log_softmax_row(xp + i * N, yp + i * N, N);
  return 0;
}
