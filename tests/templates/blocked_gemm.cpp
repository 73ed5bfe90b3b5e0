// include/kfab/templates/blocked_gemm.h compiled on its own by the cpu target's compiler
// (tests/integration/cuda_build_test.cpp), with what a generated candidate puts before it.
#include <kfab/candidate.h>

#include <cstdint>

namespace {

#include "kfab/templates/blocked_gemm.h"

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void*) {
  if (n_in != 2 || n_out != 1) return 1;
  kfab_blocked_gemm<8, 256>(static_cast<const float*>(in[0].data), static_cast<const float*>(in[1].data), static_cast<float*>(out[0].data),
                            in[0].shape[0], in[1].shape[1], in[0].shape[1]);
  return 0;
}
