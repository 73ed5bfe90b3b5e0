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
// kfab:end
