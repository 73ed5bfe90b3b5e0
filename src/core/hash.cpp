#include "core/hash.h"

#include <atomic>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kfab {

std::string hash_hex(std::string_view data) {
  const XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

Expected<std::string> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return make_error(p.string() + ": cannot read: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Expected<void> write_file_atomic(const std::filesystem::path& p, std::string_view data) {
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  // Unique per write, not only per process: threads of one kfab may write the same file at once.
  static std::atomic<unsigned> writes{0};
  const auto tmp = p.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(writes++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(tmp + ": cannot write: " + std::strerror(errno));
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) return make_error(tmp + ": write failed: " + std::strerror(errno));
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return make_error(p.string() + ": cannot rename into place: " + ec.message());
  }
  return {};
}

}  // namespace kfab
