// The cuda target's device half, for kfab-runner.
#include "backends/cuda/device.h"

namespace kfab {

Accelerator* cuda_device() {
  static cuda::CudaDevice d;
  return &d;
}

}  // namespace kfab
