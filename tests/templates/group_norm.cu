// include/kfab/templates/group_norm.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it, and a kfab_run that launches it.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kfab/candidate.h"

namespace {

#include "kfab/templates/resident.cuh"

constexpr int B = 256, IMAX = 8;
constexpr bool HOLD_SMEM = true;

#include "kfab/templates/group_norm.cuh"

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const Gn a{static_cast<const float*>(in[0].data), static_cast<const float*>(in[1].data), static_cast<const float*>(in[2].data),
             static_cast<float*>(out[0].data), 4096, 1024, 4, 8, 1e-5f};
  return kfab_dispatch<4>(a, 64, static_cast<cudaStream_t>(stream));
}
