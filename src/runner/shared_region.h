#pragma once
/// Shared memory between a runner and kfab: a memfd that a runner fills (outputs) and passes over its
/// descriptor channel (fd 5, SCM_RIGHTS), which kfab maps read-only and compares while the runner is
/// frozen. The reference's answers travel the same way from the trusted runner, so they never exist
/// in a process that has loaded candidate code.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/expected.h"
#include "core/task.h"

namespace kfab {

/// The runner's end of the descriptor channel.
inline constexpr int kRunnerChannelFd = 5;

class SharedRegion {
 public:
  SharedRegion() = default;
  SharedRegion(SharedRegion&& o) noexcept;
  SharedRegion& operator=(SharedRegion&& o) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();

  /// A new memfd of `bytes`, mapped read-write (the runner's side).
  static Expected<SharedRegion> create(size_t bytes, const char* name);
  /// Maps a received memfd read-only (kfab's side). Refuses what is not a memfd, or is smaller than
  /// `min_bytes` (a runner that shrank it would make kfab's reads fault). Takes ownership of `fd`.
  static Expected<SharedRegion> map_received(int fd, size_t min_bytes);

  int fd() const { return fd_; }
  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }
  /// Whether the file behind it still holds `bytes` (checked before every read of a runner's region).
  bool still_holds(size_t bytes) const;
  /// The same file as `fd` (st_dev, st_ino)?
  bool same_file(int fd) const;
  /// Closes the descriptor and keeps the mapping (the runner's side after passing it on).
  void close_fd();

 private:
  int fd_ = -1;
  void* data_ = nullptr;
  size_t size_ = 0;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

/// Sends descriptors over a Unix socket (SCM_RIGHTS) with one byte of payload; false on failure.
bool send_fds(int sock, const std::vector<int>& fds);
/// Receives one descriptor, waiting at most until the deadline; nullopt on timeout or failure.
std::optional<int> receive_fd(int sock, std::chrono::steady_clock::time_point deadline);

/// Where each of `bytes` lies in one region: offsets aligned to 64 bytes, and the total.
std::vector<size_t> region_layout(const std::vector<size_t>& bytes, size_t* total);
/// The bytes of each output of a task at a shape.
std::vector<size_t> output_bytes(const Task& task, const ShapeBinding& shape);

}  // namespace kfab
