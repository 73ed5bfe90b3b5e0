// The cpu target's device half: none. Its candidates run on the host, in host memory.
#include "runner/accelerator.h"

namespace kfab {

Accelerator* cpu_device() { return nullptr; }

}  // namespace kfab
