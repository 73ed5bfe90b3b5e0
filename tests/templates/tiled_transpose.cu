// include/kfab/templates/tiled_transpose.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it, and a kfab_run that launches it.
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

constexpr int KT = 2;
constexpr bool MFAST = true;

#include "kfab/templates/tiled_transpose.cuh"

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const int64_t m = in[0].shape[0], n = in[0].shape[1];
  const dim3 grid(static_cast<unsigned>((m + 31) / 32), static_cast<unsigned>((n + 31) / 32));
  const auto* x = static_cast<const float*>(in[0].data);
  auto* y = static_cast<float*>(out[0].data);
  kfab_transpose<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(x, y, m, n);
  kfab_transpose4<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(x, y, m, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
