// Reference for matmul_bf16: C[M, N] = A[M, K] @ W[N, K]^T, all bf16, row-major. Each output an
// exact-enough double sum over k of the bf16 inputs (exact in double), rounded once to bf16 (round to
// nearest, ties to even).
#include <kfab/candidate.h>

#include <cstdint>
#include <cstring>

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

double from_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t to_bf16(double v) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | ((bits & 0xffffu) != 0 ? 0x40u : 0u));  // inf, NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* /*stream*/) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 2 || n_outputs != 1) return 1;
  const kfab_tensor& a = inputs[0];
  const kfab_tensor& w = inputs[1];
  kfab_tensor& c = outputs[0];
  if (!is_dense_bf16(a, 2) || !is_dense_bf16(w, 2) || !is_dense_bf16(c, 2)) return 2;
  const int64_t M = a.shape[0], K = a.shape[1], N = w.shape[0];
  if (w.shape[1] != K || c.shape[0] != M || c.shape[1] != N) return 3;
  const auto* ap = static_cast<const uint16_t*>(a.data);
  const auto* wp = static_cast<const uint16_t*>(w.data);
  auto* cp = static_cast<uint16_t*>(c.data);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += from_bf16(ap[i * K + k]) * from_bf16(wp[j * K + k]);
      cp[i * N + j] = to_bf16(acc);
    }
  return 0;
}
