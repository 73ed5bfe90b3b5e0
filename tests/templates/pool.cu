// include/kfab/templates/pool.h compiled on its own (tests/integration/cuda_build_test.cpp), with what a
// generated candidate puts before it on cuda, and a kernel that uses it (a dilated 3-D max pooling).
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

#define KFAB_INLINE __device__ __forceinline__
#define KFAB_LOAD(p) __ldg(p)
constexpr int64_t KD = 3, KH = 3, KW = 3, SD = 2, SH = 2, SW = 2, PD = 1, PH = 1, PW = 1, DD = 3, DH = 3, DW = 3;
constexpr bool CEIL = false, INCLUDE_PAD = true, MAX = true;
constexpr int64_t DIVISOR = 0;

#include "kfab/templates/pool.h"

__global__ void pool(const float* x, float* y, int64_t D, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  y[(blockIdx.y * OH + blockIdx.x) * OW + threadIdx.x] = kfab_pool(x, D, H, W, blockIdx.y, blockIdx.x, threadIdx.x);
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const int64_t D = in[0].shape[0], H = in[0].shape[1], W = in[0].shape[2];
  const int64_t OD = kfab_pooled(D, KD, SD, PD, DD), OH = kfab_pooled(H, KH, SH, PH, DH), OW = kfab_pooled(W, KW, SW, PW, DW);
  pool<<<dim3(static_cast<unsigned>(OH), static_cast<unsigned>(OD)), static_cast<unsigned>(OW), 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(in[0].data), static_cast<float*>(out[0].data), D, H, W, OH, OW);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
