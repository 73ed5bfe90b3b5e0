#include "core/stamp.h"

#include <fmt/format.h>

#include <ctime>
#include <random>

namespace kfab {

namespace {

std::string utc_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, format, std::gmtime(&t));
  return buf;
}

}  // namespace

std::string new_run_id() { return fmt::format("{}-{:04x}", utc_now("%Y%m%d-%H%M%S"), std::random_device{}() & 0xffff); }

std::string utc_now_iso() { return utc_now("%Y-%m-%dT%H:%M:%SZ"); }

}  // namespace kfab
