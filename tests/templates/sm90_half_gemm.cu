// include/kfab/templates/sm90_half_gemm.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with the headers a generated candidate puts before it, at one tile and the persistent scheduler:
// out = x @ b on bf16 operands, b [K, N] read as given (N-major).
#ifndef NDEBUG
#define NDEBUG
#endif
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/bfloat16.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "kfab/candidate.h"

namespace {

#include "kfab/templates/sm90_tf32_gemm.cuh"
#include "kfab/templates/sm90_half_gemm.cuh"

using KfabTile = KfabSm90HalfGemm<cutlass::bfloat16_t, 128, 128, 64, 1, true, false, false, false>;

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const int m = static_cast<int>(in[0].shape[0]), k = static_cast<int>(in[0].shape[1]), n = static_cast<int>(in[1].shape[1]);
  if (!kfab_sm90_half_fits<KfabTile>(in[0].data, in[1].data, out[0].data, m, n, k)) return 7;
  return kfab_sm90_half<KfabTile>(in[0].data, in[1].data, out[0].data, m, n, k, 1, static_cast<cudaStream_t>(stream));
}
