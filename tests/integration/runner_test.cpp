#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "backends/cpu_cpp/cpu_backend.h"
#include "core/hash.h"
#include "core/task.h"
#include "eval/evaluator.h"
#include "harness.h"
#include "runner/runner_client.h"

namespace kfab::test {

namespace {

class RunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("KFAB_RUNNER", KFAB_RUNNER_BINARY, 1);
    ::setenv("KFAB_CACHE_DIR", (std::string(KFAB_BINARY) + ".test-cache").c_str(), 1);
  }
  std::string build(const std::string& rel) {
    auto r = backend_.build(fixture(rel));
    EXPECT_TRUE(r.ok()) << r.failure().message;
    return r.value().artifact.string();
  }
  nlohmann::json verify_job(const std::string& cand) {
    return {{"op", "call"},   {"task", fixture("tasks/affine/task.toml")}, {"candidate", cand},
            {"base_seed", 1}, {"shape", {{"M", 8}, {"N", 16}}},           {"seed", 0}};
  }
  void SetUp() override { ref_ = build("tasks/affine/reference.cpp"); }
  CpuBackend backend_;
  std::string ref_;
};

}  // namespace

// The compile cache's key covers the headers a source includes by a quoted name, and theirs: a header
// changed without its source builds again (the old build is not loaded), and changed back finds the first.
TEST_F(RunnerTest, AHeaderChangedWithoutItsSourceBuildsAgain) {
  const auto dir = scratch() / "include-key";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "inner");
  auto put = [&](const std::string& rel, const std::string& text) { ASSERT_TRUE(write_file_atomic(dir / rel, text).has_value()) << rel; };
  put("helper.h", "#pragma once\n  #  include \"inner/value.h\"\n");
  put("inner/value.h", "constexpr int kValue = 1;\n");
  // a source no earlier run of this test built (the cache outlives runs)
  put("cand.cpp", "// " + std::to_string(::getpid()) + " " + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) +
                      "\n#include \"kfab/candidate.h\"\n#include \"helper.h\"\n"
                      "KFAB_EXPORT int kfab_run(const kfab_tensor*, int32_t, kfab_tensor*, int32_t, void*) { return kValue - 1; }\n");
  auto build = [&] {
    auto r = backend_.build(dir / "cand.cpp");
    EXPECT_TRUE(r.ok()) << r.failure().message;
    return r.ok() ? r.value() : BuildResult{};
  };
  const BuildResult first = build();
  EXPECT_FALSE(first.cached);
  const BuildResult again = build();
  EXPECT_TRUE(again.cached);
  EXPECT_EQ(again.key, first.key);
  put("inner/value.h", "constexpr int kValue = 2;\n");  // two includes down
  const BuildResult changed = build();
  EXPECT_FALSE(changed.cached);
  EXPECT_NE(changed.key, first.key);
  put("inner/value.h", "constexpr int kValue = 1;\n");
  const BuildResult back = build();
  EXPECT_TRUE(back.cached);
  EXPECT_EQ(back.key, first.key);
}

TEST_F(RunnerTest, ACrashedRunnerIsReplacedAndTheNextJobRuns) {
  RunnerClient client(RunnerOptions{});
  JobReply crash = client.run(verify_job(build("broken/crash.cpp")));
  EXPECT_EQ(crash.kind, JobReply::Kind::Crashed);
  EXPECT_NE(crash.detail.find("SIGSEGV"), std::string::npos) << crash.detail;
  JobReply good = client.run(verify_job(build("tasks/affine/candidates/good.cpp")));
  ASSERT_EQ(good.kind, JobReply::Kind::Ok) << good.detail;
  EXPECT_TRUE(good.body.value("ok", false)) << good.body.dump();
  // Its outputs came as one shared-memory descriptor.
  EXPECT_EQ(good.fds.size(), 1u);
  EXPECT_EQ(client.spawned(), 2);
}

TEST_F(RunnerTest, AHungRunnerIsKilledAtTheDeadlineAndReplaced) {
  RunnerOptions opt;
  opt.timeout_s = 1.0;
  RunnerClient client(opt);
  const auto start = std::chrono::steady_clock::now();
  JobReply hang = client.run(verify_job(build("broken/hang.cpp")));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(hang.kind, JobReply::Kind::Timeout);
  EXPECT_LT(s, 1.0 + 5.0);
  JobReply good = client.run(verify_job(build("tasks/affine/candidates/good.cpp")));
  ASSERT_EQ(good.kind, JobReply::Kind::Ok) << good.detail;
  EXPECT_EQ(client.spawned(), 2);
}

TEST_F(RunnerTest, OneEvaluatorGoesOnAfterACrashingCandidate) {
  auto task = open_task(fixture("tasks/affine"));
  ASSERT_TRUE(task.has_value());
  EvalOptions opt;
  opt.min_calls = 5;
  opt.min_time_s = 0.01;
  Evaluator ev(*task, "cpu", opt);
  auto bad = ev.evaluate(fixture("broken/crash.cpp"));
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->disposition, Disposition::Crashed);
  EXPECT_EQ(bad->shapes[0].status, "crashed");
  EXPECT_EQ(bad->shapes[1].status, "not_run");
  auto good = ev.evaluate(fixture("tasks/affine/candidates/good.cpp"));
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->disposition, Disposition::Passed) << good->detail;
}

TEST_F(RunnerTest, TheRunnerLivesInItsOwnFolderWithLimits) {
  RunnerOptions opt;
  opt.memory_bytes = 512ull << 20;
  RunnerClient client(opt);
  JobReply r = client.run(verify_job(build("broken/unbounded_alloc.cpp")));
  ASSERT_EQ(r.kind, JobReply::Kind::Ok) << r.detail;
  EXPECT_EQ(r.body.value("kind", ""), "crashed");
  EXPECT_NE(r.body.value("detail", "").find("out of memory"), std::string::npos);
}

TEST_F(RunnerTest, ReferenceFailureIsATaskErrorNotTheCandidates) {
  RunnerOptions opt;
  opt.trusted = true;
  RunnerClient client(opt);
  nlohmann::json job = verify_job("");
  job.erase("candidate");
  job["op"] = "reference";
  job["reference"] = build("broken/returns_nonzero.cpp");
  JobReply r = client.run(job);
  ASSERT_EQ(r.kind, JobReply::Kind::Ok);
  EXPECT_EQ(r.body.value("kind", ""), "reference_failed");
}

// The trusted runner computes the reference's answers: it never loads a candidate, and a candidate's
// runner does not compute answers.
TEST_F(RunnerTest, TheTrustedRunnerRefusesCandidatesAndACandidatesRunnerRefusesTheReference) {
  RunnerOptions opt;
  opt.trusted = true;
  RunnerClient trusted(opt);
  JobReply r = trusted.run(verify_job(build("tasks/affine/candidates/good.cpp")));
  ASSERT_EQ(r.kind, JobReply::Kind::Ok) << r.detail;
  EXPECT_EQ(r.body.value("kind", ""), "protocol_error");
  EXPECT_NE(r.body.value("detail", "").find("loads no candidate"), std::string::npos) << r.body.dump();
  nlohmann::json ref = verify_job("");
  ref.erase("candidate");
  ref["op"] = "reference";
  ref["reference"] = ref_;
  JobReply answer = trusted.run(ref);
  ASSERT_EQ(answer.kind, JobReply::Kind::Ok) << answer.detail;
  EXPECT_TRUE(answer.body.value("ok", false)) << answer.body.dump();
  EXPECT_EQ(answer.fds.size(), 1u);
  RunnerClient plain(RunnerOptions{});
  JobReply refused = plain.run(ref);
  ASSERT_EQ(refused.kind, JobReply::Kind::Ok) << refused.detail;
  EXPECT_EQ(refused.body.value("kind", ""), "protocol_error");
}

// A candidate's runner is stopped between its jobs: a thread it left running makes no progress.
TEST_F(RunnerTest, ACandidatesRunnerIsFrozenBetweenJobs) {
  RunnerOptions opt;
  opt.freeze_between_jobs = true;
  RunnerClient client(opt);
  JobReply r = client.run(verify_job(build("tasks/affine/candidates/good.cpp")));
  ASSERT_EQ(r.kind, JobReply::Kind::Ok) << r.detail;
  const pid_t pid = client.pid();
  ASSERT_GT(pid, 0);
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  ASSERT_NE(close, std::string::npos);
  EXPECT_EQ(text.substr(close + 2, 1), "T") << text;  // stopped
  JobReply again = client.run(verify_job(build("tasks/affine/candidates/good.cpp")));
  EXPECT_EQ(again.kind, JobReply::Kind::Ok) << again.detail;
  EXPECT_EQ(client.spawned(), 1);
}

}  // namespace kfab::test
