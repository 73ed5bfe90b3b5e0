// include/kfab/templates/poly_exp.h's SIMD-lane functions against the C library in double: the host's
// generated candidates call them where they would call expf, logf, log1pf, tanhf and erff (issue 25), so
// their errors must stay well inside the tightest fp32 tolerance a task states (native: 1e-5 absolute,
// 1e-4 relative), with the C library's answers at the limits and NaN kept.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

namespace kfab_poly {
#include "kfab/templates/poly_exp.h"
}  // namespace kfab_poly

namespace kfab {
namespace {

using kfab_poly::kfab_erf;
using kfab_poly::kfab_exp;
using kfab_poly::kfab_log;
using kfab_poly::kfab_log1p;
using kfab_poly::kfab_tanh;

/// The worst error of f against ref over n points from lo to hi (evenly, or evenly in log where `log_scale`),
/// relative to max(|ref|, floor).
double worst(float (*f)(float), const std::function<double(double)>& ref, double lo, double hi, bool log_scale, double floor) {
  double w = 0.0;
  const int n = 200000;
  for (int i = 0; i <= n; ++i) {
    const double t = static_cast<double>(i) / n;
    const float x = static_cast<float>(log_scale ? std::exp(std::log(lo) + (std::log(hi) - std::log(lo)) * t) : lo + (hi - lo) * t);
    const double want = ref(x), got = f(x);
    w = std::max(w, std::fabs(got - want) / std::max(std::fabs(want), floor));
  }
  return w;
}

TEST(PolyMath, EachFunctionIsWithinAFewUnitsOfFloatOverItsRange) {
  EXPECT_LT(worst(kfab_exp, [](double x) { return std::exp(x); }, -87.0, 88.0, false, 0.0), 3e-7);
  EXPECT_LT(worst(kfab_log, [](double x) { return std::log(x); }, 1e-40, 1e38, true, 1e-30), 3e-7);  // subnormals too
  EXPECT_LT(worst(kfab_log1p, [](double x) { return std::log1p(x); }, -0.999, 1e30, false, 1e-30), 3e-7);
  EXPECT_LT(worst(kfab_log1p, [](double x) { return std::log1p(x); }, 1e-12, 1.0, true, 1e-30), 3e-7);  // small x: no cancellation
  EXPECT_LT(worst(kfab_tanh, [](double x) { return std::tanh(x); }, -12.0, 12.0, false, 1e-30), 3e-7);
  EXPECT_LT(worst(kfab_tanh, [](double x) { return std::tanh(x); }, 1e-10, 0.5, true, 1e-30), 3e-7);  // the series' range
  EXPECT_LT(worst(kfab_erf, [](double x) { return std::erf(x); }, -8.0, 8.0, false, 1.0), 5e-7);  // absolute
  EXPECT_LT(worst(kfab_erf, [](double x) { return std::erf(x); }, 1e-10, 0.5, true, 1e-30), 5e-7);  // relative where small
}

TEST(PolyMath, TheLimitsAndNaNAreTheCLibrarys) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(kfab_log(0.0f), -inf);
  EXPECT_EQ(kfab_log(-0.0f), -inf);
  EXPECT_TRUE(std::isnan(kfab_log(-1.0f)));
  EXPECT_EQ(kfab_log(inf), inf);
  EXPECT_EQ(kfab_log1p(-1.0f), -inf);
  EXPECT_EQ(kfab_log1p(inf), inf);
  EXPECT_EQ(kfab_log1p(1e-30f), 1e-30f);
  EXPECT_EQ(kfab_tanh(inf), 1.0f);
  EXPECT_EQ(kfab_tanh(-inf), -1.0f);
  EXPECT_EQ(kfab_erf(inf), 1.0f);
  EXPECT_EQ(kfab_erf(-inf), -1.0f);
  for (float (*f)(float) : {kfab_exp, kfab_log, kfab_log1p, kfab_tanh, kfab_erf}) EXPECT_TRUE(std::isnan(f(nan)));
}

}  // namespace
}  // namespace kfab
