#pragma once
/// Speed-of-light bounds: the fastest time a task's cost allows on this machine. A candidate timed
/// far below its bound did not do the work (or lied about its time) and is rejected.

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/task.h"

namespace kfab {

class RunnerClient;

struct MachinePeaks {
  std::string device;              ///< CPU model
  double bandwidth_Bps = 0.0;      ///< peak bandwidth for the bound (bytes read + written per second)
  double copy_Bps = 0.0;           ///< the copy bandwidth kfab measured here (the highest it has seen)
  double flops_per_s = 0.0;        ///< peak FLOP/s for the bound (CPU: cores x maximum clock x SIMD FMA width)
  /// The bound uses peaks this much above the figures above: a false rejection of an honest kernel
  /// is worse than letting a slightly-too-fast one through, and the cheats it is for (skipped work,
  /// a lying timer) come in far below any bound.
  double margin = 2.0;
  /// A time is rejected only below bound / reject_margin. The bound is what reports compare with
  /// (percent of the bound, SOL score); the rejection allows for peaks that still read low: an honest
  /// CPU kernel on a small working set moved 1.5x the copy bandwidth here, and a copy timed on a busy
  /// 2-core machine read 2.5-4x low. Devices: 2 (their published peaks do not read low).
  double reject_margin = 8.0;
  std::string source;              ///< where the bandwidth comes from: "measured", "cached <file>", ...
  std::string flops_source;        ///< how the FLOP/s was made (cores, clock and its source, FLOP per cycle)
  /// True once the peaks were measured again in this evaluation, beside a time below the bound.
  bool measured_again = false;
  /// False where kfab cannot evict the operands from the caches before a call (an OpenCL device that
  /// is a CPU): a time below the bound is then reported, not rejected.
  bool enforce = true;
  nlohmann::json to_json() const;
};

/// The clock the CPU's peak FLOP/s uses, and where it came from.
struct CpuClock {
  double mhz = 0.0;
  std::string source;
  bool assumed = false;  ///< no clock could be read: a default
};
/// The CPU's maximum clock: the highest of cpuinfo_max_freq (kHz, where the kernel has it), every
/// "cpu MHz" line of `cpuinfo` (the current clocks, which can read far below the maximum) and
/// `seen_mhz` (the highest seen here before). Never the current clock alone where a maximum is known:
/// a low clock would make the FLOP/s bound reject honest compute-bound work.
CpuClock max_cpu_clock(const std::string& cpuinfo, std::optional<double> cpuinfo_max_freq_khz, double seen_mhz);

/// The CPU's peaks: the highest bandwidth a runner's copy has shown on this machine, cached in the
/// cache folder, and FLOP/s from the CPU's maximum clock (cpuinfo_max_freq where the kernel has it,
/// else the highest "cpu MHz" seen, cached too). With `remeasure`, measures the bandwidth again,
/// several times, and keeps the highest figure: a measurement taken while the machine was busy reads
/// low; the peaks must not.
std::optional<MachinePeaks> cpu_peaks(RunnerClient& runner, bool remeasure = false);

/// A device target's peaks (cuda, opencl): the larger of the device table (H100, H200) and the highest
/// device-to-device copy measured, cached like the CPU's. nullopt when the runner cannot open the device.
std::optional<MachinePeaks> device_peaks(RunnerClient& runner, const std::string& target, bool remeasure = false);
/// cpu_peaks for a target in host memory, device_peaks for any other.
std::optional<MachinePeaks> target_peaks(RunnerClient& runner, const std::string& target, bool remeasure = false);

/// max(flops / peak, bytes / bandwidth) in ms, at the peaks as measured (or published): the roofline time
/// every figure beside it is read against (percent_of_bound, the SOL score). The margin for peaks that read
/// low is the decision's (decide_roofline), not the bound's. nullopt without cost.
std::optional<double> bound_ms(std::optional<double> flops, std::optional<double> bytes, const MachinePeaks& peaks);
/// The same for a task's cost at a shape.
std::optional<double> bound_ms(const Task& task, const ShapeBinding& shape, const MachinePeaks& peaks);

/// The host's largest cache (sysfs' cpu0 caches), in bytes; 0 where unknown.
uint64_t last_level_cache_bytes();

/// A median time judged against the roofline bound, and what it was compared with.
struct RooflineDecision {
  std::optional<double> bound_ms;        ///< the bound at the peaks (nullopt without cost)
  /// bound / (margin x reject_margin): an enforced time below it is rejected
  std::optional<double> reject_below_ms;
  bool below_bound = false;              ///< the median is below the bound / margin (beyond the peaks' error)
  bool reject = false;                   ///< enforced, and below the rejection limit after the peaks were measured again
  /// The median, the bound, the limit, and per term the cost, the peak with its margin and its source.
  nlohmann::json compared_with;
  std::string text;                      ///< one sentence for a verdict: the median and what it was compared with
};

/// Decides whether `median_ms` is impossibly fast for `flops` and `bytes` on `peaks`. A time that is
/// enforced and below bound / reject_margin is rejected only once `remeasure` (called at most once per
/// `peaks`: measured_again) has measured the peaks again beside it; the higher of each figure is kept
/// in `peaks`, so a low re-measurement can never raise the bound.
/// `no_bytes_bound`, where not empty, says why the bytes cannot bound this time (data the timing leaves in
/// a cache): the bound is then the flops' alone, and compared_with says so (`not_established`).
RooflineDecision decide_roofline(double median_ms, std::optional<double> flops, std::optional<double> bytes, MachinePeaks& peaks,
                                 bool enforce, const std::function<std::optional<MachinePeaks>()>& remeasure,
                                 const std::string& no_bytes_bound = {});

}  // namespace kfab
