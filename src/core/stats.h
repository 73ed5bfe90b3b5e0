#pragma once
/// Order statistics of timed calls.

#include <vector>

#include <nlohmann/json.hpp>

namespace kfab {

struct TimeStats {
  double median = 0.0;  ///< milliseconds, like every field here
  double iqr = 0.0;
  double q1 = 0.0;
  double q3 = 0.0;
  double min = 0.0;
  double mean = 0.0;
  size_t n = 0;
  nlohmann::json to_json() const;
  static TimeStats from_json(const nlohmann::json& j);
};

/// Quantiles by linear interpolation between order statistics (numpy's default).
double quantile(std::vector<double> sorted_samples, double q);
TimeStats summarize(std::vector<double> samples_ms);

}  // namespace kfab
