// include/kfab/templates/pool_columns.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it, and a kfab_run that launches it: in[0] [N, K] averaged
// in windows of 4 rows into out[0] [N / 4, K].
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

#include "kfab/templates/pool_columns.cuh"

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  return kfab_pool_windows(static_cast<const float*>(in[0].data), static_cast<float*>(out[0].data), in[0].shape[0] / 4, in[0].shape[1], 4,
                           true, static_cast<cudaStream_t>(stream));
}
