// The order of the dedicated templates' grids: a search of a few points (kfab bench --points 2 or 3) must
// reach the points that measured fastest on the GPU machine for the shapes they serve.
#include <gtest/gtest.h>

#include "core/task.h"
#include "tuner/templates.h"

namespace kfab {

namespace {

Task group_norm_task(double group_len) {
  Task t;
  t.name = "instance_norm";
  t.op_class = "group_norm";
  t.inputs = {{"x", DType::F32, {"N", "C", "H", "W"}}};
  t.outputs = {{"y", DType::F32, {"N", "C", "H", "W"}}};
  t.op_params = {{"groups", 0}, {"eps", 1e-5}, {"affine", 0}};
  if (group_len > 0) t.op_params["group_len"] = group_len;
  return t;
}

int64_t holds(const TemplateParams& p) {  // the values 16 blocks' registers hold at this point
  return 16 * std::stoll(p.at("block")) * 4 * std::stoll(p.at("items"));
}

}  // namespace

// A group of 512 x 512 (KernelBench's level1/34): the first points keep it in a cluster's registers, smaller
// blocks first (on an H100, 16 x 256 threads: 97% of the copy bandwidth; 8 blocks' shared memory: 77%);
// without the hint the grid keeps its own order, whose first point reads such a group twice.
TEST(TemplateGrid, ALongGroupStartsWithThePointsThatKeepItInRegisters) {
  const KernelTemplate* gn = template_named("cuda_group_norm");
  ASSERT_NE(gn, nullptr);
  const Task t = group_norm_task(512 * 512);
  ASSERT_TRUE(gn->applies(t));
  const auto g = gn->grid(t);
  ASSERT_GE(g.size(), 5u);
  for (size_t i = 0; i < 3; ++i) EXPECT_GE(holds(g[i]), 512 * 512) << i << ": " << format_params(g[i]);
  EXPECT_EQ(g[0].at("block"), "256");
  EXPECT_EQ(g[3].count("hold") ? g[3].at("hold") : "", "smem") << format_params(g[3]);
  const auto plain = gn->grid(group_norm_task(0));
  EXPECT_LT(holds(plain.front()), 512 * 512);
  EXPECT_EQ(plain.size() + 2, g.size());  // the shared-memory points only where they hold the group
}

// A short group (a 64 x 64 group norm) keeps the grid's own order and gets no shared-memory point.
TEST(TemplateGrid, AShortGroupKeepsTheGridsOrder) {
  const KernelTemplate* gn = template_named("cuda_group_norm");
  ASSERT_NE(gn, nullptr);
  const auto g = gn->grid(group_norm_task(8 * 64 * 64));
  EXPECT_EQ(format_params(g.front()), "block=256, items=4");
  for (const auto& p : g) EXPECT_EQ(p.count("hold"), 0u) << format_params(p);
}

}  // namespace kfab
