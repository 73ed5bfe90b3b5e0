// include/kfab/templates/row_div.h against the division: the cuda row kernels divide each element by its
// row's divisor through it (tuner/print_cuda.cpp), so it must stay within an ulp of x / r for every r,
// and agree exactly where the division gives 0, an infinity or NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace kfab_rd {
#include "kfab/templates/row_div.h"
}  // namespace kfab_rd

namespace kfab {
namespace {

// how many floats lie between a and b (both finite, of one sign or zero)
int64_t ulps(float a, float b) {
  int32_t ia = 0, ib = 0;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = std::numeric_limits<int32_t>::min() - ia;
  if (ib < 0) ib = std::numeric_limits<int32_t>::min() - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

// Divisors over every binade (the subnormals and the two ends included), with the zeros, the infinities
// and NaN; numerators alike. Where x / r is finite and normal the quotient is within an ulp; where it is 0,
// an infinity or NaN it is the same; where it is subnormal, within an ulp of the smallest normal.
TEST(RowDiv, EveryQuotientIsWithinAnUlpOfTheDivisions) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> rs = {0.0f, -0.0f, inf, -inf, nan, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()};
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int e = -149; e <= 127; ++e)
    for (int k = 0; k < 48; ++k) {
      const float v = std::ldexp(mant(gen), e);
      rs.push_back(v);
      rs.push_back(-v);
    }
  std::vector<float> xs = {0.0f, -0.0f, inf, -inf, nan, 1.0f, -3.0f, std::numeric_limits<float>::max()};
  for (int e = -149; e <= 127; e += 7) xs.push_back(std::ldexp(mant(gen), e));
  int64_t worst = 0, checked = 0;
  for (float r : rs) {
    const auto q = kfab_rd::kfab_recip(r);
    for (float x : xs) {
      const float want = x / r, got = kfab_rd::kfab_div_row(x, q);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << x << " / " << r << " gave " << got;
        continue;
      }
      if (std::isinf(want) || want == 0.0f) {
        // at the edges of the range the two roundings may part by an ulp: the largest float, or the smallest
        if (std::isinf(got) || got == 0.0f) EXPECT_EQ(got, want) << x << " / " << r;
        else EXPECT_LE(ulps(got, std::copysign(std::isinf(want) ? std::numeric_limits<float>::max() : std::numeric_limits<float>::denorm_min(), want)), 1) << x << " / " << r << " gave " << got;
        continue;
      }
      ASSERT_FALSE(std::isnan(got)) << x << " / " << r;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << x << " / " << r;
      const int64_t d = ulps(got, want);
      if (std::fabs(want) >= std::numeric_limits<float>::min()) {
        EXPECT_LE(d, 1) << x << " / " << r << ": " << got << " against " << want;
        worst = std::max(worst, d);
        ++checked;
      } else {
        EXPECT_LE(d, 1) << x << " / " << r << " (subnormal): " << got << " against " << want;
      }
    }
  }
  EXPECT_GT(checked, 10000);
  EXPECT_LE(worst, 1);
}

}  // namespace
}  // namespace kfab
