#pragma once
/// What else ran on the host while kfab timed something: the cores busy over a window (the kernel's
/// /proc/stat, steal time included: a hypervisor's other guests are load too) less the cores kfab's
/// own processes used (kfab and every process below it, their reaped children included, from
/// /proc/PID/stat). Linux only; elsewhere a reading is unknown.

#include <cstdint>
#include <map>

#include <nlohmann/json.hpp>

namespace kfab {

struct LoadReading {
  bool known = false;
  double window_s = 0.0;
  int cores = 0;
  double busy_cores = 0.0;  ///< every process's CPU use over the window, in cores
  double ours_cores = 0.0;  ///< kfab's own processes'
  double others_cores() const { return busy_cores > ours_cores ? busy_cores - ours_cores : 0.0; }
  nlohmann::json to_json() const;
};

class HostLoad {
 public:
  /// Starts a window.
  void begin();
  /// The window from begin() to now.
  LoadReading end() const;

 private:
  struct Sample {
    bool ok = false;
    uint64_t busy = 0, total = 0;  ///< /proc/stat's first line, clock ticks over all cores
    uint64_t ours = 0;             ///< clock ticks of kfab's process tree
    double at_s = 0.0;
  };
  static Sample sample();
  Sample first_;
};

/// kfab's process tree's CPU ticks (utime + stime + cutime + cstime of this process and each below it).
uint64_t own_tree_ticks();

}  // namespace kfab
