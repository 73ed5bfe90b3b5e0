// Every hand-written candidate of the bundled suite passes its task on its target (cpu: *.cpp,
// cuda: *.cu, opencl: *.cl.cpp); targets not present here are skipped. Speedups are for `make bench`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "backends/backend.h"
#include "harness.h"

namespace kfab::test {

namespace fs = std::filesystem;

/// The target a candidate file is for, by its suffix.
inline std::string target_of(const std::string& file) {
  auto ends = [&](const std::string& s) { return file.size() >= s.size() && file.compare(file.size() - s.size(), s.size(), s) == 0; };
  if (ends(".cl.cpp")) return "opencl";
  if (ends(".cu")) return "cuda";
  return "cpu";
}

/// Whether a target can run here (its backend probes above 0); asked once per target.
inline bool target_present(const std::string& target) {
  static std::map<std::string, bool> known;
  auto it = known.find(target);
  if (it != known.end()) return it->second;
  auto b = make_backend(target);
  return known[target] = b && b->probe() > 0;
}

static std::vector<std::string> bundled_candidates() {
  std::vector<std::string> v;
  const fs::path root = fs::path(KFAB_SOURCE_DIR) / "tasks/core";
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(root, ec)) {
    if (!fs::exists(task.path() / "candidates", ec)) continue;
    for (const auto& c : fs::directory_iterator(task.path() / "candidates", ec)) {
      const auto ext = c.path().extension();
      if (ext == ".cpp" || ext == ".cu") v.push_back(fs::relative(c.path(), root).string());
    }
  }
  std::sort(v.begin(), v.end());
  return v;
}

class BundledCandidate : public ::testing::TestWithParam<std::string> {};

TEST_P(BundledCandidate, Passes) {
  const std::string target = target_of(GetParam());
  if (!target_present(target)) GTEST_SKIP() << "target " << target << " is not present here";
  const fs::path cand = fs::path("tasks/core") / GetParam();
  const fs::path task = cand.parent_path().parent_path();
  CliResult r = kfab_cli({"eval", task.string(), cand.string(), "--target", target, "--json", "--min-calls", "5",
                          "--min-time", "0.02"});
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

TEST(BundledSuite, HasTwelveTasksEachWithACpuCandidate) {
  int cpu = 0;
  for (const auto& c : bundled_candidates()) cpu += target_of(c) == "cpu";
  EXPECT_GE(cpu, 12);
}

// The conformance suite (after ggml's test-backend-ops): the same broken-candidate classes on every
// target, each with the same disposition, wherever a fixture of that class exists for the target.
struct ConformanceCase {
  std::string file;
  std::string disposition;
};

void PrintTo(const ConformanceCase& c, std::ostream* os) { *os << c.file << " -> " << c.disposition; }

static std::vector<ConformanceCase> conformance_cases() {
  const std::map<std::string, std::string> expected = {
      {"wrong_result", "incorrect"},       {"crash", "crashed"},           {"hang", "timeout"},
      {"unbounded_alloc", "crashed"},      {"modifies_input", "rejected"}, {"hardcoded_shape", "incorrect"},
      {"caches_output", "incorrect"},      {"no_compile", "compile_failed"}, {"no_entry_point", "compile_failed"},
      {"returns_nonzero", "runtime_failed"}, {"skips_when_timed", "incorrect"}, {"exits", "crashed"},
      {"oob_write", "crashed"},            {"kernel_build_error", "runtime_failed"},
      // cheats and harness tampering (issue 8)
      {"partial_rows", "incorrect"},       {"early_return_large", "incorrect"}, {"lowered_precision", "incorrect"},
      {"late_thread", "incorrect"},        {"sleeps", "timeout"},               {"aborts", "crashed"},
      {"stack_overflow", "crashed"},       {"kills_itself", "crashed"},         {"closes_protocol", "crashed"},
      {"forges_reply", "rejected"},        {"signals_kfab", "incorrect"},       {"caches_by_value", "incorrect"},
      // kfab's secrets (set for kfab below) must not reach a runner's environment (issue 20)
      {"reads_secret", "passed"},
      // Probes of the sandbox and of the runner's memory: each computes the right answer and tells on
      // itself (outputs off by one) when its escape worked, so "passed" means it was held.
      {"writes_outside", "passed"},        {"network", "passed"},               {"fork_bomb", "passed"},
      {"sets_clock", "passed"},            {"ptraces_kfab", "passed"},          {"reads_reference", "passed"},
      // right, on a stream of its own, and each call spins 2 ms first: timed at 2 ms or more
      {"side_stream", "passed"},
      // the reference in a process of its own, timed calls on inputs changed anew (issue 20): a candidate
      // that patches the reference's code to agree with its wrong answer, and answers kept from earlier
      // calls served when timed, keyed on the call count, the time, a sample of the values with the
      // last element, or a cold output; slows_reference is honest work that slows whatever runs
      // between its calls (its speedup against the honest twin's is in bench/adversarial_speedups.sh)
      {"patches_reference", "incorrect"},  {"stashes_by_count", "incorrect"},   {"stashes_by_time", "incorrect"},
      {"stashes_by_value", "incorrect"},   {"stashes_when_cold", "incorrect"},  {"slows_reference", "passed"},
      // bytes that are not UTF-8 in what a candidate or its compiler prints (issue 20)
      {"garbled_crash", "crashed"},        {"garbled_compile_error", "compile_failed"}};
  std::vector<ConformanceCase> v;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(fs::path(KFAB_TEST_FIXTURES) / "broken", ec)) {
    const std::string name = f.path().filename().string();
    const std::string cls = name.substr(0, name.find('.'));
    auto it = expected.find(cls);
    // a fixture with no expected disposition would be skipped silently: it fails instead
    v.push_back({name, it != expected.end() ? it->second : "(no expected disposition for class " + cls + ")"});
  }
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
  return v;
}

class Conformance : public ::testing::TestWithParam<ConformanceCase> {};

TEST_P(Conformance, SameDispositionOnEveryTarget) {
  const ConformanceCase& c = GetParam();
  const std::string target = target_of(c.file);
  if (!target_present(target)) GTEST_SKIP() << "target " << target << " is not present here";
  // What the probes aim at, outside the runner's folder: a file and a listening port.
  const fs::path probe = fs::temp_directory_path() / ("kfab-escape-probe-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove(probe, ec);
  fs::remove("/tmp/kfab-escape-writes_outside", ec);
  Listener listener;
  ::setenv("KFAB_ESCAPE_PROBE", probe.c_str(), 1);
  ::setenv("KFAB_ESCAPE_PORT", std::to_string(listener.port()).c_str(), 1);
  // Secrets of kfab's, which runners must not inherit (reads_secret prints any it finds and crashes).
  const std::string secret = "kfab-test-secret-" + std::to_string(::getpid());
  ::setenv("KFAB_TEST_SECRET", secret.c_str(), 1);
  ::setenv("OPENAI_API_KEY", secret.c_str(), 1);
  // The classes that must time out get a short timeout (they would reach any); the rest a generous one.
  const std::string timeout = c.disposition == "timeout" ? "4" : "10";
  CliResult r = kfab_cli({"eval", fixture("tasks/affine"), fixture("broken/" + c.file), "--target", target, "--json",
                          "--timeout", timeout, "--min-calls", "10", "--min-time", "0.05", "--memory-limit", "1"});
  ::unsetenv("KFAB_TEST_SECRET");
  ::unsetenv("OPENAI_API_KEY");
  ASSERT_TRUE(r.status.exited) << "kfab " << r.status.describe();
  EXPECT_EQ(r.status.code, c.disposition == "passed" ? 0 : 1) << r.out << r.err;
  EXPECT_FALSE(fs::exists(probe)) << "a candidate wrote " << probe;
  EXPECT_FALSE(fs::exists("/tmp/kfab-escape-writes_outside")) << "a candidate wrote /tmp/kfab-escape-writes_outside";
  EXPECT_EQ(listener.accepted(), 0) << "a candidate connected to 127.0.0.1:" << listener.port();
  EXPECT_EQ((r.out + r.err).find(secret), std::string::npos) << "kfab's secret reached the candidate: " << r.out << r.err;
  nlohmann::json j = r.json();
  EXPECT_EQ(j.value("disposition", ""), c.disposition) << j.value("detail", "");
  EXPECT_EQ(j.value("target", ""), target);
  if (c.file.rfind("garbled_", 0) == 0) {  // stdout parsed as JSON, so the detail is valid UTF-8; the bad bytes show as U+FFFD
    const std::string detail = j.value("detail", "");
    EXPECT_NE(detail.find("garbled: \xEF\xBF\xBD\xEF\xBF\xBD"), std::string::npos) << detail;
  }
  if (c.file.rfind("side_stream", 0) == 0) {  // every timed shape counts the 2 ms its kernel spins
    int timed = 0;
    for (const auto& s : j["shapes"]) {
      if (!s.contains("time_ms")) continue;
      ++timed;
      EXPECT_GE(s["time_ms"].value("median", 0.0), 2.0) << "work on a side stream escaped the timer: " << s.dump();
    }
    EXPECT_GE(timed, 2) << "the tuning shapes were not timed: " << j.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Broken, Conformance, ::testing::ValuesIn(conformance_cases()), [](const auto& info) {
  std::string n = info.param.file;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

}  // namespace kfab::test
