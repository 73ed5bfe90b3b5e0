#pragma once
/// The candidate's code in a model's reply: markdown fences (```cpp ... ```), several blocks, prose
/// around them, a truncated last block. A reply with no usable code is an Error whose message goes
/// back to the model in a fixer turn.

#include <string>

#include "core/expected.h"

namespace kfab {

struct Extracted {
  std::string code;
  bool truncated = false;  ///< the block had no closing fence (the reply was cut off)
};

/// `dsl`: cpp, cuda, opencl (entry point kfab_run), triton, python, modelnew. The block holding the
/// entry point is chosen; among several, the last one (models put revisions last).
Expected<Extracted> extract_code(const std::string& reply, const std::string& dsl);

}  // namespace kfab
