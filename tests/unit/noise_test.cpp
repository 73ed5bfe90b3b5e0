// The measurement's quality (eval/noise.h): the paired speedup and its interval, and what raises `noisy`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "eval/noise.h"

namespace kfab {

TEST(Noise, TheMediansIntervalIsTheSignTestsOrderStatistics) {
  EXPECT_FALSE(median_interval({1, 2, 3, 4, 5}).has_value()) << "five samples give no 95% interval";
  std::vector<double> six = {1, 2, 3, 4, 5, 6};
  auto ci = median_interval(six);  // P(Bin(6, 1/2) = 0) = 1/64 <= 0.025: the extremes
  ASSERT_TRUE(ci.has_value());
  EXPECT_EQ(ci->first, 1);
  EXPECT_EQ(ci->second, 6);
  std::vector<double> hundred(100);
  for (int i = 0; i < 100; ++i) hundred[static_cast<size_t>(i)] = i + 1;
  ci = median_interval(hundred);  // the exact binomial interval for n = 100: the 40th and 61st
  ASSERT_TRUE(ci.has_value());
  EXPECT_EQ(ci->first, 40);
  EXPECT_EQ(ci->second, 61);
}

TEST(Noise, AQuietPairedRunIsNotNoisyAndItsSpeedupLiesInItsInterval) {
  std::mt19937 rng(7);
  std::normal_distribution<double> jitter(1.0, 0.01);
  std::vector<double> cand, base;
  for (int i = 0; i < 60; ++i) {
    cand.push_back(1.0 * jitter(rng));
    base.push_back(2.0 * jitter(rng));
  }
  TimingSeen seen;
  const Noise n = assess_noise(cand, base, seen);
  EXPECT_FALSE(n.noisy) << (n.reasons.empty() ? "" : n.reasons.front());
  ASSERT_TRUE(n.paired_speedup && n.ci_low && n.ci_high);
  EXPECT_NEAR(*n.paired_speedup, 2.0, 0.05);
  EXPECT_LE(*n.ci_low, *n.paired_speedup);
  EXPECT_GE(*n.ci_high, *n.paired_speedup);
  EXPECT_LT(n.ci_width(), 1.05);
}

TEST(Noise, SpreadDriftLoadAndWaitingEachRaiseTheFlagWithTheirReason) {
  std::vector<double> cand(40, 1.0), base(40, 2.0);
  auto reasons = [](const Noise& n) {
    std::string all;
    for (const auto& r : n.reasons) all += r + "\n";
    return all;
  };
  // the second half of the run twice as slow for the candidate: the halves disagree
  std::vector<double> drift = cand;
  std::fill(drift.begin() + 20, drift.end(), 2.0);
  Noise n = assess_noise(drift, base, {});
  EXPECT_TRUE(n.noisy);
  EXPECT_NE(reasons(n).find("the first half of the run measured 2x and the second 1x"), std::string::npos) << reasons(n);
  // calls spread widely: with a baseline beside them, the pairs' interval is wide; alone, their spread says it
  std::vector<double> spread;
  for (int i = 0; i < 40; ++i) spread.push_back(i % 2 ? 1.0 : 1.6);
  n = assess_noise(spread, base, {});
  EXPECT_NE(reasons(n).find("the speedup's 95% interval from 40 interleaved pairs is 1.25x to 2x"), std::string::npos) << reasons(n);
  n = assess_noise(spread, {}, {});
  EXPECT_NE(reasons(n).find("the candidate's calls spread by"), std::string::npos) << reasons(n);
  // other processes busy over a long enough window
  TimingSeen loaded;
  loaded.load.known = true;
  loaded.load.window_s = 0.5;
  loaded.load.cores = 2;
  loaded.load.busy_cores = 2.0;
  loaded.load.ours_cores = 0.9;
  n = assess_noise(cand, base, loaded);
  EXPECT_NE(reasons(n).find("other processes kept 1.1 of the machine's 2 cores busy"), std::string::npos) << reasons(n);
  loaded.load.window_s = 0.02;  // a window of two scheduler ticks is not read
  EXPECT_FALSE(assess_noise(cand, base, loaded).noisy);
  // on the CPU: a process on a CPU for 40% of its calls' wall time waited; calls of 5 ms, 200 ms in all
  std::vector<double> slow(40, 5.0), slow_base(40, 10.0);
  TimingSeen waiting;
  waiting.cpu_ms.assign(40, 2.0);
  waiting.preempted_calls = 20;
  n = assess_noise(slow, slow_base, waiting);
  ASSERT_TRUE(n.cpu_per_wall.has_value());
  EXPECT_NEAR(*n.cpu_per_wall, 0.4, 1e-12);
  EXPECT_NE(reasons(n).find("on a CPU for 40% of its calls' wall time"), std::string::npos) << reasons(n);
  EXPECT_NE(reasons(n).find("descheduled during 50% of its timed calls"), std::string::npos) << reasons(n);
}

TEST(Noise, TheSummaryNamesTheShapesAndTheGeometricMeanOfTheirIntervals) {
  NoiseSummary all;
  Noise a, b;
  a.paired_speedup = 2.0, a.ci_low = 1.0, a.ci_high = 4.0;
  b.paired_speedup = 8.0, b.ci_low = 4.0, b.ci_high = 16.0;
  b.noisy = true;
  b.reasons = {"the candidate's calls spread by 30% of their median (IQR)"};
  all.add("{N=1}", a);
  all.add("{N=2}", b);
  EXPECT_TRUE(all.noisy());
  EXPECT_EQ(all.reason_text(), "{N=2}: the candidate's calls spread by 30% of their median (IQR)");
  EXPECT_EQ(all.interval_text(), "; interleaved pairs 4.000x, 95% interval 2.000x-8.000x");
  const auto j = all.to_json();
  EXPECT_DOUBLE_EQ(j["speedup_ci95"][0].get<double>(), 2.0);
  EXPECT_EQ(j["reasons"][0]["shape"], "{N=2}");
}

}  // namespace kfab
