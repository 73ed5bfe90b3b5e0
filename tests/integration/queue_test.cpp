// Issue 26: benches across hosts through a Redis job queue, with a real redis-server on loopback (Debian's
// redis-server, installed by `make`) and `kfab worker` processes on the cpu target.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>

#include "backends/backend.h"
#include "core/process.h"
#include "store/store.h"
#include "harness.h"

namespace kfab::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// A redis-server of its own on a loopback port, ended with the test.
class RedisOnLoopback : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string server = find_program("redis-server");
    if (server.empty()) {
      // CI installs it (`make` does): there its absence is a failure, elsewhere a skip.
      if (const char* ci = std::getenv("CI"); ci && std::string(ci) == "true") FAIL() << "no redis-server in CI";
      GTEST_SKIP() << "no redis-server (apt-get install redis-server)";
    }
    port_ = free_port();
    SpawnOptions so;
    so.argv = {server, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"};
    so.output_file = scratch() / ("redis-" + std::to_string(port_) + ".log");
    auto c = Child::spawn(so);
    ASSERT_TRUE(c.has_value()) << c.error().message;
    server_.emplace(std::move(*c));
    for (int i = 0; i < 100 && cli({"PING"}) != "PONG"; ++i) std::this_thread::sleep_for(50ms);
    ASSERT_EQ(cli({"PING"}), "PONG") << "redis-server did not answer on port " << port_;
  }
  void TearDown() override { workers_.clear(); }

  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  /// redis-cli's answer, without its last newline.
  std::string cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"redis-cli", "-p", std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_command(argv, 20);
    if (!r) return "";
    std::string s = r->output;
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }

  /// `kfab worker` with the tests' store and cache, its output in a log; `prefix` goes before kfab.
  Child& worker(const std::vector<std::string>& args, const std::vector<std::string>& prefix = {}) {
    SpawnOptions so;
    so.argv = prefix;
    so.argv.push_back(KFAB_BINARY);
    so.argv.push_back("worker");
    so.argv.insert(so.argv.end(), args.begin(), args.end());
    so.env = {{"KFAB_DATA_DIR", (scratch() / "data").string()}, {"KFAB_CACHE_DIR", shared_test_cache().string()}};
    so.output_file = scratch() / ("worker-" + std::to_string(workers_.size()) + "-" + std::to_string(port_) + ".log");
    auto c = Child::spawn(so);
    EXPECT_TRUE(c.has_value()) << c.error().message;
    workers_.push_back(std::move(*c));
    return workers_.back();
  }

  /// `tasks` copies of the affine task, each with one bundled candidate (`candidate`: good.cpp for
  /// the cpu target, good.cl.cpp for opencl).
  fs::path suite_of(const std::string& name, int tasks, const std::string& candidate = "good.cpp") {
    const fs::path suite = scratch() / name;
    for (int i = 1; i <= tasks; ++i) {
      const fs::path t = suite / (std::to_string(i) + "_affine");
      fs::create_directories(t / "candidates");
      for (const char* f : {"task.toml", "reference.cpp"}) fs::copy_file(fixture("tasks/affine/") + f, t / f);
      fs::copy_file(fixture("tasks/affine/candidates/") + candidate, t / "candidates" / candidate);
    }
    return suite;
  }

  int port_ = 0;
  std::optional<Child> server_;
  std::vector<Child> workers_;
};

// Jobs spread over two workers, each task's result is written once and comes back as its row; the
// queue holds nothing pending after; a resumed bench takes the results that are there and sends no job.
TEST_F(RedisOnLoopback, JobsSpreadOverWorkersAndEachResultIsWrittenOnce) {
  const fs::path suite = suite_of("queue-suite", 4);
  worker({"--redis", url(), "--queue", "q1", "--max-jobs", "2", "--name", "w1"});
  worker({"--redis", url(), "--queue", "q1", "--max-jobs", "2", "--name", "w2"});
  // `kfab doctor --redis` shows the pool: both workers, once they have joined.
  json pool;
  for (int i = 0; i < 100; ++i) {
    CliResult d = kfab_cli({"doctor", "--json", "--redis", url(), "--queue", "q1"});
    ASSERT_EQ(d.status.code, 0) << d.err;
    pool = json::parse(d.out)["pool"];
    if (pool.value("workers", json::array()).size() == 2) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(pool["found"], true) << pool.dump();
  ASSERT_EQ(pool["workers"].size(), 2u) << pool.dump();
  EXPECT_EQ(pool["waiting"], 0);
  const fs::path out = scratch() / "bench-queue";
  CliResult r = kfab_cli({"bench", suite.string(), "--target", "cpu", "--eval", "--seeds", "2", "--out", out.string(), "--json",
                          "--quiet", "--redis", url(), "--queue", "q1"});
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  json b = json::parse(*read_file(out / "bench.json"));
  EXPECT_EQ(b["finished"], true);
  EXPECT_EQ(b["queue"]["name"], "q1");
  ASSERT_EQ(b["tasks"].size(), 4u);
  std::set<std::string> by;
  for (size_t i = 0; i < 4; ++i) {
    const json& row = b["tasks"][i];
    EXPECT_EQ(row["disposition"], "passed") << row.dump(1);
    EXPECT_EQ(fs::path(row["path"].get<std::string>()).filename(), std::to_string(i + 1) + "_affine") << "the suite's order";
    EXPECT_TRUE(row["report"].is_object());
    by.insert(row.value("worker", std::string()));
  }
  EXPECT_EQ(by, (std::set<std::string>{"w1", "w2"})) << "two jobs each (--max-jobs 2)";
  for (auto& w : workers_) EXPECT_TRUE(w.wait(std::chrono::steady_clock::now() + 60s).ok()) << "a worker ends after its jobs";
  EXPECT_EQ(cli({"XLEN", "q1:jobs"}), "0") << "every job acknowledged and deleted";
  CliResult d = kfab_cli({"doctor", "--json", "--redis", url(), "--queue", "q1"});
  EXPECT_EQ(json::parse(d.out)["pool"]["workers"].size(), 0u) << "workers done with their jobs leave the pool: " << d.out;
  EXPECT_EQ(cli({"--raw", "EVAL", "return #redis.call('KEYS', 'q1:result:*')", "0"}), "4");

  b["tasks"] = json::array();
  b["finished"] = false;
  ASSERT_TRUE(write_file_atomic(out / "bench.json", b.dump()).has_value());
  CliResult again = kfab_cli({"bench", "--resume", out.string(), "--json", "--quiet"}, 60);
  ASSERT_EQ(again.status.code, 0) << again.out << again.err;
  EXPECT_EQ(json::parse(*read_file(out / "bench.json"))["tasks"].size(), 4u);
  EXPECT_EQ(cli({"XLEN", "q1:jobs"}), "0") << "no job sent again";
}

// OpenCL devices as the workers' devices (PoCL here and in CI): a bench's tasks spread over two
// workers, each row passed, each result written once.
TEST_F(RedisOnLoopback, OpenclTasksSpreadOverWorkers) {
  auto ocl = make_backend("opencl");
  if (!ocl || ocl->probe() == 0) {
    if (const char* ci = std::getenv("CI"); ci && std::string(ci) == "true") FAIL() << "no OpenCL platform in CI (PoCL)";
    GTEST_SKIP() << "no OpenCL platform here";
  }
  const fs::path suite = suite_of("queue-opencl-suite", 4, "good.cl.cpp");
  worker({"--redis", url(), "--queue", "q5", "--max-jobs", "2", "--name", "o1"});
  worker({"--redis", url(), "--queue", "q5", "--max-jobs", "2", "--name", "o2"});
  // devices belong to the workers: a bench or an optimize given both is refused, with what to do
  for (const char* cmd : {"bench", "optimize"}) {
    CliResult both = kfab_cli({cmd, suite.string(), "--target", "opencl", "--redis", url(), "--devices", "0,1"});
    EXPECT_EQ(both.status.code, 2) << cmd << both.out << both.err;
    EXPECT_NE(both.err.find("kfab worker --redis URL --device D"), std::string::npos) << both.err;
  }
  const fs::path out = scratch() / "bench-queue-opencl";
  CliResult r = kfab_cli({"bench", suite.string(), "--target", "opencl", "--eval", "--seeds", "2", "--out", out.string(), "--json",
                          "--quiet", "--redis", url(), "--queue", "q5"});
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  const json b = json::parse(*read_file(out / "bench.json"));
  ASSERT_EQ(b["tasks"].size(), 4u);
  std::set<std::string> workers;
  for (const auto& row : b["tasks"]) {
    EXPECT_EQ(row["disposition"], "passed") << row.dump(1);
    workers.insert(row.value("worker", std::string()));
  }
  EXPECT_EQ(workers, (std::set<std::string>{"o1", "o2"})) << "each worker took two jobs (--max-jobs 2)";
  EXPECT_EQ(cli({"EVAL", "return #redis.call('KEYS', 'q5:result:*')", "0"}), "4");
  EXPECT_EQ(cli({"XLEN", "q5:jobs"}), "0");
}

// What a "worker" writes back is read, not trusted: results that are not JSON, not an object, or a
// row without a disposition become error rows; the bench finishes and says so.
TEST_F(RedisOnLoopback, GarbageResultsBecomeErrorRowsAndTheBenchFinishes) {
  const fs::path suite = suite_of("queue-garbage-suite", 3);
  const fs::path out = scratch() / "bench-queue-garbage";
  SpawnOptions so;
  so.argv = {KFAB_BINARY, "bench", suite.string(), "--target", "cpu", "--eval", "--seeds", "2", "--out", out.string(), "--quiet",
             "--redis", url(), "--queue", "q6"};
  so.env = {{"KFAB_DATA_DIR", (scratch() / "data").string()}, {"KFAB_CACHE_DIR", shared_test_cache().string()}};
  so.output_file = scratch() / "bench-queue-garbage.log";
  auto bench = Child::spawn(so);
  ASSERT_TRUE(bench.has_value()) << bench.error().message;
  for (int i = 0; i < 600 && cli({"XLEN", "q6:jobs"}) != "3"; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_EQ(cli({"XLEN", "q6:jobs"}), "3");
  // the jobs' ids, from the stream; each gets its own kind of garbage
  const std::string ids = cli({"EVAL", "local r = {} for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do "
                                       "table.insert(r, e[2][2]) end return table.concat(r, ' ')", "1", "q6:jobs"});
  std::vector<std::string> jobs;
  for (size_t at = 0; at < ids.size();) {
    const size_t sp = ids.find(' ', at);
    jobs.push_back(ids.substr(at, sp == std::string::npos ? std::string::npos : sp - at));
    at = sp == std::string::npos ? ids.size() : sp + 1;
  }
  ASSERT_EQ(jobs.size(), 3u) << ids;
  const std::string garbage[] = {"not json at all", "[1, 2, 3]", R"({"row": {"task": 7}, "worker": 5})"};
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(cli({"SET", "q6:result:" + jobs[i], garbage[i]}), "OK");
  const ExitStatus ended = bench->wait(std::chrono::steady_clock::now() + 120s);
  EXPECT_EQ(ended.code, 1) << ended.describe() << *read_file(scratch() / "bench-queue-garbage.log");
  const json b = json::parse(*read_file(out / "bench.json"));
  EXPECT_EQ(b["finished"], true);
  ASSERT_EQ(b["tasks"].size(), 3u);
  for (const auto& row : b["tasks"]) {
    EXPECT_EQ(row["disposition"], "error") << row.dump();
    EXPECT_NE(row.value("error", std::string()).find("the worker's job failed"), std::string::npos) << row.dump();
  }
}

// A worker killed in the middle of a job: once its lease runs out another worker takes the job over
// and runs it; the result is written once, nothing stays pending, the store is intact.
TEST_F(RedisOnLoopback, AKilledWorkersJobIsRedoneElsewhere) {
  const fs::path suite = suite_of("queue-kill-suite", 1);
  const fs::path dying = scratch() / "dying-worker";
  const fs::path script = scratch() / "kill-at-first-job.sh";
  ASSERT_TRUE(write_file_atomic(script, "#!/bin/sh\n\"$@\" & pid=$!\nwhile kill -0 $pid 2>/dev/null; do\n"
                                        "  if [ -n \"$(ls -A '" + dying.string() + "' 2>/dev/null)\" ]; then kill -9 $pid; kill -9 $$; fi\n"
                                        "  sleep 0.01\ndone\nwait $pid\n")
                  .has_value());
  fs::permissions(script, fs::perms::owner_all);
  Child& a = worker({"--redis", url(), "--queue", "q2", "--lease", "2", "--name", "dies", "--work-dir", dying.string()}, {script.string()});

  SpawnOptions so;
  const fs::path out = scratch() / "bench-queue-kill";
  so.argv = {KFAB_BINARY, "bench", suite.string(), "--target", "cpu", "--eval", "--seeds", "2", "--out", out.string(), "--quiet",
             "--redis", url(), "--queue", "q2"};
  so.env = {{"KFAB_DATA_DIR", (scratch() / "data").string()}, {"KFAB_CACHE_DIR", shared_test_cache().string()}};
  so.output_file = scratch() / "bench-queue-kill.log";
  auto bench = Child::spawn(so);
  ASSERT_TRUE(bench.has_value()) << bench.error().message;
  const ExitStatus died = a.wait(std::chrono::steady_clock::now() + 120s);
  EXPECT_EQ(died.signal, SIGKILL) << died.describe();
  EXPECT_EQ(cli({"XLEN", "q2:jobs"}), "1") << "its job still in the queue";

  Child& b = worker({"--redis", url(), "--queue", "q2", "--lease", "2", "--name", "lives", "--max-jobs", "1"});
  const ExitStatus ended = bench->wait(std::chrono::steady_clock::now() + 180s);
  EXPECT_EQ(ended.code, 0) << ended.describe() << *read_file(scratch() / "bench-queue-kill.log");
  EXPECT_TRUE(b.wait(std::chrono::steady_clock::now() + 60s).ok());
  const json r = json::parse(*read_file(out / "bench.json"));
  ASSERT_EQ(r["tasks"].size(), 1u);
  EXPECT_EQ(r["tasks"][0]["disposition"], "passed");
  EXPECT_EQ(r["tasks"][0]["worker"], "lives");
  const std::string log = *read_file(scratch() / ("worker-1-" + std::to_string(port_) + ".log"));
  EXPECT_NE(log.find("taken over from a worker whose lease ran out"), std::string::npos) << log;
  EXPECT_EQ(log.find("another worker had written its result"), std::string::npos) << log;
  EXPECT_EQ(cli({"XLEN", "q2:jobs"}), "0");
  auto check = run_command({"python3", "-c", "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA integrity_check').fetchone()[0])",
                            (scratch() / "data/kfab.db").string()},
                           60);
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ(check->output, "ok\n") << "the store intact";
}

// `kfab optimize --redis`: the tuner's points and its final check are jobs the workers take. A run
// killed once its jobs are sent, before any worker took one, resumes (`--resume`, its queue taken
// from the run) without sending them again: each job evaluated once, each result written once.
TEST_F(RedisOnLoopback, AnOptimizeRunsItsEvaluationsOnTheWorkersAndAResumedRunSendsNothingTwice) {
  const std::string softmax = std::string(KFAB_SOURCE_DIR) + "/tasks/core/softmax";
  const fs::path data = scratch() / "data-optimize-queue";
  fs::create_directories(data);
  SpawnOptions so;
  so.argv = {KFAB_BINARY, "optimize", softmax, "--target", "cpu", "--points", "3", "--fresh", "--out", (scratch() / "opt-queue").string(),
             "--quiet", "--redis", url(), "--queue", "q3"};
  so.env = {{"KFAB_DATA_DIR", data.string()}, {"KFAB_CACHE_DIR", shared_test_cache().string()}};
  so.output_file = scratch() / "optimize-queue.log";
  auto run = Child::spawn(so);
  ASSERT_TRUE(run.has_value()) << run.error().message;
  // no worker yet: the three points wait in the queue; then the run is killed
  for (int i = 0; i < 600 && cli({"XLEN", "q3:jobs"}) != "3"; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_EQ(cli({"XLEN", "q3:jobs"}), "3") << *read_file(scratch() / "optimize-queue.log");
  run->kill_group();
  EXPECT_EQ(run->wait().signal, SIGKILL);
  std::string id;
  {
    auto store = Store::open(data / "kfab.db");
    ASSERT_TRUE(store.has_value());
    auto runs = (*store)->latest_run();
    ASSERT_TRUE(runs.has_value());
    id = *runs;
  }

  worker({"--redis", url(), "--queue", "q3", "--name", "a"});
  worker({"--redis", url(), "--queue", "q3", "--name", "b"});
  CliResult r = kfab_with(data, shared_test_cache(), scratch() / "io-optimize-queue", {"optimize", "--resume", id, "--json", "--quiet"});
  ASSERT_TRUE(found_correct(r)) << r.out << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["best"]["disposition"], "passed") << j.dump();
  ASSERT_EQ(j["points"].size(), 3u);
  for (const auto& p : j["points"]) EXPECT_EQ(p["disposition"], "passed") << p.dump();
  EXPECT_EQ(j["verdict"].value("worker", std::string()).empty(), false) << "the final check's verdict names its worker";
  // three points and the final check, each sent once, evaluated once, its result written once
  EXPECT_EQ(cli({"EVAL", "return #redis.call('KEYS', 'q3:sent:*')", "0"}), "4");
  EXPECT_EQ(cli({"EVAL", "return #redis.call('KEYS', 'q3:result:*')", "0"}), "4");
  EXPECT_EQ(cli({"XLEN", "q3:jobs"}), "0");
  workers_.clear();  // the workers' logs are complete once they are gone
  int jobs = 0;
  for (const char* w : {"0", "1"}) {
    const std::string log = *read_file(scratch() / ("worker-" + std::string(w) + "-" + std::to_string(port_) + ".log"));
    for (size_t at = log.find(": passed in "); at != std::string::npos; at = log.find(": passed in ", at + 1)) ++jobs;
    EXPECT_EQ(log.find("another worker had written its result"), std::string::npos) << log;
    EXPECT_EQ(log.find("done already"), std::string::npos) << log;
  }
  EXPECT_EQ(jobs, 4);
}

// `kfab optimize --llm ... --redis`: an agent's candidates (and its final check) are evaluated by the
// queue's workers, each with processes of its own; the run is stored where it ran, as at home.
TEST_F(RedisOnLoopback, AnAgentsCandidatesAreEvaluatedByTheWorkers) {
  const fs::path dir = scratch() / "agent-queue";
  const fs::path data = dir / "data";
  fs::create_directories(data);
  MockLlm llm(fixture("llm/affine_session.json"), dir / "mock");
  worker({"--redis", url(), "--queue", "q4", "--name", "only"});
  CliResult r = kfab_with(data, shared_test_cache(), dir / "io",
                          {"optimize", fixture("tasks/affine"), "--target", "cpu", "--llm", "mock:m1", "--config", llm.config(), "--budget",
                           "3", "--out", (dir / "out").string(), "--json", "--quiet", "--redis", url(), "--queue", "q4"});
  ASSERT_TRUE(found_correct(r));
  const json j = json::parse(r.out);
  EXPECT_EQ(j["best"]["disposition"], "passed") << j.dump();
  EXPECT_EQ(j["candidates"], 3);
  auto store = Store::open(data / "kfab.db");
  ASSERT_TRUE(store.has_value());
  auto steps = (*store)->run_steps(j["run"]);
  ASSERT_TRUE(steps.has_value());
  std::vector<std::string> dispositions;
  for (const auto& s : *steps) dispositions.push_back(s.disposition);
  EXPECT_EQ(dispositions, (std::vector<std::string>{"", "incorrect", "passed", "", "passed", "passed"})) << "as a run evaluated here";
  // three candidates and the final check: four jobs, each evaluated by the worker
  EXPECT_EQ(cli({"EVAL", "return #redis.call('KEYS', 'q4:result:*')", "0"}), "4");
  EXPECT_EQ(cli({"XLEN", "q4:jobs"}), "0");
}

}  // namespace
}  // namespace kfab::test
