#include <gtest/gtest.h>

#include <cmath>

#include "core/compare.h"
#include "core/stats.h"

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

}  // namespace kfab
