// GPU baseline for matmul: C[M, N] = A[M, K] @ B[K, N], f32, row-major, through cuBLAS SGEMM.
// cuBLAS is column-major: a row-major [R, S] matrix is the column-major [S, R] matrix, so the product
// is computed as C^T = B^T @ A^T, i.e. sgemm(N, N, m = N, n = M, k = K, B, ldb = N, A, lda = K,
// C, ldc = N). CUBLAS_DEFAULT_MATH: plain FP32 (no TF32 tensor-op math). One handle, created on the
// first call and kept for the life of the process; its stream is set on every call.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kfab/candidate.h"

namespace {

// True when t is an f32 tensor of the given rank laid out contiguously in row-major order.
bool is_dense_f32(const kfab_tensor& t, int32_t ndim) {
  if (t.dtype != KFAB_F32 || t.ndim != ndim || t.data == nullptr) return false;
  if (ndim > 0 && t.shape == nullptr) return false;
  int64_t expect = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0) return false;
    if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

// The process-wide handle, or nullptr when cuBLAS could not be initialised.
cublasHandle_t shared_handle() {
  struct Holder {
    cublasHandle_t handle = nullptr;
    bool ok = false;
    Holder() {
      ok = cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS &&
           cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH) == CUBLAS_STATUS_SUCCESS;
    }
  };
  static Holder holder;  // thread-safe one-time initialisation; never destroyed (process lifetime)
  return holder.ok ? holder.handle : nullptr;
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 2 || n_outputs != 1) return 1;
  const kfab_tensor& a = inputs[0];
  const kfab_tensor& b = inputs[1];
  kfab_tensor& c = outputs[0];
  if (!is_dense_f32(a, 2) || !is_dense_f32(b, 2) || !is_dense_f32(c, 2)) return 2;
  const int64_t M = a.shape[0];
  const int64_t K = a.shape[1];
  const int64_t N = b.shape[1];
  if (b.shape[0] != K || c.shape[0] != M || c.shape[1] != N) return 3;
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX) return 4;
  if (M == 0 || N == 0) return 0;

  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  float* cp = static_cast<float*>(c.data);
  if (K == 0) {  // empty sum: C = 0
    return cudaMemsetAsync(cp, 0, static_cast<size_t>(M * N) * sizeof(float), s) == cudaSuccess ? 0 : 5;
  }
  cublasHandle_t h = shared_handle();
  if (h == nullptr) return 6;
  if (cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) return 7;
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st =
      cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha,
                  static_cast<const float*>(b.data), static_cast<int>(N), static_cast<const float*>(a.data),
                  static_cast<int>(K), &beta, cp, static_cast<int>(N));
  if (st != CUBLAS_STATUS_SUCCESS) return 8;
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
