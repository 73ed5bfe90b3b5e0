// Reference for scale_shift_gelu: y[i, j] = gelu_tanh(x[i, j] * a[j] + b[j]).
// gelu_tanh(z) = 0.5 * z * (1 + tanh(sqrt(2/pi) * (z + 0.044715 * z^3))).
// Plain single-threaded loops, evaluated in double and rounded once to f32.
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
  if (inputs == nullptr || outputs == nullptr || n_inputs != 3 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  const kfab_tensor& a = inputs[1];
  const kfab_tensor& b = inputs[2];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 2) || !is_dense_f32(a, 1) || !is_dense_f32(b, 1) || !is_dense_f32(y, 2)) return 2;
  const int64_t M = x.shape[0];
  const int64_t N = x.shape[1];
  if (a.shape[0] != N || b.shape[0] != N) return 3;
  if (y.shape[0] != M || y.shape[1] != N) return 3;

  const float* xp = static_cast<const float*>(x.data);
  const float* ap = static_cast<const float*>(a.data);
  const float* bp = static_cast<const float*>(b.data);
  float* yp = static_cast<float*>(y.data);
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      const double z = static_cast<double>(xp[i * N + j]) * ap[j] + bp[j];
      const double g = 0.5 * z * (1.0 + std::tanh(k * (z + 0.044715 * z * z * z)));
      yp[i * N + j] = static_cast<float>(g);
    }
  }
  return 0;
}
