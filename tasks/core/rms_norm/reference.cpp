// Reference for rms_norm over the last dimension of x [M, N], eps = 1e-6:
//   ms_i    = sum_j x[i, j]^2 / N
//   y[i, j] = x[i, j] / sqrt(ms_i + eps) * weight[j]
// Single-threaded, in double, rounded once to f32.
#include <kfab/candidate.h>

#include <cmath>
#include <cstdint>

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
  if (inputs == nullptr || outputs == nullptr || n_inputs != 2 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& w = inputs[1];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(w, 1) || !is_dense_f32(y, 2)) return 2;
  const int64_t M = x.shape[0];
  const int64_t N = x.shape[1];
  if (w.shape[0] != N || y.shape[0] != M || y.shape[1] != N) return 3;
  if (N == 0) return 0;

  const float* xp = static_cast<const float*>(x.data);
  const float* wp = static_cast<const float*>(w.data);
  float* yp = static_cast<float*>(y.data);
  const double eps = 1e-6;
  for (int64_t i = 0; i < M; ++i) {
    const float* row = xp + i * N;
    double sq = 0.0;
    for (int64_t j = 0; j < N; ++j) sq += static_cast<double>(row[j]) * row[j];
    const double rms_inv = 1.0 / std::sqrt(sq / static_cast<double>(N) + eps);
    for (int64_t j = 0; j < N; ++j)
      yp[i * N + j] = static_cast<float>(row[j] * rms_inv * wp[j]);
  }
  return 0;
}
