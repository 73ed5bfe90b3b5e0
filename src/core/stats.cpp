#include "core/stats.h"

#include <algorithm>
#include <numeric>

namespace kfab {

double quantile(std::vector<double> s, double q) {
  if (s.empty()) return 0.0;
  const double pos = q * static_cast<double>(s.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, s.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * frac;
}

TimeStats summarize(std::vector<double> v) {
  TimeStats t;
  t.n = v.size();
  if (v.empty()) return t;
  std::sort(v.begin(), v.end());
  t.median = quantile(v, 0.5);
  t.q1 = quantile(v, 0.25);
  t.q3 = quantile(v, 0.75);
  t.iqr = t.q3 - t.q1;
  t.min = v.front();
  t.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return t;
}

nlohmann::json TimeStats::to_json() const {
  return {{"median", median}, {"iqr", iqr}, {"q1", q1}, {"q3", q3}, {"min", min}, {"mean", mean}, {"n", n}};
}

TimeStats TimeStats::from_json(const nlohmann::json& j) {
  TimeStats t;
  t.median = j.value("median", 0.0);
  t.iqr = j.value("iqr", 0.0);
  t.q1 = j.value("q1", 0.0);
  t.q3 = j.value("q3", 0.0);
  t.min = j.value("min", 0.0);
  t.mean = j.value("mean", 0.0);
  t.n = j.value("n", size_t{0});
  return t;
}

}  // namespace kfab
