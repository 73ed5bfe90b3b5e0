#pragma once
// The row sums of a product A @ B without the product (tuner/program.h, fold_row_sums): sum_j (A @ B)[i, j]
// = A[i, :] . s, where s[k] = sum_j B[k, j] sums B over the product's columns. One pass over B (its
// sums, in FS chunks of the product's columns, then a finishing pass over the chunks), one over A (a
// warp a row). B is given as W [N, K] (a Linear's weight, TRANS_B: summed over its rows) or as [K, N]
// (summed along its rows). Summed in double (the row sums cancel: KernelBench's level2_14 sums products of about
// 52 to values near 1, where fp32 sums were 22 times the tolerance off the Model run in float64): a column's
// chunk in order, the chunks in order; the result rounded to fp32 once.
// The text between the kfab:begin and kfab:end lines is spliced into the candidates the tuner writes,
// inside an unnamed namespace after <cuda_runtime.h> and <cstdint>; tests/templates/row_sums_gemv.cu
// compiles it on its own.
// kfab:begin
constexpr int kfab_fold_chunks = 64;  // chunks of the product's columns summed apart (the pass over B's blocks)

// part[c * K + k] = the sum of W [N, K]'s column k over rows chunk c (rows c * per .. (c + 1) * per).
__global__ void __launch_bounds__(256) kfab_wsum_rows(const float* __restrict__ w, double* __restrict__ part, int64_t nrows, int64_t K,
                                                      int64_t per) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (k >= K) return;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * per;
  const int64_t j1 = j0 + per < nrows ? j0 + per : nrows;
  double s = 0.0;
#pragma unroll 8
  for (int64_t j = j0; j < j1; ++j) s += __ldcs(w + j * K + k);
  part[static_cast<int64_t>(blockIdx.y) * K + k] = s;
}

// s[k] = the sum of the chunks' parts of column k.
__global__ void __launch_bounds__(256) kfab_wsum_finish(const double* __restrict__ part, double* __restrict__ s, int64_t K, int chunks) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (k >= K) return;
  double t = 0.0;
  for (int c = 0; c < chunks; ++c) t += part[static_cast<int64_t>(c) * K + k];
  s[k] = t;
}

// y[r] = x[r, :] . v for the rows of x [rows, len] (v nullptr: the rows' sums), in double, a warp a row,
// eight rows a block; float4 loads of x where `vec` (len a multiple of 4, x 16-byte aligned).
template <class Out>
__global__ void __launch_bounds__(256) kfab_row_dots(const float* __restrict__ x, const double* __restrict__ v, Out* __restrict__ y,
                                                     int64_t rows, int64_t len, bool vec) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* row = x + r * len;
  double s = 0.0;
  if (vec) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int64_t k = lane; k < len / 4; k += 32) {
      const float4 a = __ldcs(row4 + k);
      if (v != nullptr) {
        const double* w = v + 4 * k;
        s += static_cast<double>(a.x) * __ldg(w) + static_cast<double>(a.y) * __ldg(w + 1) + static_cast<double>(a.z) * __ldg(w + 2) +
             static_cast<double>(a.w) * __ldg(w + 3);
      } else {
        s += static_cast<double>(a.x) + static_cast<double>(a.y) + static_cast<double>(a.z) + static_cast<double>(a.w);
      }
    }
  } else {
    for (int64_t k = lane; k < len; k += 32) s += static_cast<double>(__ldcs(row + k)) * (v != nullptr ? __ldg(v + k) : 1.0);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[r] = static_cast<Out>(s);
}

// The row sums of A [m, K] @ B into `sums` [m], B given as W [n, K] (trans_b) or as [K, n]; `scratch`, 8-byte
// aligned, holds (kfab_fold_chunks + 1) * K doubles (twice as many floats); `vec`: A and B 16-byte aligned,
// K and n multiples of 4. 0, 5 for a failed memset, or 6 for a grid CUDA cannot launch.
int kfab_product_row_sums(const float* a, const float* b, float* sums, float* scratch, int64_t m, int64_t n, int64_t K, bool trans_b,
                          bool vec, cudaStream_t stream) {
  if (m <= 0) return 0;
  if (K <= 0) return cudaMemsetAsync(sums, 0, sizeof(float) * static_cast<size_t>(m), stream) == cudaSuccess ? 0 : 5;
  double* part = reinterpret_cast<double*>(scratch);
  double* s = part + static_cast<int64_t>(kfab_fold_chunks) * K;
  const int64_t kb = (K + 255) / 256;
  if (kb > 2147483647 || (m + 7) / 8 > 2147483647 || (K + 7) / 8 > 2147483647) return 6;
  if (trans_b) {  // W [n, K]: each column k summed over the n rows, in chunks
    const int64_t per = (n + kfab_fold_chunks - 1) / kfab_fold_chunks;
    const int chunks = static_cast<int>(per > 0 ? (n + per - 1) / per : 0);
    if (chunks > 0) kfab_wsum_rows<<<dim3(static_cast<unsigned>(kb), static_cast<unsigned>(chunks)), 256, 0, stream>>>(b, part, n, K, per);
    kfab_wsum_finish<<<static_cast<unsigned>(kb), 256, 0, stream>>>(part, s, K, chunks);
  } else {  // B [K, n]: each row k summed along its n columns
    kfab_row_dots<double><<<static_cast<unsigned>((K + 7) / 8), 256, 0, stream>>>(b, nullptr, s, K, n, vec);
  }
  kfab_row_dots<float><<<static_cast<unsigned>((m + 7) / 8), 256, 0, stream>>>(a, s, sums, m, K, vec);
  return 0;
}
// kfab:end
