#pragma once
/// KFAB_ASSERT: invariants of kfab itself. A failure is a kfab bug, never a user's or a candidate's.

#include <string>

namespace kfab::detail {
[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const std::string& msg);
}

#define KFAB_ASSERT(cond, msg)                                                     \
  do {                                                                             \
    if (!(cond)) ::kfab::detail::assert_failed(#cond, __FILE__, __LINE__, (msg));  \
  } while (0)
