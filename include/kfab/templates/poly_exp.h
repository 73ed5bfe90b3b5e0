#pragma once
// A float exp on the SIMD lanes: 2^n * p(r) with x = n ln2 + r, |r| <= ln2 / 2; relative error
// about 2e-7 over the range that does not under- or overflow.
// For the tuner's generated cpu candidates (tuner/cpu_templates.cpp, tuner/print_cpp.cpp): the text
// between the kfab:begin and kfab:end lines is spliced into them after <cmath> and <cstdint>;
// tests/templates/poly_exp.cpp compiles it on its own.
// kfab:begin
static inline float kfab_exp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  const float kk = x * 1.44269504f + 12582912.0f;  // + 1.5 * 2^23 rounds k into the low mantissa bits
  const float k = kk - 12582912.0f;
  const int ki = __builtin_bit_cast(int, kk) - 0x4B400000;  // no float->int conversion: it would not vectorise
  const float r = x - k * 0.693359375f + k * 2.12194440e-4f;
  float q = 1.9875691500e-4f;
  q = q * r + 1.3981999507e-3f;
  q = q * r + 8.3334519073e-3f;
  q = q * r + 4.1665795894e-2f;
  q = q * r + 1.6666665459e-1f;
  q = q * r + 5.0000001201e-1f;
  q = q * r * r + r + 1.0f;
  return q * __builtin_bit_cast(float, static_cast<unsigned>(ki + 127) << 23);
}

// log, log1p, tanh and erf on the SIMD lanes too (glibc's logf, log1pf, tanhf and erff are calls, which keep
// `omp simd` loops scalar: issue 25 measured l1_mish 0.08x eager for its scalar log1pf and tanhf). Every
// branch is a select, so that a loop over them vectorises; relative errors about 2e-7 (log, log1p), 3e-7
// (tanh), and 3e-7 absolute (erf); NaN in gives NaN out, and the limits (log(0) = -inf, log of a negative
// = NaN, log(inf) = inf, tanh(+-inf) = +-1, erf(+-inf) = +-1) are libm's.
static inline float kfab_log(float x) {
  // (both arms of every select computed first, and one select per case: a short circuit is control flow,
  // which keeps the loop scalar, and so is a select after a division unless the compiler may assume that no
  // floating-point operation traps: the cpu target builds with -fno-trapping-math)
  const bool sub = x < 1.17549435e-38f;  // subnormal (or zero, or negative: answered below)
  const float scaled = x * 8388608.0f;    // * 2^23
  const float xs = sub ? scaled : x;
  const int bits = __builtin_bit_cast(int, xs);
  int e = ((bits >> 23) & 0xff) - 127 - (sub ? 23 : 0);
  const float m1 = __builtin_bit_cast(float, (bits & 0x007fffff) | 0x3f800000);  // [1, 2)
  const bool high = m1 > 1.41421356f;  // m into [sqrt(1/2), sqrt(2))
  const float half = m1 * 0.5f;
  const float m = high ? half : m1;
  e = high ? e + 1 : e;
  const float f = m - 1.0f, s = f / (2.0f + f), z = s * s;  // log(m) = 2 atanh(s)
  const float p = ((((z * 0.0909090909f + 0.111111111f) * z + 0.142857143f) * z + 0.2f) * z + 0.333333333f) * z;
  const float ef = static_cast<float>(e);
  float r = ef * 0.693359375f + ((2.0f * s + 2.0f * s * p) + ef * -2.12194440e-4f);  // e ln2 (in two parts) + log(m)
  r = x == 0.0f ? -INFINITY : r;
  r = x == INFINITY ? INFINITY : r;
  r = x < 0.0f ? NAN : r;
  return x != x ? x : r;
}

// log(1 + x), accurate where x is small: log(u) * x / (u - 1) with u = 1 + x rounded (Goldberg's correction).
static inline float kfab_log1p(float x) {
  const float u = 1.0f + x, d = u - 1.0f;
  const float r = kfab_log(u) * (x / (d == 0.0f ? 1.0f : d));
  const float big = u == INFINITY ? INFINITY : r;
  return d == 0.0f ? x : big;
}

static inline float kfab_tanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  // |x| < 0.4: the odd series to x^13; else 1 - 2 / (e^2|x| + 1), with the sign back
  const float z = x * x;
  // tanh x = x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 - 1382x^11/155925 + 21844x^13/6081075 - 929569x^15/638512875
  float q = z * -0.00145583438705131f + 0.00359212803657248f;
  q = q * z - 0.00886323552990220f;
  q = q * z + 0.0218694885361552f;
  q = q * z - 0.0539682539682540f;
  q = q * z + 0.133333333333333f;
  q = q * z - 0.333333333333333f;
  const float small = x + x * z * q;
  const float big = 1.0f - 2.0f / (kfab_exp(2.0f * (ax > 10.0f ? 10.0f : ax)) + 1.0f);  // 1.0f from 9.01 on
  const float r = ax < 0.4f ? small : (x < 0.0f ? -big : big);
  return x != x ? x : r;
}

static inline float kfab_erf(float x) {
  const float ax = x < 0.0f ? -x : x, z = x * x;
  // |x| < 0.5: 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320 + x^13/9360)
  float q = z * 1.06837606837607e-4f - 7.57575757575758e-4f;
  q = q * z + 4.62962962962963e-3f;
  q = q * z - 2.38095238095238e-2f;
  q = q * z + 0.1f;
  q = q * z - 0.333333333333333f;
  const float small = 1.12837916709551f * (x + x * z * q);
  // else Abramowitz and Stegun 7.1.26: 1 - (a1 t + ... + a5 t^5) e^-x^2, t = 1 / (1 + p |x|), 1.5e-7 absolute
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float y = t * 1.061405429f - 1.453152027f;
  y = y * t + 1.421413741f;
  y = y * t - 0.284496736f;
  y = y * t + 0.254829592f;
  const float big = 1.0f - y * t * kfab_exp(-(ax > 10.0f ? 10.0f : ax) * (ax > 10.0f ? 10.0f : ax));
  const float r = ax < 0.5f ? small : (x < 0.0f ? -big : big);
  return x != x ? x : r;
}
// kfab:end
