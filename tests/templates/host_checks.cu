// include/kfab/templates/host_checks.h compiled on its own (tests/integration/cuda_build_test.cpp),
// with what a generated candidate puts before it.
#include <cstdint>

#include "kfab/candidate.h"

namespace {

#include "kfab/templates/host_checks.h"

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor*, int32_t, void*) {
  return n_in == 1 && kfab_dense(in[0]) && kfab_dense_f32(in[0], 2) && kfab_dense_f32(in[0]) && kfab_numel(in[0]) > 0 &&
                 kfab_aligned16(in[0].data)
             ? 0
             : 2;
}
