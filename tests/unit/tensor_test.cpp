#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/tensor.h"

namespace kfab {

TEST(HostTensor, ViewDescribesARowMajorBuffer) {
  HostTensor t(DType::F32, {3, 4, 5});
  kfab_tensor v = t.view();
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.strides[0], 20);
  EXPECT_EQ(v.strides[1], 5);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 64, 0u);
  EXPECT_EQ(t.numel(), 60u);
}

TEST(HostTensor, ScalarHasOneElement) {
  HostTensor t(DType::F64, {});
  EXPECT_EQ(t.numel(), 1u);
  EXPECT_EQ(t.view().ndim, 0);
}

TEST(HostTensor, FillIsDeterministicPerSeedAndDiffersAcrossSeeds) {
  HostTensor a(DType::F32, {1000}), b(DType::F32, {1000}), c(DType::F32, {1000});
  InitSpec normal{InitKind::Normal, 0.0, 1.0};
  a.fill(normal, 42);
  b.fill(normal, 42);
  c.fill(normal, 43);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  EXPECT_NE(std::memcmp(a.data(), c.data(), a.nbytes()), 0);
  double mean = 0, var = 0;
  for (size_t i = 0; i < a.numel(); ++i) mean += a.at(i);
  mean /= 1000;
  for (size_t i = 0; i < a.numel(); ++i) var += (a.at(i) - mean) * (a.at(i) - mean);
  var /= 1000;
  EXPECT_NEAR(mean, 0.0, 0.15);
  EXPECT_NEAR(var, 1.0, 0.2);
}

TEST(HostTensor, InitialisersRespectTheirBounds) {
  HostTensor u(DType::F32, {5000});
  u.fill({InitKind::Uniform, -2.0, 3.0}, 1);
  HostTensor r(DType::I64, {5000});
  r.fill({InitKind::RandInt, 0.0, 10.0}, 1);
  HostTensor b(DType::Bool, {5000});
  b.fill({InitKind::Bernoulli, 0.25, 0.0}, 1);
  double ones = 0;
  bool saw_zero = false, saw_nine = false;
  for (size_t i = 0; i < 5000; ++i) {
    EXPECT_GE(u.at(i), -2.0);
    EXPECT_LT(u.at(i), 3.0);
    EXPECT_GE(r.at(i), 0.0);
    EXPECT_LT(r.at(i), 10.0);
    EXPECT_EQ(r.at(i), std::floor(r.at(i)));
    saw_zero |= r.at(i) == 0.0;
    saw_nine |= r.at(i) == 9.0;
    ones += b.at(i);
  }
  EXPECT_TRUE(saw_zero && saw_nine);
  EXPECT_NEAR(ones / 5000, 0.25, 0.03);
}

TEST(HostTensor, PoisonFillsFloatsWithNanAndIntegersWithThePattern) {
  HostTensor f(DType::BF16, {7});
  f.poison(0x5a);
  for (size_t i = 0; i < 7; ++i) EXPECT_TRUE(std::isnan(f.at(i)));
  HostTensor i(DType::I32, {3});
  i.poison(0xa5);
  EXPECT_EQ(static_cast<uint32_t*>(i.data())[2], 0xa5a5a5a5u);
}

}  // namespace kfab
