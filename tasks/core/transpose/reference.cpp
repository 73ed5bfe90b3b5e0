// Reference for transpose (permute 0, 2, 1): x [B, M, N] f32 -> y [B, N, M] f32,
//   y[b, j, i] = x[b, i, j]
// Single-threaded, plain loops in the order of x (reads sequential, writes strided).
#include <kfab/candidate.h>

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
  if (inputs == nullptr || outputs == nullptr || n_inputs != 1 || n_outputs != 1) return 1;
  const kfab_tensor& x = inputs[0];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 3) || !is_dense_f32(y, 3)) return 2;
  const int64_t B = x.shape[0];
  const int64_t M = x.shape[1];
  const int64_t N = x.shape[2];
  if (y.shape[0] != B || y.shape[1] != N || y.shape[2] != M) return 3;

  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  for (int64_t b = 0; b < B; ++b) {
    const float* xs = xp + b * M * N;
    float* ys = yp + b * N * M;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) ys[j * M + i] = xs[i * N + j];
  }
  return 0;
}
