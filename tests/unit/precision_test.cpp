// The tuner's precision policy (tuner/precision.h): a reduced precision is kept only well within the
// task's tolerance on every shape; fp32-accurate points on any pass.
#include <gtest/gtest.h>

#include <cmath>

#include "tuner/precision.h"

namespace kfab {

namespace {
nlohmann::json shapes(std::initializer_list<double> used) {
  nlohmann::json s = nlohmann::json::array();
  for (double u : used) s.push_back({{"correct", true}, {"tolerance_used", u}});
  return s;
}
}  // namespace

TEST(Precision, TheWorstShapeDecides) {
  EXPECT_DOUBLE_EQ(worst_tolerance_used(shapes({0.01, 0.2, 0.05})), 0.2);
  // a shape that was not checked does not count; one that does not state its share counts as unbounded
  nlohmann::json s = shapes({0.01});
  s.push_back({{"correct", false}, {"status", "not_run"}});
  EXPECT_DOUBLE_EQ(worst_tolerance_used(s), 0.01);
  s.push_back({{"correct", true}, {"max_abs_err", 1e-6}});
  EXPECT_TRUE(std::isinf(worst_tolerance_used(s)));
  EXPECT_TRUE(std::isinf(worst_tolerance_used(nlohmann::json::object())));
}

TEST(Precision, AReducedPrecisionIsKeptOnlyWithinItsShareOfTheTolerance) {
  const TemplateParams tf32{{"mma", "sm90_tf32"}, {"precision", "tf32"}};
  EXPECT_TRUE(reduced_precision(tf32));
  EXPECT_EQ(precision_refusal(tf32, 0.1), "");
  EXPECT_EQ(precision_refusal(tf32, kReducedPrecisionShare), "");
  const std::string why = precision_refusal(tf32, 0.6);
  EXPECT_NE(why.find("tf32"), std::string::npos) << why;
  EXPECT_NE(why.find("0.6"), std::string::npos) << why;
  EXPECT_NE(precision_refusal(tf32, std::numeric_limits<double>::infinity()), "");
  // fp32-accurate points pass as they are, however much of the tolerance they used
  for (const TemplateParams& p : {TemplateParams{{"precision", "3xtf32"}}, TemplateParams{{"bm", "128"}}, TemplateParams{{"precision", "fp32"}}}) {
    EXPECT_FALSE(reduced_precision(p));
    EXPECT_EQ(precision_refusal(p, 0.99), "");
  }
  EXPECT_TRUE(reduced_precision({{"precision", "bf16"}}));
}

}  // namespace kfab
