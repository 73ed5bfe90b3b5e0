// Every hand-written candidate of the bundled suite passes its task (speedups are for `make bench`).
#include <gtest/gtest.h>

#include <filesystem>

#include "harness.h"

namespace kfab::test {

namespace fs = std::filesystem;

static std::vector<std::string> bundled_candidates() {
  std::vector<std::string> v;
  const fs::path root = fs::path(KFAB_SOURCE_DIR) / "tasks/core";
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(root, ec)) {
    if (!fs::exists(task.path() / "candidates", ec)) continue;
    for (const auto& c : fs::directory_iterator(task.path() / "candidates", ec))
      if (c.path().extension() == ".cpp") v.push_back(fs::relative(c.path(), root).string());
  }
  std::sort(v.begin(), v.end());
  return v;
}

class BundledCandidate : public ::testing::TestWithParam<std::string> {};

TEST_P(BundledCandidate, Passes) {
  const fs::path cand = fs::path("tasks/core") / GetParam();
  const fs::path task = cand.parent_path().parent_path();
  CliResult r = kfab_cli({"eval", task.string(), cand.string(), "--json", "--min-calls", "5", "--min-time", "0.02"});
  ASSERT_TRUE(r.status.exited) << r.status.describe();
  nlohmann::json j = r.json();
  EXPECT_EQ(j.value("disposition", ""), "passed") << j.value("detail", "") << r.err;
  EXPECT_EQ(r.status.code, 0);
  for (const auto& s : j["shapes"]) EXPECT_TRUE(s.value("correct", false)) << s.dump();
}

INSTANTIATE_TEST_SUITE_P(Core, BundledCandidate, ::testing::ValuesIn(bundled_candidates()), [](const auto& info) {
  std::string n = info.param;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

TEST(BundledSuite, HasTwelveTasksEachWithACandidate) { EXPECT_GE(bundled_candidates().size(), 12u); }

}  // namespace kfab::test
