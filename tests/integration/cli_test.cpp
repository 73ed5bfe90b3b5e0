#include <gtest/gtest.h>

#include <csignal>
#include <sstream>
#include <thread>
#include <tuple>

#include "core/paths.h"
#include "harness.h"
#include "store/store.h"

namespace kfab::test {

namespace {
const std::vector<std::string> kFast = {"--json", "--timeout", "10", "--min-calls", "10", "--min-time", "0.05"};

std::vector<std::string> eval_args(const std::string& task, const std::string& cand, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"eval", task, cand};
  a.insert(a.end(), kFast.begin(), kFast.end());
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}
}  // namespace

struct BrokenCase {
  std::string file;
  std::string disposition;
  std::string detail;  ///< a fragment the detail must contain
};

void PrintTo(const BrokenCase& c, std::ostream* os) { *os << c.file << " -> " << c.disposition; }

class BrokenCandidate : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(BrokenCandidate, GetsItsDispositionAndKfabExitsOne) {
  const BrokenCase& c = GetParam();
  CliResult r = kfab_cli(eval_args(fixture("tasks/affine"), fixture("broken/" + c.file), {"--memory-limit", "1"}));
  ASSERT_TRUE(r.status.exited) << "kfab " << r.status.describe() << "\n" << r.err;
  EXPECT_EQ(r.status.code, 1) << r.out << r.err;
  nlohmann::json j = r.json();
  EXPECT_EQ(j.value("disposition", ""), c.disposition) << j.dump(2);
  EXPECT_NE(j.value("detail", "").find(c.detail), std::string::npos) << j.value("detail", "");
}

INSTANTIATE_TEST_SUITE_P(
    Classes, BrokenCandidate,
    ::testing::Values(
        BrokenCase{"wrong_result.cpp", "incorrect", "values differ; first at y[0, 0] (seed 0, call 1)"},
        BrokenCase{"crash.cpp", "crashed", "SIGSEGV"},
        BrokenCase{"unbounded_alloc.cpp", "crashed", "out of memory"},
        BrokenCase{"modifies_input.cpp", "rejected", "input x was modified"},
        BrokenCase{"hardcoded_shape.cpp", "incorrect", "(held out)"},
        BrokenCase{"caches_output.cpp", "incorrect", "(seed 1, call 1)"},
        BrokenCase{"no_compile.cpp", "compile_failed", "undefined_variable"},
        BrokenCase{"no_entry_point.cpp", "compile_failed", "does not export kfab_run"},
        BrokenCase{"returns_nonzero.cpp", "runtime_failed", "kfab_run returned 7"},
        BrokenCase{"skips_when_timed.cpp", "incorrect", "work was skipped while timed"},
        BrokenCase{"exits.cpp", "crashed", "exited with status 0"}),
    [](const auto& info) {
      std::string n = info.param.file.substr(0, info.param.file.find('.'));
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

// A damaged compile cache (a truncated or emptied shared object) is built again: the candidate is not
// blamed for a load failure that is the cache's.
TEST(Eval, ADamagedCompileCacheEntryIsBuiltAgain) {
  const auto cache = scratch() / "damaged-cache";
  auto eval = [&] {
    const std::string cmd = "KFAB_CACHE_DIR=" + quote(cache.string()) + " KFAB_DATA_DIR=" + quote((scratch() / "damaged-data").string()) +
                            " exec " + quote(KFAB_BINARY) + " eval " + quote(fixture("tasks/affine")) + " " +
                            quote(fixture("tasks/affine/candidates/good.cpp")) + " --target cpu --json --seeds 1 --min-calls 5 --min-time 0";
    auto r = run_command({"/bin/sh", "-c", cmd + " 2>/dev/null"}, 300, KFAB_SOURCE_DIR);
    EXPECT_TRUE(r.has_value());
    return r ? nlohmann::json::parse(r->output, nullptr, false) : nlohmann::json();
  };
  const auto first = eval();
  EXPECT_EQ(first.value("disposition", ""), "passed") << first.dump(2);
  std::vector<std::filesystem::path> artifacts;
  for (const auto& f : std::filesystem::recursive_directory_iterator(cache / "cpu"))
    if (f.path().extension() == ".so") artifacts.push_back(f.path());
  ASSERT_FALSE(artifacts.empty());
  for (const auto& damage : {std::uintmax_t{200}, std::uintmax_t{0}}) {
    for (const auto& a : artifacts) std::filesystem::resize_file(a, damage);
    const auto again = eval();
    EXPECT_EQ(again.value("disposition", ""), "passed") << "cache entries cut to " << damage << " bytes: " << again.dump(2);
    EXPECT_FALSE(again["build"].value("cached", true)) << again["build"].dump();
    for (const auto& a : artifacts) EXPECT_GT(std::filesystem::file_size(a), 1000u) << a;
  }
}

// The candidate spins forever, so any end at all is the deadline's doing. The bound is far above
// --timeout on purpose: a busy CI machine may take seconds to build and start the runner, and
// how soon after the deadline the kill lands is a benchmark's question, not a test's.
TEST(Eval, AHangEndsAtTheDeadlineWithATimeoutVerdict) {
  CliResult r = kfab_cli({"eval", fixture("tasks/affine"), fixture("broken/hang.cpp"), "--json", "--timeout", "3"});
  ASSERT_TRUE(r.status.exited) << r.status.describe();
  EXPECT_EQ(r.status.code, 1);
  EXPECT_EQ(r.json().value("disposition", ""), "timeout");
  EXPECT_GE(r.seconds, 3.0);
  EXPECT_LT(r.seconds, 3.0 + 120.0);
}

TEST(Eval, CorrectCandidateGivesTheDesignJson) {
  CliResult r = kfab_cli(eval_args(fixture("tasks/affine"), fixture("tasks/affine/candidates/good.cpp")));
  ASSERT_TRUE(r.status.exited);
  EXPECT_EQ(r.status.code, 0) << r.out << r.err;
  nlohmann::json j = r.json();
  EXPECT_EQ(j["task"], "affine");
  EXPECT_EQ(j["target"], "cpu");
  EXPECT_EQ(j["dsl"], "cpp");
  EXPECT_EQ(j["disposition"], "passed");
  ASSERT_TRUE(j["speedup"].is_number());
  ASSERT_EQ(j["shapes"].size(), 3u);  // 2 tuning + 1 held out
  double log_sum = 0;
  for (const auto& s : j["shapes"]) {
    EXPECT_TRUE(s["correct"].get<bool>());
    EXPECT_TRUE(s["max_abs_err"].is_number());
    EXPECT_TRUE(s["max_rel_err"].is_number());
    // the share of atol + rtol |want| the worst element used: a passing shape stays within 1
    ASSERT_TRUE(s["tolerance_used"].is_number()) << s.dump();
    EXPECT_GE(s["tolerance_used"].get<double>(), 0.0);
    EXPECT_LE(s["tolerance_used"].get<double>(), 1.0);
    EXPECT_EQ(s["checked"].get<int64_t>() % (2 * 5 + 1), 0) << "two candidate calls x five seeds, and the call on perturbed inputs";
    if (s["heldout"].get<bool>()) {
      EXPECT_FALSE(s.contains("time_ms"));
      continue;
    }
    EXPECT_GE(s["time_ms"]["n"].get<int>(), 10);
    EXPECT_TRUE(s["time_ms"]["median"].is_number());
    EXPECT_TRUE(s["time_ms"]["iqr"].is_number());
    EXPECT_TRUE(s["baseline_ms"]["median"].is_number());
    EXPECT_TRUE(s["percent_of_bound"].is_number());
    log_sum += std::log(s["baseline_ms"]["median"].get<double>() / s["time_ms"]["median"].get<double>());
  }
  EXPECT_NEAR(j["speedup"].get<double>(), std::exp(log_sum / 2), 1e-9) << "speedup is the geometric mean over tuning shapes";
  EXPECT_TRUE(j["store"]["evaluation"].is_number());
}

// Regression: the human-readable verdict once threw on a verdict without a profile (exit 3).
TEST(Eval, PlainOutputPrintsTheTableAndTheVerdict) {
  CliResult r = kfab_cli({"eval", fixture("tasks/affine"), fixture("tasks/affine/candidates/good.cpp"), "--min-calls", "10",
                          "--min-time", "0.05"});
  ASSERT_TRUE(r.status.exited);
  EXPECT_EQ(r.status.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("median ms"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("passed ("), std::string::npos) << r.out;
}

TEST(Eval, CandidateOutputOnStdoutDoesNotDisturbTheRunner) {
  CliResult r = kfab_cli(eval_args(fixture("tasks/affine"), fixture("tasks/affine/candidates/noisy.cpp")));
  EXPECT_EQ(r.status.code, 0) << r.out << r.err;
  EXPECT_EQ(r.json().value("disposition", ""), "passed");
}

TEST(Eval, TimeBelowTheRooflineBoundIsRejected) {
  CliResult r = kfab_cli(eval_args(fixture("tasks/affine_impossible_cost"), fixture("tasks/affine/candidates/good.cpp")));
  EXPECT_EQ(r.status.code, 1) << r.out << r.err;
  nlohmann::json j = r.json();
  EXPECT_EQ(j.value("disposition", ""), "rejected");
  EXPECT_NE(j.value("detail", "").find("below the roofline bound"), std::string::npos);
}

TEST(Eval, EveryEvaluationIsRecordedInTheStore) {
  const auto db = scratch() / "recorded.db";
  CliResult a = kfab_cli(eval_args(fixture("tasks/affine"), fixture("broken/wrong_result.cpp"), {"--db", db.string()}));
  CliResult b = kfab_cli(eval_args(fixture("tasks/affine"), fixture("tasks/affine/candidates/good.cpp"), {"--db", db.string()}));
  ASSERT_EQ(a.status.code, 1);
  ASSERT_EQ(b.status.code, 0);
  auto s = Store::open(db);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*(*s)->count("evaluations"), 2);
  auto rows = (*s)->recent_evaluations(2);
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ((*rows)[0].disposition, "passed");
  EXPECT_EQ((*rows)[1].disposition, "incorrect");
}

TEST(Eval, MalformedManifestExitsTwoNamingTheFile) {
  const auto dir = scratch() / "bad-task";
  std::filesystem::create_directories(dir);
  (void)write_file_atomic(dir / "task.toml", "name = \"bad\"\n[[output]]\nname = \"y\"\ndtype = \"f33\"\nshape = [\"M\"]\n");
  CliResult r = kfab_cli({"eval", dir.string(), fixture("tasks/affine/candidates/good.cpp")});
  ASSERT_TRUE(r.status.exited);
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.err.find((dir / "task.toml").string() + ":4: output(y).dtype: unknown dtype \"f33\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("accepted: f32"), std::string::npos) << r.err;
}

namespace {
/// A copy of tests/fixtures/tasks/affine named `name`, with its `key` shapes (tune or heldout) replaced.
std::filesystem::path affine_with(const std::string& name, const std::string& key, const std::string& shapes) {
  const auto dir = scratch() / name;
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture("tasks/affine/reference.cpp"), dir / "reference.cpp", std::filesystem::copy_options::overwrite_existing);
  std::string m = *read_file(fixture("tasks/affine/task.toml"));
  m.replace(m.find("name = \"affine\""), 15, "name = \"" + name + "\"");
  const auto at = m.find(key + " = ");
  m.replace(at, m.find('\n', at) - at, key + " = " + shapes);
  EXPECT_TRUE(write_file_atomic(dir / "task.toml", m).has_value());
  return dir;
}
}  // namespace

// Issue 20: a task whose shapes no machine could hold (10^12 elements; an element count past 64 bits)
// is the task's fault: exit 2 naming the file, the tensor and the shape entry, and nothing is stored
// against the candidate, which never runs.
TEST(Eval, AShapeNoMachineCouldHoldIsRefusedAtLoad) {
  const auto db = scratch() / "huge.db";
  for (const auto& [name, shapes, says] :
       {std::tuple<std::string, std::string, std::string>{"huge_affine", "[ { M = 1000000, N = 1000000 } ]", "past kfab's limit of 1.0 TiB"},
        {"overflowing_affine", "[ { M = 4294967296, N = 4294967296 } ]", "the element count overflows a 64-bit integer"}}) {
    const auto dir = affine_with(name, "tune", shapes);
    CliResult r = kfab_cli({"eval", dir.string(), fixture("tasks/affine/candidates/good.cpp"), "--json", "--db", db.string()});
    ASSERT_TRUE(r.status.exited) << r.status.describe();
    EXPECT_EQ(r.status.code, 2) << r.out << r.err;
    const std::string error = r.json().value("error", "");
    EXPECT_NE(error.find((dir / "task.toml").string() + ":9: input(x).shape: "), std::string::npos) << error;
    EXPECT_NE(error.find("shapes.tune[0]"), std::string::npos) << error;
    EXPECT_NE(error.find(says), std::string::npos) << error;
  }
  if (std::filesystem::exists(db)) {
    auto s = Store::open(db);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(*(*s)->count("evaluations"), 0) << "a task's fault was stored against the candidate";
  }
}

// Issue 20: a task that loads but cannot fit the cpu runner's memory is refused before anything runs,
// with the figures; a held-out entry is named by its place only, never its sizes.
TEST(Eval, AShapeBeyondTheRunnersMemoryIsRefusedBeforeItRuns) {
  const auto db = scratch() / "too-big.db";
  const auto dir = affine_with("too_big_affine", "heldout", "[ { M = 16384, N = 16385 } ]");
  CliResult r = kfab_cli({"eval", dir.string(), fixture("tasks/affine/candidates/good.cpp"), "--json", "--memory-limit", "1", "--db", db.string()});
  ASSERT_TRUE(r.status.exited) << r.status.describe();
  EXPECT_EQ(r.status.code, 2) << r.out << r.err;
  const nlohmann::json j = r.json();
  const std::string error = j.value("error", "");
  EXPECT_NE(error.find((dir / "task.toml").string() + ": input(x).shape: 1.0 GiB in shapes.heldout[0]; one evaluation of the shape holds 4.0 GiB"),
            std::string::npos) << error;
  EXPECT_NE(error.find("more than the 1.0 GiB the cpu runner may use"), std::string::npos) << error;
  EXPECT_NE(j.value("hint", "").find("--memory-limit"), std::string::npos) << j.dump();
  EXPECT_EQ(error.find("16385"), std::string::npos) << "a held-out size was shown: " << error;
  EXPECT_FALSE(std::filesystem::exists(db) && *(*Store::open(db))->count("evaluations") > 0);
  // Without the held-out shapes, what is left fits.
  CliResult tuning = kfab_cli(eval_args(dir.string(), fixture("tasks/affine/candidates/good.cpp"), {"--memory-limit", "1", "--no-heldout"}));
  EXPECT_EQ(tuning.status.code, 0) << tuning.out << tuning.err;
}

namespace {
/// The kfab-runner-* folders under `dir`.
std::vector<std::string> runner_folders(const std::filesystem::path& dir) {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec))
    if (f.path().filename().string().rfind("kfab-runner-", 0) == 0) v.push_back(f.path().filename().string());
  return v;
}
}  // namespace

// Issue 20: kfab ended by SIGTERM, SIGINT or SIGHUP mid-job leaves no runner folder behind (its own
// TMPDIR here, so that other tests' runners do not count).
TEST(Eval, NoRunnerFolderOutlivesASignal) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const auto tmp = scratch() / ("signal-tmp-" + std::to_string(sig));
    std::filesystem::create_directories(tmp);
    SpawnOptions so;
    so.argv = {"/bin/sh", "-c",
               "TMPDIR=" + quote(tmp.string()) + " KFAB_CACHE_DIR=" + quote(shared_test_cache().string()) + " KFAB_DATA_DIR=" +
                   quote((scratch() / "data").string()) + " exec " + quote(KFAB_BINARY) + " eval " + quote(fixture("tasks/affine")) + " " +
                   quote(fixture("broken/hang.cpp")) + " --timeout 120 --json >/dev/null 2>&1"};
    so.cwd = KFAB_SOURCE_DIR;
    auto kfab = Child::spawn(so);
    ASSERT_TRUE(kfab.has_value()) << kfab.error().message;
    // The runner is up and at work (its log exists) before the signal.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    bool working = false;
    while (!working && std::chrono::steady_clock::now() < deadline) {
      for (const auto& f : runner_folders(tmp)) working = working || std::filesystem::exists(tmp / f / "runner.log");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(working) << "no runner started under " << tmp;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::kill(kfab->pid(), sig);
    const ExitStatus st = kfab->wait(std::chrono::steady_clock::now() + std::chrono::seconds(30));
    EXPECT_EQ(st.signal, sig) << st.describe();
    EXPECT_EQ(runner_folders(tmp), std::vector<std::string>{}) << "after " << signal_name(sig);
  }
}

// Issue 20: folders whose owner is gone (kfab killed outright, which no handler sees) are swept when
// kfab next starts; a live owner's folder, and anything not named by an owner, is left alone.
TEST(Eval, ANextStartSweepsTheFoldersOfAKfabThatIsGone) {
  const auto tmp = scratch() / "sweep-tmp";
  std::filesystem::create_directories(tmp);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  auto live = make_owned_temp_dir("kfab-runner");  // this test's own: its owner is alive
  old ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
  ASSERT_TRUE(live.has_value()) << live.error().message;
  // A pid no process has (past any pid_max), and this process at another start time (its pid reused).
  const std::string name = live->filename().string();  // kfab-runner-PID.START-XXXXXX
  const auto dash = name.rfind('-', name.size() - 8), dot = name.rfind('.');
  const std::string pid = name.substr(dash + 1, dot - dash - 1), start = name.substr(dot + 1, name.size() - 7 - dot - 1);
  std::vector<std::filesystem::path> orphans = {
      tmp / ("kfab-runner-999999999." + start + "-abcdef"),
      tmp / ("kfab-runner-" + pid + "." + std::to_string(std::stoull(start) + 1) + "-ghijkl"),
      tmp / ("kfab-ncu-999999999." + start + "-mnopqr")};
  for (const auto& o : orphans) {
    std::filesystem::create_directories(o / "inductor/deep");
    ASSERT_TRUE(write_file_atomic(o / "inductor/deep/file", "x").has_value());
  }
  std::filesystem::create_directories(tmp / "kfab-runner-notours");
  const std::string cmd = "TMPDIR=" + quote(tmp.string()) + " exec " + quote(KFAB_BINARY) + " tasks " + quote(fixture("tasks/affine")) + " >/dev/null";
  auto r = run_command({"/bin/sh", "-c", cmd}, 60);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->status.ok()) << r->output;
  for (const auto& o : orphans) EXPECT_FALSE(std::filesystem::exists(o)) << o << " was not swept";
  EXPECT_TRUE(std::filesystem::exists(*live)) << "a live kfab's folder was swept";
  EXPECT_TRUE(std::filesystem::exists(tmp / "kfab-runner-notours"));
  std::filesystem::remove_all(*live);
}

TEST(Eval, BadUsageExitsTwo) {
  EXPECT_EQ(kfab_cli({"eval", fixture("tasks/affine"), fixture("broken/absent.cpp")}).status.code, 2);
  EXPECT_EQ(kfab_cli({"eval", fixture("tasks/affine"), fixture("tasks/affine/task.toml")}).status.code, 2);
  EXPECT_EQ(kfab_cli({"eval", fixture("tasks/affine"), fixture("broken/crash.cpp"), "--target", "tpu"}).status.code, 2);
  EXPECT_EQ(kfab_cli({"eval"}).status.code, 2);
  EXPECT_EQ(kfab_cli({"frobnicate"}).status.code, 2);
  CliResult j = kfab_cli({"eval", fixture("tasks/affine"), fixture("broken/absent.cpp"), "--json"});
  EXPECT_EQ(j.status.code, 2);
  EXPECT_NE(j.json().value("error", "").find("no such candidate"), std::string::npos);
}

TEST(Tasks, ListsTheBundledSuite) {
  CliResult r = kfab_cli({"tasks", "tasks/core", "--json"});
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  nlohmann::json j = r.json();
  EXPECT_EQ(j["broken"], 0);
  EXPECT_GE(j["tasks"].size(), 12u);
  for (const auto& t : j["tasks"]) {
    EXPECT_EQ(t["format"], "native");
    EXPECT_FALSE(t["tune"].empty()) << t.dump();
    EXPECT_FALSE(t["heldout"].empty()) << t.dump();
  }
  CliResult table = kfab_cli({"tasks", "tasks/core"});
  EXPECT_NE(table.out.find("softmax"), std::string::npos);
  EXPECT_NE(table.out.find("held out"), std::string::npos);
}

TEST(Tasks, ABrokenManifestIsShownAndExitsTwo) {
  const auto dir = scratch() / "suite-with-broken/bad";
  std::filesystem::create_directories(dir);
  (void)write_file_atomic(dir / "task.toml", "name = 3\n");
  CliResult r = kfab_cli({"tasks", dir.parent_path().string()});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.out.find("BROKEN"), std::string::npos) << r.out;
}

// Issue 24's loose ends (finding 9): optimize and bench take --db like eval and report (the run lands in that
// store, for the processes they start too); `kfab tasks` shows what a KernelBench file declares (its op
// class, GPU shape and held-out shapes, read from its text); doctor probes the Python the worker runs
// (the .venv's, with torch where `make test` installed it); optimize's help speaks of the built-in tuner;
// with stderr not a terminal, progress comes as plain lines with the elapsed time (finding 10).
// KFAB_TUNER_ONLY keeps the built-in tuner to the points that have those parameters (a probe of one kernel
// family on a short device lease): only they are searched, the result says so, and no cached winner is
// written (a later plain run searches); a value no point has, or an entry that is not key=value, is an error.
TEST(Cli, TheTunerSearchesOnlyThePointsAskedFor) {
  const std::string task = std::string(KFAB_SOURCE_DIR) + "/tasks/core/gelu";
  const auto dir = scratch() / "tuner-only";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto run = [&](const char* only, const std::vector<std::string>& extra) {
    if (only != nullptr) setenv("KFAB_TUNER_ONLY", only, 1);
    std::vector<std::string> args = {"optimize", task, "--target", "cpu", "--json", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    static int n = 0;
    CliResult r = kfab_with(dir / "data", dir / "cache", dir / ("io" + std::to_string(++n)), args);
    unsetenv("KFAB_TUNER_ONLY");
    return r;
  };
  CliResult r = run("schedule=dynamic", {"--points", "30", "--fresh"});
  ASSERT_TRUE(found_correct(r)) << r.out << r.err;
  const nlohmann::json j = r.json();
  ASSERT_FALSE(j["points"].empty()) << j.dump();
  for (const auto& pt : j["points"]) EXPECT_EQ(pt["params"].value("schedule", ""), "dynamic") << pt.dump();
  EXPECT_EQ(j["tuner"]["only"].value("schedule", ""), "dynamic") << j["tuner"].dump();
  CliResult plain = run(nullptr, {"--points", "1"});
  ASSERT_TRUE(found_correct(plain)) << plain.out << plain.err;
  EXPECT_FALSE(plain.json()["tuner"].value("cached", true)) << "the probe's winner was cached: " << plain.out;
  EXPECT_FALSE(plain.json()["tuner"].contains("only"));
  CliResult none = run("schedule=none", {"--points", "30", "--fresh"});
  EXPECT_EQ(none.status.code, 2);
  EXPECT_NE(none.out.find("no parameter point of this task has these"), std::string::npos) << none.out << none.err;
  CliResult bad = run("schedule", {"--points", "30", "--fresh"});
  EXPECT_EQ(bad.status.code, 2);
  EXPECT_NE((bad.out + bad.err).find("is not key=value"), std::string::npos) << bad.out << bad.err;
}

TEST(Cli, TheNewUsersLooseEndsAreTied) {
  const auto db = scratch() / "optimize-db" / "runs.db";
  CliResult r = kfab_cli({"optimize", std::string(KFAB_SOURCE_DIR) + "/tasks/core/gelu", "--target", "cpu", "--points", "1", "--fresh", "--json", "--db",
                          db.string(), "--out", (scratch() / "optimize-db" / "out").string()});
  ASSERT_TRUE(found_correct(r)) << r.out << r.err;
  // stderr is a file here: plain progress lines, each with the time since the start (finding 10)
  EXPECT_NE(r.err.find("kfab [0:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("]: cpu_fused_rows ("), std::string::npos) << "a line per point: " << r.err;
  EXPECT_NE(r.err.find("]: final: "), std::string::npos) << r.err;
  auto store = Store::open(db);
  ASSERT_TRUE(store.has_value());
  EXPECT_GE(*(*store)->count("evaluations"), 2) << "the point and the final check";
  CliResult rep = kfab_cli({"report", "latest", "--db", db.string(), "--json"});
  EXPECT_EQ(rep.status.code, 0) << rep.err;
  EXPECT_NE(rep.out.find(r.json()["run"].get<std::string>()), std::string::npos);

  CliResult t = kfab_cli({"tasks", std::string(KFAB_SOURCE_DIR) + "/tasks/kb", "--json"});
  ASSERT_EQ(t.status.code, 0) << t.err;
  bool bmm = false;
  const nlohmann::json listed = t.json();
  for (const auto& task : listed["tasks"])
    if (task["name"] == "l1_bmm") {
      bmm = true;
      EXPECT_EQ(task["op_class"], "matmul");
      EXPECT_NE(task.value("tune_gpu", "").find("batch_size"), std::string::npos) << task.dump();
      EXPECT_NE(task.value("heldout", "").find("batch_size"), std::string::npos) << task.dump();
    }
  EXPECT_TRUE(bmm);

  CliResult d = kfab_cli({"doctor", "--json"});
  ASSERT_EQ(d.status.code, 0);
  if (std::getenv("KFAB_REQUIRE_TORCH") != nullptr) {
    EXPECT_EQ(d.json()["python"].value("torch", "absent").find("absent"), std::string::npos) << d.json()["python"].dump();
  }

  // make run builds kfab and its runner, not the test programs, before it optimizes (finding 8)
  auto plan = run_command({"make", "-n", "run", "BUILD=build-dry-run"}, 60.0, KFAB_SOURCE_DIR);
  ASSERT_TRUE(plan.has_value());
  EXPECT_NE(plan->output.find("--target kfab kfab-runner\n"), std::string::npos) << plan->output;
  std::istringstream lines(plan->output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("cmake --build build-dry-run", 0) == 0) {
      EXPECT_NE(line.find("--target"), std::string::npos) << line;
    }
  }
  EXPECT_LT(plan->output.find("--target kfab kfab-runner"), plan->output.find("kfab optimize"));

  CliResult h = kfab_cli({"optimize", "--help"});
  EXPECT_NE(h.out.find("built-in tuner by default"), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("evolve"), std::string::npos) << "--strategy names both strategies";
  EXPECT_NE(h.out.find("--db"), std::string::npos);
  EXPECT_EQ(kfab_cli({"optimize", fixture("tasks/affine"), "--strategy", "greedy"}).status.code, 2) << "an unknown strategy is bad usage";
}

TEST(Doctor, NeverFailsAndReportsEveryArea) {
  CliResult r = kfab_cli({"doctor", "--json"});
  ASSERT_EQ(r.status.code, 0) << r.err;
  nlohmann::json j = r.json();
  for (const char* k : {"compilers", "cuda_toolkit", "gpus", "python", "opencl", "ncu", "backends", "paths"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_TRUE(j["gpus"].contains("found"));
  bool has_cpu = false;
  for (const auto& b : j["backends"]) has_cpu = has_cpu || b["target"] == "cpu";
  EXPECT_TRUE(has_cpu) << j["backends"].dump();
  EXPECT_EQ(kfab_cli({"doctor"}).status.code, 0);
}

}  // namespace kfab::test

namespace kfab::test {

// `kfab sandbox -- CMD` runs CMD as a runner is run: with the allow-listed part of kfab's environment
// (no secret of kfab's) and HOME and caches in its own folder.
TEST(Sandbox, TheCommandGetsTheEnvironmentARunnerGets) {
  const std::string secret = "kfab-sandbox-secret-" + std::to_string(::getpid());
  ::setenv("KFAB_TEST_SECRET", secret.c_str(), 1);
  ::setenv("OMP_NUM_THREADS", "3", 1);  // allow-listed: thread pools reach a runner
  CliResult r = kfab_cli({"sandbox", "--", "/usr/bin/env"});
  ::unsetenv("KFAB_TEST_SECRET");
  ::unsetenv("OMP_NUM_THREADS");
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find(secret), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("OMP_NUM_THREADS=3\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nPATH="), std::string::npos) << r.out;
  const auto home = r.out.find("\nHOME=");
  ASSERT_NE(home, std::string::npos) << r.out;
  const auto tmp = r.out.find("\nTMPDIR=");
  ASSERT_NE(tmp, std::string::npos) << r.out;
  const std::string folder = r.out.substr(tmp + 8, r.out.find('\n', tmp + 1) - tmp - 8);
  EXPECT_NE(folder.find("kfab-sandbox"), std::string::npos) << folder;
  EXPECT_EQ(r.out.substr(home + 6, folder.size()), folder) << "HOME is not in the sandbox's folder:\n" << r.out;
}

}  // namespace kfab::test
