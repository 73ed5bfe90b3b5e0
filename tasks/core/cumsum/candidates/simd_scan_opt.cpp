// cumsum candidate (last dim of x [M, N]): rows split across OpenMP threads; within a row, a
// vector-register prefix sum (log2(width) shift-and-add steps) plus a running carry broadcast
// from the last lane. The only loop-carried dependence is "add carry, broadcast last lane"
// once per vector instead of one add per element. f32 throughout.
#include <kfab/candidate.h>

#include <cstdint>

#if defined(__AVX512F__) || defined(__AVX2__)
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

#if defined(__AVX512F__)
// Inclusive prefix sum of the 16 lanes. alignr(v, 0, 16 - s) shifts v up by s lanes, filling zeros.
inline __m512 scan_lanes(__m512 v) {
  const __m512i z = _mm512_setzero_si512();
  v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), z, 15)));
  v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), z, 14)));
  v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), z, 12)));
  v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), z, 8)));
  return v;
}

// Returns the number of leading elements done; y[j - 1] holds the running sum.
inline int64_t scan_row_simd(const float* __restrict x, float* __restrict y, int64_t n) {
  const __m512i last = _mm512_set1_epi32(15);
  __m512 carry = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_add_ps(scan_lanes(_mm512_loadu_ps(x + j)), carry);
    _mm512_storeu_ps(y + j, v);
    carry = _mm512_permutexvar_ps(last, v);
  }
  return j;
}
#elif defined(__AVX2__)
// Inclusive prefix sum of the 8 lanes: scan each 128-bit half, then add the low half's total
// (its lane 3) to the high half.
inline __m256 scan_lanes(__m256 v) {
  v = _mm256_add_ps(v, _mm256_castsi256_ps(_mm256_slli_si256(_mm256_castps_si256(v), 4)));
  v = _mm256_add_ps(v, _mm256_castsi256_ps(_mm256_slli_si256(_mm256_castps_si256(v), 8)));
  const __m256 low_total = _mm256_shuffle_ps(v, v, _MM_SHUFFLE(3, 3, 3, 3));
  return _mm256_add_ps(v, _mm256_permute2f128_ps(low_total, low_total, 0x08));  // [0, low half]
}

inline int64_t scan_row_simd(const float* __restrict x, float* __restrict y, int64_t n) {
  const __m256i last = _mm256_set1_epi32(7);
  __m256 carry = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_add_ps(scan_lanes(_mm256_loadu_ps(x + j)), carry);
    _mm256_storeu_ps(y + j, v);
    carry = _mm256_permutevar8x32_ps(v, last);
  }
  return j;
}
#else
inline int64_t scan_row_simd(const float*, float*, int64_t) { return 0; }
#endif

inline void scan_row(const float* __restrict x, float* __restrict y, int64_t n) {
  int64_t j = scan_row_simd(x, y, n);
  float run = j > 0 ? y[j - 1] : 0.0f;
  for (; j < n; ++j) {
    run += x[j];
    y[j] = run;
  }
}

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
  const bool parallel = M > 1 && M * N >= (int64_t{1} << 15);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < M; ++i) scan_row(xp + i * N, yp + i * N, N);
  return 0;
}
