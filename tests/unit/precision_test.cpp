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
  // one TF32 product and a bf16 one of the cross terms: 3 bits short of three TF32 products
  EXPECT_TRUE(reduced_precision({{"mma", "sm90_mixed"}, {"precision", "tf32+bf16"}}));
  EXPECT_NE(precision_refusal({{"precision", "tf32+bf16"}}, 0.3), "");
  // a half-precision task's point in its own type is not a reduction of it; bf16 for an fp16 task is
  const TemplateParams own{{"mma", "sm90_half"}, {"precision", "bf16"}, {"io", "bf16"}};
  EXPECT_FALSE(reduced_precision(own));
  EXPECT_EQ(precision_refusal(own, 0.9), "");
  EXPECT_TRUE(reduced_precision({{"precision", "bf16"}, {"io", "fp16"}}));
}

// A reduced precision refused in the final check after it passed (level2_22 on an H200: tf32 used 0.14
// of the tolerance on the search's 2 seeds, 0.56 on the final 5) is recorded as rejected, so that a
// bench row or a report never counts it as passed; its measurements stay.
TEST(Precision, AFinalPassRefusedForItsPrecisionIsRecordedAsRejected) {
  Verdict v;
  v.disposition = Disposition::Passed;
  v.detail = "correct on 1 shapes x 5 seeds; 8.057x the torch eager";
  v.speedup = 8.057;
  const std::string why = precision_refusal({{"precision", "tf32"}}, 0.56);
  ASSERT_FALSE(why.empty());
  const Verdict r = refused_verdict(v, why);
  EXPECT_EQ(r.disposition, Disposition::Rejected);
  EXPECT_FALSE(r.passed());
  EXPECT_NE(r.detail.find("not kept"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("tf32"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("8.057x"), std::string::npos) << "what was measured stays in the detail: " << r.detail;
  ASSERT_TRUE(r.speedup.has_value());
  EXPECT_EQ(r.to_json().value("disposition", ""), "rejected");
}

}  // namespace kfab
