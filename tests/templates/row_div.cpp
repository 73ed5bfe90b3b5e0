// include/kfab/templates/row_div.h compiled on its own by the cpu target's compiler
// (tests/integration/cuda_build_test.cpp), with what a generated candidate puts before it; the input's
// first element over its second.
#include <kfab/candidate.h>

namespace {

#include "kfab/templates/row_div.h"

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void*) {
  if (n_in != 1 || n_out != 1) return 1;
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  y[0] = kfab_div_row(x[0], kfab_recip(x[1]));
  return 0;
}
