#pragma once
// The kernel of the row-wise scan template: a block per row, tiles of B * V elements
// (tuner/scan.cpp). A cumulative sum or product (OP 0 or 1) along the last dimension, read from the
// row's end where REVERSE (torch's flip, cumsum, flip), shifted by one where EXCLUSIVE (the first output
// the identity, as cat(zeros, cumsum(x[..., :-1]))), each element times its mask where MASKED (a bool
// tensor of x's shape: cumsum(x * mask)). The generated file defines B, OP, REVERSE, EXCLUSIVE and
// MASKED before it and launches it from its kfab_run. The text between the kfab:begin and kfab:end
// lines is spliced into the candidates the tuner writes, inside an unnamed namespace;
// tests/templates/row_scan.cu compiles it on its own.
// kfab:begin
__device__ __forceinline__ float kfab_scan_op(float a, float b) { return OP == 1 ? a * b : a + b; }

// V elements of the row at logical positions c.. (physical n - 1 - c.. read backwards where REVERSE),
// each times its mask; the identity past the row's end. V == 4 needs n % 4 == 0 and aligned rows.
template <int V>
__device__ __forceinline__ void kfab_scan_load(const float* xr, const unsigned char* mr, int64_t c, int64_t n, float (&v)[V], float id) {
  if constexpr (V == 4) {
    if (c >= n) {
      v[0] = v[1] = v[2] = v[3] = id;
      return;
    }
    const int64_t at = REVERSE ? n - 4 - c : c;
    const float4 q = __ldcs(reinterpret_cast<const float4*>(xr + at));
    float e[4] = {q.x, q.y, q.z, q.w};
    if constexpr (MASKED) {
      const uchar4 k = *reinterpret_cast<const uchar4*>(mr + at);
      e[0] *= k.x ? 1.0f : 0.0f, e[1] *= k.y ? 1.0f : 0.0f, e[2] *= k.z ? 1.0f : 0.0f, e[3] *= k.w ? 1.0f : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = e[REVERSE ? 3 - j : j];
  } else {
    const int64_t at = REVERSE ? n - 1 - c : c;
    v[0] = c < n ? __ldcs(xr + at) : id;
    if constexpr (MASKED) v[0] *= c < n && mr[at] ? 1.0f : 0.0f;
  }
}

template <int V>
__device__ __forceinline__ void kfab_scan_store(float* yr, int64_t c, int64_t n, const float (&o)[V]) {
  if (c >= n) return;
  if constexpr (V == 4) {
    if (REVERSE) __stcs(reinterpret_cast<float4*>(yr + n - 4 - c), make_float4(o[3], o[2], o[1], o[0]));
    else __stcs(reinterpret_cast<float4*>(yr + c), make_float4(o[0], o[1], o[2], o[3]));
  } else {
    __stcs(yr + (REVERSE ? n - 1 - c : c), o[0]);
  }
}

// Each tile: every thread scans its V consecutive elements, the warps scan the thread totals with
// shuffles, the first warp scans the warp totals; the running carry crosses tiles.
template <int V>
__global__ void __launch_bounds__(B)
    kfab_scan_rows(const float* __restrict__ x, const unsigned char* __restrict__ m, float* __restrict__ y, int64_t rows, int64_t n) {
  __shared__ float warp_total[B / 32];
  const float id = OP == 1 ? 1.0f : 0.0f;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * n;
    const unsigned char* mr = MASKED ? m + row * n : nullptr;
    float* yr = y + row * n;
    float carry = id;
    for (int64_t base = 0; base < n; base += static_cast<int64_t>(B) * V) {
      const int64_t c = base + static_cast<int64_t>(threadIdx.x) * V;
      float v[V];
      kfab_scan_load<V>(xr, mr, c, n, v, id);
#pragma unroll
      for (int j = 1; j < V; ++j) v[j] = kfab_scan_op(v[j - 1], v[j]);
      float t = v[V - 1];
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const float u = __shfl_up_sync(0xffffffffu, t, off);
        if (lane >= off) t = kfab_scan_op(u, t);
      }
      float lower = __shfl_up_sync(0xffffffffu, t, 1);  // the lanes before this one, scanned
      if (lane == 0) lower = id;
      if (lane == 31) warp_total[warp] = t;
      __syncthreads();
      if (warp == 0) {
        float w = lane < B / 32 ? warp_total[lane] : id;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
          const float u = __shfl_up_sync(0xffffffffu, w, off);
          if (lane >= off) w = kfab_scan_op(u, w);
        }
        if (lane < B / 32) warp_total[lane] = w;
      }
      __syncthreads();
      const float before = kfab_scan_op(kfab_scan_op(carry, warp > 0 ? warp_total[warp - 1] : id), lower);
      float o[V];
#pragma unroll
      for (int j = 0; j < V; ++j) o[j] = EXCLUSIVE ? (j == 0 ? before : kfab_scan_op(before, v[j - 1])) : kfab_scan_op(before, v[j]);
      kfab_scan_store<V>(yr, c, n, o);
      carry = kfab_scan_op(carry, warp_total[B / 32 - 1]);
      __syncthreads();  // warp_total is rewritten by the next tile
    }
  }
}
// kfab:end
