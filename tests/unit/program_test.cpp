// Fused row programs: parsing, value classes, common subexpressions and the errors a user sees.
#include <gtest/gtest.h>

#include <cmath>

#include "core/task.h"
#include "tuner/emitter.h"
#include "tuner/fused.h"
#include "tuner/program.h"

namespace kfab {

namespace {
const std::vector<PInput> kRowIn = {{"x", VClass::E}, {"w", VClass::C}, {"t", VClass::R, true}};
}

TEST(Program, ClassesFollowTheRowShape) {
  auto p = parse_program("m = rowmax(x); e = exp(x - m); y = e / rowsum(e) * w; s = rowsum(e); l = allmean(s)", kRowIn, {"y", "s", "l"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->nodes[p->outputs[0].second].cls, VClass::E);
  EXPECT_EQ(p->nodes[p->outputs[1].second].cls, VClass::R);
  EXPECT_EQ(p->nodes[p->outputs[2].second].cls, VClass::K);
  EXPECT_TRUE(p->needs_rows());
  // exp(x - m) is written once and shared: one sub, one exp
  int subs = 0, exps = 0;
  for (const auto& n : p->nodes) subs += n.op == "sub", exps += n.op == "exp";
  EXPECT_EQ(subs, 1);
  EXPECT_EQ(exps, 1);
}

// A softmax's row maximum pairs with the row sum of exp(x - max) after it (a row split over blocks meets
// once for both); not where the maximum is an output, something per row comes between, or the sum's
// argument is not exp(x - m) of the maximum's own x.
// Issue 25: a softmax whose outputs read x only through exp(x - m) can keep exp(x - m) in x's registers
// for them (softmax_exp_reuse); a log-softmax (x - m read again), an output or a later reduction that reads
// x does not.
TEST(Program, ASoftmaxThatReadsXOnlyThroughItsExpCanKeepTheExpInXsPlace) {
  const std::vector<std::pair<const char*, bool>> cases = {
      {"m = rowmax(x); e = exp(x - m); y = e / rowsum(e)", true},                  // softmax (level1/23)
      {"m = rowmax(x); y = exp(x - m) / rowmean(exp(x - m))", true},                // a mean
      {"m = rowmax(x); y = exp(x - m) / rowsum(exp(x - m)) + m", true},             // m is read, not x
      {"m = rowmax(x); d = x - m; y = d - log(rowsum(exp(d)))", false},             // log-softmax (level1/24)
      {"m = rowmax(x); y = exp(x - m) / rowsum(exp(x - m)) + x", false},            // x read per element
      {"m = rowmax(x); y = exp(x - m) / rowsum(exp(x - m)) * rowsum(x * x)", false},  // a reduction of x after the sum
  };
  for (const auto& [text, reuse] : cases) {
    auto p = parse_program(text, kRowIn, {"y"});
    ASSERT_TRUE(p.has_value()) << text << ": " << p.error().message;
    const auto r = softmax_exp_reuse(*p);
    EXPECT_EQ(r.has_value(), reuse) << text;
    if (r) {
      EXPECT_EQ(p->nodes[r->max].op, "rowmax") << text;
      EXPECT_EQ(p->nodes[r->exp].op, "exp") << text;
      EXPECT_EQ(p->nodes[r->sum].args[0], r->exp) << text;
      EXPECT_EQ(r->input, 0) << text;
    }
  }
}

TEST(Program, SoftmaxPairsAreTheMaximumAndItsSum) {
  const std::vector<std::pair<const char*, bool>> cases = {
      {"m = rowmax(x); e = exp(x - m); y = e / rowsum(e)", true},                    // softmax (level1/23)
      {"m = rowmax(x); d = x - m; y = d - log(rowsum(exp(d)))", true},               // log-softmax (level1/24)
      {"m = rowmax(x); y = exp(x - m) / rowmean(exp(x - m))", true},                  // a mean
      {"m = rowmax(x); y = exp(x - m) / rowsum(exp(x - m)) + m", true},               // m read per element after
      {"m = rowmax(x); q = m * 2; y = exp(x - m) / rowsum(exp(x - m)) + q", false},   // per row in between
      {"m = rowmax(x); y = exp(x * w - m) / rowsum(exp(x * w - m))", false},          // not the maximum's x
      {"m = rowmax(x); y = exp(2 * (x - m)) / rowsum(exp(2 * (x - m)))", false},      // not exp(x - m)
  };
  for (const auto& [text, pairs] : cases) {
    auto p = parse_program(text, kRowIn, {"y"});
    ASSERT_TRUE(p.has_value()) << text << ": " << p.error().message;
    const auto found = softmax_pairs(*p);
    EXPECT_EQ(found.size(), pairs ? 1u : 0u) << text;
    if (!found.empty()) {
      EXPECT_EQ(p->nodes[found[0].first].op, "rowmax") << text;
      EXPECT_EQ(p->nodes[p->nodes[found[0].second].args[0]].op, "exp") << text;
    }
  }
  auto out = parse_program("m = rowmax(x); y = exp(x - m) / rowsum(exp(x - m))", kRowIn, {"y", "m"});
  ASSERT_TRUE(out.has_value()) << out.error().message;
  EXPECT_TRUE(softmax_pairs(*out).empty());  // the maximum is an output
}

// A layer norm's row mean pairs with the row mean of (x - mean)^2 after it; not an RMS norm's, nor a
// variance about something else.
TEST(Program, MomentPairsAreTheMeanAndItsSquaredDeviations) {
  const std::vector<std::pair<const char*, bool>> cases = {
      {"m = rowmean(x); d = x - m; y = d * rsqrt(rowmean(d * d) + 1e-05) * w", true},  // layer norm (level1/40)
      {"m = rowmean(x); d = x - m; y = d / rowsum(d * d)", true},                       // a sum
      {"y = x * rsqrt(rowmean(x * x) + 1e-05)", false},                                // RMS norm
      {"m = rowmean(x); d = x - m; y = d * rowmean(d * x)", false},                     // not a square
      {"m = rowmax(x); d = x - m; y = d * rowmean(d * d)", false},                      // not a mean
      {"m = rowmean(x); d = x * w - m; y = d * rowmean(d * d)", false},                 // not the mean's x
  };
  for (const auto& [text, pairs] : cases) {
    auto p = parse_program(text, kRowIn, {"y"});
    ASSERT_TRUE(p.has_value()) << text << ": " << p.error().message;
    EXPECT_EQ(moment_pairs(*p).size(), pairs ? 1u : 0u) << text;
    EXPECT_TRUE(softmax_pairs(*p).empty()) << text;
  }
}

TEST(Program, AnElementwiseChainNeedsNoRows) {
  auto p = parse_program("y = clamp(gelu_tanh(x * w + 1.5e-1), -2, 2) + (x > 0)", kRowIn, {"y"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_FALSE(p->needs_rows());
  EXPECT_TRUE(p->has("gelu_tanh"));
  EXPECT_TRUE(p->has("gt"));
}

TEST(Program, ConstantsComeFromOpParams) {
  auto p = parse_program("y = x * rsqrt(rowmean(x * x) + eps)", kRowIn, {"y"}, {{"eps", 1e-6}});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  bool found = false;
  for (const auto& n : p->nodes) found = found || (n.op == "const" && n.value == 1e-6);
  EXPECT_TRUE(found);
  auto missing = parse_program("y = x * rsqrt(rowmean(x * x) + eps)", kRowIn, {"y"});
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("unknown name eps"), std::string::npos) << missing.error().message;
}

TEST(Program, ErrorsNameTheStatement) {
  auto bad = parse_program("a = x +\ny = a", kRowIn, {"y"});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("statement 1"), std::string::npos) << bad.error().message;
  auto fn = parse_program("y = frobnicate(x)", kRowIn, {"y"});
  ASSERT_FALSE(fn.has_value());
  EXPECT_NE(fn.error().message.find("unknown function frobnicate"), std::string::npos);
  auto arity = parse_program("y = where(x, x)", kRowIn, {"y"});
  ASSERT_FALSE(arity.has_value());
  EXPECT_NE(arity.error().message.find("takes 3"), std::string::npos);
  auto unassigned = parse_program("z = x", kRowIn, {"y"});
  ASSERT_FALSE(unassigned.has_value());
  EXPECT_NE(unassigned.error().message.find("never assigns the output y"), std::string::npos);
}

TEST(Program, ARowValueCannotWaitForTheWholeGrid) {
  auto p = parse_program("y = x / allsum(x)", kRowIn, {"y"});
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("whole grid"), std::string::npos) << p.error().message;
  auto r = parse_program("y = rowsum(w)", kRowIn, {"y"});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("per-element"), std::string::npos);
}

TEST(Program, PickReadsAColumnOfTheRow) {
  auto p = parse_program("m = rowmax(x); l = allmean(m + log(rowsum(exp(x - m))) - pick(x, t))", kRowIn, {"l"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_TRUE(p->has("pick"));
  auto wrong = parse_program("y = pick(x, x)", kRowIn, {"y"});
  EXPECT_FALSE(wrong.has_value());
}

TEST(Program, EveryBundledFormulaParsesAgainstItsManifest) {
  int with = 0;
  for (const char* t : {"softmax", "log_softmax", "rms_norm", "layer_norm", "gelu", "scale_shift_gelu", "cross_entropy"}) {
    auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core" / t);
    ASSERT_TRUE(task.has_value()) << t;
    ASSERT_FALSE(task->formula.empty()) << t;
    auto p = task_program(*task);
    ASSERT_TRUE(p.has_value()) << t << ": " << p.error().message;
    ++with;
  }
  EXPECT_EQ(with, 7);
}

TEST(Program, AFormulaThatContradictsTheShapesIsRefused) {
  auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core/softmax");
  ASSERT_TRUE(task.has_value());
  task->formula = "y = rowsum(x)";  // a per-row value for a [M, N] output
  auto p = task_program(*task);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("its shape says E"), std::string::npos) << p.error().message;
}

// The printers' emitter: two spaces a level, a #pragma at column 0 whatever the depth, `} else {` at
// the depth of its `if`.
// Column reductions (a training batch norm's statistics): a per-column value, computed in passes over
// the columns before the rows, so their argument may not depend on anything per row.
TEST(Program, ColumnReductionsArePerColumnAndComeBeforeTheRows) {
  auto p = parse_program("m = colmean(x); d = x - m; y = d * rsqrt(colmean(d * d) + 1e-5) * w", kRowIn, {"y"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  int cols = 0;
  for (const auto& n : p->nodes) {
    if (!is_col_reduction(n.op)) continue;
    ++cols;
    EXPECT_EQ(n.cls, VClass::C);
  }
  EXPECT_EQ(cols, 2);
  EXPECT_TRUE(p->needs_rows()) << "the column passes run before a row kernel";
  // the second statistic reads the first: two passes, the second one's sums read the first's
  const std::string cuda = generate_fused_cuda(*p, fused_grid(*p, 1024).front(), "t");
  for (const char* want : {"kfab_cols1<<<", "kfab_cols2<<<", "atomicAdd(&a.cs[1 * n + c]", "a.cs[0 * n + c] / static_cast<double>(rows)"})
    EXPECT_NE(cuda.find(want), std::string::npos) << want;
  EXPECT_EQ(cuda.find("kfab_cols3"), std::string::npos);
  const std::string cpp = generate_fused_cpp(*p, fused_cpu_grid().front(), "t");
  for (const char* want : {"// column pass 1", "// column pass 2", "a.cs[1 * n + c] = s0[c - c0];"}) EXPECT_NE(cpp.find(want), std::string::npos) << want;
  // on the host, the mean and 1 / sqrt(var + eps) are computed once a column into a.cv (two rows of it) and
  // the rows read them: no double division or square root per element (the row loop is the file's last)
  for (const char* want : {"const int64_t cv_need = 2 * n;", "a.cv[0 * n + c] = ", "a.cv[1 * n + c] = "})
    EXPECT_NE(cpp.find(want), std::string::npos) << want << "\n" << cpp;
  const std::string rows = cpp.substr(cpp.rfind("for (int64_t row = 0; row < rows; ++row)"));
  EXPECT_NE(rows.find("= a.cv[1 * n + c];"), std::string::npos) << rows;
  EXPECT_EQ(rows.find("static_cast<double>(rows)"), std::string::npos) << rows;
  EXPECT_EQ(rows.find("kfab_rsqrt("), std::string::npos) << rows;
  // refused: a column statistic of a per-row value, or of anything a row reduction fed
  for (const char* bad : {"y = x - colmean(x - rowmean(x))", "y = x * colsum(t)", "y = colmean(x)"}) {
    auto q = parse_program(bad, kRowIn, {"y"});
    EXPECT_FALSE(q.has_value()) << bad;
  }
}

TEST(Emitter, KeepsTheColumnsOfNestedBlocks) {
  Emitter e;
  e.open("if (a)").line("#pragma unroll").open("for (;;)").line("f();").close().reopen("} else {").line("g();").close();
  EXPECT_EQ(e.str(), "if (a) {\n#pragma unroll\n  for (;;) {\n    f();\n  }\n} else {\n  g();\n}\n");
  Emitter inner(2);
  inner.nested("for (;;)", "h();").open("").linef("x = {};", 3).close();
  EXPECT_EQ(inner.str(), "    for (;;)\n      h();\n    {\n      x = 3;\n    }\n");
}

// One printer per language over the same program: the C++ one writes host spellings (the polynomial
// exp, plain loads), never CUDA's, and the CUDA one the device's.
TEST(Printers, EachLanguageSpellsItsOwnLoadsAndFunctions) {
  auto p = parse_program("m = rowmax(x); e = exp(x - m); y = e / rowsum(e) * w * rsqrt(rowmean(x * x) + s); c = pick(x, t)",
                         {{"x", VClass::E}, {"w", VClass::C}, {"t", VClass::R, true}, {"s", VClass::K}}, {"y", "c"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  const std::string cpp = generate_fused_cpp(*p, fused_cpu_grid().front(), "t");
  for (const char* cuda_only : {"__ldg", "rsqrtf", "expf(", "__global__"}) EXPECT_EQ(cpp.find(cuda_only), std::string::npos) << cuda_only << "\n" << cpp;
  for (const char* host : {"kfab_exp(", "kfab_rsqrt(", "a.in1[c]", "a.in3[0]", "#pragma omp simd"}) EXPECT_NE(cpp.find(host), std::string::npos) << host << "\n" << cpp;
  const std::string cuda = generate_fused_cuda(*p, fused_grid(*p, 1024).front(), "t");
  for (const char* device : {"kfab_ld(a.in1 + c)", "kfab_ld(a.in3)", "expf(", "rsqrtf(", "kfab_group<G, 1>"}) EXPECT_NE(cuda.find(device), std::string::npos) << device;
  EXPECT_EQ(cuda.find("kfab_exp("), std::string::npos);
}

// Issue 25 (level1/38, 39): an element over its row's divisor is a multiply by the divisor's reciprocal,
// taken once a row before the loop over the row (row_div.h), not a division an element; a divisor per
// element (x / w) stays a division. A cluster's or a lone block's thread tests its vectors against its
// part's length, an int, and stores at fixed offsets from one pointer; split rows keep the 64-bit test.
TEST(Printers, ADivisionByTheRowsDivisorIsAMultiplyByItsReciprocal) {
  auto p = parse_program("y = x / rowmean(abs(x)) + x / w + x / s", {{"x", VClass::E}, {"w", VClass::E}, {"s", VClass::K}}, {"y"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  const auto grid = fused_grid(*p, 65535);
  const auto cluster = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("cluster") > 0; });
  ASSERT_NE(cluster, grid.end());
  const std::string cuda = generate_fused_cuda(*p, *cluster, "t");
  const std::string cached = cuda.substr(cuda.find("kfab_rows_cached(Args a"), cuda.find("kfab_rows_stream(Args a") - cuda.find("kfab_rows_cached(Args a"));
  EXPECT_NE(cuda.find("struct KfabRecip"), std::string::npos) << "row_div.h is not in the file";
  for (const char* want : {"const KfabRecip kfab_q", "= kfab_recip(r", "= kfab_recip(k", "kfab_div_row(e0, kfab_q", "(e0 / e1)",
                           "int kfab_len = static_cast<int>(hi - lo);", "if ((it * G + lane) * V < kfab_len)", "float* kfab_o0 = a.out0 + roff - kfab_m + lo + lane * V;",
                           "__stcs(kfab_o0 + it * G * V, o0[0]);"})
    EXPECT_NE(cached.find(want), std::string::npos) << want << "\n" << cached;
  EXPECT_EQ(cached.find("c0 < hi"), std::string::npos) << cached;
  EXPECT_EQ(cached.find("/ r"), std::string::npos) << "a division by the row's divisor an element\n" << cached;
  const auto split = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("split") > 0; });
  ASSERT_NE(split, grid.end());
  const std::string s = generate_fused_cuda(*p, *split, "t");
  const std::string kernel = s.substr(s.find("kfab_rows_split(Args a"));
  EXPECT_NE(kernel.find("if (c0 < hi)"), std::string::npos) << kernel;
  EXPECT_NE(kernel.find("kfab_div_row(e0, kfab_q"), std::string::npos) << kernel;
}

// Issue 25 (level1/38): a cluster's or a lone block's thread loads its part from one pointer an input, all
// but its last vector behind no test where the part reaches that far (a block-uniform test), each behind
// its own elsewhere; a cluster's thread keeping at most 32 floats is held to 64 registers. The clusters of
// rows whose length is not a multiple of 4, first (one row reduction): 512 threads (4 blocks for 65535),
// 256 (8), 128 (16), 1024, each reading them a float4 at a time from the 16-byte boundary before the row
// where every per-element tensor is 16-byte aligned (shift; U): the floats before and past the row left
// out of the sums (an unsigned compare of the column) and not written (kfab_st4), the vectors that may
// reach past the part read through kfab_ld4.
TEST(Printers, ARowPartsLoadsAreUnguardedWhereThePartReachesItsLastVector) {
  auto p = parse_program("y = x / rowmean(abs(x)) + x * w", {{"x", VClass::E}, {"w", VClass::E}}, {"y"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  const auto grid = fused_grid(*p, 65535);
  std::vector<std::string> clusters;
  for (const auto& q : grid)
    if (q.count("cluster")) clusters.push_back(q.at("block") + "x" + q.at("cluster"));
  EXPECT_EQ(clusters, (std::vector<std::string>{"512x4", "256x8", "128x16", "1024x4"}));
  for (size_t i = 0; i < clusters.size(); ++i) {
    EXPECT_TRUE(grid[i].count("cluster")) << format_params(grid[i]);  // one row reduction: they lead
    EXPECT_EQ(grid[i].count("shift"), 1u) << format_params(grid[i]);
  }
  const auto cluster = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("cluster") > 0; });
  ASSERT_NE(cluster, grid.end());
  const std::string cuda = generate_fused_cuda(*p, *cluster, "t");
  const size_t at = cuda.find("kfab_rows_cached(Args a");
  const std::string cached = cuda.substr(at, cuda.find("kfab_rows_stream(Args a") - at);
  EXPECT_NE(cuda.find("__launch_bounds__(B, CL > 1 && IT * V * 2 <= 32 ? 1024 / B : 1) kfab_rows_cached("), std::string::npos);
  const size_t fast = cached.find("if (kfab_len >= (IT - 1) * G * V) {");
  const size_t slow = cached.find("} else {\n#pragma unroll", fast);  // the guarded loads
  ASSERT_NE(fast, std::string::npos) << cached;
  ASSERT_NE(slow, std::string::npos) << cached;
  for (const char* want : {"const float* kfab_x0 = a.in0 + roff - kfab_m + lo + lane * V;", "const float* kfab_x1 = a.in1 + roff - kfab_m + lo + lane * V;"})
    EXPECT_LT(cached.find(want), fast) << want << "\n" << cached;
  const std::string unguarded = cached.substr(fast, slow - fast);
  // every vector but the last: no test; the last: its own
  const size_t loop = unguarded.find("for (int it = 0; it < IT - 1; ++it) {");
  const size_t last = unguarded.find("for (int it = IT - 1; it < NV; ++it) {\n        if ((it * G + lane) * V < kfab_len) {");
  ASSERT_NE(loop, std::string::npos) << unguarded;
  ASSERT_NE(last, std::string::npos) << unguarded;
  EXPECT_EQ(unguarded.substr(loop, last - loop).find("if ("), std::string::npos) << unguarded;
  for (const char* load : {"x0[it] = __ldcs(kfab_x0 + it * G * V);", "x1[it] = __ldcs(kfab_x1 + it * G * V);"})
    EXPECT_NE(unguarded.find(load, loop), std::string::npos) << load << "\n" << unguarded;
  EXPECT_NE(unguarded.find("const float4 q = kfab_ld4<U>(kfab_x0 + it * G * V, kfab_len - (it * G + lane) * V);", last), std::string::npos)
      << unguarded;
  const size_t end = cached.find("float s", slow);
  EXPECT_NE(cached.substr(slow, end - slow).find("if ((it * G + lane) * V < kfab_len) {"), std::string::npos) << cached;
  // U: the row's parts cut from kfab_m floats before it; its floats outside the row neither summed nor written
  EXPECT_NE(cuda.find("constexpr bool SH = true;"), std::string::npos);
  EXPECT_NE(cached.find("const int kfab_m = U ? static_cast<int>(roff % 4) : 0;"), std::string::npos) << cached;
  EXPECT_NE(cached.find("kfab_cluster_part<CL, V>(n + kfab_m, "), std::string::npos) << cached;
  EXPECT_NE(cached.find("if (U && static_cast<unsigned>(kfab_c + (it * G + lane) * V + v) >= static_cast<unsigned>(n)) continue;", end),
            std::string::npos)
      << cached;
  EXPECT_NE(cached.find("kfab_st4<U>(kfab_o0 + it * G * V, make_float4("), std::string::npos) << cached;
  EXPECT_NE(cuda.find("if (!vec && kfab_aligned16(a.in0) && kfab_aligned16(a.in1) && kfab_aligned16(a.out0)) {"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("return kfab_go_cluster<CL>(kfab_rows_cached<B, G, 4, 8, CL, true>, "), std::string::npos) << cuda;
  // a per-column input (read by column, past the row's ends) keeps its rows a float at a time
  auto q = parse_program("y = x / rowmean(abs(x)) + w", {{"x", VClass::E}, {"w", VClass::C}}, {"y"});
  ASSERT_TRUE(q.has_value()) << q.error().message;
  const auto qgrid = fused_grid(*q, 65535);
  ASSERT_TRUE(qgrid.front().count("shift")) << format_params(qgrid.front());
  EXPECT_NE(generate_fused_cuda(*q, qgrid.front(), "t").find("constexpr bool SH = false;"), std::string::npos);
}

// The host's transcendentals and max/min are spelled so that an `omp simd` loop vectorises (issue 25: the C
// library's tanhf, log1pf, erff and fmaxf are calls, which kept l1_mish, l1_gelu_tanh and l1_relu scalar):
// poly_exp.h's functions, and selects that give NaN where torch does; the device keeps its own.
TEST(Printers, TheHostsTranscendentalsAndMaxAreTheOnesThatVectorise) {
  auto p = parse_program("y = tanh(log1p(exp(x))) * x + erf(x) + log(x) + max(x, w) + min(x, 0.5) + relu(x)", kRowIn, {"y"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  const std::string cpp = generate_fused_cpp(*p, fused_cpu_grid().front(), "t");
  for (const char* call : {"tanhf(", "log1pf(", "erff(", "logf(", "fmaxf(", "fminf(", "std::tanh", "std::erf"})
    EXPECT_EQ(cpp.find(call), std::string::npos) << call << "\n" << cpp;
  for (const char* own : {"kfab_tanh(", "kfab_log1p(", "kfab_erf(", "kfab_log(", " != ", " >= ", " <= "})
    EXPECT_NE(cpp.find(own), std::string::npos) << own << "\n" << cpp;
  const std::string cuda = generate_fused_cuda(*p, fused_grid(*p, 1024).front(), "t");
  for (const char* device : {"tanhf(", "log1pf(", "erff(", "fmaxf(", "fminf("}) EXPECT_NE(cuda.find(device), std::string::npos) << device;
}

namespace {

/// A program evaluated the plain way over [rows, n] (every value a rows x n matrix, broadcast by its
/// class), for the ops the fold tests use; `in` holds each input as rows x n values.
std::vector<std::vector<double>> evaluate(const Program& p, const std::vector<std::vector<double>>& in, int rows, int n) {
  std::vector<std::vector<double>> v(p.nodes.size());
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const PNode& nd = p.nodes[k];
    std::vector<double>& out = v[k];
    out.assign(static_cast<size_t>(rows) * n, 0.0);
    auto arg = [&](int a, int i) { return v[nd.args[a]][i]; };
    for (int r = 0; r < rows; ++r) {
      double sum = 0.0;
      if (nd.op == "rowsum" || nd.op == "rowmean")
        for (int c = 0; c < n; ++c) sum += arg(0, r * n + c);
      for (int c = 0; c < n; ++c) {
        const int i = r * n + c;
        double& y = out[i];
        if (nd.op == "in") y = in[nd.input][i];
        else if (nd.op == "const") y = nd.value;
        else if (nd.op == "ncols") y = n;
        else if (nd.op == "add") y = arg(0, i) + arg(1, i);
        else if (nd.op == "sub") y = arg(0, i) - arg(1, i);
        else if (nd.op == "mul") y = arg(0, i) * arg(1, i);
        else if (nd.op == "div") y = arg(0, i) / arg(1, i);
        else if (nd.op == "neg") y = -arg(0, i);
        else if (nd.op == "exp") y = std::exp(arg(0, i));
        else if (nd.op == "rowsum") y = sum;
        else if (nd.op == "rowmean") y = sum / n;
        else ADD_FAILURE() << "the test's evaluator has no " << nd.op;
      }
    }
  }
  return v;
}

}  // namespace

// A product read only through row sums of linear functions of it (KernelBench's Gemm_Divide_Sum_Scaling,
// Matmul_Sum_..., Gemm_Subtract_GlobalAvgPool_...) folds into the product's row sums; the folded program
// computes what the original does, and anything else that reads the product refuses the fold.
TEST(Program, RowSumsOfALinearFunctionOfTheProductFold) {
  const std::vector<PInput> in = {{"bias", VClass::C}, {"x", VClass::E}, {"acc", VClass::E}};
  const int rows = 3, n = 5;
  std::vector<std::vector<double>> vals(3, std::vector<double>(rows * n));
  for (int i = 0; i < rows * n; ++i) {
    vals[0][i] = 0.25 * (i % n) - 0.3;  // per column
    vals[1][i] = std::sin(1.0 + i);
    vals[2][i] = std::cos(0.7 * i) * 2.0;
  }
  for (const char* text : {"y = rowsum(acc / 2.0) * 1.5", "y = exp(rowsum(acc + bias))", "y = rowmean((acc + bias) - 0.5 * bias) + x",
                           "y = rowsum(-acc * 3.0) + rowmean(2.0 * acc - x)"}) {
    auto p = parse_program(text, in, {"y"});
    ASSERT_TRUE(p.has_value()) << text << ": " << p.error().message;
    auto f = fold_row_sums(*p, 2);
    ASSERT_TRUE(f.has_value()) << text;
    EXPECT_EQ(f->inputs[2].cls, VClass::R);
    for (const auto& nd : f->nodes) EXPECT_FALSE(nd.op == "in" && nd.input == 2 && nd.cls != VClass::R) << text;
    std::vector<std::vector<double>> folded_in = vals;
    for (int r = 0; r < rows; ++r) {
      double s = 0.0;
      for (int c = 0; c < n; ++c) s += vals[2][r * n + c];
      for (int c = 0; c < n; ++c) folded_in[2][r * n + c] = s;
    }
    const auto want = evaluate(*p, vals, rows, n)[p->outputs[0].second];
    const auto got = evaluate(*f, folded_in, rows, n)[f->outputs[0].second];
    for (int i = 0; i < rows * n; ++i) EXPECT_NEAR(got[i], want[i], 1e-9 * (1.0 + std::abs(want[i]))) << text << " at " << i << "\n" << f->describe();
  }
  // the product itself, a nonlinear function of it, a row max of it, a product of it with a per-element
  // value, a constant added (its row sum would need the row length): the product must be formed
  for (const char* text : {"y = acc + bias", "y = rowsum(exp(acc))", "y = rowmax(acc)", "y = rowsum(acc * x)", "y = rowsum(acc) + acc",
                           "y = rowsum(acc + 1.0)", "y = x"}) {
    auto p = parse_program(text, in, {"y"});
    ASSERT_TRUE(p.has_value()) << text << ": " << p.error().message;
    EXPECT_FALSE(fold_row_sums(*p, 2).has_value()) << text;
  }
  // a formula's own row sum of a per-column value is still refused (only the fold builds one)
  EXPECT_FALSE(parse_program("y = rowsum(bias) + x", in, {"y"}).has_value());
}

// An element's column and row index (torch.triu's mask): colidx is per column, rowidx per row; both
// printers read them from the loop they are in.
TEST(Program, ColumnAndRowIndicesMaskATriangle) {
  auto p = parse_program("y = where(colidx - rowidx >= 0, x, 0)", kRowIn, {"y"});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  for (const auto& n : p->nodes) {
    if (n.op == "colidx") {
      EXPECT_EQ(n.cls, VClass::C);
    }
    if (n.op == "rowidx") {
      EXPECT_EQ(n.cls, VClass::R);
    }
  }
  EXPECT_TRUE(p->needs_rows()) << "a per-row index needs the row kernel";
  const std::string cuda = generate_fused_cuda(*p, fused_grid(*p, 1024).front(), "t");
  EXPECT_NE(cuda.find("static_cast<float>(row)"), std::string::npos);
  EXPECT_NE(cuda.find("static_cast<float>(c"), std::string::npos);
  const std::string cpp = generate_fused_cpp(*p, fused_cpu_grid().front(), "t");
  EXPECT_NE(cpp.find("static_cast<float>(row)"), std::string::npos);
  EXPECT_NE(cpp.find("static_cast<float>(c)"), std::string::npos);
}

}  // namespace kfab
