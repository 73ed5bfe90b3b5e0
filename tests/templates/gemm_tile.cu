// include/kfab/templates/gemm_tile.cuh compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it, and a kernel that stores its tile.
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {

constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
constexpr int NT = (BM / TM) * (BN / TN);
constexpr bool TRANS_B = true;
constexpr int LA = BM * BK / NT, LB = BN * BK / NT;

#include "kfab/templates/gemm_tile.cuh"

__global__ void __launch_bounds__(NT) gemm(Operands o, int64_t rows, int64_t n, int64_t K) {
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  float acc[TM][TN] = {};
  kfab_gemm_tile<true>(o, rows, n, K, m0, n0, acc);
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j)
      if (m0 + ty * TM + i < rows && n0 + tx * TN + j < n) o.C[(m0 + ty * TM + i) * n + n0 + tx * TN + j] = acc[i][j];
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* stream) {
  const Operands o{static_cast<const float*>(in[0].data), static_cast<const float*>(in[1].data), static_cast<float*>(out[0].data)};
  const int64_t rows = in[0].shape[0], K = in[0].shape[1], n = in[1].shape[0];
  const dim3 grid(static_cast<unsigned>((n + BN - 1) / BN), static_cast<unsigned>((rows + BM - 1) / BM));
  gemm<<<grid, NT, 0, static_cast<cudaStream_t>(stream)>>>(o, rows, n, K);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
