#pragma once
// 2-D average pooling over one plane (tuner/pool.cpp, on cuda and on cpu): the output size torch
// gives (pooling_output_shape), and one output's average, a window wholly inside the input summed by
// unrolled loops. The generated file defines the window (KH, KW, SH, SW, PH, PW, CEIL, INCLUDE_PAD,
// DIVISOR), KFAB_INLINE (__device__ __forceinline__, or static inline on the host) and KFAB_LOAD
// before it. The text between the kfab:begin and kfab:end lines is spliced into the candidates the
// tuner writes, inside an unnamed namespace; tests/templates/avg_pool.cu compiles it on its own.
// kfab:begin
int64_t kfab_pooled(int64_t in, int64_t k, int64_t s, int64_t p) {
  const int64_t span = in + 2 * p - k + (CEIL ? s - 1 : 0);
  if (span < 0) return 0;
  int64_t out = span / s + 1;
  if (CEIL && (out - 1) * s >= in + p) --out;  // the last window must start inside the input or its left padding
  return out;
}

KFAB_INLINE float kfab_average(const float* __restrict__ plane, int64_t H, int64_t W, int64_t oh, int64_t ow) {
  int64_t hs = oh * SH - PH, ws = ow * SW - PW;
  int64_t he = hs + KH < H + PH ? hs + KH : H + PH, we = ws + KW < W + PW ? ws + KW : W + PW;
  const int64_t pool = (he - hs) * (we - ws);
  float s = 0.0f;
  if (hs >= 0 && ws >= 0 && hs + KH <= H && ws + KW <= W) {
    const float* p = plane + hs * W + ws;
#pragma unroll
    for (int64_t r = 0; r < KH; ++r)
#pragma unroll
      for (int64_t c = 0; c < KW; ++c) s += KFAB_LOAD(p + r * W + c);
    he = hs + KH, we = ws + KW;
  } else {
    hs = hs > 0 ? hs : 0, ws = ws > 0 ? ws : 0;
    he = he < H ? he : H, we = we < W ? we : W;
    for (int64_t r = hs; r < he; ++r)
      for (int64_t c = ws; c < we; ++c) s += KFAB_LOAD(plane + r * W + c);
  }
  const int64_t d = DIVISOR != 0 ? DIVISOR : INCLUDE_PAD ? pool : (he - hs) * (we - ws);
  return d != 0 ? s / static_cast<float>(d) : 0.0f;
}
// kfab:end
