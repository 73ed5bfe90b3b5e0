// kfab bench and kfab report: the core suite optimized on the cpu, scored, written as JSON, CSV and
// an HTML page, which headless Chromium renders (Debian's chromium, installed by `make test`).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "harness.h"

namespace kfab::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + what.size())) ++n;
  return n;
}

/// Debian's chromium, or another Chromium on the PATH; empty when there is none.
std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    auto r = run_command({"/bin/sh", "-c", std::string("command -v ") + name}, 10);
    if (r && r->status.ok() && !r->output.empty()) return r->output.substr(0, r->output.find('\n'));
  }
  return {};
}

/// Width and height from a PNG's IHDR chunk; {0, 0} when the file is not a PNG.
std::pair<uint32_t, uint32_t> png_size(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  unsigned char h[24] = {};
  if (!in.read(reinterpret_cast<char*>(h), sizeof h) || h[1] != 'P' || h[2] != 'N' || h[3] != 'G') return {0, 0};
  auto be = [&](int o) { return (uint32_t{h[o]} << 24) | (uint32_t{h[o + 1]} << 16) | (uint32_t{h[o + 2]} << 8) | h[o + 3]; };
  return {be(16), be(20)};
}

const char* kCoreTasks[] = {"cross_entropy", "cumsum", "gelu", "group_norm", "layer_norm", "log_softmax", "matmul",
                            "matmul_bias_relu", "rms_norm", "scale_shift_gelu", "softmax", "sum_dim1", "transpose"};

TEST(Bench, TheCoreSuiteOnTheCpuIsScoredAndReportedAndChromiumRendersIt) {
  const fs::path out = scratch() / "bench-core";
  CliResult r = kfab_cli({"bench", "tasks/core", "--target", "cpu", "--points", "2", "--fresh", "--seeds", "2", "--out", out.string(), "--json"},
                         3000);
  EXPECT_EQ(r.status.code, 0) << r.out << r.err;
  const json j = r.json();
  ASSERT_TRUE(j.contains("scores")) << r.out << r.err;
  const json& s = j["scores"];
  EXPECT_EQ(s["tasks"], 13);
  EXPECT_EQ(s["correct"], 13) << j.dump(2);
  EXPECT_DOUBLE_EQ(s["fast_p"]["0"].get<double>(), 1.0);
  EXPECT_GT(s["geomean_speedup"].get<double>(), 0.0);
  EXPECT_TRUE(s["sol_score"].is_number()) << s.dump();  // the core tasks state their cost
  EXPECT_TRUE(s["heldout_retention"].is_number()) << s.dump();
  ASSERT_EQ(j["tasks"].size(), 13u);
  for (const auto& t : j["tasks"]) {
    EXPECT_EQ(t["disposition"], "passed") << t.dump(2);
    EXPECT_TRUE(t["run"].is_string()) << t.dump(2);
    EXPECT_GT(t["heldout"]["total"].get<int>(), 0) << t["task"];
    EXPECT_FALSE(t.contains("report")) << "--json leaves the runs to bench.json";
  }

  // the files: bench.json holds every run's steps; CSV rows for the tasks and the scores
  auto bench = read_file(out / "bench.json");
  ASSERT_TRUE(bench.has_value());
  const json b = json::parse(*bench);
  EXPECT_TRUE(b["finished"].get<bool>());
  for (const auto& t : b["tasks"]) {
    ASSERT_TRUE(t["report"].is_object()) << t["task"];
    EXPECT_GE(t["report"]["steps"].size(), 3u) << t["task"];  // 2 points and the final check
    EXPECT_TRUE(t["report"]["steps"][0].contains("source")) << t["task"];
    // the winner's template: the point whose candidate the final check evaluated
    std::string winner;
    for (const auto& f : t["report"]["steps"])
      if (f["role"] == "final" && f["disposition"] == "passed")
        for (const auto& p : t["report"]["steps"])
          if (p["role"] == "tuner" && p["candidate_hash"] == f["candidate_hash"]) winner = p["detail"].get<std::string>();
    winner = winner.substr(0, winner.find(" ("));
    EXPECT_EQ(t["report"]["steps"].size() - 1, 2u + (t["retained"] == false)) << t["task"] << ": 2 points, then the final check(s)";
    // the tasks with no hand-written cpu template are tuned from their formula
    if (t["task"] == "gelu" || t["task"] == "cross_entropy") {
      EXPECT_EQ(winner, "cpu_fused_rows") << t["task"];
    }
    if (t["task"] == "matmul_bias_relu") {
      EXPECT_EQ(winner, "cpu_gemm_epilogue") << t["task"];
    }
  }
  auto tasks_csv = read_file(out / "tasks.csv");
  ASSERT_TRUE(tasks_csv.has_value());
  EXPECT_EQ(count_of(*tasks_csv, "\n"), 14u) << *tasks_csv;
  auto scores_csv = read_file(out / "scores.csv");
  ASSERT_TRUE(scores_csv.has_value());
  EXPECT_NE(scores_csv->find("fast_p_1.2,"), std::string::npos) << *scores_csv;
  EXPECT_NE(scores_csv->find("correctness_rate,1\n"), std::string::npos) << *scores_csv;

  auto html = read_file(out / "report.html");
  ASSERT_TRUE(html.has_value());
  for (const char* t : kCoreTasks) EXPECT_NE(html->find(t), std::string::npos) << t;
  EXPECT_EQ(count_of(*html, "src=\"http") + count_of(*html, "href=\"http") + count_of(*html, "<script"), 0u) << "nothing is fetched or run";

  // one run's page from the store, and its data
  const std::string run = j["tasks"][0]["run"];
  const fs::path run_html = scratch() / "run.html";
  CliResult rr = kfab_cli({"report", run, "--html", run_html.string(), "--json"});
  EXPECT_EQ(rr.status.code, 0) << rr.out << rr.err;
  const json rj = rr.json();
  EXPECT_EQ(rj["run"], run);
  ASSERT_GE(rj["steps"].size(), 3u);
  EXPECT_TRUE(rj["steps"][0]["verdict"].is_object());
  EXPECT_EQ(rj["steps"][1].value("parent_hash", std::string()), rj["steps"][0]["candidate_hash"].get<std::string>())
      << "the second point derives from the first";
  auto page = read_file(run_html);
  ASSERT_TRUE(page.has_value());
  EXPECT_NE(page->find("class=\"chart trajectory\""), std::string::npos);
  EXPECT_NE(page->find("class=\"chart roofline\""), std::string::npos);
  // a bench folder is re-rendered from its bench.json
  CliResult rb = kfab_cli({"report", out.string(), "--html", (scratch() / "again.html").string()});
  EXPECT_EQ(rb.status.code, 0) << rb.out << rb.err;
  EXPECT_TRUE(fs::exists(scratch() / "again.html"));

  const std::string browser = chromium();
  if (browser.empty()) {
    if (std::getenv("KFAB_REQUIRE_CHROMIUM") != nullptr) FAIL() << "chromium is not installed (make test installs it)";
    GTEST_SKIP() << "chromium is not installed: the report was not rendered";
  }
  const std::string flags = " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars --user-data-dir=" +
                            quote((scratch() / "chromium-profile").string());
  const std::string url = "file://" + fs::absolute(out / "report.html").string();
  auto dom = run_command({"/bin/sh", "-c", quote(browser) + flags + " --dump-dom " + quote(url) + " 2>/dev/null"}, 180);
  ASSERT_TRUE(dom.has_value());
  // what the browser parsed: the charts, the scores, the tasks table with a row per task
  EXPECT_NE(dom->output.find("class=\"chart speedups\""), std::string::npos);
  EXPECT_NE(dom->output.find("class=\"chart roofline\""), std::string::npos);
  EXPECT_GE(count_of(dom->output, "class=\"chart trajectory\""), 13u);
  EXPECT_NE(dom->output.find("class=\"scores\""), std::string::npos);
  const size_t table = dom->output.find("id=\"tasks\"");
  ASSERT_NE(table, std::string::npos);
  const std::string tasks_table = dom->output.substr(table, dom->output.find("</table>", table) - table);
  EXPECT_GE(count_of(tasks_table, "<tr"), 14u) << "a header and a row per task";
  for (const char* t : kCoreTasks) EXPECT_NE(tasks_table.find(t), std::string::npos) << t;
  const fs::path png = scratch() / "report.png";
  auto shot = run_command({"/bin/sh", "-c", quote(browser) + flags + " --window-size=1400,2400 --screenshot=" + quote(png.string()) + " " +
                                                quote(url) + " 2>/dev/null"},
                          180);
  ASSERT_TRUE(shot.has_value());
  const auto [w, h] = png_size(png);
  EXPECT_EQ(w, 1400u);
  EXPECT_EQ(h, 2400u);
  EXPECT_GT(fs::file_size(png), 50'000u) << "a page of charts and tables, not a blank one";
  if (const char* keep = std::getenv("KFAB_REPORT_SCREENSHOT")) fs::copy_file(png, keep, fs::copy_options::overwrite_existing);
}

TEST(Bench, EvalModeEvaluatesEveryBundledCandidateTheTargetTakes) {
  const fs::path suite = scratch() / "eval-suite";
  fs::create_directories(suite);
  fs::copy(fs::path(KFAB_SOURCE_DIR) / "tasks/core/softmax", suite / "softmax", fs::copy_options::recursive);
  const fs::path out = scratch() / "bench-eval";
  CliResult r = kfab_cli({"bench", suite.string(), "--target", "cpu", "--eval", "--seeds", "2", "--out", out.string(), "--json", "--quiet"});
  EXPECT_EQ(r.status.code, 0) << r.out << r.err;
  const json j = r.json();
  ASSERT_EQ(j["tasks"].size(), 1u) << r.out;
  EXPECT_EQ(j["mode"], "eval");
  EXPECT_EQ(j["tasks"][0]["disposition"], "passed");
  EXPECT_TRUE(j["scores"]["heldout_retention"].is_null()) << "no search, so nothing to retain";
  auto bench = read_file(out / "bench.json");
  ASSERT_TRUE(bench.has_value());
  const json steps = json::parse(*bench)["tasks"][0]["report"]["steps"];
  // the cpu takes rowwise_simd_opt.cpp, not the .cu or the OpenCL .cl.cpp beside it
  ASSERT_EQ(steps.size(), 1u) << steps.dump(2);
  EXPECT_NE(steps[0]["candidate_path"].get<std::string>().find("rowwise_simd_opt.cpp"), std::string::npos);
  EXPECT_EQ(steps[0]["disposition"], "passed");
}

// Issue 20: bytes that are not UTF-8 in a crashing candidate's output ended kfab with exit 3 at the
// first task, and no bench.json was written. Now the bench goes on to its last task.
TEST(Bench, EvalModeGoesOnPastACandidateThatPrintsBytesThatAreNotUtf8AndCrashes) {
  const fs::path suite = scratch() / "garbled-suite";
  fs::create_directories(suite / "1_garbled" / "candidates");
  for (const char* f : {"task.toml", "reference.cpp"}) fs::copy_file(fixture("tasks/affine/") + f, suite / "1_garbled" / f);
  fs::copy_file(fixture("broken/garbled_crash.cpp"), suite / "1_garbled/candidates/garbled_crash.cpp");
  fs::create_directories(suite / "2_affine" / "candidates");
  for (const char* f : {"task.toml", "reference.cpp"}) fs::copy_file(fixture("tasks/affine/") + f, suite / "2_affine" / f);
  fs::copy_file(fixture("tasks/affine/candidates/good.cpp"), suite / "2_affine/candidates/good.cpp");
  const fs::path out = scratch() / "bench-garbled";
  CliResult r = kfab_cli({"bench", suite.string(), "--target", "cpu", "--eval", "--seeds", "2", "--out", out.string(), "--json", "--quiet"});
  EXPECT_EQ(r.status.code, 1) << "one task of two passed: 1, as for any failed task; 3 was kfab's own failure\n" << r.out << r.err;
  const json j = r.json();
  ASSERT_EQ(j["tasks"].size(), 2u) << r.out;
  EXPECT_EQ(j["tasks"][0]["disposition"], "crashed") << "the row says what became of its only candidate";
  EXPECT_EQ(j["tasks"][1]["disposition"], "passed");
  auto bench = read_file(out / "bench.json");
  ASSERT_TRUE(bench.has_value()) << "no bench.json";
  const json b = json::parse(*bench);  // throws, and fails the test, on bytes that are not UTF-8
  EXPECT_EQ(b["finished"], true);
  ASSERT_EQ(b["tasks"].size(), 2u);
  const json step = b["tasks"][0]["report"]["steps"][0];
  EXPECT_EQ(step["disposition"], "crashed");
  EXPECT_NE(step.value("detail", "").find("garbled: \xEF\xBF\xBD\xEF\xBF\xBD before the crash"), std::string::npos) << step.dump();
}

// Issue 21: a KernelBench bench outlasts one device call; --resume goes on with a stopped one in its
// folder, with the suite and settings it was started with, keeping the rows it had finished.
TEST(Bench, ResumeRunsOnlyTheTasksAStoppedBenchHadNotFinished) {
  const fs::path suite = scratch() / "resume-suite";
  for (const char* name : {"1_affine", "2_affine"}) {
    fs::create_directories(suite / name / "candidates");
    for (const char* f : {"task.toml", "reference.cpp"}) fs::copy_file(fixture("tasks/affine/") + f, suite / name / f);
    fs::copy_file(fixture("tasks/affine/candidates/good.cpp"), suite / name / "candidates/good.cpp");
  }
  const fs::path out = scratch() / "bench-resume";
  CliResult first = kfab_cli({"bench", suite.string(), "--target", "cpu", "--eval", "--seeds", "2", "--out", out.string(), "--json", "--quiet"});
  ASSERT_EQ(first.status.code, 0) << first.out << first.err;
  // Stopped after its first task: bench.json as it was written then (one row, not finished).
  json b = json::parse(*read_file(out / "bench.json"));
  ASSERT_EQ(b["tasks"].size(), 2u);
  const json kept = b["tasks"][0];
  b["tasks"].erase(1);
  b["finished"] = false;
  ASSERT_TRUE(write_file_atomic(out / "bench.json", b.dump()).has_value());

  CliResult changed = kfab_cli({"bench", "--resume", out.string(), "--seeds", "3", "--json"});
  EXPECT_EQ(changed.status.code, 2) << changed.out << changed.err;
  EXPECT_NE((changed.out + changed.err).find("--seeds cannot change a bench that is resumed"), std::string::npos) << changed.out << changed.err;
  CliResult both = kfab_cli({"bench", suite.string(), "--resume", out.string()});
  EXPECT_EQ(both.status.code, 2) << both.err;

  CliResult resumed = kfab_cli({"bench", "--resume", out.string(), "--json", "--quiet"});
  ASSERT_EQ(resumed.status.code, 0) << resumed.out << resumed.err;
  const json r = json::parse(*read_file(out / "bench.json"));
  EXPECT_EQ(r["finished"], true);
  EXPECT_EQ(r["bench"], b["bench"]);
  EXPECT_EQ(r["mode"], "eval");
  EXPECT_EQ(r["settings"]["seeds"], 2) << "the stopped bench's settings";
  ASSERT_EQ(r["tasks"].size(), 2u) << r.dump(1);
  EXPECT_EQ(r["tasks"][0], kept) << "the finished row is kept as it was, not run again";
  EXPECT_EQ(fs::path(r["tasks"][1]["path"].get<std::string>()).filename(), "2_affine") << r["tasks"][1]["path"];
  EXPECT_EQ(r["tasks"][1]["disposition"], "passed");
  EXPECT_EQ(r["resumed_at"].size(), 1u);
  EXPECT_GE(r["wall_s"].get<double>(), b["wall_s"].get<double>());

  CliResult none = kfab_cli({"bench", "--resume", (scratch() / "no-bench-here").string()});
  EXPECT_EQ(none.status.code, 2);
  EXPECT_NE(none.err.find("no bench to resume here"), std::string::npos) << none.err;
}

/// Two copies of the affine task, one with a candidate that passes and one with one that crashes.
fs::path two_task_suite(const std::string& name) {
  const fs::path suite = scratch() / name;
  for (const char* t : {"1_affine", "2_affine"}) {
    fs::create_directories(suite / t / "candidates");
    for (const char* f : {"task.toml", "reference.cpp"}) fs::copy_file(fixture("tasks/affine/") + f, suite / t / f);
  }
  fs::copy_file(fixture("tasks/affine/candidates/good.cpp"), suite / "1_affine/candidates/good.cpp");
  fs::copy_file(fixture("broken/garbled_crash.cpp"), suite / "2_affine/candidates/garbled_crash.cpp");
  return suite;
}

// Issue 26: `--devices` spreads the tasks over devices, a kfab per task pinned to its device; on the
// cpu the indices are slots that run at once. The verdicts are those of a bench in one process, the
// rows in the suite's order, each with its device and its own bench folder.
TEST(Bench, DevicesSpreadTheTasksAndGiveTheVerdictsOfOneProcess) {
  const fs::path suite = two_task_suite("devices-suite");
  const fs::path here = scratch() / "bench-one-process", spread = scratch() / "bench-devices";
  CliResult one = kfab_cli({"bench", suite.string(), "--target", "cpu", "--eval", "--seeds", "2", "--out", here.string(), "--json", "--quiet"});
  ASSERT_EQ(one.status.code, 1) << one.out << one.err;
  CliResult two = kfab_cli({"bench", suite.string(), "--target", "cpu", "--eval", "--seeds", "2", "--out", spread.string(), "--json",
                            "--devices", "0,1"});
  ASSERT_EQ(two.status.code, 1) << two.out << two.err;
  const json a = json::parse(*read_file(here / "bench.json")), b = json::parse(*read_file(spread / "bench.json"));
  EXPECT_EQ(b["finished"], true);
  EXPECT_EQ(b["devices"], json::array({0, 1}));
  ASSERT_EQ(b["tasks"].size(), 2u) << b.dump(1);
  std::set<int> used;
  for (size_t i = 0; i < 2; ++i) {
    const json& r = b["tasks"][i];
    EXPECT_EQ(r["path"], a["tasks"][i]["path"]) << "the suite's order";
    EXPECT_EQ(r["disposition"], a["tasks"][i]["disposition"]) << r.dump(1);
    ASSERT_TRUE(r.contains("device")) << r.dump(1);
    used.insert(r["device"].get<int>());
    const fs::path own = r["bench_dir"].get<std::string>();
    EXPECT_TRUE(fs::exists(own / "log.txt")) << own;
    EXPECT_EQ(json::parse(*read_file(own / "bench.json"))["tasks"].size(), 1u);
  }
  EXPECT_EQ(b["tasks"][0]["disposition"], "passed");
  EXPECT_EQ(b["tasks"][1]["disposition"], "crashed");
  EXPECT_TRUE(b["tasks"][0]["report"].is_object()) << "the run's report comes with the row";
  EXPECT_EQ(used.size(), 2u) << "both slots took a task";
  EXPECT_NE(two.err.find("(device "), std::string::npos) << two.err;
  // the one-process bench timed both tasks here: the devices take them longest first
  EXPECT_NE(two.err.find("2 of 2 tasks have taken a known time here before: handed out longest first"), std::string::npos) << two.err;

  CliResult bad = kfab_cli({"bench", suite.string(), "--target", "cpu", "--eval", "--devices", "-1"});
  EXPECT_EQ(bad.status.code, 2) << bad.out << bad.err;
}

// Issue 26: a task whose kfab dies costs that task alone: its row says how the kfab ended, the other
// task passes (on a kfab started anew), bench.json is written and finished. Resumed, a task whose kfab
// had finished is not run again.
TEST(Bench, ATaskWhoseKfabIsKilledCostsThatTaskAloneAndAResumeKeepsFinishedTasks) {
  const fs::path suite = scratch() / "devices-kill-suite";
  for (const char* t : {"1_affine", "2_affine"}) {
    fs::create_directories(suite / t / "candidates");
    for (const char* f : {"task.toml", "reference.cpp"}) fs::copy_file(fixture("tasks/affine/") + f, suite / t / f);
    fs::copy_file(fixture("tasks/affine/candidates/good.cpp"), suite / t / "candidates/good.cpp");
  }
  const fs::path out = scratch() / "bench-devices-kill";
  // Each device's kfab runs under this script; the first to find the first task's log killed (once).
  const fs::path killer = scratch() / "kill-first.sh";
  const std::string script = "#!/bin/sh\n\"$@\" & pid=$!\nwhile kill -0 $pid 2>/dev/null; do\n"
                             "  if [ -f '" + (out / "tasks/000-affine/log.txt").string() + "' ] && mkdir '" +
                             (scratch() / "killed-once").string() + "' 2>/dev/null; then kill -9 $pid; kill -9 $$; fi\n"
                             "  sleep 0.02\ndone\nwait $pid\n";
  ASSERT_TRUE(write_file_atomic(killer, script).has_value());
  fs::permissions(killer, fs::perms::owner_all);
  ::setenv("KFAB_BENCH_TASK_PREFIX", killer.c_str(), 1);
  CliResult r = kfab_cli({"bench", suite.string(), "--target", "cpu", "--eval", "--seeds", "2", "--out", out.string(), "--json",
                          "--quiet", "--devices", "0"});
  ::unsetenv("KFAB_BENCH_TASK_PREFIX");
  ASSERT_EQ(r.status.code, 1) << r.out << r.err;
  json b = json::parse(*read_file(out / "bench.json"));
  EXPECT_EQ(b["finished"], true);
  ASSERT_EQ(b["tasks"].size(), 2u);
  EXPECT_EQ(b["tasks"][0]["disposition"], "error");
  EXPECT_NE(b["tasks"][0].value("error", "").find("was killed by SIGKILL"), std::string::npos) << b["tasks"][0].dump(1);
  EXPECT_EQ(b["tasks"][1]["disposition"], "passed") << "on a kfab started anew for the device";

  // Stopped with the second task's kfab done but its row not yet taken: the resume takes that row
  // from the task's own folder and runs the first task again.
  const fs::path own = b["tasks"][1]["bench_dir"].get<std::string>();
  const auto written = fs::last_write_time(own / "bench.json");
  b["tasks"] = json::array();
  b["finished"] = false;
  ASSERT_TRUE(write_file_atomic(out / "bench.json", b.dump()).has_value());
  CliResult again = kfab_cli({"bench", "--resume", out.string(), "--json", "--quiet"});
  ASSERT_EQ(again.status.code, 0) << again.out << again.err;
  const json c = json::parse(*read_file(out / "bench.json"));
  ASSERT_EQ(c["tasks"].size(), 2u);
  EXPECT_EQ(c["devices"], json::array({0})) << "the stopped bench's devices";
  EXPECT_EQ(c["tasks"][0]["disposition"], "passed");
  EXPECT_EQ(c["tasks"][1]["disposition"], "passed");
  EXPECT_EQ(c["tasks"][1]["device"], 0);
  EXPECT_EQ(fs::last_write_time(own / "bench.json"), written) << "a finished task is not run again";
}

TEST(Bench, ASuiteThatDoesNotExistIsBadInput) {
  CliResult r = kfab_cli({"bench", "no/such/suite", "--target", "cpu"});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.err.find("no/such/suite: no such suite"), std::string::npos) << r.err;
}

TEST(Bench, AReportOfAnUnknownRunNamesIt) {
  CliResult r = kfab_cli({"report", "19700101-000000-dead"});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.err.find("19700101-000000-dead"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kfab::test
