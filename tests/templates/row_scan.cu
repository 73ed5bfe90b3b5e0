// include/kfab/templates/row_scan.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it, and a kfab_run that launches it (a reversed, masked
// cumulative product).
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

constexpr int B = 256, OP = 1;
constexpr bool REVERSE = true, EXCLUSIVE = false, MASKED = true;

#include "kfab/templates/row_scan.cuh"

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const int64_t rows = in[0].shape[0], n = in[0].shape[1];
  kfab_scan_rows<4><<<static_cast<unsigned>(rows), B, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(in[0].data), static_cast<const unsigned char*>(in[1].data), static_cast<float*>(out[0].data), rows, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
