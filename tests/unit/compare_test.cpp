#include <gtest/gtest.h>

#include <cmath>

#include "core/compare.h"
#include "core/stats.h"
#include "eval/job_evidence.h"

namespace kfab {

namespace {
HostTensor make(std::initializer_list<float> v, std::vector<int64_t> shape) {
  HostTensor t(DType::F32, std::move(shape));
  size_t i = 0;
  for (float x : v) static_cast<float*>(t.data())[i++] = x;
  return t;
}
}  // namespace

TEST(Compare, AllcloseWithinTolerancePasses) {
  auto want = make({1.0f, 100.0f, 0.0f, -5.0f}, {2, 2});
  auto got = make({1.000001f, 100.005f, 0.000005f, -5.0f}, {2, 2});
  CompareStats st;
  compare_output(got, want, {1e-5, 1e-4}, "y", 0, 1, st);
  EXPECT_TRUE(st.ok());
  EXPECT_NEAR(st.max_abs, 0.005, 1e-4);
  EXPECT_EQ(st.checked, 4u);
  // the worst share of atol + rtol |want|: 5e-6 of atol 1e-5 at the zero, 0.005 of 0.01001 at 100
  EXPECT_NEAR(st.tol_used, 0.5, 1e-3);
  EXPECT_NEAR(st.to_json()["tolerance_used"].get<double>(), st.tol_used, 1e-12);
}

TEST(Compare, ToleranceUsedIsZeroWhenExactAndAboveOneOnAMismatch) {
  auto want = make({1.0f, 2.0f}, {2});
  CompareStats exact;
  compare_output(want, want, {1e-4, 1e-4}, "y", 0, 1, exact);
  EXPECT_EQ(exact.tol_used, 0.0);
  CompareStats off;
  compare_output(make({1.0f, 2.01f}, {2}), want, {1e-4, 1e-4}, "y", 0, 1, off);
  EXPECT_FALSE(off.ok());
  EXPECT_GT(off.tol_used, 1.0);
  // no tolerance at all: any difference uses an unbounded share
  CompareStats none;
  compare_output(make({1.0f, 2.01f}, {2}), want, {0.0, 0.0}, "y", 0, 1, none);
  EXPECT_TRUE(std::isinf(none.tol_used));
}

TEST(Compare, FirstMismatchCarriesCoordinatesAndValues) {
  auto want = make({1, 2, 3, 4, 5, 6}, {2, 3});
  auto got = make({1, 2, 3, 4, 5.5f, 7}, {2, 3});
  CompareStats st;
  compare_output(got, want, {1e-5, 1e-4}, "y", 3, 2, st);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.mismatches, 2u);
  ASSERT_TRUE(st.first.has_value());
  EXPECT_EQ(st.first->index, 4u);
  EXPECT_EQ(st.first->coord, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(st.first->got, 5.5);
  EXPECT_EQ(st.first->want, 5.0);
  EXPECT_EQ(st.first->seed, 3);
  EXPECT_EQ(st.to_json()["first_mismatch"]["coord"], nlohmann::json({1, 1}));
}

TEST(Compare, NanOrInfWhereTheReferenceIsFiniteFails) {
  auto want = make({1, 2}, {2});
  auto got = make({NAN, INFINITY}, {2});
  CompareStats st;
  compare_output(got, want, {1e9, 1e9}, "y", 0, 1, st);
  EXPECT_EQ(st.mismatches, 2u);
  EXPECT_EQ(st.nonfinite, 2u);
  // the error summary cannot read 0 when the outputs are not finite (issue 24, finding 7)
  const auto j = st.to_json();
  EXPECT_EQ(j["max_abs_err"], "inf") << j.dump();
  EXPECT_EQ(j["max_rel_err"], "inf");
  EXPECT_EQ(j["tolerance_used"], "inf");
  // and the same where the reference's NaN is missed
  CompareStats missed;
  compare_output(make({1}, {1}), make({NAN}, {1}), {1e9, 1e9}, "y", 0, 1, missed);
  EXPECT_EQ(missed.to_json()["max_abs_err"], "inf");
}

TEST(Compare, NanMatchesNanAndInfMatchesTheSameInf) {
  auto want = make({NAN, INFINITY, -INFINITY}, {3});
  auto same = make({NAN, INFINITY, -INFINITY}, {3});
  auto wrong = make({1.0f, -INFINITY, 0.0f}, {3});
  CompareStats ok, bad;
  compare_output(same, want, {0, 0}, "y", 0, 1, ok);
  compare_output(wrong, want, {1e9, 1e9}, "y", 0, 1, bad);
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(bad.mismatches, 3u);
}

TEST(Stats, MedianAndIqrInterpolate) {
  TimeStats t = summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(t.median, 3.0);
  EXPECT_EQ(t.q1, 2.0);
  EXPECT_EQ(t.q3, 4.0);
  EXPECT_EQ(t.iqr, 2.0);
  EXPECT_EQ(t.min, 1.0);
  EXPECT_EQ(t.n, 5u);
  EXPECT_EQ(summarize({1, 2, 3, 4}).median, 2.5);
  EXPECT_EQ(TimeStats::from_json(t.to_json()).iqr, 2.0);
}

// The Python worker's comparison, where it failed, runs the Model in float64 too (jobs.py
// _against_fp64): merged over calls (counts summed, the worst kept), and where the reference itself is
// outside the tolerance of that run, the verdict's text says so beside what the check found.
TEST(Compare, AReferenceOutsideItsFloat64RunIsNamedInTheMismatchText) {
  const nlohmann::json first = {{"checked", 1024}, {"mismatches", 3}, {"correct", false},
                                {"first_mismatch", {{"output", "output"}, {"coord", {7, 0}}, {"seed", 1}, {"call", 1}, {"got", 1.5}, {"want", 1.2}}},
                                {"reference_fp64",
                                 {{"checked", 1024}, {"reference_outside", 2}, {"reference_tolerance_used", 3.1}, {"candidate_outside", 0},
                                  {"candidate_tolerance_used", 0.2}}}};
  const nlohmann::json second = {{"checked", 1024}, {"mismatches", 1}, {"correct", false},
                                 {"reference_fp64",
                                  {{"checked", 1024}, {"reference_outside", 1}, {"reference_tolerance_used", 1.4}, {"candidate_outside", 1},
                                   {"candidate_tolerance_used", 1.1}}}};
  const nlohmann::json merged = merge_stats(merge_stats(nlohmann::json(), first), second);
  EXPECT_EQ(merged["mismatches"], 4);
  EXPECT_EQ(merged["reference_fp64"]["reference_outside"], 3);
  EXPECT_EQ(merged["reference_fp64"]["candidate_outside"], 1);
  EXPECT_DOUBLE_EQ(merged["reference_fp64"]["reference_tolerance_used"].get<double>(), 3.1);
  EXPECT_DOUBLE_EQ(merged["reference_fp64"]["candidate_tolerance_used"].get<double>(), 1.1);
  const std::string text = mismatch_text(merged);
  EXPECT_NE(text.find("4 of 2048 values differ"), std::string::npos) << text;
  EXPECT_NE(text.find("the reference itself is outside the tolerance of the Model run in float64 at 3 of 2048 values (worst 3.1 of it), "
                      "this candidate at 1 (worst 1.1)"),
            std::string::npos)
      << text;
  // a reference within its float64 run's tolerance, or a float64 run not made: nothing is added
  nlohmann::json fine = first;
  fine["reference_fp64"]["reference_outside"] = 0;
  EXPECT_EQ(mismatch_text(fine).find("float64"), std::string::npos);
  nlohmann::json skipped = first;
  skipped["reference_fp64"] = {{"skipped", "not made: the Model in float64 needs about 40.0 GiB, 12.0 GiB is free"}};
  EXPECT_EQ(mismatch_text(skipped).find("float64"), std::string::npos);
  EXPECT_EQ(merge_stats(skipped, first)["reference_fp64"]["reference_outside"], 2) << "a run made replaces one skipped";
}

// Values judged by the Model run in float64 (jobs.py _judged_by_fp64: each value that differs from eager's is
// within the float64 answer's tolerance, where eager's is not): merged over calls, a pass whose text says so;
// where some are outside it too (--judge float64), the failure's text says how many.
TEST(Compare, ValuesJudgedByTheFloat64ModelAreCountedAndSaid) {
  const nlohmann::json fp = {{"checked", 1024}, {"reference_outside", 5}, {"reference_tolerance_used", 9.5}, {"candidate_outside", 0},
                             {"candidate_tolerance_used", 0.01}, {"rescued", 5}, {"unrescued", 0}, {"judge", "float64"}};
  const nlohmann::json call = {{"checked", 1024}, {"mismatches", 0}, {"correct", true}, {"judged_by_float64", 5},
                               {"eager_mismatches", 5}, {"reference_fp64", fp}};
  const nlohmann::json merged = merge_stats(merge_stats(nlohmann::json(), call), call);
  EXPECT_TRUE(merged["correct"].get<bool>());
  EXPECT_EQ(merged["judged_by_float64"], 10);
  EXPECT_EQ(merged["reference_fp64"]["rescued"], 10);
  const std::string text = judged_text(merged);
  EXPECT_NE(text.find("10 values differ from torch eager's by more than the tolerance"), std::string::npos) << text;
  EXPECT_NE(text.find("KernelBench's own check, against eager, fails them"), std::string::npos) << text;
  EXPECT_EQ(judged_text(nlohmann::json{{"checked", 10}, {"mismatches", 0}}), "");
  nlohmann::json failed = {{"checked", 1024}, {"mismatches", 7}, {"correct", false},
                           {"first_mismatch", {{"output", "output"}, {"coord", {1}}, {"seed", 0}, {"call", 1}, {"got", 1.0}, {"want", 2.0}}},
                           {"reference_fp64", fp}};
  failed["reference_fp64"]["unrescued"] = 2;
  EXPECT_NE(mismatch_text(failed).find("2 of the values that differ from eager's are outside the float64 answer's tolerance too"),
            std::string::npos)
      << mismatch_text(failed);
  failed["reference_fp64"]["judge"] = "eager";
  EXPECT_NE(mismatch_text(failed).find("the check asks for eager's own fp32 rounding there (--judge eager)"), std::string::npos);
}

}  // namespace kfab
