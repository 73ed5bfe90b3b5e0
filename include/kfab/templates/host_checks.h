#pragma once
// The host-side tensor checks of every candidate the tuner generates: whether a tensor's elements lie
// packed in row-major order (strides absent, or those of that layout; a dimension of extent 1 may
// have any stride), the same for an f32 tensor of a given rank, its element count, and whether a
// pointer allows 16-byte vector accesses. A generated file uses some of them. The text between the
// kfab:begin and kfab:end lines is spliced into the candidates the tuner writes, inside an unnamed
// namespace after <cstdint> and kfab/candidate.h; tests/templates/host_checks.cu compiles it alone.
// kfab:begin
[[maybe_unused]] bool kfab_dense(const kfab_tensor& t) {
  if (t.data == nullptr || (t.ndim > 0 && t.shape == nullptr)) return false;
  int64_t expect = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0) return false;
    if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}
[[maybe_unused]] int64_t kfab_numel(const kfab_tensor& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}
// ndim < 0: any rank of at least one
[[maybe_unused]] bool kfab_dense_f32(const kfab_tensor& t, int32_t ndim = -1) {
  return t.dtype == KFAB_F32 && (ndim < 0 ? t.ndim >= 1 : t.ndim == ndim) && kfab_dense(t);
}
[[maybe_unused]] bool kfab_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
// kfab:end
