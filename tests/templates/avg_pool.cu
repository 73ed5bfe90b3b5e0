// include/kfab/templates/avg_pool.h compiled on its own (tests/integration/cuda_build_test.cpp), with
// what a generated candidate puts before it on cuda, and a kernel that uses it.
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

#define KFAB_INLINE __device__ __forceinline__
#define KFAB_LOAD(p) __ldg(p)
constexpr int64_t KH = 3, KW = 3, SH = 2, SW = 2, PH = 1, PW = 1;
constexpr bool CEIL = false, INCLUDE_PAD = true;
constexpr int64_t DIVISOR = 0;

#include "kfab/templates/avg_pool.h"

__global__ void pool(const float* x, float* y, int64_t H, int64_t W, int64_t OW) {
  y[blockIdx.x * OW + threadIdx.x] = kfab_average(x, H, W, blockIdx.x, threadIdx.x);
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const int64_t H = in[0].shape[0], W = in[0].shape[1];
  const int64_t OH = kfab_pooled(H, KH, SH, PH), OW = kfab_pooled(W, KW, SW, PW);
  pool<<<static_cast<unsigned>(OH), static_cast<unsigned>(OW), 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(in[0].data), static_cast<float*>(out[0].data), H, W, OW);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
