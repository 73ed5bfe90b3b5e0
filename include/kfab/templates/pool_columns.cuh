#pragma once
// Averages in windows of P, for a GEMM whose product's columns are averaged (an AvgPool1d over a Linear's
// outputs, tuner/fused.h GemmProgram::pool): the weight's and the bias's columns are averaged first, so
// the GEMM makes the pooled product directly. The text between the kfab:begin and kfab:end lines is
// spliced into the candidates the tuner writes, inside an unnamed namespace after <cuda_runtime.h> and
// <cstdint>; tests/templates/pool_columns.cu compiles it on its own.
// kfab:begin
// y [outer, inner] from x averaged in windows of P: of rows (x is [outer * P, inner]: a W [N, K] whose
// N is pooled) or of columns (x is [outer, inner * P]: a B [K, N], a bias [N]). A sum then a divide, as
// torch's average pooling.
__global__ void __launch_bounds__(256) kfab_pool_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t outer, int64_t inner,
                                                        int P, bool rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (i >= outer * inner) return;
  const int64_t r = i / inner, c = i % inner;
  float t = 0.0f;
  if (rows) {
    for (int q = 0; q < P; ++q) t += __ldg(x + (r * P + q) * inner + c);
  } else {
    for (int q = 0; q < P; ++q) t += __ldg(x + (r * inner + c) * P + q);
  }
  y[i] = t / static_cast<float>(P);
}

// y [rows, cols / P] = each window of P columns' maximum of x [rows, cols] plus bias [cols] (nullptr: none):
// a MaxPool1d over a Linear's outputs (GemmProgram::pool_max), after the GEMM. A NaN in a window is its
// maximum, as in torch's max pooling.
__global__ void __launch_bounds__(256) kfab_max_kernel(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,
                                                       int64_t rows, int64_t cols, int P) {
  const int64_t oc = cols / P;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (i >= rows * oc) return;
  const int64_t r = i / oc, c0 = (i % oc) * P;
  float m = __int_as_float(0xff800000);  // -infinity
  for (int q = 0; q < P; ++q) {
    const float v = __ldg(x + r * cols + c0 + q) + (bias != nullptr ? __ldg(bias + c0 + q) : 0.0f);
    m = v > m || v != v ? v : m;
  }
  y[i] = m;
}

// Launches it on `stream`: 0, or 6 for a grid CUDA cannot launch.
int kfab_max_windows(const float* x, const float* bias, float* y, int64_t rows, int64_t cols, int P, cudaStream_t stream) {
  const int64_t blocks = (rows * (cols / P) + 255) / 256;
  if (blocks == 0) return 0;
  if (blocks > 2147483647) return 6;
  kfab_max_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, bias, y, rows, cols, P);
  return 0;
}

// Launches it on `stream`: 0, or 6 for a grid CUDA cannot launch.
int kfab_pool_windows(const float* x, float* y, int64_t outer, int64_t inner, int P, bool rows, cudaStream_t stream) {
  const int64_t blocks = (outer * inner + 255) / 256;
  if (blocks == 0) return 0;
  if (blocks > 2147483647) return 6;
  kfab_pool_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, y, outer, inner, P, rows);
  return 0;
}
// kfab:end
