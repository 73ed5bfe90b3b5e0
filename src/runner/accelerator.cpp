#include "runner/accelerator.h"

#include "runner/cuda_driver.h"
#include "runner/opencl_device.h"

namespace kfab {

Accelerator* accelerator(std::string_view target) {
  if (target == "cuda") {
    static cuda::CudaDevice d;
    return &d;
  }
  if (target == "opencl") {
    static OpenClDevice d;
    return &d;
  }
  return nullptr;
}

}  // namespace kfab
