#include "eval/noise.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/stats.h"

namespace kfab {

using json = nlohmann::json;

std::optional<std::pair<double, double>> median_interval(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  if (n < 6) return std::nullopt;
  // The largest k with P(Binomial(n, 1/2) <= k - 1) <= 0.025: [x_(k), x_(n-k+1)] (1-based) holds the
  // median with at least 95% confidence.
  const double log_half_n = static_cast<double>(n) * std::log(0.5);
  double cdf = 0.0;
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const double log_pmf = std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(i) + 1) -
                           std::lgamma(static_cast<double>(n - i) + 1) + log_half_n;
    cdf += std::exp(log_pmf);
    if (cdf > 0.025) break;
    k = i + 1;
  }
  if (k == 0) return std::nullopt;
  return std::make_pair(sorted[k - 1], sorted[n - k]);
}

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());  // quantile() takes its samples sorted
  return quantile(std::move(v), 0.5);
}

double spread_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const TimeStats s = summarize(v);
  return s.median > 0 ? s.iqr / s.median : 0.0;
}

}  // namespace

Noise assess_noise(const std::vector<double>& candidate, const std::vector<double>& baseline, const TimingSeen& seen,
                   const NoiseLimits& limits) {
  Noise n;
  n.load = seen.load;
  n.candidate_spread = spread_of(candidate);
  n.baseline_spread = spread_of(baseline);
  auto flag = [&](std::string why) {
    n.noisy = true;
    n.reasons.push_back(std::move(why));
  };
  std::vector<double> ratios;
  for (size_t i = 0; i < std::min(candidate.size(), baseline.size()); ++i)
    if (candidate[i] > 0 && baseline[i] > 0) ratios.push_back(baseline[i] / candidate[i]);
  if (!ratios.empty()) {
    n.paired_speedup = median_of(ratios);
    std::vector<double> sorted = ratios;
    std::sort(sorted.begin(), sorted.end());
    if (auto ci = median_interval(sorted)) {
      n.ci_low = ci->first;
      n.ci_high = ci->second;
      if (ci->second > limits.ci_ratio * ci->first)
        flag(fmt::format("the speedup's 95% interval from {} interleaved pairs is {:.3g}x to {:.3g}x", ratios.size(),
                         ci->first, ci->second));
    }
    if (ratios.size() >= 12) {
      const auto half = static_cast<std::ptrdiff_t>(ratios.size() / 2);
      const double first = median_of({ratios.begin(), ratios.begin() + half});
      const double second = median_of({ratios.begin() + half, ratios.end()});
      n.halves = first / second;
      if (*n.halves > limits.halves || *n.halves < 1.0 / limits.halves)
        flag(fmt::format("the first half of the run measured {:.3g}x and the second {:.3g}x", first, second));
    }
  }
  // The calls' spread is read where no interval is: with one, a wide spread around a median that the
  // pairs pin down (torch eager on the cpu often spreads by 40%) is already in its width.
  if (!n.ci_low && n.candidate_spread > limits.spread)
    flag(fmt::format("the candidate's calls spread by {:.0f}% of their median (IQR)", 100 * n.candidate_spread));
  if (!n.ci_low && n.baseline_spread > limits.spread)
    flag(fmt::format("the baseline's calls spread by {:.0f}% of their median (IQR)", 100 * n.baseline_spread));
  // /proc's counts move in scheduler ticks (10 ms): a window of a tenth of a second at least is read
  if (seen.on_host && seen.load.known && seen.load.window_s >= 0.1 && seen.load.others_cores() >= std::max(limits.others_cores, 0.1 * seen.load.cores))
    flag(fmt::format("other processes kept {:.1f} of the machine's {} cores busy while timing", seen.load.others_cores(),
                     seen.load.cores));
  if (!seen.cpu_ms.empty() && seen.cpu_ms.size() == candidate.size()) {
    // Summed over the calls: a thread's CPU time reaches the process clock at scheduler ticks, so a
    // short call's own share is coarse while the sums are not.
    double cpu = 0.0, wall = 0.0;
    for (size_t i = 0; i < candidate.size(); ++i) {
      cpu += seen.cpu_ms[i];
      wall += candidate[i];
    }
    if (wall >= 100.0) {  // ms: as the load, a sum over a tenth of a second at least is read
      n.cpu_per_wall = cpu / wall;
      if (*n.cpu_per_wall < limits.cpu_per_wall)
        flag(fmt::format("the candidate's process was on a CPU for {:.0f}% of its calls' wall time (it waited: for its "
                         "threads, or for a busy machine)",
                         100 * *n.cpu_per_wall));
    }
    n.preempted_share = static_cast<double>(seen.preempted_calls) / static_cast<double>(candidate.size());
    if (n.preempted_share > limits.preempted)
      flag(fmt::format("the candidate's process was descheduled during {:.0f}% of its timed calls", 100 * n.preempted_share));
  }
  return n;
}

double Noise::ci_width() const {
  if (!ci_low || !ci_high || *ci_low <= 0) return std::numeric_limits<double>::infinity();
  return *ci_high / *ci_low;
}

json Noise::to_json() const {
  json j = {{"noisy", noisy},
            {"reasons", reasons},
            {"candidate_spread", candidate_spread},
            {"baseline_spread", baseline_spread},
            {"load", load.to_json()}};
  if (paired_speedup) j["paired_speedup"] = *paired_speedup;
  if (ci_low && ci_high) j["speedup_ci95"] = {*ci_low, *ci_high};
  if (halves) j["halves"] = *halves;
  if (cpu_per_wall) {
    j["cpu_per_wall"] = *cpu_per_wall;
    j["preempted_share"] = preempted_share;
  }
  return j;
}

void NoiseSummary::add(const std::string& shape, const Noise& n) {
  ++shapes_;
  for (const auto& r : n.reasons) reasons_.emplace_back(shape, r);
  if (n.ci_low && n.ci_high && *n.ci_low > 0) {
    log_low_ += std::log(*n.ci_low);
    log_high_ += std::log(*n.ci_high);
    log_paired_ += std::log(n.paired_speedup.value_or(1.0));
    ++with_interval_;
  }
  if (n.load.known && (load_.is_null() || n.load.others_cores() > load_.value("others_cores", 0.0))) load_ = n.load.to_json();
}

std::string NoiseSummary::interval_text() const {
  if (with_interval_ == 0 || with_interval_ != shapes_) return {};
  return fmt::format("; interleaved pairs {:.3f}x, 95% interval {:.3f}x-{:.3f}x", std::exp(log_paired_ / shapes_),
                     std::exp(log_low_ / shapes_), std::exp(log_high_ / shapes_));
}

std::string NoiseSummary::reason_text() const {
  std::string out;
  for (const auto& [shape, r] : reasons_) out += (out.empty() ? "" : "; ") + (shapes_ > 1 ? shape + ": " : "") + r;
  return out;
}

json NoiseSummary::to_json() const {
  json reasons = json::array();
  for (const auto& [shape, r] : reasons_) reasons.push_back({{"shape", shape}, {"reason", r}});
  json j = {{"noisy", noisy()}, {"reasons", reasons}};
  if (with_interval_ > 0 && with_interval_ == shapes_) {
    j["paired_speedup"] = std::exp(log_paired_ / shapes_);
    j["speedup_ci95"] = {std::exp(log_low_ / shapes_), std::exp(log_high_ / shapes_)};
  }
  if (!load_.is_null()) j["load"] = load_;
  return j;
}

}  // namespace kfab
