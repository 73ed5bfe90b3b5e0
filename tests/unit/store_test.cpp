#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "store/store.h"

namespace kfab {

namespace fs = std::filesystem;

namespace {

Task fixture_task() {
  auto t = load_task(fs::path(KFAB_TEST_FIXTURES) / "tasks/affine");
  EXPECT_TRUE(t.has_value());
  return *t;
}

Verdict verdict(const std::string& hash, Disposition d, std::optional<double> speedup) {
  Verdict v;
  v.task = "affine";
  v.target = "cpu";
  v.dsl = "cpp";
  v.candidate = "c.cpp";
  v.candidate_hash = hash;
  v.disposition = d;
  v.detail = "d";
  v.speedup = speedup;
  return v;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = fs::temp_directory_path() / ("kfab-store-" + std::to_string(::getpid()) + "-" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name()) / "kfab.db";
  }
  void TearDown() override { fs::remove_all(db_.parent_path()); }
  fs::path db_;
};

}  // namespace

TEST_F(StoreTest, RecordsTasksCandidatesByHashAndEveryEvaluation) {
  auto s = Store::open(db_);
  ASSERT_TRUE(s.has_value()) << s.error().to_string();
  const Task t = fixture_task();
  ASSERT_TRUE((*s)->record_evaluation(t, "src a", verdict("aaa", Disposition::Passed, 2.0)).has_value());
  ASSERT_TRUE((*s)->record_evaluation(t, "src a", verdict("aaa", Disposition::Passed, 2.1)).has_value());
  ASSERT_TRUE((*s)->record_evaluation(t, "src b", verdict("bbb", Disposition::Crashed, std::nullopt)).has_value());
  EXPECT_EQ(*(*s)->count("tasks"), 1);
  EXPECT_EQ(*(*s)->count("candidates"), 2);
  EXPECT_EQ(*(*s)->count("evaluations"), 3);
  auto rows = (*s)->recent_evaluations(10);
  ASSERT_TRUE(rows.has_value());
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].disposition, "crashed");
  EXPECT_FALSE((*rows)[0].speedup.has_value());
  EXPECT_EQ((*rows)[1].speedup, 2.1);
}

TEST_F(StoreTest, ReopeningKeepsWhatWasStored) {
  {
    auto s = Store::open(db_);
    ASSERT_TRUE(s.has_value());
    ASSERT_TRUE((*s)->record_evaluation(fixture_task(), "src", verdict("h", Disposition::Passed, 1.5)).has_value());
  }
  auto s = Store::open(db_);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*(*s)->count("evaluations"), 1);
}

TEST_F(StoreTest, AFileThatIsNotAStoreIsAClearError) {
  fs::create_directories(db_.parent_path());
  std::FILE* f = std::fopen(db_.c_str(), "w");
  std::fputs("this is not an sqlite database, not even close; it is a text file of some length.....", f);
  std::fclose(f);
  auto s = Store::open(db_);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find(db_.string()), std::string::npos) << s.error().message;
}

TEST_F(StoreTest, TwoProcessesWritingAtOnceLoseAndCorruptNothing) {
  constexpr int kEach = 150;
  const Task t = fixture_task();
  { ASSERT_TRUE(Store::open(db_).has_value()); }
  pid_t kids[2];
  for (int k = 0; k < 2; ++k) {
    kids[k] = ::fork();
    ASSERT_GE(kids[k], 0);
    if (kids[k] == 0) {
      auto s = Store::open(db_);
      if (!s) ::_exit(10);
      for (int i = 0; i < kEach; ++i) {
        const std::string hash = "p" + std::to_string(k) + "-" + std::to_string(i % 10);
        if (!(*s)->record_evaluation(t, "src " + hash, verdict(hash, Disposition::Passed, 1.0 + i)).has_value()) ::_exit(11);
      }
      ::_exit(0);
    }
  }
  for (pid_t kid : kids) {
    int st = 0;
    ASSERT_EQ(::waitpid(kid, &st, 0), kid);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0);
  }
  auto s = Store::open(db_);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*(*s)->count("evaluations"), 2 * kEach);
  EXPECT_EQ(*(*s)->count("candidates"), 20);
  EXPECT_EQ(*(*s)->count("tasks"), 1);
  EXPECT_TRUE(*(*s)->integrity_ok());
}

}  // namespace kfab
