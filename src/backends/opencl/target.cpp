// The opencl target: a C++ host file with OpenCL C kernels, run on the first platform's device.
#include "backends/opencl/opencl_backend.h"
#include "backends/target.h"

namespace kfab {

const Target& opencl_target() {
  static const Target t{
      .name = "opencl",
      .suffixes = {".cl.cpp"},
      .dsl = "opencl",
      .dsl_rules = "OpenCL: a C++ host file exporting kfab_run whose kernels are OpenCL C source strings built at run time; "
                   "data are cl_mem, the stream is the cl_command_queue.",
      .runner_spawns = true,
      .flush = "on a GPU device, a fill of a buffer twice its global memory cache, on the queue, before each timed call; none on a CPU device",
      .timer = "profiling markers on the runner's queue around the call; the queue finished after each call",
      .make_backend = []() -> std::unique_ptr<Backend> { return std::make_unique<OpenClBackend>(); },
  };
  return t;
}

}  // namespace kfab
