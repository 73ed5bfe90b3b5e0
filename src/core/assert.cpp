#include "core/assert.h"

#include <cstdio>
#include <cstdlib>

namespace kfab::detail {

void assert_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "kfab: internal error: %s:%d: assertion `%s` failed: %s\n", file, line, expr,
               msg.c_str());
  std::abort();
}

}  // namespace kfab::detail
