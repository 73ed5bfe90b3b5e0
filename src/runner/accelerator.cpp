#include "runner/accelerator.h"

namespace kfab {

// Each target's device half (backends/<name>/device*.cpp), from the one list of targets.
#define KFAB_TARGET(name) Accelerator* name##_device();
#include "backends/targets.def"
#undef KFAB_TARGET

DeviceFor accelerator(std::string_view target) {
#define KFAB_TARGET(name) \
  if (target == #name) return {true, name##_device()};
#include "backends/targets.def"
#undef KFAB_TARGET
  return {false, nullptr};
}

}  // namespace kfab
