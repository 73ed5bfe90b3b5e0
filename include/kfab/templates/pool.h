#pragma once
// Pooling over one N-D window (tuner/pool.cpp, on cuda and on cpu; 1-D and 2-D pooling as 3-D with
// leading windows of one element): the output size torch gives (pooling_output_shape), and one output's
// maximum (MAX) or average. A window wholly inside the input is read by unrolled loops. The generated
// file defines the window (KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW: size, stride, padding and
// dilation; CEIL, INCLUDE_PAD, DIVISOR, MAX), KFAB_INLINE (__device__ __forceinline__, or static inline on
// the host) and KFAB_LOAD before it. The text between the kfab:begin and kfab:end lines is spliced into
// the candidates the tuner writes, inside an unnamed namespace; tests/templates/pool.cu compiles it alone.
// kfab:begin
int64_t kfab_pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1 + (CEIL ? s - 1 : 0);
  if (span < 0) return 0;
  int64_t out = span / s + 1;
  if (CEIL && (out - 1) * s >= in + p) --out;  // the last window must start inside the input or its left padding
  return out;
}

// The larger of m and v as torch's max pooling takes it: a NaN wins. On the device one max.NaN (sm_80 on),
// where the compare-or-NaN-test-and-select took three instructions a tap (level1/42's 16 taps an output:
// 48 of its ~65; on an H200, session 19: 42 2.462 ms against 3.107, 41 1.837 against 2.084). It may
// return +0 where torch keeps -0 (equal values). The host's vectorised row
// (kfab_pool_row) keeps its select.
KFAB_INLINE float kfab_max_nan(float m, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(v));
  return r;
#else
  return v > m || v != v ? v : m;
#endif
}

// The maximum as torch's max pooling takes it: a NaN wins; positions in the padding are not read.
KFAB_INLINE float kfab_pool_max(const float* __restrict__ vol, int64_t D, int64_t H, int64_t W, int64_t ds, int64_t hs, int64_t ws) {
  float m = -INFINITY;
  if (ds >= 0 && hs >= 0 && ws >= 0 && ds + (KD - 1) * DD < D && hs + (KH - 1) * DH < H && ws + (KW - 1) * DW < W) {
    // a pointer stepped a row and a plane at a time: (a * DD * H + b * DH) * W a tap took three 64-bit
    // multiply-adds (75 of the 170 instructions of level1/46's window of 27)
    const int64_t plane = DD * H * W, row = DH * W;
    const float* pa = vol + (ds * H + hs) * W + ws;
#pragma unroll
    for (int64_t a = 0; a < KD; ++a, pa += plane) {
      const float* pb = pa;
#pragma unroll
      for (int64_t b = 0; b < KH; ++b, pb += row)
#pragma unroll
        for (int64_t c = 0; c < KW; ++c) m = kfab_max_nan(m, KFAB_LOAD(pb + c * DW));
    }
    return m;
  }
  for (int64_t a = 0; a < KD; ++a) {
    const int64_t d = ds + a * DD;
    if (d < 0 || d >= D) continue;
    for (int64_t b = 0; b < KH; ++b) {
      const int64_t h = hs + b * DH;
      if (h < 0 || h >= H) continue;
      for (int64_t c = 0; c < KW; ++c) {
        const int64_t w = ws + c * DW;
        if (w < 0 || w >= W) continue;
        const float v = KFAB_LOAD(vol + (d * H + h) * W + w);
        m = kfab_max_nan(m, v);
      }
    }
  }
  return m;
}

// Whether the window that starts at (ds, hs, ws) lies wholly inside the input (an average then divides by the
// window's size; an average has no dilation).
KFAB_INLINE bool kfab_pool_inside(int64_t D, int64_t H, int64_t W, int64_t ds, int64_t hs, int64_t ws) {
  return ds >= 0 && hs >= 0 && ws >= 0 && ds + KD <= D && hs + KH <= H && ws + KW <= W;
}

// The divisor of the average whose window starts at (ds, hs, ws): its size inside the input (less the
// padding where !INCLUDE_PAD), the window first clipped to the padded input.
KFAB_INLINE int64_t kfab_pool_avg_divisor(int64_t D, int64_t H, int64_t W, int64_t ds, int64_t hs, int64_t ws) {
  if (DIVISOR != 0) return DIVISOR;
  int64_t de = ds + KD < D + PD ? ds + KD : D + PD, he = hs + KH < H + PH ? hs + KH : H + PH, we = ws + KW < W + PW ? ws + KW : W + PW;
  if (INCLUDE_PAD) return (de - ds) * (he - hs) * (we - ws);
  ds = ds > 0 ? ds : 0, hs = hs > 0 ? hs : 0, ws = ws > 0 ? ws : 0;
  de = de < D ? de : D, he = he < H ? he : H, we = we < W ? we : W;
  return (de - ds) * (he - hs) * (we - ws);
}

// The average as torch's CUDA kernels take it: the window clipped to the padded input sets the divisor
// (count_include_pad), the sum runs over the part inside the input, depth, then rows, then columns.
// A window wholly inside the input divides by the window's size, a constant (the same division: x / 27.0f
// whether 27 is known at compile time or not); working it out at run time (64-bit products, a division
// by a float not known in advance) held level1/44 at half the copy bandwidth.
KFAB_INLINE float kfab_pool_avg(const float* __restrict__ vol, int64_t D, int64_t H, int64_t W, int64_t ds, int64_t hs, int64_t ws) {
  float s = 0.0f;
  if (kfab_pool_inside(D, H, W, ds, hs, ws)) {
    const int64_t plane = H * W;  // stepped, as kfab_pool_max's
    const float* pa = vol + (ds * H + hs) * W + ws;
#pragma unroll
    for (int64_t a = 0; a < KD; ++a, pa += plane) {
      const float* pr = pa;
#pragma unroll
      for (int64_t r = 0; r < KH; ++r, pr += W)
#pragma unroll
        for (int64_t c = 0; c < KW; ++c) s += KFAB_LOAD(pr + c);
    }
    constexpr float inside = static_cast<float>(DIVISOR != 0 ? DIVISOR : KD * KH * KW);
    return s / inside;
  }
  const int64_t d = kfab_pool_avg_divisor(D, H, W, ds, hs, ws);
  const int64_t de = ds + KD < D ? ds + KD : D, he = hs + KH < H ? hs + KH : H, we = ws + KW < W ? ws + KW : W;
  for (int64_t a = ds > 0 ? ds : 0; a < de; ++a)
    for (int64_t r = hs > 0 ? hs : 0; r < he; ++r)
      for (int64_t c = ws > 0 ? ws : 0; c < we; ++c) s += KFAB_LOAD(vol + (a * H + r) * W + c);
  return d > 0 ? s / static_cast<float>(d) : 0.0f;
}

// Output (od, oh, ow) of one [D, H, W] volume.
KFAB_INLINE float kfab_pool(const float* __restrict__ vol, int64_t D, int64_t H, int64_t W, int64_t od, int64_t oh, int64_t ow) {
  if constexpr (MAX) return kfab_pool_max(vol, D, H, W, od * SD - PD, oh * SH - PH, ow * SW - PW);
  else return kfab_pool_avg(vol, D, H, W, od * SD - PD, oh * SH - PH, ow * SW - PW);
}

// The device's helpers; tests/unit/pool_host_check.inc compiles them on the host too (KFAB_POOL_HOST_CHECK,
// with stand-ins for __ldg, float4 and the rest) and checks them against kfab_pool.
#if defined(__CUDACC__) || defined(KFAB_POOL_HOST_CHECK)
// Whether row j of R windows' union (R outputs down one column: windows SH apart, rows DH apart, KH high)
// is a row of output r's window.
KFAB_INLINE constexpr bool kfab_row_of(int64_t j, int64_t r, int64_t sh, int64_t dh, int64_t kh) {
  return j >= r * sh && (j - r * sh) % dh == 0 && (j - r * sh) / dh < kh;
}

// R outputs down one column of one volume (od, oh0 .. oh0 + R - 1, ow) into o[R]. Where all R windows lie
// wholly inside the input, each input row they share is loaded once (a stride SH below the window's
// height: level1/42's 4 x 4 window at stride 1 loads 7 rows of 4 for 4 outputs, not 16), each output
// taking its taps in kfab_pool's order (so the same values); elsewhere output by output.
template <int R>
KFAB_INLINE void kfab_pool_rows(const float* __restrict__ vol, int64_t D, int64_t H, int64_t W, int64_t OH, int64_t od, int64_t oh0, int64_t ow,
                                float* o) {
  constexpr int64_t DDe = MAX ? DD : 1, DHe = MAX ? DH : 1, DWe = MAX ? DW : 1;  // an average has no dilation
  constexpr int64_t ROWS = (R - 1) * SH + (KH - 1) * DHe + 1;
  const int64_t ds = od * SD - PD, hs = oh0 * SH - PH, ws = ow * SW - PW;
  if (R == 1 || oh0 + R > OH || ds < 0 || hs < 0 || ws < 0 || ds + (KD - 1) * DDe >= D || hs + ROWS > H || ws + (KW - 1) * DWe >= W) {
#pragma unroll
    for (int r = 0; r < R; ++r) o[r] = oh0 + r < OH ? kfab_pool(vol, D, H, W, od, oh0 + r, ow) : 0.0f;
    return;
  }
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = MAX ? -INFINITY : 0.0f;
  const int64_t plane = DDe * H * W;  // stepped, as kfab_pool_max's
  const float* pa = vol + (ds * H + hs) * W + ws;
#pragma unroll
  for (int64_t a = 0; a < KD; ++a, pa += plane) {
    const float* pj = pa;
#pragma unroll
    for (int64_t j = 0; j < ROWS; ++j, pj += W) {
      bool used = false;
#pragma unroll
      for (int r = 0; r < R; ++r) used = used || kfab_row_of(j, r, SH, DHe, KH);
      if (!used) continue;
      float v[KW];
#pragma unroll
      for (int64_t c = 0; c < KW; ++c) v[c] = KFAB_LOAD(pj + c * DWe);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!kfab_row_of(j, r, SH, DHe, KH)) continue;
#pragma unroll
        for (int64_t c = 0; c < KW; ++c) {
          if constexpr (MAX) {
            acc[r] = kfab_max_nan(acc[r], v[c]);
          } else {
            acc[r] += v[c];
          }
        }
      }
    }
  }
  constexpr float div = static_cast<float>(DIVISOR != 0 ? DIVISOR : KD * KH * KW);
#pragma unroll
  for (int r = 0; r < R; ++r) o[r] = MAX ? acc[r] : acc[r] / div;
}

// A block's tile of outputs staged through shared memory (kfab_pool_tile_kernel): R output rows of TW
// outputs at (volume, od), from the KD window planes' ROWS x SPAN input values they read, loaded once
// with neighbouring threads on neighbouring columns (coalesced, each value once however many windows
// share it), then each output's taps read from shared memory (level1/41 and 44's 1-D windows of 8 at
// stride 1 read their 8 taps a warp at a time through L1, 2 sectors a load at unaligned starts).
// A tile row holds SPAN values from `lead` on (0 to 3: the staged columns start at a multiple of 4, where
// whole float4 are loaded), PITCH floats apart.
template <int R, int TW>
struct KfabPoolTile {
  static constexpr int64_t DDe = MAX ? DD : 1, DHe = MAX ? DH : 1, DWe = MAX ? DW : 1;  // an average has no dilation
  static constexpr int64_t ROWS = (R - 1) * SH + (KH - 1) * DHe + 1, SPAN = (TW - 1) * SW + (KW - 1) * DWe + 1;
  static constexpr int64_t PITCH = (SPAN + 3 + 3) / 4 * 4;
  static constexpr int64_t SIZE = KD * ROWS * PITCH;  // floats
};

// The tile's input: plane a (depth ds + a * DDe), rows hs .., columns ws .. of one volume; outside the
// input -infinity for a maximum (torch's max pooling never reads the padding) and 0 for an average
// (whose windows that reach outside are computed from global memory: kfab_pool_tile_out).
// A tile row at a time, the threads along it (no division an element); rows no window reads (a window
// dilated down the column) are left unset. Where the input's rows are whole float4 (W a multiple of 4,
// the volume 16-byte aligned), a float4 a load from the multiple of 4 at or before ws (lead floats
// before it), each float4 wholly inside the row or wholly outside: level1/41 and 44 staged a float a
// load kept too few bytes in flight (74% and 56% of the copy bandwidth on an H100). Returns the lead.
template <int R, int TW, int B>
__device__ __forceinline__ int kfab_pool_stage(float* tile, const float* __restrict__ vol, int64_t D, int64_t H, int64_t W, int64_t ds, int64_t hs,
                                               int64_t ws) {
  using T = KfabPoolTile<R, TW>;
  const bool v4 = W % 4 == 0 && (reinterpret_cast<uintptr_t>(vol) & 15) == 0;
  const int lead = v4 ? static_cast<int>((ws % 4 + 4) % 4) : 0;
  constexpr float fill = MAX ? -INFINITY : 0.0f;
#pragma unroll 1
  for (int aj = 0; aj < static_cast<int>(KD * T::ROWS); ++aj) {
    const int a = aj / static_cast<int>(T::ROWS), j = aj % static_cast<int>(T::ROWS);
    bool used = false;
#pragma unroll
    for (int r = 0; r < R; ++r) used = used || kfab_row_of(j, r, SH, T::DHe, KH);
    if (!used) continue;
    const int64_t d = ds + a * T::DDe, h = hs + j;
    const bool row_in = d >= 0 && d < D && h >= 0 && h < H;
    const float* src = vol + ((row_in ? d : 0) * H + (row_in ? h : 0)) * W + ws - lead;
    float* dst = tile + aj * static_cast<int>(T::PITCH);
    if (v4) {
#pragma unroll 4
      for (int q = threadIdx.x; q < static_cast<int>(T::PITCH / 4); q += B) {
        const int64_t c = ws - lead + 4 * q;
        reinterpret_cast<float4*>(dst)[q] = row_in && c >= 0 && c < W ? __ldcs(reinterpret_cast<const float4*>(src) + q) : make_float4(fill, fill, fill, fill);
      }
    } else {
#pragma unroll 4
      for (int c = threadIdx.x; c < static_cast<int>(T::SPAN); c += B) dst[c] = row_in && ws + c >= 0 && ws + c < W ? __ldcs(src + c) : fill;
    }
  }
  return lead;
}

// Outputs (od, oh0 .. oh0 + R - 1, ow) into o[R] from the staged tile (from its lead on), ow being
// column `col` of the tile: each tile row R windows share read once (as kfab_pool_rows reads them), taps in kfab_pool's
// order, so the same values. An average's window that reaches outside the input sums the tile's zeros
// there and divides by its own count (kfab_pool_avg_divisor), as kfab_pool_avg does. EDGE false: the
// caller knows every window of the tile lies inside the input (no count worked out, no division by it).
template <int R, int TW, bool EDGE = true>
__device__ __forceinline__ void kfab_pool_tile_out(const float* tile, int64_t col, int64_t D, int64_t H, int64_t W, int64_t od, int64_t oh0, int64_t ow,
                                                   float* o) {
  using T = KfabPoolTile<R, TW>;
  const int64_t ds = od * SD - PD, hs = oh0 * SH - PH, ws = ow * SW - PW;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = MAX ? -INFINITY : 0.0f;
#pragma unroll
  for (int64_t a = 0; a < KD; ++a)
#pragma unroll
    for (int64_t j = 0; j < T::ROWS; ++j) {
      bool used = false;
#pragma unroll
      for (int r = 0; r < R; ++r) used = used || kfab_row_of(j, r, SH, T::DHe, KH);
      if (!used) continue;
      float v[KW];
#pragma unroll
      for (int64_t c = 0; c < KW; ++c)
        v[c] = tile[static_cast<int>((a * T::ROWS + j) * T::PITCH + c * T::DWe) + static_cast<int>(col) * static_cast<int>(SW)];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!kfab_row_of(j, r, SH, T::DHe, KH)) continue;
#pragma unroll
        for (int64_t c = 0; c < KW; ++c) {
          if constexpr (MAX) {
            acc[r] = kfab_max_nan(acc[r], v[c]);
          } else {
            acc[r] += v[c];
          }
        }
      }
    }
  constexpr float div = static_cast<float>(DIVISOR != 0 ? DIVISOR : KD * KH * KW);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if constexpr (MAX) {
      o[r] = acc[r];
    } else {
      // at the edges the tile's zeros outside the input add nothing (s + 0.0f is s), so the sum is
      // kfab_pool_avg's; its divisor is the window's own
      const int64_t hr = hs + r * SH;
      const bool inside = !EDGE || kfab_pool_inside(D, H, W, ds, hr, ws);
      o[r] = inside ? acc[r] / div : acc[r] / static_cast<float>(kfab_pool_avg_divisor(D, H, W, ds, hr, ws));
    }
  }
}

// A 1-D tile's OPT consecutive outputs (tile columns col0 .. col0 + OPT - 1, col0 * SW a multiple of 4)
// from registers: the values their windows read loaded from shared memory a float4 at a time (from the
// tile row's start, `tile`; LEAD its lead, the same for every block of a launch), then each output's taps
// taken from those registers in kfab_pool's order (so the same values). The tile's outputs B apart each
// read their KW taps from shared memory: level1/41's 8 taps, 8 loads an output, here about 0.6 (faster on
// level1/44, slower on 41: tuner/pool.cpp).
// An average's window that reaches outside the input sums the tile's zeros there over its own count.
// EDGE false: the caller knows every window lies inside the row (no count worked out).
template <int OPT, int LEAD, bool EDGE = true>
__device__ __forceinline__ void kfab_pool_slide(const float* tile, int col0, int64_t W, int64_t ow0, float* o) {
  constexpr int DWe = MAX ? static_cast<int>(DW) : 1;
  constexpr int ST = (OPT - 1) * static_cast<int>(SW) + (static_cast<int>(KW) - 1) * DWe + 1, NV = (LEAD + ST + 3) / 4;
  float v[4 * NV];
  const float4* src = reinterpret_cast<const float4*>(tile + col0 * static_cast<int>(SW));
#pragma unroll
  for (int q = 0; q < NV; ++q) {
    const float4 f = src[q];
    v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
  }
  constexpr float div = static_cast<float>(DIVISOR != 0 ? DIVISOR : KD * KH * KW);
#pragma unroll
  for (int k = 0; k < OPT; ++k) {
    float acc = MAX ? -INFINITY : 0.0f;
#pragma unroll
    for (int c = 0; c < static_cast<int>(KW); ++c) {
      const float x = v[LEAD + k * static_cast<int>(SW) + c * DWe];
      if constexpr (MAX) {
        acc = kfab_max_nan(acc, x);
      } else {
        acc += x;
      }
    }
    if constexpr (MAX) {
      o[k] = acc;
    } else {
      // at the row's ends the tile's zeros add nothing: the window's own divisor (as kfab_pool_tile_out)
      const int64_t ws = (ow0 + k) * SW - PW;
      o[k] = !EDGE || (ws >= 0 && ws + KW <= W) ? acc / div : acc / static_cast<float>(kfab_pool_avg_divisor(1, 1, W, 0, 0, ws));
    }
  }
}

// A max pooling at stride 1 along W, separably: R output rows of 4 consecutive outputs ow0 .. ow0 + 3 (ow0 a
// multiple of 4) into acc. Each input row the R windows read is loaded once (a float4 a load where V4:
// W a multiple of 4 and the volume 16-byte aligned), its 4 row maxima (KW taps each) taken once, then
// folded into the outputs whose windows hold that row: level1/42's 4 x 4 window takes 3 + 4 instructions
// an output and a row where kfab_pool_rows took a load and 4 maxima (issue-bound: ncu, 61% of cycles
// issuing). Values outside the input are -infinity, which torch's max pooling never reads and which no
// maximum takes, so every thread runs the same code. A maximum of the same taps in another order is the
// same value (a NaN wins either way; +0 and -0 may swap). (An average over 1-D windows so, its row's sum
// in kfab_pool's order, and 1-D maxima lost to the staged tiles on an H200, session 19, tree d2c00f5:
// level1/41 2.196 ms against 1.837, level1/44 1.751 against 1.619. Not offered.)
template <int R, bool V4>
__device__ __forceinline__ void kfab_pool_sep(const float* __restrict__ vol, int64_t D, int64_t H, int64_t W, int64_t od, int64_t oh0, int64_t ow0,
                                              float (&acc)[R][4]) {
  static_assert(R > 0 && MAX && SW == 1, "separable pooling: a maximum at stride 1 along W");
  constexpr int64_t ROWS = (R - 1) * SH + (KH - 1) * DH + 1;
  constexpr int SPAN = 3 + static_cast<int>((KW - 1) * DW) + 1;                 // the values 4 outputs read a row
  constexpr int LEAD = V4 ? static_cast<int>((4 - PW % 4) % 4) : 0;            // (ow0 - PW) mod 4, ow0 a multiple of 4
  constexpr int NV = V4 ? (LEAD + SPAN + 3) / 4 * 4 : SPAN;
  const int64_t ds = od * SD - PD, hs = oh0 * SH - PH, ws = ow0 - PW - LEAD;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[r][k] = -INFINITY;
#pragma unroll 1
  for (int64_t a = 0; a < KD; ++a) {
    const int64_t d = ds + a * DD;
    if (d < 0 || d >= D) continue;
#pragma unroll
    for (int64_t j = 0; j < ROWS; ++j) {
      bool used = false;
#pragma unroll
      for (int r = 0; r < R; ++r) used = used || kfab_row_of(j, r, SH, DH, KH);
      if (!used) continue;  // known at compile time
      // a row outside the input reads -infinity through the same predicated loads, with no branch: a
      // branch around each row kept each row's loads behind the last row's maxima (level1/42: one row's
      // loads in flight a thread; ncu: waiting on loads)
      const int64_t h = hs + j;
      const bool in = h >= 0 && h < H;
      const float* row = vol + (d * H + (in ? h : 0)) * W;
      float v[NV];
      if constexpr (V4) {
#pragma unroll
        for (int q = 0; q < NV / 4; ++q) {
          const int64_t c = ws + 4 * q;  // a float4 wholly inside the row or wholly outside
          const float4 f = in && c >= 0 && c < W ? __ldg(reinterpret_cast<const float4*>(row + c))
                                                 : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
          v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < NV; ++i) v[i] = in && ws + i >= 0 && ws + i < W ? KFAB_LOAD(row + ws + i) : -INFINITY;
      }
      float m[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        m[k] = v[LEAD + k];
#pragma unroll
        for (int i = 1; i < static_cast<int>(KW); ++i) m[k] = kfab_max_nan(m[k], v[LEAD + k + i * static_cast<int>(DW)]);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!kfab_row_of(j, r, SH, DH, KH)) continue;
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[r][k] = kfab_max_nan(acc[r][k], m[k]);
      }
    }
  }
}

// Four consecutive outputs (od, oh, ow0 .. ow0 + 3; ow0 a multiple of 4) of one volume into o, each window
// row's values for all four loaded a float4 at a time into registers (from the multiple of 4 at or before
// the first one's first tap: LEAD values before it, the same for every ow0), then each output's taps
// taken from them in kfab_pool's order (so the same values). level1/46's 3 x 3 x 3 windows at stride 2:
// 3 float4 a row for 4 outputs where one output a thread loaded 3 floats a row (27 loads an output, and
// about 280 instructions; ncu: issuing in 71% of cycles). Where a window reaches outside the input, or
// the rows are not whole float4 (W a multiple of 4, the volume 16-byte aligned), output by output.
KFAB_INLINE void kfab_pool_vec4(const float* __restrict__ vol, int64_t D, int64_t H, int64_t W, int64_t OW, int64_t od, int64_t oh, int64_t ow0,
                                float* o) {
  constexpr int64_t DDe = MAX ? DD : 1, DHe = MAX ? DH : 1, DWe = MAX ? DW : 1;  // an average has no dilation
  constexpr int LEAD = static_cast<int>(((-PW) % 4 + 4) % 4);                   // (ow0 * SW - PW) mod 4
  constexpr int SPAN = static_cast<int>(3 * SW + (KW - 1) * DWe + 1), NV = (LEAD + SPAN + 3) / 4;
  const int64_t ds = od * SD - PD, hs = oh * SH - PH, ws = ow0 * SW - PW - LEAD;
  if (ow0 + 4 > OW || W % 4 != 0 || (reinterpret_cast<uintptr_t>(vol) & 15) != 0 || ds < 0 || hs < 0 || ws < 0 || ds + (KD - 1) * DDe >= D ||
      hs + (KH - 1) * DHe >= H || ws + 4 * NV > W) {
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (ow0 + k < OW) o[k] = kfab_pool(vol, D, H, W, od, oh, ow0 + k);
    return;
  }
  float acc[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) acc[k] = MAX ? -INFINITY : 0.0f;
  const int64_t plane = DDe * H * W, row = DHe * W;
  const float* pa = vol + (ds * H + hs) * W + ws;
#pragma unroll
  for (int64_t a = 0; a < KD; ++a, pa += plane) {
    const float* pb = pa;
#pragma unroll
    for (int64_t b = 0; b < KH; ++b, pb += row) {
      float v[4 * NV];
#pragma unroll
      for (int q = 0; q < NV; ++q) {
        const float4 f = __ldg(reinterpret_cast<const float4*>(pb) + q);
        v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
      }
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int64_t c = 0; c < KW; ++c) {
          const float x = v[LEAD + k * static_cast<int>(SW) + static_cast<int>(c * DWe)];
          if constexpr (MAX) {
            acc[k] = kfab_max_nan(acc[k], x);
          } else {
            acc[k] += x;
          }
        }
    }
  }
  constexpr float div = static_cast<float>(DIVISOR != 0 ? DIVISOR : KD * KH * KW);
#pragma unroll
  for (int k = 0; k < 4; ++k) o[k] = MAX ? acc[k] : acc[k] / div;
}

// ---- marching along D: a block's outputs for every od in turn, each input plane staged once -----------
// kfab_pool_march (tuner/pool.cpp): a block owns R output rows x TW output columns of one volume and takes
// od = 0, 1, ... in turn. Each input plane its windows read (ROWS rows x SPAN columns) is copied once into a
// ring of NS planes in shared memory, by cp.async while the block reduces the planes already there: the
// next od's SD new planes are in flight while this od's outputs are taken. The loads through L1 of the
// packed kernels read each of level1/46's values about 3.4 times (27 taps an output, 8 values an output)
// and held 43 and 46 at 48% and 57% of the copy bandwidth (H200, session 22).
template <int R, int TW, int A = 1>
struct KfabPoolMarch {
  static constexpr int64_t DDe = MAX ? DD : 1, DHe = MAX ? DH : 1, DWe = MAX ? DW : 1;  // an average has no dilation
  static constexpr int ROWS = static_cast<int>((R - 1) * SH + (KH - 1) * DHe + 1), SPAN = static_cast<int>((TW - 1) * SW + (KW - 1) * DWe + 1);
  static constexpr int PITCH = (SPAN + 3 + 3) / 4 * 4;           // a lead of up to 3, whole float4
  static constexpr int ZSPAN = static_cast<int>((KD - 1) * DDe + 1);  // the planes one window spans
  static constexpr int NS = ZSPAN + A * static_cast<int>(SD);   // one window's planes and the next A ods' new ones
  static constexpr int PLANE = ROWS * PITCH;                    // floats a slot
  static constexpr int64_t BYTES = 4LL * NS * PLANE;
};

#if !defined(KFAB_POOL_HOST_CHECK)
__device__ __forceinline__ void kfab_pool_cp16(float* dst, const float* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))), "l"(src) : "memory");
}
__device__ __forceinline__ void kfab_pool_cp4(float* dst, const float* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))), "l"(src) : "memory");
}
__device__ __forceinline__ void kfab_pool_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// every copy but those of the last N commits landed
template <int N>
__device__ __forceinline__ void kfab_pool_cp_wait_prior() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
#endif

// Input plane d of one volume (outside the input: the fill, -infinity for a maximum, 0 for an average),
// rows hs .. hs + ROWS - 1 and columns from ws - lead on, into a ring slot, by B threads. V4 (W a multiple
// of 4, the volume 16-byte aligned, lead = ws mod 4): whole float4, each wholly inside the row or wholly
// outside; else a float at a time (lead 0).
template <int R, int TW, int B, bool V4>
__device__ __forceinline__ void kfab_march_stage(float* slab, const float* __restrict__ vol, int64_t D, int64_t H, int64_t W, int64_t d,
                                                 int64_t hs, int64_t ws, int lead) {
  using M = KfabPoolMarch<R, TW>;
  constexpr float fill = MAX ? -INFINITY : 0.0f;
  const bool plane_in = d >= 0 && d < D;
  const float* base = vol + (plane_in ? d : 0) * H * W;
  if constexpr (V4) {
    constexpr int NQ = M::PITCH / 4;
#pragma unroll 4
    for (int i = static_cast<int>(threadIdx.x); i < M::ROWS * NQ; i += B) {
      const int j = i / NQ, q = i - j * NQ;
      const int64_t h = hs + j, c = ws - lead + 4 * q;
      float* dst = slab + j * M::PITCH + 4 * q;
      if (plane_in && h >= 0 && h < H && c >= 0 && c < W) kfab_pool_cp16(dst, base + h * W + c);
      else *reinterpret_cast<float4*>(dst) = make_float4(fill, fill, fill, fill);
    }
  } else {
#pragma unroll 4
    for (int i = static_cast<int>(threadIdx.x); i < M::ROWS * M::SPAN; i += B) {
      const int j = i / M::SPAN, k = i - j * M::SPAN;
      const int64_t h = hs + j, c = ws + k;
      float* dst = slab + j * M::PITCH + k;
      if (plane_in && h >= 0 && h < H && c >= 0 && c < W) kfab_pool_cp4(dst, base + h * W + c);
      else *dst = fill;
    }
  }
}

// Output (od, oh0 + r, ow0 + c) from the ring: pl[a] the slot of plane od * SD - PD + a * DDe, its row 0
// input row oh0 * SH - PH, its column lead the input column ow0 * SW - PW. Taps in kfab_pool's order, so
// the same values: the fill never wins a maximum and adds nothing to a sum (s + 0.0f is s). EDGE false:
// the caller knows the window lies inside the input (an average divides by the window's size alone).
template <int R, int TW, bool EDGE>
__device__ __forceinline__ float kfab_march_out(const float* const* pl, int lead, int r, int c, int64_t D, int64_t H, int64_t W, int64_t od,
                                                int64_t oh, int64_t ow) {
  using M = KfabPoolMarch<R, TW>;
  const int at = r * static_cast<int>(SH) * M::PITCH + lead + c * static_cast<int>(SW);
  float acc = MAX ? -INFINITY : 0.0f;
#pragma unroll
  for (int a = 0; a < static_cast<int>(KD); ++a) {
    const float* p = pl[a] + at;
#pragma unroll
    for (int b = 0; b < static_cast<int>(KH); ++b)
#pragma unroll
      for (int k = 0; k < static_cast<int>(KW); ++k) {
        const float x = p[b * static_cast<int>(M::DHe) * M::PITCH + k * static_cast<int>(M::DWe)];
        if constexpr (MAX) {
          acc = kfab_max_nan(acc, x);
        } else {
          acc += x;
        }
      }
  }
  if constexpr (MAX) {
    return acc;
  } else {
    constexpr float div = static_cast<float>(DIVISOR != 0 ? DIVISOR : KD * KH * KW);
    if (!EDGE) return acc / div;
    const int64_t ds = od * SD - PD, hs = oh * SH - PH, ws = ow * SW - PW;
    return kfab_pool_inside(D, H, W, ds, hs, ws) ? acc / div : acc / static_cast<float>(kfab_pool_avg_divisor(D, H, W, ds, hs, ws));
  }
}

// The separable march (CT > 0 in kfab_pool_march_block): a thread takes RT output rows x CT consecutive
// output columns, and each input row of each plane their windows read is loaded once, a float4 at a time,
// reduced along W for the CT outputs, and folded into the output rows whose windows hold it. The thread's
// first column is then CT * SW floats past its neighbour's, a multiple of 4, so every thread's row starts on
// the same lead within a float4 (L: the block's lead, KfabMarchSep::LC where the input's rows are float4, else
// 0). The per-output march (kfab_march_out) took 27 loads of 4 bytes, 2 bank-conflicted wavefronts each, and
// 27 adds an output of level1/46 (ncu: issuing in 75% of cycles, DRAM at 65%). An average's sums are taken in
// another order than kfab_pool's: within a few ulps of it, not the same bits (a maximum's are the same).
template <int R, int TW, int RT, int CT>
struct KfabMarchSep {
  using M = KfabPoolMarch<R, TW>;
  static constexpr int NG = R / RT, CTH = (TW + CT - 1) / CT;  // row groups, and threads along a row
  static constexpr int NRW = static_cast<int>((RT - 1) * SH + (KH - 1) * M::DHe + 1);  // input rows a thread reads a plane
  static constexpr int SPN = static_cast<int>((CT - 1) * SW + (KW - 1) * M::DWe + 1);  // input columns it reads a row
  static constexpr int LC = static_cast<int>((4 - PW % 4) % 4);  // the lead where ow0 * SW is a multiple of 4
  static_assert(R % RT == 0 && (CT * SW) % 4 == 0 && (TW * SW) % 4 == 0, "the separable march's threads start on one lead");
};

// a float4 of shared memory (16-byte aligned)
__device__ __forceinline__ void kfab_lds4(const float* p, float* v) {
#if defined(KFAB_POOL_HOST_CHECK)
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) std::abort();
  std::memcpy(v, p, 16);
#else
  const float4 t = *reinterpret_cast<const float4*>(p);
  v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
#endif
}

// A thread's RT x CT sums or maxima of the planes pl[a] (as kfab_march_out's), output rows r0 .., columns c0 ..
// of the block, into o (its row 0 the input row r0 * SH of the slot, column L + c0 * SW).
template <int R, int TW, int RT, int CT, int L>
__device__ __forceinline__ void kfab_march_sep(const float* const* pl, int r0, int c0, float (&o)[RT][CT]) {
  using M = KfabPoolMarch<R, TW>;
  using S = KfabMarchSep<R, TW, RT, CT>;
  constexpr int NV = (L + S::SPN + 3) / 4;
#pragma unroll
  for (int i = 0; i < RT; ++i)
#pragma unroll
    for (int j = 0; j < CT; ++j) o[i][j] = MAX ? -INFINITY : 0.0f;
#pragma unroll
  for (int a = 0; a < static_cast<int>(KD); ++a) {
    const float* p = pl[a] + r0 * static_cast<int>(SH) * M::PITCH + c0 * static_cast<int>(SW);
#pragma unroll
    for (int jr = 0; jr < S::NRW; ++jr) {  // rows no window holds (a dilation's gaps) load nothing: their values go unused
      float v[4 * NV];
#pragma unroll
      for (int q = 0; q < NV; ++q) kfab_lds4(p + jr * M::PITCH + 4 * q, v + 4 * q);
      float red[CT];
#pragma unroll
      for (int j = 0; j < CT; ++j) {
        red[j] = v[L + j * static_cast<int>(SW)];
#pragma unroll
        for (int k = 1; k < static_cast<int>(KW); ++k) {
          const float x = v[L + j * static_cast<int>(SW) + k * static_cast<int>(M::DWe)];
          red[j] = MAX ? kfab_max_nan(red[j], x) : red[j] + x;
        }
      }
#pragma unroll
      for (int i = 0; i < RT; ++i)
#pragma unroll
        for (int b = 0; b < static_cast<int>(KH); ++b) {
          if (jr != i * static_cast<int>(SH) + b * static_cast<int>(M::DHe)) continue;
#pragma unroll
          for (int j = 0; j < CT; ++j) o[i][j] = MAX ? kfab_max_nan(o[i][j], red[j]) : o[i][j] + red[j];
        }
    }
  }
}

// The separable march's outputs of one od: thread u of the block takes row group u / CTH, columns (u % CTH) * CT ..
// (a loop, so that one host thread takes them all); an average divided as kfab_march_out divides.
template <int R, int TW, int B, int RT, int CT>
__device__ __forceinline__ void kfab_march_sep_store(const float* const* pl, float* yo, int lead, int rows, int cols, bool inside, int64_t D,
                                                     int64_t H, int64_t W, int64_t OW, int64_t od, int64_t oh0, int64_t ow0) {
  using S = KfabMarchSep<R, TW, RT, CT>;
#pragma unroll 1
  for (int u = static_cast<int>(threadIdx.x); u < S::NG * S::CTH; u += B) {
    const int g = u / S::CTH, r0 = g * RT, c0 = (u - g * S::CTH) * CT;
    if (r0 >= rows || c0 >= cols) continue;
    float o[RT][CT];
    if (lead == S::LC) kfab_march_sep<R, TW, RT, CT, S::LC>(pl, r0, c0, o);
    else kfab_march_sep<R, TW, RT, CT, 0>(pl, r0, c0, o);
#pragma unroll
    for (int i = 0; i < RT; ++i) {
      if (r0 + i >= rows) break;
#pragma unroll
      for (int j = 0; j < CT; ++j) {
        if (c0 + j >= cols) break;
        float v = o[i][j];
        if constexpr (!MAX) {
          constexpr float div = static_cast<float>(DIVISOR != 0 ? DIVISOR : KD * KH * KW);
          const int64_t ds = od * SD - PD, hs = (oh0 + r0 + i) * SH - PH, ws = (ow0 + c0 + j) * SW - PW;
          v = inside || kfab_pool_inside(D, H, W, ds, hs, ws) ? v * (1.0f / div)
                                                               : v / static_cast<float>(kfab_pool_avg_divisor(D, H, W, ds, hs, ws));
        }
        yo[(r0 + i) * OW + c0 + j] = v;
      }
    }
  }
}

// One block's march over one volume (x the volume's input, y its output [OD, OH, OW]): output rows oh0 ..
// oh0 + R - 1, columns ow0 .. ow0 + TW - 1 (fewer at the ends), od = 0 .. OD - 1. ring: NS * PLANE floats,
// 16-byte aligned. Plane n of the march (input plane n - PD) goes to slot n % NS: od reads n = od * SD + a * DDe,
// and while it does, the new planes of od + A (ZSPAN + (od + A - 1) * SD .. + SD - 1) are copied into the
// slots its previous planes held, one commit group an od (the prologue's A groups: the planes od = 0 .. A - 1
// read first); one barrier an od (every thread past od - 1, od's planes in). A = 2 keeps two ods' planes in
// flight where one od's reduction is shorter than a plane's copy.
template <int R, int TW, int B, int A = 1, int RT = 1, int CT = 0>
__device__ __forceinline__ void kfab_pool_march_block(float* ring, const float* __restrict__ x, float* __restrict__ y, int64_t D, int64_t H,
                                                      int64_t W, int OD, int64_t OH, int64_t OW, int64_t oh0, int64_t ow0) {
  using M = KfabPoolMarch<R, TW, A>;
  const int64_t hs = oh0 * SH - PH, ws = ow0 * SW - PW;
  const bool v4 = W % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  const int lead = v4 ? static_cast<int>((ws % 4 + 4) % 4) : 0;
  const int rows = static_cast<int>(OH - oh0 < R ? OH - oh0 : R), cols = static_cast<int>(OW - ow0 < TW ? OW - ow0 : TW);
  // every window of the block inside the input along H and W (an average's count is then the window's
  // size wherever od's window is inside along D)
  const bool hw_inside = hs >= 0 && (oh0 + rows - 1) * SH - PH + KH <= H && ws >= 0 && (ow0 + cols - 1) * SW - PW + KW <= W;
  const auto stage = [&](int n) {
    float* slab = ring + (n % M::NS) * M::PLANE;
    if (v4) kfab_march_stage<R, TW, B, true>(slab, x, D, H, W, n - PD, hs, ws, lead);
    else kfab_march_stage<R, TW, B, false>(slab, x, D, H, W, n - PD, hs, ws, 0);
  };
  constexpr int sd = static_cast<int>(SD);
#pragma unroll
  for (int j = 0; j < A; ++j) {
    if (j < OD) {
#pragma unroll 1
      for (int n = j == 0 ? 0 : M::ZSPAN + (j - 1) * sd; n < M::ZSPAN + j * sd; ++n) stage(n);
    }
    kfab_pool_cp_commit();
  }
#pragma unroll 1
  for (int od = 0; od < OD; ++od) {
    kfab_pool_cp_wait_prior<A - 1>();  // groups 0 .. od of the A + od committed
    __syncthreads();
    if (od + A < OD) {
#pragma unroll 1
      for (int n = M::ZSPAN + (od + A - 1) * sd; n < M::ZSPAN + (od + A) * sd; ++n) stage(n);
    }
    kfab_pool_cp_commit();
    const float* pl[KD];
#pragma unroll
    for (int a = 0; a < static_cast<int>(KD); ++a) pl[a] = ring + ((od * sd + a * static_cast<int>(M::DDe)) % M::NS) * M::PLANE;
    const int64_t ds = static_cast<int64_t>(od) * SD - PD;
    const bool inside = MAX || (hw_inside && ds >= 0 && ds + KD <= D);
    float* yo = y + (od * OH + oh0) * OW + ow0;
    if constexpr (CT > 0) {
      kfab_march_sep_store<R, TW, B, RT, CT>(pl, yo, lead, rows, cols, inside, D, H, W, OW, od, oh0, ow0);
      continue;
    }
#pragma unroll
    for (int k = 0; k < (R * TW + B - 1) / B; ++k) {
      const int e = static_cast<int>(threadIdx.x) + k * B;
      const int r = e / TW, c = e - r * TW;
      if (e >= R * TW || r >= rows || c >= cols) continue;
      yo[r * OW + c] = inside ? kfab_march_out<R, TW, false>(pl, lead, r, c, D, H, W, od, oh0 + r, ow0 + c)
                              : kfab_march_out<R, TW, true>(pl, lead, r, c, D, H, W, od, oh0 + r, ow0 + c);
    }
  }
}
#endif

#if !defined(__CUDACC__)
// Output row (od, oh) of one volume on the host: the outputs whose window lies wholly inside the input
// window tap by tap with the row's outputs as the SIMD lanes (the same operations in the same order as
// kfab_pool, so the same values), the others one by one.
static inline void kfab_pool_row(const float* __restrict__ vol, int64_t D, int64_t H, int64_t W, int64_t od, int64_t oh,
                                 float* __restrict__ out, int64_t OW) {
  constexpr int64_t DDe = MAX ? DD : 1, DHe = MAX ? DH : 1, DWe = MAX ? DW : 1;  // an average has no dilation
  const int64_t ds = od * SD - PD, hs = oh * SH - PH;
  const int64_t last = W - 1 - (KW - 1) * DWe;  // the largest window start inside the row
  int64_t lo = (PW + SW - 1) / SW, hi = last + PW >= 0 ? (last + PW) / SW + 1 : 0;
  hi = hi < OW ? hi : OW;
  lo = lo < hi ? lo : hi;
  if (ds < 0 || hs < 0 || ds + (KD - 1) * DDe >= D || hs + (KH - 1) * DHe >= H) lo = hi = 0;
  for (int64_t ow = 0; ow < lo; ++ow) out[ow] = kfab_pool(vol, D, H, W, od, oh, ow);
  for (int64_t ow = hi; ow < OW; ++ow) out[ow] = kfab_pool(vol, D, H, W, od, oh, ow);
  if (lo >= hi) return;
  for (int64_t ow = lo; ow < hi; ++ow) out[ow] = MAX ? -INFINITY : 0.0f;
  for (int64_t a = 0; a < KD; ++a)
    for (int64_t b = 0; b < KH; ++b)
      for (int64_t c = 0; c < KW; ++c) {
        const float* p = vol + ((ds + a * DDe) * H + hs + b * DHe) * W + c * DWe - PW;
#pragma omp simd
        for (int64_t ow = lo; ow < hi; ++ow) {
          const float v = p[ow * SW], m = out[ow];
          out[ow] = MAX ? ((v > m || v != v) ? v : m) : m + v;
        }
      }
  if constexpr (!MAX) {
    const float d = static_cast<float>(DIVISOR != 0 ? DIVISOR : KD * KH * KW);
#pragma omp simd
    for (int64_t ow = lo; ow < hi; ++ow) out[ow] /= d;
  }
}
#endif
// kfab:end
