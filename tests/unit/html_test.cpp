#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "report/html.h"

namespace kfab {

using json = nlohmann::json;

namespace {

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + needle.size())) ++n;
  return n;
}

/// The text of the first <svg class="chart `cls`" ...> ... </svg>, or "" when there is none.
std::string svg_of(const std::string& page, const std::string& cls) {
  const size_t at = page.find("<svg class=\"chart " + cls + "\"");
  if (at == std::string::npos) return {};
  return page.substr(at, page.find("</svg>", at) - at);
}

json machine() { return {{"device", "Test CPU"}, {"copy_bandwidth_GBps", 20.0}, {"peak_gflops_f32", 300.0}}; }

json verdict(double median_ms, double speedup) {
  const json tuning = {{"shape", {{"M", 64}, {"N", 256}}},
                       {"heldout", false},
                       {"status", "passed"},
                       {"correct", true},
                       {"max_abs_err", 1e-7},
                       {"max_rel_err", 1e-6},
                       {"time_ms", {{"median", median_ms}, {"q1", median_ms * 0.95}, {"q3", median_ms * 1.05}, {"n", 100}}},
                       {"baseline_ms", {{"median", median_ms * speedup}}},
                       {"bound_ms", 0.01},
                       {"percent_of_bound", 100.0 * 0.01 / median_ms},
                       {"flops", 1e6},
                       {"bytes", 4e5},
                       {"percent_of_copy_bandwidth", 50.0}};
  json heldout = tuning;
  heldout["shape"] = {{"M", 128}, {"N", 512}};
  heldout["heldout"] = true;
  return {{"task", "softmax"}, {"target", "cpu"},     {"dsl", "cpp"},      {"disposition", "passed"},
          {"detail", ""},      {"speedup", speedup}, {"baseline", "reference"}, {"machine", machine()},
          {"shapes", {tuning, heldout}}};
}

const std::string kParentSource = "float f(float a, float b) {\n  float c = a;\n  return a < b && c;\n}\n";
const std::string kChildSource = "float f(float a, float b) {\n  float c = b;\n  return a < b && c;\n}\n";

/// Three steps: a compile failure, then two passing candidates, the second derived from the first.
json small_run() {
  json steps = json::array();
  steps.push_back({{"seq", 1}, {"role", "coder"}, {"disposition", "compile_failed"}, {"speedup", nullptr},
                   {"detail", "error: expected ';' before <token>"}, {"candidate_hash", "fail0001"}, {"candidate_path", "/x/c1.cpp"},
                   {"parent_hash", nullptr}, {"source", "float f( {"}, {"verdict", nullptr}});
  steps.push_back({{"seq", 2}, {"role", "coder"}, {"disposition", "passed"}, {"speedup", 1.5}, {"detail", "ok"},
                   {"candidate_hash", "aaaa1111"}, {"candidate_path", "/x/c2.cpp"}, {"parent_hash", nullptr}, {"source", kParentSource},
                   {"verdict", verdict(0.2, 1.5)}});
  steps.push_back({{"seq", 3}, {"role", "tuner"}, {"disposition", "passed"}, {"speedup", 2.5}, {"detail", "tiled"},
                   {"candidate_hash", "bbbb2222"}, {"candidate_path", "/x/best.cpp"}, {"parent_hash", "aaaa1111"},
                   {"source", kChildSource}, {"verdict", verdict(0.12, 2.5)}});
  return {{"run", "20261124-081500-ab12"}, {"task", "softmax"},    {"task_path", "/x/tasks/core/softmax"},
          {"target", "cpu"},               {"llm", "tuner"},       {"strategy", "tune"},
          {"status", "finished"},          {"created_at", "2026-11-24T08:15:00Z"}, {"machine", machine()},
          {"steps", steps}};
}

json small_bench() {
  json ok = {{"task", "softmax"},      {"path", "tasks/core/softmax"},  {"format", "native"}, {"run", "20261124-081500-ab12"},
             {"disposition", "passed"}, {"detail", ""},                  {"speedup", 2.5},      {"speedup_vs_compile", nullptr},
             {"sol_score", 0.8},        {"percent_of_bound", 8.3},       {"percent_of_copy_bandwidth", 90.0},
             {"heldout", {{"passed", 1}, {"total", 1}}}, {"retained", true}, {"candidate", "/x/best.cpp"}, {"report", small_run()}};
  json bad = {{"task", "layer<norm>"}, {"path", "tasks/core/layernorm"}, {"format", "kernelbench"}, {"run", nullptr},
              {"disposition", ""},      {"speedup", nullptr},             {"error", "worker died: no torch"}, {"report", nullptr}};
  return {{"bench", "20261124-090000-1a2b"},
          {"suite", "tasks/core"},
          {"target", "cpu"},
          {"mode", "optimize"},
          {"started_at", "2026-11-24T09:00:00Z"},
          {"wall_s", 123.4},
          {"machine", machine()},
          {"scores",
           {{"tasks", 2}, {"correct", 1}, {"correctness_rate", 0.5}, {"fast_p", {{"0", 0.5}, {"1", 0.5}, {"1.2", 0.5}, {"2", 0.5}}},
            {"geomean_speedup", 2.5}, {"geomean_speedup_vs_compile", nullptr}, {"sol_score", 0.8}, {"mean_percent_of_bound", 8.3},
            {"heldout_retention", 1.0}}},
          {"tasks", {ok, bad}}};
}

std::string numbered(int n, int changed = 0) {
  std::string s;
  for (int i = 1; i <= n; ++i) s += (i == changed ? "changed " : "line ") + std::to_string(i) + "\n";
  return s;
}

}  // namespace

TEST(Html, DiffOfIdenticalTextIsEmpty) {
  EXPECT_EQ(unified_diff("", ""), "");
  EXPECT_EQ(unified_diff(numbered(10), numbered(10)), "");
}

TEST(Html, OneLineChangeGivesOneHunkWithContext) {
  const std::string d = unified_diff(numbered(10), numbered(10, 5));
  EXPECT_EQ(d,
            "@@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+changed 5\n line 6\n line 7\n line 8\n");
  EXPECT_EQ(count("\n" + d, "\n-"), 1u);
  EXPECT_EQ(count("\n" + d, "\n+"), 1u);
}

TEST(Html, DistantChangesMakeTwoHunksAndInsertionsCountFromZero) {
  const std::string d = unified_diff(numbered(30, 2), numbered(30, 25));
  EXPECT_EQ(count(d, "@@ -"), 2u);
  EXPECT_NE(d.find("@@ -1,5 +1,5 @@\n"), std::string::npos) << d;
  EXPECT_NE(d.find("@@ -22,7 +22,7 @@\n"), std::string::npos) << d;
  EXPECT_EQ(unified_diff("", "a\nb\n"), "@@ -0,0 +1,2 @@\n+a\n+b\n");
  EXPECT_EQ(unified_diff("a\nb\nc\n", "a\nc\n"), "@@ -1,3 +1,2 @@\n a\n-b\n c\n");
}

TEST(Html, HugeDiffFallsBackToReplacement) {
  std::string before, after;
  for (int i = 0; i < 2500; ++i) before += "old " + std::to_string(i) + "\n", after += "new " + std::to_string(i) + "\n";
  const std::string d = unified_diff(before, after);
  EXPECT_EQ(d.rfind("@@ -1,2500 +1,2500 @@\n", 0), 0u);
  EXPECT_EQ(count("\n" + d, "\n-old"), 2500u);
  EXPECT_EQ(count("\n" + d, "\n+new"), 2500u);
}

TEST(Html, EscapesAllFive) {
  EXPECT_EQ(html_escape(R"(<a href="x" title='y'>&</a>)"), "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;");
  EXPECT_EQ(html_escape("plain"), "plain");
}

TEST(Html, RunPageHasChartsTablesSourcesAndDiff) {
  const std::string page = render_run_html(small_run());
  ASSERT_NE(page.find("<html"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(count(page, "http"), count(page, "xmlns=\"http://www.w3.org/2000/svg\""));  // nothing fetched

  const std::string trajectory = svg_of(page, "trajectory");
  ASSERT_FALSE(trajectory.empty());
  EXPECT_EQ(count(trajectory, "<circle"), 3u);  // the failure too, as a hollow marker
  EXPECT_EQ(count(trajectory, "fill=\"#fff\""), 1u);
  EXPECT_NE(trajectory.find("<polyline"), std::string::npos);  // best so far
  EXPECT_NE(trajectory.find("stroke-dasharray"), std::string::npos);  // 1.0x
  EXPECT_NE(trajectory.find("<text"), std::string::npos);

  const std::string roofline = svg_of(page, "roofline");
  ASSERT_FALSE(roofline.empty());
  EXPECT_EQ(count(roofline, "<circle"), 2u);  // one per passing step's tuning shape, held-out left out
  EXPECT_NE(roofline.find("M=64 N=256"), std::string::npos);
  EXPECT_NE(roofline.find("peak 300 GFLOP/s"), std::string::npos);
  EXPECT_EQ(count(page, "<svg"), count(page, "xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_EQ(count(page, "<svg"), count(page, "viewBox=\"0 0 "));

  EXPECT_NE(page.find("<table class=\"steps\">"), std::string::npos);
  EXPECT_NE(page.find("2.50x"), std::string::npos);
  EXPECT_NE(page.find("a &lt; b &amp;&amp; c"), std::string::npos);
  EXPECT_EQ(page.find("a < b && c"), std::string::npos);
  EXPECT_NE(page.find("expected &#39;;&#39; before &lt;token&gt;"), std::string::npos);
  EXPECT_NE(page.find("<span class=\"del\">-  float c = a;</span>"), std::string::npos);
  EXPECT_NE(page.find("<span class=\"add\">+  float c = b;</span>"), std::string::npos);
  EXPECT_EQ(count(page, "<span class=\"add\">"), 1u);
  EXPECT_NE(page.find("held-out"), std::string::npos);
}

// Issue 24 (findings 11, 12): the page heads with the run's result, the final check's figure, not the
// search's best (tuning shapes, brief timing), which stands beside it; a final figure below 1x says to keep
// the baseline.
TEST(Html, TheHeadlineIsTheFinalChecksFigureAndSaysWhenItIsSlower) {
  nlohmann::json run = small_run();
  auto& steps = run["steps"];
  steps.push_back({{"seq", 4}, {"role", "final"}, {"disposition", "passed"}, {"speedup", 1.54}, {"detail", "final"},
                   {"candidate_hash", "c3"}, {"source", "int y;"}});
  std::string page = render_run_html(run);
  EXPECT_NE(page.find("result <b>1.54x</b> (the final check"), std::string::npos) << page.substr(0, 4000);
  EXPECT_NE(page.find("search best 2.50x"), std::string::npos);
  EXPECT_EQ(page.find("not faster than the baseline"), std::string::npos);
  steps.back()["speedup"] = 0.09;
  page = render_run_html(run);
  EXPECT_NE(page.find("result <b>0.09x</b>"), std::string::npos);
  EXPECT_NE(page.find("not faster than the baseline: keep the baseline"), std::string::npos);
}

TEST(Html, RunWithoutCostSaysSoInsteadOfAnEmptyRoofline) {
  json run = small_run();
  for (auto& st : run["steps"])
    if (st["verdict"].is_object())
      for (auto& sh : st["verdict"]["shapes"]) sh.erase("flops");
  const std::string page = render_run_html(run);
  EXPECT_TRUE(svg_of(page, "roofline").empty());
  EXPECT_NE(page.find("no roofline data (the task states no cost)"), std::string::npos);
}

TEST(Html, RooflineWithoutMachinePeaksStillPlotsThePoints) {
  json run = small_run();
  run.erase("machine");
  for (auto& st : run["steps"])
    if (st["verdict"].is_object()) st["verdict"].erase("machine");
  const std::string roofline = svg_of(render_run_html(run), "roofline");
  EXPECT_EQ(count(roofline, "<circle"), 2u);
  EXPECT_NE(roofline.find("machine peaks unknown"), std::string::npos);
  EXPECT_EQ(roofline.find("<polyline"), std::string::npos);
}

TEST(Html, WideSpeedupRangeUsesALogAxis) {
  json run = small_run();
  run["steps"][2]["speedup"] = 40.0;
  EXPECT_NE(svg_of(render_run_html(run), "trajectory").find("speedup (log)"), std::string::npos);
  EXPECT_EQ(svg_of(render_run_html(small_run()), "trajectory").find("speedup (log)"), std::string::npos);
}

TEST(Html, EmptyAndGarbageRunsStillRender) {
  const json cases[] = {json::object(),
                        json(nullptr),
                        json::array({1, 2}),
                        json{{"steps", 5}, {"machine", "fast"}, {"task", 12}},
                        json{{"steps", {1, "x", nullptr, {{"verdict", 7}, {"seq", "a"}, {"speedup", "fast"}, {"source", 3}}}}},
                        json{{"steps", {{{"disposition", "passed"}, {"speedup", -1}, {"verdict", {{"shapes", {{{"time_ms", 0}}}}}}},
                                        {{"disposition", 4}, {"parent_hash", "nope"}, {"candidate_hash", {1}}}}}}};
  for (const json& run : cases) {
    std::string page;
    ASSERT_NO_THROW(page = render_run_html(run)) << run.dump();
    EXPECT_NE(page.find("<html"), std::string::npos) << run.dump();
    EXPECT_NE(page.find("</html>"), std::string::npos) << run.dump();
    EXPECT_EQ(page.find("could not render"), std::string::npos) << run.dump();
  }
  for (const json& bench : {json::object(), json{{"tasks", 5}, {"scores", {{"fast_p", {{"x", 1}, {"1", "a"}}}}}},
                            json{{"tasks", {nullptr, {{"report", 3}}, {{"report", {{"steps", 1}}}}}}}}) {
    std::string page;
    ASSERT_NO_THROW(page = render_bench_html(bench)) << bench.dump();
    EXPECT_NE(page.find("<html"), std::string::npos) << bench.dump();
    EXPECT_EQ(page.find("could not render"), std::string::npos) << bench.dump();
  }
}

TEST(Html, BenchPageHasScoresChartTableAndTaskSections) {
  const std::string page = render_bench_html(small_bench());
  ASSERT_NE(page.find("<html"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  const size_t table = page.find("<table id=\"tasks\" class=\"tasks\">");
  ASSERT_NE(table, std::string::npos);
  const std::string rows = page.substr(table, page.find("</table>", table) - table);
  EXPECT_NE(rows.find(">softmax<"), std::string::npos);
  EXPECT_NE(rows.find(">layer&lt;norm&gt;<"), std::string::npos);
  EXPECT_NE(rows.find("1/1"), std::string::npos);

  const size_t scores = page.find("<div class=\"scores\">");
  ASSERT_NE(scores, std::string::npos);
  EXPECT_NE(page.find("fast_1.2", scores), std::string::npos);
  EXPECT_NE(page.find("50.0%", scores), std::string::npos);
  EXPECT_NE(page.find("2.50x", scores), std::string::npos);

  const std::string speedups = svg_of(page, "speedups");
  ASSERT_FALSE(speedups.empty());
  EXPECT_EQ(count(speedups, "<rect"), 1u);  // only softmax has a speedup
  EXPECT_NE(speedups.find("<text"), std::string::npos);
  EXPECT_EQ(count(svg_of(page, "roofline"), "<circle"), 2u);

  EXPECT_NE(page.find("<details id=\"task-0\">"), std::string::npos);
  EXPECT_NE(page.find("<details id=\"task-1\">"), std::string::npos);
  EXPECT_NE(page.find("worker died: no torch"), std::string::npos);
  EXPECT_NE(page.find("<svg class=\"chart trajectory\"", page.find("id=\"task-0\"")), std::string::npos);
  EXPECT_NE(page.find("<span class=\"add\">", page.find("id=\"task-0\"")), std::string::npos);
  EXPECT_EQ(count(page, "<svg"), count(page, "xmlns=\"http://www.w3.org/2000/svg\""));
}

TEST(Html, WritesSamplesWhenAsked) {
  const char* dir = std::getenv("KFAB_HTML_SAMPLE_DIR");
  if (!dir) GTEST_SKIP() << "set KFAB_HTML_SAMPLE_DIR to write sample pages";
  json run = small_run();
  const char* dispositions[] = {"passed", "incorrect", "passed", "timeout", "passed", "passed", "runtime_failed", "passed"};
  for (int i = 0; i < 8; ++i) {
    json st = run["steps"][2];
    const double speedup = 2.5 * std::pow(1.6, i);
    st["seq"] = 4 + i;
    st["disposition"] = dispositions[i];
    st["candidate_hash"] = "cand" + std::to_string(i);
    st["parent_hash"] = i == 0 ? "bbbb2222" : "cand" + std::to_string(i - 1);
    st["source"] = kChildSource + "// variant " + std::to_string(i) + "\n";
    st["speedup"] = st["disposition"] == "passed" ? json(speedup) : json(nullptr);
    st["verdict"] = st["disposition"] == "passed" ? verdict(0.3 / speedup, speedup) : json(nullptr);
    st["detail"] = st["disposition"] == "passed" ? "ok" : "max_abs_err 3.2e-2 at out[17] (expected 0.5, got 0.468)";
    run["steps"].push_back(st);
  }
  json bench = small_bench();
  bench["tasks"][0]["report"] = run;
  bench["tasks"].push_back(bench["tasks"][0]);
  bench["tasks"][2]["task"] = "matmul";
  bench["tasks"][2]["speedup"] = 0.7;
  bench["tasks"][2]["disposition"] = "incorrect";
  std::ofstream(std::string(dir) + "/html_sample_run.html") << render_run_html(run);
  std::ofstream(std::string(dir) + "/html_sample_bench.html") << render_bench_html(bench);
}

}  // namespace kfab
