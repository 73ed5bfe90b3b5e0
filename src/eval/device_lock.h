#pragma once
/// Timing on a GPU belongs to one process at a time. kfab processes that share a GPU (`kfab bench
/// --devices 0,0`, two `kfab worker`s given one device, a bench beside an optimize) overlap their
/// builds, tracing and correctness checks, but never time at once: each would measure the other's
/// kernels. The lock is a file per physical GPU, named by its PCI address, held with flock(2) for as
/// long as one evaluation times (the machine's peaks, the candidate, the baselines, the exported
/// ModelNew). The kernel drops it when its process ends, however it ends.
///
/// Where: KFAB_LOCK_DIR, else /tmp/kfab-locks (made world-writable, sticky, so that the users of one
/// machine share it). KFAB_DEVICE_LOCK=off times without it.

#include <functional>
#include <map>
#include <string>

namespace kfab {

/// Each target names its devices' locks (Target::lock_key: a GPU's PCI address).
class DeviceLock {
 public:
  /// Blocks until this process holds the lock of `key`; says (once) that it waits, and for whom. A
  /// lock that cannot be made (a read-only /tmp) is said once and not held.
  DeviceLock(const std::string& key, const std::function<void(const std::string&)>& say);
  ~DeviceLock();
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;

  /// Seconds spent waiting for another process's timing to end.
  double waited_s() const { return waited_s_; }
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  double waited_s_ = 0.0;
};

}  // namespace kfab
