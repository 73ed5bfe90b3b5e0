#pragma once
// The kernel of the sum over the middle dimension of [outer, r, c]: column vectors a thread, row
// groups a block, partial sums combined (tuner/cuda_templates.cpp). The generated file defines B, RY
// and CX before it and launches it from its kfab_run. The text between the kfab:begin and kfab:end
// lines is spliced into the candidates the tuner writes, inside an unnamed namespace;
// tests/templates/middle_sum.cu compiles it on its own.
// kfab:begin
// Thread (tx, ty) of block (cx, split, b) sums rows r0 + ty, r0 + ty + RY, ... < r1 of the V columns
// at (cx * CX + tx) * V; the RY partial sums meet in shared memory; with more than one split, the
// blocks' sums meet in y through atomics (y is zeroed first).
template <int V>
__global__ void __launch_bounds__(B) kfab_middle_sum(const float* __restrict__ x, float* __restrict__ y, int64_t r, int64_t c) {
  __shared__ float part[RY][CX * V];
  const int tx = threadIdx.x % CX, ty = threadIdx.x / CX;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * CX + tx) * V;
  const bool live = col < c;
  const int64_t b = blockIdx.z;
  const int64_t split = gridDim.y;
  const int64_t per = (r + split - 1) / split;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * per, r1 = r0 + per < r ? r0 + per : r;
  float acc[V] = {};
  const float* xb = x + b * r * c + (live ? col : 0);
  if (live) {
#pragma unroll 4
    for (int64_t i = r0 + ty; i < r1; i += RY) {
      if constexpr (V == 4) {
        const float4 q = __ldcs(reinterpret_cast<const float4*>(xb + i * c));
        acc[0] += q.x, acc[1] += q.y, acc[2] += q.z, acc[3] += q.w;
      } else {
        acc[0] += __ldcs(xb + i * c);
      }
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) part[ty][tx * V + v] = acc[v];
  __syncthreads();
  // the first CX * V threads each finish one column: the RY partials in order
  for (int k = threadIdx.x; k < CX * V; k += B) {
    const int64_t cc = static_cast<int64_t>(blockIdx.x) * CX * V + k;
    if (cc >= c) continue;
    float t = 0.0f;
#pragma unroll
    for (int j = 0; j < RY; ++j) t += part[j][k];
    if (split == 1) y[b * c + cc] = t;
    else if (r0 < r1) atomicAdd(y + b * c + cc, t);
  }
}
// kfab:end
