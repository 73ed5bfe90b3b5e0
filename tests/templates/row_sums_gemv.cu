// include/kfab/templates/row_sums_gemv.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it, and a kfab_run that launches it: the row sums of
// in[0] [m, K] @ in[1]^T (in[1] a Linear's weight [n, K]) into out[0] [m].
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

#include "kfab/templates/row_sums_gemv.cuh"

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const int64_t m = in[0].shape[0], K = in[0].shape[1], n = in[1].shape[0];
  static float* scratch = nullptr;
  if (scratch == nullptr && cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(double) * (kfab_fold_chunks + 1) * K) != cudaSuccess) return 4;
  return kfab_product_row_sums(static_cast<const float*>(in[0].data), static_cast<const float*>(in[1].data), static_cast<float*>(out[0].data),
                               scratch, m, n, K, true, false, static_cast<cudaStream_t>(stream));
}
