#pragma once
// The dense check of the tuner's generated candidates with a fixed rank (tuner/cuda_templates.cpp,
// tuner/pool.cpp): an f32 tensor of `ndim` dimensions whose elements lie packed in row-major order
// (strides absent, or those of that layout; a dimension of extent 1 may have any stride). The text
// between the kfab:begin and kfab:end lines is spliced into the candidates the tuner writes, after
// <cstdint> and kfab/candidate.h; tests/templates/dense_ndim.cu compiles it on its own.
// kfab:begin
bool kfab_dense_f32(const kfab_tensor& t, int32_t ndim) {
  if (t.dtype != KFAB_F32 || t.ndim != ndim || t.data == nullptr || (ndim > 0 && t.shape == nullptr)) return false;
  int64_t expect = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0) return false;
    if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}
// kfab:end
