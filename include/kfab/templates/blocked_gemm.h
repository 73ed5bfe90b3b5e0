#pragma once
// C[m, n] = A[m, k] B[k, n], row-major: MB rows of C at a time across OpenMP threads, k in KB chunks,
// i-k-j order (the rows of B and C go through the SIMD lanes).
// For the tuner's generated cpu candidates (tuner/cpu_templates.cpp, tuner/print_cpp.cpp): the text
// between the kfab:begin and kfab:end lines is spliced into them after <cstdint>;
// tests/templates/blocked_gemm.cpp compiles it on its own.
// kfab:begin
template <int64_t MB, int64_t KB>
static void kfab_blocked_gemm(const float* ap, const float* bp, float* cp, int64_t m, int64_t n, int64_t k) {
#pragma omp parallel for schedule(dynamic, 1) if (m * n * k > 262144)
  for (int64_t i0 = 0; i0 < m; i0 += MB) {
    const int64_t i1 = i0 + MB < m ? i0 + MB : m;
    for (int64_t i = i0; i < i1; ++i)
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) cp[i * n + j] = 0.0f;
    for (int64_t k0 = 0; k0 < k; k0 += KB) {
      const int64_t k1 = k0 + KB < k ? k0 + KB : k;
      for (int64_t i = i0; i < i1; ++i) {
        float* crow = cp + i * n;
        for (int64_t kk = k0; kk < k1; ++kk) {
          const float av = ap[i * k + kk];
          const float* brow = bp + kk * n;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
        }
      }
    }
  }
}

// dst [cols, rows] = src [rows, cols] transposed, 32 rows of src at a time across OpenMP threads (a
// Linear's weight W [N, K] read as [K, N]; an A given as [K, M] read as [M, K]).
inline void kfab_transpose_blocked(const float* src, float* dst, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 262144)
  for (int64_t i0 = 0; i0 < rows; i0 += 32)
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = i0; i < i0 + 32 && i < rows; ++i) dst[j * rows + i] = src[i * cols + j];
}
// kfab:end
