// GPU baseline for matmul_bf16: C[M, N] = A[M, K] @ W[N, K]^T, all bf16, row-major, through cuBLAS's
// cublasGemmEx with fp32 accumulation (what torch runs for a bf16 Linear). cuBLAS is column-major: the
// row-major C [M, N] is the column-major C^T [N, M] = W @ A^T, i.e. gemm(T, N, m = N, n = M, k = K,
// W (column-major [K, N], ld K), A (column-major [K, M], ld K), C^T (ld N)). One handle, created on the
// first call and kept for the life of the process; its stream is set on every call.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kfab/candidate.h"

namespace {

// True when t is a bf16 tensor of the given rank laid out contiguously in row-major order.
bool is_dense_bf16(const kfab_tensor& t, int32_t ndim) {
  if (t.dtype != KFAB_BF16 || t.ndim != ndim || t.data == nullptr) return false;
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
    Holder() { ok = cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS; }
  };
  static Holder holder;  // thread-safe one-time initialisation; never destroyed (process lifetime)
  return holder.ok ? holder.handle : nullptr;
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 2 || n_outputs != 1) return 1;
  const kfab_tensor& a = inputs[0];
  const kfab_tensor& w = inputs[1];
  kfab_tensor& c = outputs[0];
  if (!is_dense_bf16(a, 2) || !is_dense_bf16(w, 2) || !is_dense_bf16(c, 2)) return 2;
  const int64_t M = a.shape[0], K = a.shape[1], N = w.shape[0];
  if (w.shape[1] != K || c.shape[0] != M || c.shape[1] != N) return 3;
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX) return 4;
  if (M == 0 || N == 0) return 0;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (K == 0) return cudaMemsetAsync(c.data, 0, static_cast<size_t>(M * N) * 2, s) == cudaSuccess ? 0 : 5;  // empty sum
  cublasHandle_t h = shared_handle();
  if (h == nullptr) return 6;
  if (cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) return 7;
  const float alpha = 1.0f, beta = 0.0f;
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w.data, CUDA_R_16BF, k, a.data, CUDA_R_16BF, k, &beta,
                                         c.data, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) return 8;
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
