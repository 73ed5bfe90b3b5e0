// The built-in tuner (kfab optimize with no LLM): a search over template parameter points, every one an
// ordinary candidate; the winner checked on held-out shapes; the result cached for an instant rerun.
#include <algorithm>

#include <gtest/gtest.h>

#include "backends/cpu_cpp/cpu_backend.h"
#include "core/process.h"
#include "core/task.h"
#include "tuner/fused.h"
#include "tuner/program.h"
#include "tuner/templates.h"
#include "harness.h"

namespace kfab::test {

// Issue 25: the host's generated element loops vectorise with the cpu target's own flags, transcendentals
// and all (the C library's tanhf, log1pf and fmaxf are calls, and a select after a division is control flow
// unless no floating-point operation may trap: they kept l1_mish at 0.08x eager). The compiler's own report
// (-fopt-info-vec-optimized) must name the `omp simd` loop of a Mish, a GELU (erf) and a ReLU.
TEST(CpuPrinter, ItsElementLoopsVectoriseWithTheTargetsFlags) {
  const std::vector<PInput> in = {{"x", VClass::E}};
  for (const char* formula : {"y = x * tanh(log1p(exp(x)))", "y = gelu_erf(x) + log(x * x + 1)", "y = relu(x)"}) {
    auto p = parse_program(formula, in, {"y"});
    ASSERT_TRUE(p.has_value()) << formula << ": " << p.error().message;
    const std::string src = generate_fused_cpp(*p, fused_cpu_grid().front(), "vec");
    const auto file = scratch() / "vec.cpp";
    ASSERT_TRUE(write_file_atomic(file, src).has_value());
    // the line of the loop after the last `#pragma omp simd`
    const size_t at = src.rfind("#pragma omp simd");
    ASSERT_NE(at, std::string::npos) << src;
    const int line = static_cast<int>(std::count(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(at), '\n')) + 2;
    std::vector<std::string> cmd = {"g++"};
    for (const auto& f : CpuBackend::flags()) cmd.push_back(f);
    for (const char* f : {"-I", KFAB_SOURCE_DIR "/include", "-fopt-info-vec-optimized", "-c", "-o", "/dev/null"}) cmd.push_back(f);
    cmd.push_back(file.string());
    auto r = run_command(cmd, 300);
    ASSERT_TRUE(r.has_value() && r->status.ok()) << (r ? r->output : "") << src;
    // gcc names the loop's line or its first statement's
    bool vectorised = false;
    for (int l = line; l <= line + 1; ++l) vectorised = vectorised || r->output.find("vec.cpp:" + std::to_string(l) + ":") != std::string::npos;
    EXPECT_TRUE(vectorised) << formula << ": no vectorised loop at line " << line << "\n" << r->output;
  }
}

// Issue 25: a row whose first step is a row reduction is offered 4 rows at a time (one pass over the columns
// for the 4 rows' reductions, the last rows short of 4 each on its own), on all threads and on the calling
// thread; both pass the RMS norm's check (rows of 97 and 1031 among the shapes: the short tail), and a row
// that starts with a per-row input (a class index) is not offered it.
TEST(CpuPrinter, RowsFourAtATimePassTheirChecks) {
  auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core/rms_norm");
  ASSERT_TRUE(task.has_value());
  auto p = task_program(*task);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  const auto grid = fused_cpu_grid(*p);
  ASSERT_GE(grid.size(), 4u);
  int checked = 0;
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(grid[i].count("interleave") ? grid[i].at("interleave") : "", "4") << format_params(grid[i]);
    const std::string src = generate_fused_cpp(*p, grid[i], "rms_norm");
    ASSERT_NE(src.find("constexpr int64_t R = 4;"), std::string::npos) << src;
    EXPECT_EQ(src.find("#pragma omp parallel for") == std::string::npos, grid[i].count("threads") > 0) << format_params(grid[i]);
    const auto f = scratch() / ("rms_rows4_" + std::to_string(i) + ".cpp");
    ASSERT_TRUE(write_file_atomic(f, src).has_value());
    CliResult r = kfab_cli({"eval", "tasks/core/rms_norm", f.string(), "--target", "cpu", "--json"});
    EXPECT_EQ(r.status.code, 0) << r.out << r.err;
    EXPECT_EQ(r.json().value("disposition", ""), "passed") << format_params(grid[i]) << "\n" << r.out;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  auto ce = parse_program("m = rowmax(x); y = log(rowsum(exp(x - m))) + m - pick(x, t)", {{"t", VClass::R, true}, {"x", VClass::E}}, {"y"});
  ASSERT_TRUE(ce.has_value()) << ce.error().message;
  EXPECT_FALSE(cpu_rows_interleave(*ce));
  for (const auto& point : fused_cpu_grid(*ce)) EXPECT_FALSE(point.count("interleave")) << format_params(point);
}

TEST(Tuner, SearchesThenReusesItsCachedResult) {
  const auto cache = scratch() / "tuner-cache";
  const auto run = [&](const std::string& out) {
    const std::string cmd = "KFAB_CACHE_DIR=" + quote(cache.string()) + " KFAB_DATA_DIR=" + quote((scratch() / "tuner-data").string()) +
                            " exec " + quote(KFAB_BINARY) + " optimize tasks/core/log_softmax --target cpu --json --quiet --out " +
                            quote((scratch() / out).string());
    auto r = run_command({"/bin/sh", "-c", cmd + " 2>/dev/null"}, 600, KFAB_SOURCE_DIR);
    EXPECT_TRUE(r.has_value());
    EXPECT_TRUE(r && r->status.ok()) << (r ? r->output : "");
    return r ? nlohmann::json::parse(r->output) : nlohmann::json();
  };
  const auto first = run("tune-a");
  EXPECT_EQ(first["best"]["disposition"], "passed") << first.dump(2);
  // the hand-written row-wise template (8 points) and the task's formula (4 points: its rows start with a row reduction) compete
  const std::string winner = first["tuner"]["template"];
  EXPECT_TRUE(winner == "cpu_rowwise_softmax" || winner == "cpu_fused_rows") << winner;
  EXPECT_FALSE(first["tuner"]["cached"].get<bool>());
  EXPECT_EQ(first["candidates"], 12);
  // every point searched is listed, and the winner is the fastest of those that passed
  ASSERT_EQ(first["points"].size(), 12u);
  double fastest = 0.0;
  for (const auto& p : first["points"]) {
    EXPECT_TRUE(p.contains("template") && p.contains("params") && p.contains("disposition")) << p.dump();
    if (p["disposition"] == "passed") fastest = std::max(fastest, p["speedup"].get<double>());
  }
  // issue 24: the finalists are timed interleaved before one is picked; the search's fastest stays unless
  // the runner-up's interval lies wholly above it
  const auto& runoff = first["runoff"];
  ASSERT_TRUE(runoff.is_object() && !runoff["rounds"].empty()) << first.dump(2);
  bool swapped = false;
  for (const auto& round : runoff["rounds"]) {
    ASSERT_TRUE(round.contains("a_over_b")) << round.dump();
    ASSERT_EQ(round["speedup_ci95"].size(), 2u) << round.dump();
    const double lo = round["speedup_ci95"][0], hi = round["speedup_ci95"][1];
    EXPECT_LE(lo, hi);
    EXPECT_EQ(round["b_kept"].get<bool>(), hi < 1.0) << round.dump();
    swapped = swapped || round["b_kept"].get<bool>();
  }
  EXPECT_EQ(runoff["chosen"], first["tuner"]["params"]);
  bool winner_listed = false;
  for (const auto& p : first["points"])
    winner_listed = winner_listed || (p["template"] == first["tuner"]["template"] && p["params"] == first["tuner"]["params"] &&
                                      (swapped || p["speedup"].get<double>() == fastest));
  EXPECT_TRUE(winner_listed) << first["points"].dump(2);
  bool heldout_checked = false;
  for (const auto& s : first["verdict"]["shapes"]) heldout_checked = heldout_checked || s["heldout"].get<bool>();
  EXPECT_TRUE(heldout_checked);
  const auto second = run("tune-b");
  EXPECT_TRUE(second["tuner"]["cached"].get<bool>());
  EXPECT_EQ(second["candidates"], 0);
  EXPECT_TRUE(second["points"].empty());
  EXPECT_EQ(second["tuner"]["params"], first["tuner"]["params"]);
  EXPECT_EQ(second["best"]["disposition"], "passed");
}

// Every bundled task with a cpu template tuning to a passing kernel: Bench.TheCoreSuiteOnTheCpu...
// (tests/integration/bench_test.cpp) optimizes the whole of tasks/core.

// Issue 26: `--devices` spreads the search's points over evaluators that run at once (on the cpu,
// slots; on cuda, one GPU each). Every point is evaluated once and listed, each with the disposition
// the search in one evaluator gives it, and the winner passes its final check.
TEST(Tuner, DevicesSpreadThePointsAndEvaluateEachOnce) {
  const auto one = kfab_cli({"optimize", "tasks/core/log_softmax", "--target", "cpu", "--json", "--quiet", "--fresh", "--points", "4",
                             "--out", (scratch() / "tune-one").string()});
  ASSERT_TRUE(found_correct(one)) << one.out << one.err;
  const auto two = kfab_cli({"optimize", "tasks/core/log_softmax", "--target", "cpu", "--json", "--quiet", "--fresh", "--points", "4",
                             "--devices", "0,1", "--out", (scratch() / "tune-two").string()});
  ASSERT_TRUE(found_correct(two)) << two.out << two.err;
  const auto a = nlohmann::json::parse(one.out), b = nlohmann::json::parse(two.out);
  EXPECT_EQ(b["best"]["disposition"], "passed") << b.dump(1);
  EXPECT_EQ(b["candidates"], 4);
  EXPECT_EQ(b["devices"], nlohmann::json::array({0, 1})) << "the search spread over two slots";
  EXPECT_FALSE(a.contains("devices")) << "one evaluator";
  ASSERT_EQ(b["points"].size(), 4u);
  ASSERT_EQ(a["points"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b["points"][i]["template"], a["points"][i]["template"]) << "the points in the search's order";
    EXPECT_EQ(b["points"][i]["params"], a["points"][i]["params"]);
    EXPECT_EQ(b["points"][i]["disposition"], a["points"][i]["disposition"]) << b["points"][i].dump();
  }
  const auto bad = kfab_cli({"optimize", "tasks/core/log_softmax", "--target", "cpu", "--devices", "-1"});
  EXPECT_EQ(bad.status.code, 2) << bad.err;
}

TEST(Tuner, AnOpClassWithoutATemplateIsBadInputNamingIt) {
  // matmul_bias_relu with an op class no template takes and no formula
  const auto dir = scratch() / "conv_like";
  std::filesystem::create_directories(dir);
  std::filesystem::copy(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core/matmul_bias_relu/reference.cpp", dir / "reference.cpp");
  std::filesystem::copy(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core/matmul_bias_relu/reference.cu", dir / "reference.cu");
  auto manifest = read_file(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core/matmul_bias_relu/task.toml");
  ASSERT_TRUE(manifest.has_value());
  std::string m = *manifest;
  m.replace(m.find("op_class = \"matmul_epilogue\""), std::string("op_class = \"matmul_epilogue\"").size(), "op_class = \"convolution\"");
  m.erase(m.find("formula = "), m.find('\n', m.find("formula = ")) - m.find("formula = "));
  ASSERT_TRUE(write_file_atomic(dir / "task.toml", m).has_value());
  CliResult r = kfab_cli({"optimize", dir.string(), "--target", "cpu", "--json"});
  EXPECT_EQ(r.status.code, 2) << r.out << r.err;
  EXPECT_NE(r.json().value("error", "").find("no template for op class \"convolution\""), std::string::npos) << r.out;
}

}  // namespace kfab::test
