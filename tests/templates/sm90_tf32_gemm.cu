// include/kfab/templates/sm90_tf32_gemm.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with the headers a generated candidate puts before it, at one tile and the persistent scheduler (the
// generated files' three products take the stream-K one: CudaBuild.GemmEpiloguesCompile):
// out = x @ b, b [K, N]: in one TF32 product (b written K-major first) where K is a multiple of 8, else in one
// TF32 product and one bf16 one (kfab_sm90_mixed, which takes a K short of a slice as three TF32 products).
#ifndef NDEBUG
#define NDEBUG
#endif
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "kfab/candidate.h"

namespace {

#include "kfab/templates/sm90_tf32_gemm.cuh"

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const int m = static_cast<int>(in[0].shape[0]), k = static_cast<int>(in[0].shape[1]), n = static_cast<int>(in[1].shape[1]);
  static float* scratch = nullptr;
  using G = KfabSm90Gemm<128, 128, 32, 1, true>;
  const auto* x = static_cast<const float*>(in[0].data);
  const auto* b = static_cast<const float*>(in[1].data);
  auto* y = static_cast<float*>(out[0].data);
  const int64_t need = k % 8 == 0 ? static_cast<int64_t>(n) * k : kfab_3xtf32_scratch_for(x, b, y, m, n, k, 1);
  if (scratch == nullptr && cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(float) * static_cast<size_t>(need)) != cudaSuccess) return 4;
  if (k % 8 == 0) return kfab_sm90_1xtf32<G>(x, b, y, scratch, m, n, k, 1, true, static_cast<cudaStream_t>(stream));
  return kfab_sm90_mixed<G, true>(x, b, y, scratch, m, n, k, 1, true, static_cast<cudaStream_t>(stream));
}
