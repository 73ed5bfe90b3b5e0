// Reference for sum_dim1: y[b, c] = sum_{r < R} x[b, r, c] for x of shape [B, R, C].
// Single-threaded; each output is accumulated in double (rows of x are walked in memory order,
// adding row r into a double accumulator per column) and rounded once to f32.
#include <kfab/candidate.h>

#include <cstddef>
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
  if (inputs == nullptr || outputs == nullptr || n_inputs != 1 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 3) || !is_dense_f32(y, 2)) return 2;
  const int64_t B = x.shape[0];
  const int64_t R = x.shape[1];
  const int64_t C = x.shape[2];
  if (y.shape[0] != B || y.shape[1] != C) return 3;

  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  std::vector<double> acc(static_cast<size_t>(C));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t c = 0; c < C; ++c) acc[c] = 0.0;
    for (int64_t r = 0; r < R; ++r) {
      const float* row = xp + (b * R + r) * C;
      for (int64_t c = 0; c < C; ++c) acc[c] += row[c];
    }
    for (int64_t c = 0; c < C; ++c) yp[b * C + c] = static_cast<float>(acc[c]);
  }
  return 0;
}
