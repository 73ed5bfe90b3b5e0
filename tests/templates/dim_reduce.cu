// include/kfab/templates/dim_reduce.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it, and a kfab_run that launches its argmax.
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

constexpr int B = 256, RY = 8, OP = 4, UNROLL = 4;
constexpr bool STREAM = true;
constexpr float EPS = 1e-5f;
constexpr int CX = B / RY;

#include "kfab/templates/dim_reduce.cuh"

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const int64_t r = in[0].shape[1], c = in[0].shape[2];
  const dim3 grid(static_cast<unsigned>((c + CX - 1) / CX), 1, static_cast<unsigned>(in[0].shape[0]));
  kfab_dim_reduce<1, int64_t><<<grid, B, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const float*>(in[0].data),
                                                                                 static_cast<int64_t*>(out[0].data), r, c);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
