#pragma once
// The kernel of the batched transpose of the permute template: 32 x 32 tiles through shared memory,
// float4 where KT > 0 (tuner/cuda_templates.cpp). The generated file defines KT (tiles a block moves
// with float4 accesses) and MFAST (blockIdx.x along M) before it and launches it from its kfab_run.
// The text between the kfab:begin and kfab:end lines is spliced into the candidates the tuner writes,
// inside an unnamed namespace; tests/templates/tiled_transpose.cu compiles it on its own.
// kfab:begin
// The scalar kernel: a 32 x 32 tile read and written by 32 x 8 threads.
__global__ void __launch_bounds__(256) kfab_transpose(const float* __restrict__ x, float* __restrict__ y, int64_t m, int64_t n) {
  __shared__ float tile[32][33];  // +1: the column reads hit 32 different banks
  const int64_t b = blockIdx.z;
  const int64_t i0 = static_cast<int64_t>(MFAST ? blockIdx.x : blockIdx.y) * 32, j0 = static_cast<int64_t>(MFAST ? blockIdx.y : blockIdx.x) * 32;
  const float* xb = x + b * m * n;
  float* yb = y + b * m * n;
#pragma unroll
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int64_t i = i0 + k, j = j0 + threadIdx.x;
    if (i < m && j < n) tile[k][threadIdx.x] = __ldcs(xb + i * n + j);
  }
  __syncthreads();
#pragma unroll
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int64_t j = j0 + k, i = i0 + threadIdx.x;
    if (i < m && j < n) __stcs(yb + j * m + i, tile[threadIdx.x][k]);
  }
}

// M and N multiples of 4: 256 threads move KT tiles of 32 x 32, each thread reading a float4 of an
// input row and writing a float4 of an output row per tile. Row stride 33 in shared memory: both the
// scalar stores of a float4 and the column reads of one hit 32 different banks across a warp.
__global__ void __launch_bounds__(256) kfab_transpose4(const float* __restrict__ x, float* __restrict__ y, int64_t m, int64_t n) {
  __shared__ float tile[KT > 0 ? KT : 1][32][33];
  const int64_t b = blockIdx.z;
  const int64_t i0 = static_cast<int64_t>(MFAST ? blockIdx.x : blockIdx.y) * 32;
  const int64_t j0 = static_cast<int64_t>(MFAST ? blockIdx.y : blockIdx.x) * 32 * (KT > 0 ? KT : 1);
  const float* xb = x + b * m * n;
  float* yb = y + b * m * n;
  const int r = threadIdx.x / 8, q = threadIdx.x % 8;  // a row of the tile, a float4 of it
  float4 v[KT > 0 ? KT : 1];
#pragma unroll
  for (int t = 0; t < KT; ++t) {
    const int64_t i = i0 + r, j = j0 + t * 32 + q * 4;
    v[t] = i < m && j < n ? __ldcs(reinterpret_cast<const float4*>(xb + i * n + j)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int t = 0; t < KT; ++t) {
    float* d = &tile[t][r][q * 4];
    d[0] = v[t].x, d[1] = v[t].y, d[2] = v[t].z, d[3] = v[t].w;
  }
  __syncthreads();
#pragma unroll
  for (int t = 0; t < KT; ++t) {
    const int64_t j = j0 + t * 32 + r, i = i0 + q * 4;  // output row r of the tile, a float4 of it
    if (j < n && i < m)
      __stcs(reinterpret_cast<float4*>(yb + j * m + i), make_float4(tile[t][q * 4][r], tile[t][q * 4 + 1][r], tile[t][q * 4 + 2][r], tile[t][q * 4 + 3][r]));
  }
}
// kfab:end
