// Reference for cross_entropy: logits [B, C] f32, targets [B] i64 in [0, C), loss [] f32:
//   lse_i = log(sum_j exp(logits[i, j]))            (computed as max_i + log(sum exp(x - max_i)))
//   loss  = (1 / B) * sum_i (lse_i - logits[i, targets[i]])
// i.e. the mean over rows of -log_softmax(logits)[i, targets[i]]. Single-threaded, in double,
// rounded once to f32. A target outside [0, C) is an error (return 4).
#include <kfab/candidate.h>

#include <cmath>
#include <cstdint>

namespace {

// True when t has the given dtype and rank and is laid out contiguously in row-major order.
bool is_dense(const kfab_tensor& t, kfab_dtype dtype, int32_t ndim) {
  if (t.dtype != dtype || t.ndim != ndim || t.data == nullptr) return false;
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
  const kfab_tensor& logits = inputs[0];
  const kfab_tensor& targets = inputs[1];
  kfab_tensor& loss = outputs[0];
  if (!is_dense(logits, KFAB_F32, 2) || !is_dense(targets, KFAB_I64, 1) || !is_dense(loss, KFAB_F32, 0))
    return 2;
  const int64_t B = logits.shape[0];
  const int64_t C = logits.shape[1];
  if (targets.shape[0] != B || B == 0 || C == 0) return 3;

  const float* x = static_cast<const float*>(logits.data);
  const int64_t* t = static_cast<const int64_t*>(targets.data);
  double total = 0.0;
  for (int64_t i = 0; i < B; ++i) {
    const float* row = x + i * C;
    if (t[i] < 0 || t[i] >= C) return 4;
    double mx = row[0];
    for (int64_t j = 1; j < C; ++j) mx = row[j] > mx ? row[j] : mx;
    double sum = 0.0;
    for (int64_t j = 0; j < C; ++j) sum += std::exp(row[j] - mx);
    const double lse = mx + std::log(sum);
    total += lse - row[t[i]];
  }
  *static_cast<float*>(loss.data) = static_cast<float>(total / static_cast<double>(B));
  return 0;
}
