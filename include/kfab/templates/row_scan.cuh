#pragma once
// The kernel of the row-wise inclusive scan of the cumsum template: a block per row, tiles of B * V
// elements (tuner/cuda_templates.cpp). The generated file defines B (threads per block) before it and
// launches it from its kfab_run. The text between the kfab:begin and kfab:end lines is spliced into
// the candidates the tuner writes, inside an unnamed namespace; tests/templates/row_scan.cu compiles
// it on its own.
// kfab:begin
// Each tile: every thread scans its V consecutive elements, the warps scan the thread totals with
// shuffles, the first warp scans the warp totals; the running carry crosses tiles.
template <int V>
__global__ void __launch_bounds__(B) kfab_scan_rows(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t n) {
  __shared__ float warp_total[B / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * n;
    float* yr = y + row * n;
    float carry = 0.0f;
    for (int64_t base = 0; base < n; base += static_cast<int64_t>(B) * V) {
      const int64_t c = base + static_cast<int64_t>(threadIdx.x) * V;
      float v[V];
      if constexpr (V == 4) {
        if (c < n) {
          const float4 q = __ldcs(reinterpret_cast<const float4*>(xr + c));
          v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        } else {
          v[0] = v[1] = v[2] = v[3] = 0.0f;
        }
      } else {
        v[0] = c < n ? __ldcs(xr + c) : 0.0f;
      }
#pragma unroll
      for (int j = 1; j < V; ++j) v[j] += v[j - 1];
      float t = v[V - 1];
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const float u = __shfl_up_sync(0xffffffffu, t, off);
        if (lane >= off) t += u;
      }
      if (lane == 31) warp_total[warp] = t;
      __syncthreads();
      if (warp == 0) {
        float w = lane < B / 32 ? warp_total[lane] : 0.0f;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
          const float u = __shfl_up_sync(0xffffffffu, w, off);
          if (lane >= off) w += u;
        }
        if (lane < B / 32) warp_total[lane] = w;
      }
      __syncthreads();
      const float before = carry + (warp > 0 ? warp_total[warp - 1] : 0.0f) + (t - v[V - 1]);
      if constexpr (V == 4) {
        if (c < n) __stcs(reinterpret_cast<float4*>(yr + c), make_float4(v[0] + before, v[1] + before, v[2] + before, v[3] + before));
      } else {
        if (c < n) __stcs(yr + c, v[0] + before);
      }
      carry += warp_total[B / 32 - 1];
      __syncthreads();  // warp_total is rewritten by the next tile
    }
  }
}
// kfab:end
