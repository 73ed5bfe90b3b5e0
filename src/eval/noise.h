#pragma once
/// How far a timed shape's figures can be trusted (issue 24): the spread of the calls within the run,
/// the speedup from interleaved candidate/baseline pairs with a 95% confidence interval, the first half
/// of the run against the second, the host's load while timing and, on the CPU, the candidate's CPU time
/// against its wall time and how often it was descheduled. `noisy`, with the reasons in words, where any
/// of them says the speedup is not to be read to the figure shown.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/host_load.h"

namespace kfab {

/// What one timing of a shape saw, besides its times.
struct TimingSeen {
  /// Timed on the host (the cpu target): its load and the candidate's CPU time bear on the times. A device's
  /// timing hides the host behind its hold (a bench runs a kfab per GPU on one host): reported, not flagged.
  bool on_host = true;
  LoadReading load;
  std::vector<double> cpu_ms;  ///< the candidate's CPU time per timed call, where its process reports it (CPU)
  int preempted_calls = 0;     ///< timed calls of the candidate during which its process was descheduled
};

struct Noise {
  bool noisy = false;
  std::vector<std::string> reasons;
  std::optional<double> paired_speedup;  ///< the median of baseline/candidate over the interleaved pairs
  std::optional<double> ci_low, ci_high;  ///< its 95% confidence interval (order statistics; 6 pairs at least)
  double candidate_spread = 0.0, baseline_spread = 0.0;  ///< IQR over median, within the run
  std::optional<double> halves;  ///< the paired speedup over the run's first half against its second
  /// The candidate's process's CPU time (all its threads) over its calls' wall time, summed over them,
  /// where they add up to 0.1 s at least (CPU)
  std::optional<double> cpu_per_wall;
  double preempted_share = 0.0;
  LoadReading load;
  /// The width of the interval relative to its middle; infinite without one (for choosing the
  /// quieter of two timings).
  double ci_width() const;
  nlohmann::json to_json() const;
};

/// The thresholds a `noisy` flag is raised at, named in its reasons.
struct NoiseLimits {
  double ci_ratio = 1.2;      ///< the interval's high over its low
  double spread = 0.2;        ///< IQR over median, candidate or baseline (where the pairs give no interval)
  double halves = 1.15;       ///< the first half's speedup over the second's (or its inverse)
  double others_cores = 0.5;  ///< other processes' CPU use while timing, in cores (at least a tenth of the cores)
  double cpu_per_wall = 0.7;  ///< the candidate's CPU time over wall time, below which it waited (CPU)
  double preempted = 0.25;    ///< the share of calls during which the candidate was descheduled (CPU)
};

/// `candidate` and `baseline` are the calls' ms in the order they were timed, call i of each from the
/// same round (the evaluator interleaves them); baseline empty where nothing was timed beside it.
Noise assess_noise(const std::vector<double>& candidate, const std::vector<double>& baseline, const TimingSeen& seen,
                   const NoiseLimits& limits = {});

/// The noise of a verdict's timed shapes together: `noisy` where any shape is, the reasons with the
/// shapes' labels, and the speedup's interval over the shapes (the geometric means of the shapes'
/// bounds, as the speedup is the geometric mean of theirs).
class NoiseSummary {
 public:
  void add(const std::string& shape, const Noise& n);
  bool noisy() const { return !reasons_.empty(); }
  /// "; interleaved pairs 1.28x, 95% interval 1.21x-1.35x" where every shape has one, else "" (the pairs'
  /// median ratio, which may differ from the ratio of the medians that `speedup` is).
  std::string interval_text() const;
  std::string reason_text() const;
  nlohmann::json to_json() const;

 private:
  std::vector<std::pair<std::string, std::string>> reasons_;  ///< (shape, reason)
  double log_low_ = 0.0, log_high_ = 0.0, log_paired_ = 0.0;
  int shapes_ = 0, with_interval_ = 0;
  nlohmann::json load_;  ///< the busiest shape's
};

/// The 95% confidence interval of a median from its sorted samples: the order statistics a sign test
/// puts around it (exact binomial); none for fewer than 6 samples.
std::optional<std::pair<double, double>> median_interval(const std::vector<double>& sorted);

}  // namespace kfab
