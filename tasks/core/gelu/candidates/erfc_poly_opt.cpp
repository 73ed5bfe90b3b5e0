// Optimized gelu (erf form): y = 0.5 x (1 + erf(x / sqrt(2))).
//
// With z = |x| / sqrt(2) and h = 0.5 * x * erfc(z):
//   x <  0:  y = 0.5 x (1 - erf(z)) = h
//   x >= 0:  y = 0.5 x (1 + erf(z)) = x - h
// so only erfc on z >= 0 is needed, and neither branch cancels badly.
//
// erfc(z) = t * exp(P(t) - z^2) with t = 1 / (1 + z/2). P is a degree-9 polynomial fitted for this
// kernel (interpolation at Chebyshev nodes of t in [1/6, 1], i.e. z in [0, 10]) to
// log(erfc(z) / t) + z^2; its absolute error is ~5e-8, so erfc has ~5e-8 relative error before
// float rounding. Beyond z = 10, erfc (< 2.1e-45) is taken as exactly 0.
// exp is a polynomial (Cody-Waite reduction by ln2, degree-6 series, ~1e-7 relative error).
//
// The math is written with AVX-512 or AVX2+FMA intrinsics, chosen at compile time from what
// -march=native enables, with a scalar fallback; tails use masked loads/stores. The flat element
// range is cut into chunks that OpenMP threads take statically (the op is elementwise, rows do
// not matter).
#include <kfab/candidate.h>

#include <algorithm>
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

// exp(v) = 2^k e^r, k = round(v / ln2), r = v - k ln2.
constexpr float kExpLo = -87.0f;  // clamp so that 2^k stays a normal float
constexpr float kExpHi = 88.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;  // ln2 split: k * hi is exact for |k| < 2^10
constexpr float kLn2Lo = 1.428606765330187e-06f;
constexpr float kC6 = 1.0f / 720.0f, kC5 = 1.0f / 120.0f, kC4 = 1.0f / 24.0f, kC3 = 1.0f / 6.0f;

// P(t), highest degree first.
constexpr float kP[10] = {0.148046054f,   -0.6975365907f, 1.195327675f,  -0.7464698947f, -0.03986631755f,
                          -0.0195080035f, 0.04139596419f, 0.3852836336f, 0.9987824596f,  -1.26545493f};
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kZMax = 10.0f;

inline float exp_scalar(float v) {
  v = v < kExpLo ? kExpLo : v;
  v = v > kExpHi ? kExpHi : v;
  const float kf = std::nearbyint(v * kLog2e);
  const float r = (v - kf * kLn2Hi) - kf * kLn2Lo;
  const float p = ((((((kC6 * r + kC5) * r + kC4) * r + kC3) * r + 0.5f) * r + 1.0f) * r + 1.0f);
  const int32_t bits = (static_cast<int32_t>(kf) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float gelu_scalar(float x) {
  const float z_raw = std::fabs(x) * kInvSqrt2;
  const float z = std::min(z_raw, kZMax);
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = kP[0];
  for (int k = 1; k < 10; ++k) p = p * t + kP[k];
  const float erfc_z = z_raw > kZMax ? 0.0f : t * exp_scalar(p - z * z);
  const float h = 0.5f * x * erfc_z;
  return x < 0.0f ? h : x - h;
}

#if defined(__AVX512F__)

inline __m512 exp16(__m512 v) {
  v = _mm512_max_ps(_mm512_set1_ps(kExpLo), v);
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

inline __m512 gelu16(__m512 x) {
  const __m512 z_raw = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(kInvSqrt2));
  const __m512 z = _mm512_min_ps(z_raw, _mm512_set1_ps(kZMax));
  const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(z, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f)));
  __m512 p = _mm512_set1_ps(kP[0]);
  for (int k = 1; k < 10; ++k) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kP[k]));
  __m512 erfc_z = _mm512_mul_ps(t, exp16(_mm512_fnmadd_ps(z, z, p)));
  erfc_z = _mm512_mask_mov_ps(erfc_z, _mm512_cmp_ps_mask(z_raw, _mm512_set1_ps(kZMax), _CMP_GT_OQ),
                              _mm512_setzero_ps());
  const __m512 h = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), erfc_z);
  // x >= 0 lanes take x - h; x < 0 lanes keep h.
  return _mm512_mask_sub_ps(h, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), x, h);
}

void gelu_range(const float* __restrict x, float* __restrict y, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(y + j, gelu16(_mm512_loadu_ps(x + j)));
  if (j < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1u);
    _mm512_mask_storeu_ps(y + j, m, gelu16(_mm512_maskz_loadu_ps(m, x + j)));
  }
}

#elif defined(__AVX2__) && defined(__FMA__)

inline __m256 exp8(__m256 v) {
  v = _mm256_max_ps(_mm256_set1_ps(kExpLo), v);
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

inline __m256 gelu8(__m256 x) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 z_raw = _mm256_mul_ps(_mm256_and_ps(x, abs_mask), _mm256_set1_ps(kInvSqrt2));
  const __m256 z = _mm256_min_ps(z_raw, _mm256_set1_ps(kZMax));
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(z, _mm256_set1_ps(0.5f), _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(kP[0]);
  for (int k = 1; k < 10; ++k) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(kP[k]));
  __m256 erfc_z = _mm256_mul_ps(t, exp8(_mm256_fnmadd_ps(z, z, p)));
  erfc_z = _mm256_andnot_ps(_mm256_cmp_ps(z_raw, _mm256_set1_ps(kZMax), _CMP_GT_OQ), erfc_z);
  const __m256 h = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), erfc_z);
  const __m256 ge0 = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
  return _mm256_blendv_ps(h, _mm256_sub_ps(x, h), ge0);
}

void gelu_range(const float* __restrict x, float* __restrict y, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, gelu8(_mm256_loadu_ps(x + j)));
  if (j < n) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - j)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(y + j, m, gelu8(_mm256_maskload_ps(x + j, m)));
  }
}

#else

void gelu_range(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = gelu_scalar(x[j]);
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
  const int64_t total = M * N;
  if (total == 0) return 0;

  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  // Chunks of 4096 elements (16 KiB in, 16 KiB out); a multiple of every vector width.
  const int64_t chunk = 4096;
  const int64_t nchunks = (total + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t lo = c * chunk;
    gelu_range(xp + lo, yp + lo, std::min(chunk, total - lo));
  }
  return 0;
}
