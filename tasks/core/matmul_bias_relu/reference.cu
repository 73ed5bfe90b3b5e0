// GPU baseline for matmul_bias_relu: Y[M, N] = relu(A[M, K] @ W[K, N] + bias[N]), f32, row-major.
// The product through cuBLAS SGEMM (column-major, so Y^T = W^T @ A^T: sgemm(N, N, m = N, n = M, k = K,
// W, ldw = N, A, lda = K, Y, ldy = N)), CUBLAS_DEFAULT_MATH (plain FP32, no TF32), then a small
// elementwise kernel for + bias and max(., 0) in place on Y. One handle, created on the first call and
// kept for the life of the process; its stream is set on every call.
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

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 30;

__global__ void __launch_bounds__(kThreads) bias_relu(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                                      int64_t cols) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(y[i] + bias[i % cols], 0.0f);
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* stream) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 3 || n_outputs != 1) return 1;
  const kfab_tensor& a = inputs[0];
  const kfab_tensor& w = inputs[1];
  const kfab_tensor& bias = inputs[2];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(a, 2) || !is_dense_f32(w, 2) || !is_dense_f32(bias, 1) || !is_dense_f32(y, 2)) return 2;
  const int64_t M = a.shape[0];
  const int64_t K = a.shape[1];
  const int64_t N = w.shape[1];
  if (w.shape[0] != K || bias.shape[0] != N || y.shape[0] != M || y.shape[1] != N) return 3;
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX) return 4;
  if (M == 0 || N == 0) return 0;

  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  float* yp = static_cast<float*>(y.data);
  const int64_t n = M * N;
  if (K == 0) {  // empty sum: A @ W = 0
    if (cudaMemsetAsync(yp, 0, static_cast<size_t>(n) * sizeof(float), s) != cudaSuccess) return 5;
  } else {
    cublasHandle_t h = shared_handle();
    if (h == nullptr) return 6;
    if (cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) return 7;
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st =
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha,
                    static_cast<const float*>(w.data), static_cast<int>(N), static_cast<const float*>(a.data),
                    static_cast<int>(K), &beta, yp, static_cast<int>(N));
    if (st != CUBLAS_STATUS_SUCCESS) return 8;
  }
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  bias_relu<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(yp, static_cast<const float*>(bias.data), n, N);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
