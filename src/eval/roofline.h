#pragma once
/// Speed-of-light bounds: the fastest time a task's cost allows on this machine. A candidate timed
/// below its bound did not do the work (or lied about its time) and is rejected.

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/task.h"

namespace kfab {

class RunnerClient;

struct MachinePeaks {
  std::string device;              ///< CPU model
  double bandwidth_Bps = 0.0;      ///< peak bandwidth for the bound (bytes read + written per second)
  double copy_Bps = 0.0;           ///< the copy bandwidth kfab measured here
  double flops_per_s = 0.0;        ///< peak FLOP/s for the bound (CPU: cores x clock x SIMD FMA width)
  /// The bound uses peaks this much above the figures above: a false rejection of an honest kernel
  /// is worse than letting a slightly-too-fast one through, and the cheats it is for (skipped work,
  /// a lying timer) come in far below any bound.
  double margin = 2.0;
  std::string source;              ///< "measured", "cached"
  /// False where kfab cannot evict the operands from the caches before a call (an OpenCL device that
  /// is a CPU): a time below the bound is then reported, not rejected.
  bool enforce = true;
  nlohmann::json to_json() const;
};

/// The CPU's peaks: the bandwidth measured once through a runner and cached in the cache folder.
/// With `remeasure`, measures again and keeps the higher figure (a measurement taken while the
/// machine was busy reads low; the bound must not).
std::optional<MachinePeaks> cpu_peaks(RunnerClient& runner, bool remeasure = false);

/// A device target's peaks (cuda, opencl): the larger of the device table (H100, H200) and a measured
/// device-to-device copy, cached like the CPU's. nullopt when the runner cannot open the device.
std::optional<MachinePeaks> device_peaks(RunnerClient& runner, const std::string& target, bool remeasure = false);

/// max(flops / peak, bytes / bandwidth) in ms, both peaks raised by the margin; nullopt without cost.
std::optional<double> bound_ms(std::optional<double> flops, std::optional<double> bytes, const MachinePeaks& peaks);
/// The same for a task's cost at a shape.
std::optional<double> bound_ms(const Task& task, const ShapeBinding& shape, const MachinePeaks& peaks);

}  // namespace kfab
