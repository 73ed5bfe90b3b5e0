#include "eval/device_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>


namespace kfab {

namespace fs = std::filesystem;

namespace {

fs::path lock_dir() {
  const char* d = std::getenv("KFAB_LOCK_DIR");
  return d && *d ? fs::path(d) : fs::path("/tmp/kfab-locks");
}

}  // namespace

DeviceLock::DeviceLock(const std::string& key, const std::function<void(const std::string&)>& say) {
  if (const char* off = std::getenv("KFAB_DEVICE_LOCK"); off && std::string(off) == "off") return;
  const fs::path dir = lock_dir();
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    // for every user of the machine, each deleting only their own files
    ::chmod(dir.c_str(), 01777);
  }
  const fs::path file = dir / (key + ".lock");
  const mode_t old = ::umask(0);
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  ::umask(old);
  if (fd_ < 0) {
    if (say) say(fmt::format("timing without the device lock: cannot open {} ({})", file.string(), std::strerror(errno)));
    return;
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  if (say) say(fmt::format("waiting for {}: another process is timing on it ({})", key, file.string()));
  const auto start = std::chrono::steady_clock::now();
  int rc;
  while ((rc = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
  }
  waited_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rc != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

DeviceLock::~DeviceLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the flock
}

}  // namespace kfab
