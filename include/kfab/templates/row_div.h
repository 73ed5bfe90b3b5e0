#pragma once
// x / r for the many x of a row that share r (a row reduction or a scalar: level1/38's x / mean(|x|), a
// softmax's e / sum): r's reciprocal once a row (kfab_recip, before the loop over the row's elements), then
// two multiplies an element (kfab_div_row). On the GPU a division is about 10 instructions an element (a
// reciprocal, its refinement, a range check and a branch to a slow path), and it left level1/38's L1 norm
// issuing more instructions than its loads needed; nvcc does not take it out of the row's guarded
// iterations itself. r is first scaled by a power of two where its reciprocal would overflow (|r| under
// 2^-126) or lose bits (over 2^126), and x by the same: the result is within an ulp of x / r, and the same
// at 0, the infinities and NaN. tests/unit/row_div_test.cpp checks it against the division.
// For the tuner's generated cuda row kernels (tuner/print_cuda.cpp): the text between the kfab:begin and
// kfab:end lines is spliced in inside an unnamed namespace; tests/templates/row_div.cpp compiles it alone.
// kfab:begin
struct KfabRecip {
  float s, i;  // x / r is (x * s) * i
};

#if defined(__CUDACC__)
__host__ __device__ __forceinline__
#else
inline
#endif
    KfabRecip kfab_recip(float r) {
  const float a = r < 0.0f ? -r : r;
  const float s = a < 0x1p-126f ? 0x1p24f : a > 0x1p126f ? 0x1p-24f : 1.0f;
  return {s, 1.0f / (r * s)};
}

#if defined(__CUDACC__)
__host__ __device__ __forceinline__
#else
inline
#endif
    float kfab_div_row(float x, KfabRecip q) {
  return (x * q.s) * q.i;
}
// kfab:end
