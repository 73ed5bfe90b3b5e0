#include <gtest/gtest.h>

#include "core/task.h"
#include "eval/roofline.h"

namespace kfab {

TEST(Roofline, BoundIsTheSlowerOfComputeAndMemoryWithTheMargin) {
  Task t;
  t.cost_flops = "2*M*N*K";
  t.cost_bytes = "4*(M*K + K*N + M*N)";
  MachinePeaks p;
  p.flops_per_s = 1e12;
  p.bandwidth_Bps = 1e11;
  p.margin = 2.0;
  const ShapeBinding b{{"M", 1000}, {"N", 1000}, {"K", 1000}};
  // compute: 2e9 / 2e12 = 1 ms; memory: 1.2e7 / 2e11 = 0.06 ms
  EXPECT_NEAR(*bound_ms(t, b, p), 1.0, 1e-12);
  t.cost_flops.clear();
  EXPECT_NEAR(*bound_ms(t, b, p), 0.06, 1e-12);
  t.cost_bytes.clear();
  EXPECT_FALSE(bound_ms(t, b, p).has_value());
}

}  // namespace kfab
