// include/kfab/templates/fast_div.h against the division: the pooling kernels find an output's place by it
// (tuner/pool.cpp's kfab_pool_packed), so one wrong quotient is a wrong output.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace kfab_fd {
#include "kfab/templates/fast_div.h"
}  // namespace kfab_fd

namespace kfab {
namespace {

using kfab_fd::kfab_div;
using kfab_fd::kfab_fast_div;

// Divisors: 1 to 4096, the powers of two and their neighbours up to 2^31, and random ones; numerators: the
// edges of each quotient (q d - 1, q d, q d + 1) near 0 and near 2^32, and random ones.
TEST(FastDiv, EveryQuotientIsTheDivisions) {
  std::vector<uint32_t> ds;
  for (uint32_t d = 1; d <= 4096; ++d) ds.push_back(d);
  for (int k = 1; k <= 31; ++k) {
    const uint32_t p = uint32_t{1} << k;
    ds.insert(ds.end(), {p - 1, p, p + (k < 31 ? 1u : 0u)});
  }
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> any_d(1, uint32_t{1} << 31), any_n;
  for (int i = 0; i < 2000; ++i) ds.push_back(any_d(gen));
  int64_t checked = 0, wrong = 0;
  for (const uint32_t d : ds) {
    const auto f = kfab_fast_div(d);
    const auto check = [&](uint64_t n) {
      if (n > UINT32_MAX) return;
      const auto q = kfab_div(static_cast<uint32_t>(n), f);
      ++checked;
      if (q != static_cast<uint32_t>(n) / d && ++wrong <= 10) ADD_FAILURE() << n << " / " << d << ": " << q << ", not " << n / d;
    };
    const uint64_t top = UINT32_MAX / d;
    for (const uint64_t q : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{1000}, top - 1, top, top + 1})
      for (int64_t e = -1; e <= 1; ++e)
        if (static_cast<int64_t>(q * d) + e >= 0) check(static_cast<uint64_t>(static_cast<int64_t>(q * d) + e));
    check(UINT32_MAX);
    for (int i = 0; i < 200; ++i) check(any_n(gen));
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(checked, 1000000);
}

}  // namespace
}  // namespace kfab
