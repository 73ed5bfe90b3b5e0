// Reference for group_norm over x [N, C, H, W] with 8 groups of C/8 consecutive channels, eps = 1e-5:
//   mean_ng = sum over the group's (C/8)*H*W values / count
//   var_ng  = sum (x - mean_ng)^2 / count                 (biased, two-pass)
//   y[n, c, h, w] = (x - mean_ng) / sqrt(var_ng + eps) * weight[c] + bias[c]
// Single-threaded, in double, rounded once to f32.
#include <kfab/candidate.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int64_t kGroups = 8;
constexpr double kEps = 1e-5;

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
  const kfab_tensor& w = inputs[1];
  const kfab_tensor& b = inputs[2];
  kfab_tensor& y = outputs[0];
  if (!is_dense_f32(x, 4) || !is_dense_f32(w, 1) || !is_dense_f32(b, 1) || !is_dense_f32(y, 4)) return 2;
  const int64_t N = x.shape[0], C = x.shape[1], HW = x.shape[2] * x.shape[3];
  for (int d = 0; d < 4; ++d)
    if (y.shape[d] != x.shape[d]) return 3;
  if (w.shape[0] != C || b.shape[0] != C || C % kGroups != 0) return 3;

  const float* xp = static_cast<const float*>(x.data);
  const float* wp = static_cast<const float*>(w.data);
  const float* bp = static_cast<const float*>(b.data);
  float* yp = static_cast<float*>(y.data);
  const int64_t cg = C / kGroups, count = cg * HW;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < kGroups; ++g) {
      const int64_t base = (n * C + g * cg) * HW;  // the group's channels are consecutive
      double sum = 0.0;
      for (int64_t i = 0; i < count; ++i) sum += xp[base + i];
      const double mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
      double sq = 0.0;
      for (int64_t i = 0; i < count; ++i) {
        const double d = xp[base + i] - mean;
        sq += d * d;
      }
      const double rstd = 1.0 / std::sqrt((count > 0 ? sq / static_cast<double>(count) : 0.0) + kEps);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t c = g * cg + i / HW;
        yp[base + i] = static_cast<float>((xp[base + i] - mean) * rstd * wp[c] + bp[c]);
      }
    }
  }
  return 0;
}
