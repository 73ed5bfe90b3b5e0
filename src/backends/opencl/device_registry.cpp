// The opencl target's device half, for kfab-runner.
#include "backends/opencl/device.h"

namespace kfab {

Accelerator* opencl_device() {
  static OpenClDevice d;
  return &d;
}

}  // namespace kfab
