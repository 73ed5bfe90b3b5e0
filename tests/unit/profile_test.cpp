#include <gtest/gtest.h>

#include "eval/profile.h"

namespace kfab {

TEST(NcuCsv, AveragesMetricsPerKernelAndRanksStalls) {
  const std::string csv = R"csv(==PROF== Connected to process 123
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","123","kfab-runner","h","affine(const float *, float *, long)","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","2.50"
"0","123","kfab-runner","h","affine(const float *, float *, long)","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","40.00"
"0","123","kfab-runner","h","affine(const float *, float *, long)","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","","3.5"
"0","123","kfab-runner","h","affine(const float *, float *, long)","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","","0.5"
"1","123","kfab-runner","h","affine(const float *, float *, long)","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","3,500"
"1","123","kfab-runner","h","affine(const float *, float *, long)","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","launch__registers_per_thread","register/thread","16"
==PROF== Disconnected from process 123
)csv";
  auto r = parse_ncu_csv(csv);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const auto& k = (*r)["affine(const float *, float *, long)"];
  EXPECT_DOUBLE_EQ(k["duration_ns"].get<double>(), 3000.0);  // 2.5 us and 3500 ns
  EXPECT_DOUBLE_EQ(k["dram_throughput_pct"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(k["registers_per_thread"].get<double>(), 16.0);
  EXPECT_EQ(k["launches"].get<int>(), 2);
  ASSERT_EQ(k["top_stalls"].size(), 2u);
  EXPECT_EQ(k["top_stalls"][0]["reason"], "long_scoreboard");
}

TEST(NcuCsv, NoTableIsAnError) {
  EXPECT_FALSE(parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n").has_value());
}

}  // namespace kfab
