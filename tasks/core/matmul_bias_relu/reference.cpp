// Reference for matmul_bias_relu: Y[M, N] = relu(A[M, K] @ W[K, N] + bias[N]), all f32, row-major.
// One double accumulator per output element, summed over k in order (bias added in double before
// the relu), rounded once to f32.
#include <kfab/candidate.h>

#include <algorithm>
#include <cstdint>
#include <vector>

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

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* /*stream*/) {
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

  const float* ap = static_cast<const float*>(a.data);
  const float* wp = static_cast<const float*>(w.data);
  const float* bp = static_cast<const float*>(bias.data);
  float* yp = static_cast<float*>(y.data);
  // one double accumulator per output, summed over k in order (i-k-j loops: W read along its rows)
  std::vector<double> acc(static_cast<size_t>(N));
  for (int64_t i = 0; i < M; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double av = ap[i * K + k];
      for (int64_t j = 0; j < N; ++j) acc[j] += av * static_cast<double>(wp[k * N + j]);
    }
    for (int64_t j = 0; j < N; ++j) {
      const double v = acc[j] + bp[j];
      yp[i * N + j] = static_cast<float>(v > 0.0 ? v : 0.0);
    }
  }
  return 0;
}
