// CUDA candidates are compiled here even without a GPU (CI has nvcc and no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <functional>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backends/cpu_cpp/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "core/paths.h"
#include "core/process.h"
#include "core/task.h"
#include "tuner/fused.h"
#include "tuner/plan.h"
#include "tuner/precision.h"
#include "harness.h"

namespace kfab::test {

class CudaBuild : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("KFAB_CACHE_DIR", (std::string(KFAB_BINARY) + ".test-cache").c_str(), 1);
    if (!backend_.has_compiler()) GTEST_SKIP() << "nvcc is not installed";
  }
  CudaBackend backend_;

  /// Builds the first `points` grid points of `template_name` for `forms` variants of the native task `base`, each
  /// made by `shape(form, task)` (op class, op_params, tensors); each must apply and compile.
  void build_each_form(const char* base, const char* template_name, int forms, const std::function<void(int, Task&)>& shape, size_t points = 1) {
    auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core" / base);
    ASSERT_TRUE(task.has_value()) << base;
    const KernelTemplate* t = template_named(template_name);
    ASSERT_NE(t, nullptr) << template_name;
    for (int form = 0; form < forms; ++form) {
      Task k = *task;
      shape(form, k);
      ASSERT_TRUE(t->applies(k)) << template_name << " " << form;
      const auto grid = t->grid(k);
      for (size_t i = 0; i < points && i < grid.size(); ++i) {
        const auto f = scratch() / (std::string(template_name) + "_" + std::to_string(form) + "_" + std::to_string(i) + ".cu");
        ASSERT_TRUE(write_file_atomic(f, t->generate(k, grid[i])).has_value());
        auto r = backend_.build(f);
        ASSERT_TRUE(r.ok()) << template_name << " " << form << " (" << format_params(grid[i]) << ")\n" << r.failure().message;
      }
    }
  }
};

// Every .cu file of the repository (bundled baselines and candidates, test fixtures) is compiled,
// the ones meant not to compile excepted; a second build comes from the cache.
static std::vector<std::string> cuda_sources() {
  std::vector<std::string> v;
  for (const auto* root : {KFAB_SOURCE_DIR "/tasks", KFAB_TEST_FIXTURES}) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root, ec); it != std::filesystem::recursive_directory_iterator();
         it.increment(ec)) {
      if (it->path().extension() == ".cu" && it->path().filename() != "no_compile.cu" &&
          it->path().filename() != "garbled_compile_error.cu")
        v.push_back(std::filesystem::relative(it->path(), KFAB_SOURCE_DIR).string());
    }
  }
  std::sort(v.begin(), v.end());
  return v;
}

class CudaSource : public CudaBuild, public ::testing::WithParamInterface<std::string> {};

TEST_P(CudaSource, CompilesAndIsCached) {
  const std::string f = std::string(KFAB_SOURCE_DIR) + "/" + GetParam();
  auto r = backend_.build(f);
  ASSERT_TRUE(r.ok()) << f << "\n" << r.failure().message;
  EXPECT_TRUE(std::filesystem::exists(r.value().artifact));
  auto again = backend_.build(f);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value().cached);
  EXPECT_EQ(again.value().key, r.value().key);
}

INSTANTIATE_TEST_SUITE_P(Repository, CudaSource, ::testing::ValuesIn(cuda_sources()), [](const auto& info) {
  std::string n = info.param;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

TEST_F(CudaBuild, TheRepositoryHasCudaSources) { EXPECT_GE(cuda_sources().size(), 20u); }

TEST_F(CudaBuild, ACompileErrorCarriesNvccsMessage) {
  const auto f = scratch() / "bad.cu";
  ASSERT_TRUE(write_file_atomic(f, "#include \"kfab/candidate.h\"\n__global__ void k() { undefined_name = 1; }\n").has_value());
  auto r = backend_.build(f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.failure().message.find("undefined_name"), std::string::npos) << r.failure().message;
}

// Issue 20: nvcc quotes the raw 0xFF 0xFE of an #error; the message keeps them as U+FFFD, valid UTF-8.
TEST_F(CudaBuild, ACompileErrorWithBytesThatAreNotUtf8IsKeptAsValidUtf8) {
  auto r = backend_.build(fixture("broken/garbled_compile_error.cu"));
  ASSERT_FALSE(r.ok());
  const std::string& m = r.failure().message;
  EXPECT_NE(m.find("garbled: \xEF\xBF\xBD\xEF\xBF\xBD quoted by the compiler"), std::string::npos) << m;
  EXPECT_NO_THROW((void)nlohmann::json(m).dump()) << "the strict dump throws on bytes that are not UTF-8";
}

// The tuner's generated kernels compile for every bundled task with a formula, at both ends of the
// parameter grid (a warp or a whole block per row, flat or row kernels), and for a per-row output.
TEST_F(CudaBuild, FusedRowProgramsCompileAcrossTheirGrid) {
  int built = 0;
  for (const char* t : {"softmax", "log_softmax", "rms_norm", "layer_norm", "gelu", "scale_shift_gelu", "cross_entropy"}) {
    auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core" / t);
    ASSERT_TRUE(task.has_value()) << t;
    auto p = task_program(*task);
    ASSERT_TRUE(p.has_value()) << t << ": " << p.error().message;
    for (int64_t n : {256, 4096}) {
      const auto grid = fused_grid(*p, n);
      ASSERT_FALSE(grid.empty()) << t;
      for (const auto* point : {&grid.front(), &grid.back()}) {
        const auto f = scratch() / (std::string(t) + "_" + std::to_string(built) + ".cu");
        ASSERT_TRUE(write_file_atomic(f, generate_fused_cuda(*p, *point, t)).has_value());
        auto r = backend_.build(f);
        ASSERT_TRUE(r.ok()) << t << " (" << format_params(*point) << ")\n" << r.failure().message;
        ++built;
      }
    }
  }
  auto huber = parse_program("d = abs(p - q); y = rowmean(where(d < 1, 0.5 * d * d, d - 0.5))",
                             {{"p", VClass::E}, {"q", VClass::E}}, {"y"});
  ASSERT_TRUE(huber.has_value()) << huber.error().message;
  const auto f = scratch() / "huber.cu";
  ASSERT_TRUE(write_file_atomic(f, generate_fused_cuda(*huber, fused_grid(*huber, 2048).front(), "huber")).has_value());
  auto r = backend_.build(f);
  ASSERT_TRUE(r.ok()) << r.failure().message;
  EXPECT_EQ(built, 28);
}

// A grid without its points that read rows in tiles twice (l2; RowsReadTwiceInTilesGetPointsThatCompile
// tests those): the order of the others.
static std::vector<TemplateParams> without_l2(std::vector<TemplateParams> grid) {
  grid.erase(std::remove_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("l2") > 0; }), grid.end());
  return grid;
}

// Issue 25: rows longer than a block holds (level1/23's softmax over 393216, level1/38's L1 norm over
// 65535) get points that split each row over a cluster (after those that split it over the grid's
// blocks); those compile, with the cluster's combine of each row reduction, and a program with a scalar
// output gets none.
TEST_F(CudaBuild, LongRowsGetClusterPointsThatCompile) {
  int built = 0;
  for (const char* t : {"softmax", "rms_norm"}) {
    auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core" / t);
    ASSERT_TRUE(task.has_value()) << t;
    auto p = task_program(*task);
    ASSERT_TRUE(p.has_value()) << t << ": " << p.error().message;
    for (int64_t n : {393216, 65535}) {
      const auto grid = without_l2(fused_grid(*p, n));
      const auto point = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("cluster") > 0; });
      ASSERT_NE(point, grid.end()) << t << " " << n;
      // a softmax's: after the two split points (and before them the split points whose row reductions meet
      // at once, or that prefetch, where they apply); an RMS norm's (one row reduction): first, the split
      // points after the clusters
      const bool pairs = std::string(t) == "softmax";
      const auto lead = std::count_if(grid.begin(), point, [](const TemplateParams& q) { return q.count("defer") || q.count("prefetch") || q.count("colsm"); });
      EXPECT_EQ(point - grid.begin(), pairs ? lead + 2 : 0) << t << " " << n;
      const auto clusters = std::count_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("cluster") > 0; });
      for (long i = 0; i < (pairs ? 0 : clusters); ++i) EXPECT_TRUE(grid[i].count("cluster")) << t << " " << n << ": " << format_params(grid[i]);
      // for rows of whole float4 only: second, after a softmax's first (reuse) and an RMS norm's weight
      // kept in shared memory (colsm); no split point with 8 float4 a thread (measured slower)
      for (const auto& q : grid)
        EXPECT_FALSE(q.count("defer") && q.at("items") == "8") << t << " " << n << ": " << format_params(q);
      const size_t pre = (pairs ? 0 : clusters) + 1 + (grid[0].count("reuse") ? 1 : 0) + (first_column_input(*p) >= 0 ? 1 : 0);
      EXPECT_EQ(first_column_input(*p) >= 0, std::string(t) == "rms_norm") << t;
      EXPECT_EQ(grid[pre].count("prefetch") > 0, n % 4 == 0) << t << " " << n;
      EXPECT_EQ(grid[0].count("reuse") > 0, std::string(t) == "softmax") << t << " " << n;
      EXPECT_EQ(point->at("cluster"), n == 393216 ? "16" : "4");  // a row read a float at a time: half as much a block
      const std::string src = generate_fused_cuda(*p, *point, t);
      EXPECT_NE(src.find("kfab_cluster_combine<CL,"), std::string::npos);
      EXPECT_NE(src.find("CL = " + point->at("cluster")), std::string::npos);
      const auto f = scratch() / (std::string(t) + "_cluster_" + std::to_string(n) + ".cu");
      ASSERT_TRUE(write_file_atomic(f, src).has_value());
      auto r = backend_.build(f);
      ASSERT_TRUE(r.ok()) << t << " (" << format_params(*point) << ")\n" << r.failure().message;
      ++built;
    }
  }
  EXPECT_EQ(built, 4);
  auto total = parse_program("y = x / rowsum(x); s = allsum(x)", {{"x", VClass::E}}, {"y", "s"});
  ASSERT_TRUE(total.has_value()) << total.error().message;
  for (const auto& point : fused_grid(*total, 393216)) EXPECT_FALSE(point.count("cluster")) << format_params(point);
}

// Issue 25: rows longer than a block holds (level1/40's layer norm over rows of 4M floats, longer than a
// cluster of 16 holds; level1/23's softmax over 393216) lead the grid with points that split each row
// over a group of the grid's blocks, which compile with a global-memory combine of each row reduction.
TEST_F(CudaBuild, RowsLongerThanAClusterGetSplitPointsThatCompile) {
  auto ln = parse_program("m = rowmean(x); d = x - m; r = rsqrt(rowmean(d * d) + 1e-05); y = d * r * w + b",
                          {{"x", VClass::E}, {"w", VClass::C}, {"b", VClass::C}}, {"y"});
  ASSERT_TRUE(ln.has_value()) << ln.error().message;
  int built = 0;
  for (int64_t n : {4194304, 4194303}) {
    const auto grid = without_l2(fused_grid(*ln, n));
    ASSERT_GE(grid.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(grid[i].count("split")) << n << ": " << format_params(grid[i]);  // none of them a cluster
      EXPECT_FALSE(grid[i].count("cluster")) << n << ": " << format_params(grid[i]);
    }
    // the points whose reductions meet at once first (compiled below), then the others
    const auto plain = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return !q.count("defer"); });
    ASSERT_NE(plain, grid.end());
    // with one keeping the weight in shared memory, and a prefetching one where rows are whole float4
    EXPECT_EQ(plain - grid.begin(), n % 4 == 0 ? 3 : 2) << n;
    const std::string src = generate_fused_cuda(*ln, *plain, "layer_norm");
    EXPECT_NE(src.find("kfab_split_combine<B, 0>"), std::string::npos);
    EXPECT_NE(src.find("kfab_rows_split_go(a, rows, n, vec, stream)"), std::string::npos);
    const auto f = scratch() / ("layer_norm_split_" + std::to_string(n) + ".cu");
    ASSERT_TRUE(write_file_atomic(f, src).has_value());
    auto r = backend_.build(f);
    ASSERT_TRUE(r.ok()) << format_params(*plain) << "\n" << r.failure().message;
    ++built;
  }
  EXPECT_EQ(built, 2);
  auto sm = parse_program("e = exp(x - rowmax(x)); y = e / rowsum(e)", {{"x", VClass::E}}, {"y"});
  ASSERT_TRUE(sm.has_value()) << sm.error().message;
  const auto grid = without_l2(fused_grid(*sm, 393216));
  ASSERT_GE(grid.size(), 3u);
  EXPECT_TRUE(grid[3].count("split") && grid[4].count("split") && grid[5].count("cluster")) << format_params(grid[5]);
  // the softmax's maximum and sum met at once, the layer norm's mean and squared deviations too: the first
  // points, which compile: the softmax's first keeping exp(x - the block's maximum) in x's registers for its
  // outputs (reuse), then for both a plain one and one copying each block's part of its next row into shared
  // memory while the row's blocks meet; not for an RMS norm (one reduction)
  const auto lgrid = without_l2(fused_grid(*ln, 4194304));
  for (const auto& [name, prog, g, call] : std::vector<std::tuple<std::string, const Program*, std::vector<TemplateParams>, std::string>>{
           {"softmax", &*sm, grid, "kfab_split_softmax<B>(&r"}, {"layer_norm", &*ln, lgrid, "kfab_split_moments<B, V>(&r"}}) {
    ASSERT_GE(g.size(), 4u) << name;
    // the layer norm's second keeps its weight's part in shared memory for the whole run (colsm)
    const size_t r = name == "softmax" ? 1 : 0, c = first_column_input(*prog) >= 0 ? 1 : 0;
    EXPECT_EQ(c, name == "layer_norm" ? 1u : 0u);
    if (r == 1) {
      EXPECT_TRUE(g[0].count("defer") && g[0].count("reuse") && !g[0].count("prefetch")) << format_params(g[0]);
    }
    ASSERT_TRUE(g[r].count("defer") && !g[r].count("prefetch") && !g[r].count("reuse") && !g[r].count("colsm")) << name << ": " << format_params(g[r]);
    if (c == 1) {
      EXPECT_TRUE(g[r + 1].count("defer") && g[r + 1].count("colsm") && !g[r + 1].count("prefetch")) << format_params(g[r + 1]);
    }
    const size_t e = 0;  // (no point with 8 float4 a thread: measured slower)
    ASSERT_TRUE(g[r + 1 + c + e].count("defer") && g[r + 1 + c + e].count("prefetch")) << name << ": " << format_params(g[r + 1 + c + e]);
    const size_t lead = r + 2 + c + e;
    for (size_t i = lead; i < g.size(); ++i)
      EXPECT_FALSE(g[i].count("defer") || g[i].count("prefetch") || g[i].count("reuse") || g[i].count("colsm")) << name << ": " << format_params(g[i]);
    for (size_t i = 0; i < lead; ++i) {
      const std::string src = generate_fused_cuda(*prog, g[i], name);
      EXPECT_NE(src.find(call), std::string::npos) << name;
      EXPECT_EQ(src.find("kfab_cp16(kfab_pre") != std::string::npos, i == r + 1 + c + e) << name << " " << i;
      EXPECT_EQ(src.find("* kfab_rescale;") != std::string::npos, g[i].count("reuse") > 0) << name << " " << i;  // the outputs read the kept exp
      // the layer norm's weight and bias loaded after the meeting (not moved above it, beside the row's part)
      EXPECT_EQ(src.find("asm volatile(\"\" : \"+l\"(a.in1));") != std::string::npos, name == "layer_norm") << name << " " << i;
      EXPECT_EQ(src.find("asm volatile(\"\" : \"+l\"(a.in2));") != std::string::npos, name == "layer_norm") << name << " " << i;
      EXPECT_NE(src.find(i == r + 1 + c + e ? "constexpr int pre = 1 * B * I * 16;" : "constexpr int pre = 0 * B * I * 16;"), std::string::npos)
          << name << " " << i;
      // the kept weight: copied once before the rows, read from shared memory by the outputs
      const bool kept = c == 1 && i == r + 1;
      EXPECT_EQ(src.find("kfab_col[it * B + threadIdx.x] = __ldg(") != std::string::npos, kept) << name << " " << i;
      EXPECT_EQ(src.find("reinterpret_cast<const float*>(kfab_col + it * B + threadIdx.x)[v]") != std::string::npos, kept) << name << " " << i;
      EXPECT_NE(src.find(kept ? "constexpr int keep = 1 * B * I * 16;" : "constexpr int keep = 0 * B * I * 16;"), std::string::npos) << name << " " << i;
      const auto f = scratch() / (name + "_split_defer_" + std::to_string(i) + ".cu");
      ASSERT_TRUE(write_file_atomic(f, src).has_value());
      auto r = backend_.build(f);
      ASSERT_TRUE(r.ok()) << name << " " << format_params(g[i]) << "\n" << r.failure().message;
    }
  }
  auto rms = parse_program("y = x * rsqrt(rowmean(x * x) + 1e-05)", {{"x", VClass::E}}, {"y"});
  ASSERT_TRUE(rms.has_value()) << rms.error().message;
  for (const auto& point : fused_grid(*rms, 4194304)) EXPECT_FALSE(point.count("defer")) << format_params(point);
  // a program with a scalar output gets none (its per-row shares would be added once a block)
  auto total = parse_program("y = x / rowsum(x); s = allsum(x)", {{"x", VClass::E}}, {"y", "s"});
  ASSERT_TRUE(total.has_value()) << total.error().message;
  for (const auto& point : fused_grid(*total, 4194304)) EXPECT_FALSE(point.count("split")) << format_params(point);
}

// Issue 25: rows longer than a cluster holds whose row reductions all meet at once (a softmax's maximum and
// sum, a layer norm's mean and squared deviations) get points that read them in tiles twice, the second
// time from L2 (l2; lag 4 first for rows of at most 1M floats, the others after the split points), which
// compile: tickets from the grid's counter, each
// tile's shares written, the row's made by its last first pass (a pair's at once), the second pass waiting
// for them; an RMS norm (one row reduction) gets none, and a program whose second reduction reads the
// first's row value apart from a pair's is generated without them. (The points that keep the tiles in
// shared memory, ring: RowsInTilesInSharedMemoryGetPointsThatCompile.)
TEST_F(CudaBuild, RowsReadTwiceInTilesGetPointsThatCompile) {
  auto sm = parse_program("e = exp(x - rowmax(x)); y = e / rowsum(e)", {{"x", VClass::E}}, {"y"});
  auto ln = parse_program("m = rowmean(x); d = x - m; r = rsqrt(rowmean(d * d) + 1e-05); y = d * r * w + b",
                          {{"x", VClass::E}, {"w", VClass::C}, {"b", VClass::C}}, {"y"});
  ASSERT_TRUE(sm.has_value() && ln.has_value());
  int built = 0;
  for (const auto& [name, prog, gather] : std::vector<std::tuple<std::string, const Program*, std::string>>{
           {"softmax", &*sm, "kfab_softmax_gather<B>(&gm, &gt, shares + 0 * s.S, shares + 1 * s.S"},
           {"layer_norm", &*ln, "kfab_moments_gather<B, V>(&gm, &gt, n, shares + 0 * s.S, shares + 1 * s.S"}}) {
    for (int64_t n : {4194304, 393216}) {
      const auto all = fused_grid(*prog, n);
      std::vector<TemplateParams> grid;
      for (const auto& q : all)
        if (q.count("l2") && !q.count("ring")) grid.push_back(q);
      ASSERT_EQ(grid.size(), 3u) << name << " " << n;
      for (const auto& q : grid) EXPECT_TRUE(q.count("split")) << name << " " << n << ": " << format_params(q);
      if (n == 393216) {  // rows of at most 1M floats: lag 4 first (measured the fastest on level1/23 and 24)
        EXPECT_EQ(format_params(all.front()), format_params(grid.front())) << name;
        EXPECT_EQ(grid.front().at("lag"), "4") << name;
      } else {  // longer: after the split points, before the general row points (ring's next)
        const auto first = std::find_if(all.begin(), all.end(), [](const TemplateParams& q) { return q.count("l2") > 0; });
        ASSERT_NE(first, all.end());
        EXPECT_TRUE(first[-1].count("split") && !first[-1].count("l2")) << name;
        for (size_t i = 0; i < 3; ++i) EXPECT_EQ(format_params(first[i]), format_params(grid[i])) << name;
        EXPECT_TRUE(first[3].count("ring")) << name;
        EXPECT_FALSE(first[4].count("split")) << name;
      }
      if (n != 4194304) continue;
      for (size_t i = 0; i < 3; ++i) {
        const std::string src = generate_fused_cuda(*prog, grid[i], name);
        EXPECT_NE(src.find("const unsigned long long kfab_next = threadIdx.x == 0 ? atomicAdd(s.ticket, 1ull) : 0ull;"), std::string::npos) << name;
        EXPECT_NE(src.find("kfab_go_l2(kfab_rows_split<B, G, 4, I>"), std::string::npos) << name;
        EXPECT_NE(src.find("kfab_l2_ticket(t, T, s.D, &tile, &second);"), std::string::npos) << name;
        EXPECT_NE(src.find("if (threadIdx.x == 0) __stcg(shares + 1 * s.S + part, s"), std::string::npos) << name;
        EXPECT_NE(src.find(gather), std::string::npos) << name;
        EXPECT_NE(src.find("kfab_l2_wait(kfab_bar, static_cast<unsigned>(s.S) + 1u);"), std::string::npos) << name;
        EXPECT_NE(src.find("= __ldcg(kfab_fin + 1);"), std::string::npos) << name;
        // no meeting of a row's blocks
        for (const char* meet : {"kfab_split_combine<B, ", "kfab_split_softmax<B>(&r", "kfab_split_moments<B, V>(&r"})
          EXPECT_EQ(src.find(meet), std::string::npos) << name << " " << meet;
        const auto f = scratch() / (name + "_l2_" + std::to_string(i) + ".cu");
        ASSERT_TRUE(write_file_atomic(f, src).has_value());
        auto r = backend_.build(f);
        ASSERT_TRUE(r.ok()) << name << " " << format_params(grid[i]) << "\n" << r.failure().message;
        ++built;
      }
    }
  }
  EXPECT_EQ(built, 6);
  auto rms = parse_program("y = x * rsqrt(rowmean(x * x) + 1e-05)", {{"x", VClass::E}}, {"y"});
  ASSERT_TRUE(rms.has_value()) << rms.error().message;
  const auto rgrid = fused_grid(*rms, 4194304);
  for (const auto& point : rgrid) EXPECT_FALSE(point.count("l2")) << format_params(point);
  // asked for, an RMS norm's one reduction is made from its tiles' shares alone
  TemplateParams q = rgrid.front();
  q["l2"] = "1";
  const std::string rsrc = generate_fused_cuda(*rms, q, "rms_norm");
  EXPECT_NE(rsrc.find("const float gt = kfab_split_gather<B, 0>(shares + 0 * s.S, s.S, red[0]);"), std::string::npos);
  // a variance about a mean that is not the pair's (x - rowmean(x) * 2): two meetings, so the plain split kernel
  auto two = parse_program("m = rowmean(x); d = x - m * 2; y = d * rsqrt(rowmean(d * d) + 1e-05)", {{"x", VClass::E}}, {"y"});
  ASSERT_TRUE(two.has_value()) << two.error().message;
  q = rgrid.front();
  q["l2"] = "1";
  const std::string tsrc = generate_fused_cuda(*two, q, "two");
  EXPECT_EQ(tsrc.find("kfab_l2_ticket(t"), std::string::npos);
  EXPECT_NE(tsrc.find("kfab_split_combine<B, 0>"), std::string::npos);
}

// Issue 25: the same rows of one per-element input, of whole float4, get points that keep each tile in a ring
// of shared-memory slots (ring: read once, by the bulk copy): second for rows of at most 1M floats, after the
// l2 points for longer ones; tiles of 8 float4 a thread, then of 16 only where a row has at most 64 of them. They compile: tiles dealt round the grid, shares stamped with the launch's
// epoch, the row's taken into shared memory and gathered from there, no meeting, no ticket. Rows whose length
// is not a multiple of 4, and a softmax of two per-element inputs, get none.
TEST_F(CudaBuild, RowsInTilesInSharedMemoryGetPointsThatCompile) {
  auto sm = parse_program("e = exp(x - rowmax(x)); y = e / rowsum(e)", {{"x", VClass::E}}, {"y"});
  auto ln = parse_program("m = rowmean(x); d = x - m; r = rsqrt(rowmean(d * d) + 1e-05); y = d * r * w + b",
                          {{"x", VClass::E}, {"w", VClass::C}, {"b", VClass::C}}, {"y"});
  auto two = parse_program("t = x + z; e = exp(t - rowmax(t)); y = e / rowsum(e)", {{"x", VClass::E}, {"z", VClass::E}}, {"y"});
  ASSERT_TRUE(sm.has_value() && ln.has_value() && two.has_value());
  const auto is_ring = [](const TemplateParams& q) { return q.count("ring") > 0; };
  int built = 0;
  for (const auto& [name, prog, gather] : std::vector<std::tuple<std::string, const Program*, std::string>>{
           {"softmax", &*sm, "kfab_softmax_gather<32, true>(&gm, &gt, kfab_sh + 0 * s.S, kfab_sh + 1 * s.S"},
           {"layer_norm", &*ln, "kfab_moments_gather<32, V, true>(&gm, &gt, n, kfab_sh + 0 * s.S, kfab_sh + 1 * s.S"}}) {
    for (const auto& [n, items] : std::vector<std::pair<int64_t, std::vector<std::string>>>{{393216, {"8", "16"}}, {4194304, {"8"}}}) {
      const auto all = fused_grid(*prog, n);
      // after the l2 point with lag 4 (rows of at most 1M floats: first), or after the three l2 points (longer)
      const auto at = std::find_if(all.begin(), all.end(), is_ring);
      ASSERT_NE(at, all.end()) << name << " " << n;
      EXPECT_EQ(at - all.begin(), n == 393216 ? 1 : std::find_if(all.begin(), all.end(), [](const TemplateParams& q) { return q.count("l2") > 0; }) - all.begin() + 3)
          << name << " " << n;
      const std::vector<TemplateParams> grid(at, all.end());
      ASSERT_GE(grid.size(), items.size() + 1) << name << " " << n;
      for (size_t i = 0; i < items.size(); ++i) {
        ASSERT_TRUE(is_ring(grid[i]) && grid[i].count("l2") && grid[i].count("split")) << name << " " << n << ": " << format_params(grid[i]);
        EXPECT_EQ(grid[i].at("items"), items[i]) << name << " " << n;
      }
      EXPECT_FALSE(is_ring(grid[items.size()])) << name << " " << n;
      if (n != 393216) continue;
      for (size_t i = 0; i < items.size(); ++i) {
        const std::string src = generate_fused_cuda(*prog, grid[i], name);
        EXPECT_NE(src.find("return vec && kfab_go_ring(kfab_rows_split<B, G, 4, I>, B, holds, NRED, LAG, stream, a, rows, n);"), std::string::npos) << name;
        EXPECT_NE(src.find("const int64_t tile = blockIdx.x + j * gridDim.x;"), std::string::npos) << name;
        EXPECT_NE(src.find("if (threadIdx.x == 0) kfab_ring_put(kfab_tags + 1 * s.S + part, s"), std::string::npos) << name;
        EXPECT_NE(src.find("kfab_ring_take<B>(kfab_q, kfab_tags, NRED * s.S, s.epoch, kfab_sh);"), std::string::npos) << name;
        EXPECT_NE(src.find("kfab_ring_wait(kfab_mbar + kfab_slot, j / s.R);"), std::string::npos) << name;
        EXPECT_NE(src.find(gather), std::string::npos) << name;
        EXPECT_NE(src.find("= kfab_fin[1];"), std::string::npos) << name;
        EXPECT_NE(src.find("if (threadIdx.x < 32) {\n        float gm = 0.0f, gt = 0.0f;"), std::string::npos) << name;  // warp 0 gathers
        for (const char* other : {"kfab_split_combine<B, ", "kfab_split_softmax<B>(&r", "kfab_split_moments<B, V>(&r", "kfab_l2_ticket(t, T", "kfab_l2_wait(kfab_bar",
                                  "__ldcg(kfab_fin"})
          EXPECT_EQ(src.find(other), std::string::npos) << name << " " << other;
        const auto f = scratch() / (name + "_ring_" + std::to_string(i) + ".cu");
        ASSERT_TRUE(write_file_atomic(f, src).has_value());
        auto r = backend_.build(f);
        ASSERT_TRUE(r.ok()) << name << " " << format_params(grid[i]) << "\n" << r.failure().message;
        ++built;
      }
    }
    for (const auto& q : fused_grid(*prog, 393215)) EXPECT_FALSE(is_ring(q)) << name << ": " << format_params(q);
  }
  EXPECT_EQ(built, 4);
  for (const auto& q : fused_grid(*two, 393216)) EXPECT_FALSE(is_ring(q)) << format_params(q);
}

// The cuda templates for cumsum, transpose, the middle-dimension sum (dim_reduce) and group norm compile at every point.
TEST_F(CudaBuild, CudaTemplatesCompileAtEveryPoint) {
  int built = 0;
  for (const char* t : {"cumsum", "transpose", "sum_dim1", "group_norm"}) {
    auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core" / t);
    ASSERT_TRUE(task.has_value()) << t;
    const auto templates = templates_for(*task, "cuda");
    ASSERT_EQ(templates.size(), 1u) << t;
    for (const auto& point : templates[0]->grid(*task)) {
      const auto f = scratch() / (std::string(t) + "_t" + std::to_string(built) + ".cu");
      ASSERT_TRUE(write_file_atomic(f, templates[0]->generate(*task, point)).has_value());
      auto r = backend_.build(f);
      ASSERT_TRUE(r.ok()) << t << " (" << format_params(point) << ")\n" << r.failure().message;
      ++built;
    }
  }
  EXPECT_EQ(built, 29);  // the four grids' points (the group norm's 10 since issue 25)
}

// The pool template compiles for a max and an average over 1, 2 and 3 dimensions, at its first point, and
// at the second for 1-D windows (both stage a tile through shared memory) and 2-D ones (16 outputs down a
// column a thread).
TEST_F(CudaBuild, EveryPoolingCompiles) {
  const auto shape = [](int form, Task& k) {
    k.op_class = "pool";  // a [B, N] tensor as [B, 1, 1, 1, N]: the shapes only need the rank
    k.inputs[0].shape = {"B", "1", "1", "1", "N"};
    k.outputs[0].shape = k.inputs[0].shape;
    k.op_params = {{"nd", form / 2 + 1}, {"max", form % 2}, {"kw", 3}, {"sw", 2}, {"pw", 1}, {"dw", form % 2 + 1}};
    if (form >= 2) k.op_params.insert({{"kh", 2}, {"sh", 1}});
    if (form >= 4) k.op_params.insert({{"kd", 3}, {"sd", 2}, {"pd", 1}, {"dd", 3}});
    const auto grid = template_named("cuda_pool")->grid(k);
    ASSERT_GE(grid.size(), 3u);
    size_t tiles = 0;
    for (const auto& point : grid) tiles += point.count("tile");
    // 1-D windows only, first: 256 threads of 16 outputs B apart, 16 consecutive (slide), 4 B apart
    EXPECT_EQ(tiles, form < 2 ? 3u : 0u) << form;
    EXPECT_EQ(grid[0].count("tile") + grid[1].count("tile"), form < 2 ? 2u : 0u) << form;
    if (form < 2) {
      EXPECT_EQ(grid[0].at("outputs"), "16") << form;
      EXPECT_EQ(grid[0].count("slide"), 0u) << form;
      EXPECT_EQ(grid[1].at("slide"), "1") << form;
    } else {  // 2-D and 3-D: rows reused (2 high at stride 1)
      EXPECT_EQ(grid[0].at("rows"), "8") << form;
    }
  };
  build_each_form("cumsum", "cuda_pool", 6, shape);     // the first point of each form
  build_each_form("cumsum", "cuda_pool", 6, shape, 2);  // and the 1-D forms' sliding window, the others' 4 rows of 2
  // level1/41's window (8 taps at stride 1, dilation 3, padding 4: a float4 staging's lead is 0) and one whose
  // lead is 3 (padding 1): the sliding window's point builds
  build_each_form("cumsum", "cuda_pool", 2, [](int form, Task& k) {
    k.op_class = "pool";
    k.inputs[0].shape = {"B", "1", "1", "1", "N"};
    k.outputs[0].shape = k.inputs[0].shape;
    k.op_params = {{"nd", 1}, {"max", 1}, {"kw", 8}, {"sw", 1}, {"pw", form == 0 ? 4 : 1}, {"dw", 3}};
    const auto grid = template_named("cuda_pool")->grid(k);
    ASSERT_GE(grid.size(), 3u);
    EXPECT_EQ(grid[0].at("outputs"), "16");
    EXPECT_TRUE(grid[0].count("tile") && !grid[0].count("slide") && grid[1].count("slide") && grid[2].count("tile"));
  }, 2);
  // a maximum at stride 1 along W (pool.h's kfab_pool_sep: a thread's 4 consecutive outputs, each input row's
  // maxima taken once): first for level1/42's 4 x 4 window at padding 1 (8 rows, then 4) and a 3-D one of 3
  // x 3 x 3 (its planes looped); not for 1-D windows (level1/41's; measured slower than the tiles), an
  // average, nor a stride of 2 along W. Whole output rows a block (pack, kfab_pool_packed) for 2-D and 3-D
  // windows: the five after the march where rows are not reused (level1/43 and 46's windows, at their input
  // width of 128; the third and fourth with 4 consecutive outputs a slot, vec, the third built too), the last
  // three before it where they are. The march (kfab_pool_march; separable, a thread's rows x columns: 4 rows
  // 2 x 2, 8 rows 2 x 2, 2 rows 1 x 2, 4 rows 1 x 2; an output a thread: 8 rows, 4, then 4 with two ods'
  // planes in flight; the separable ones last where the window is dilated, as 43's): 3-D windows only, first
  // where rows are not reused (46's first built, and 43's), last where they are; where its ring would pass
  // 113 KB, not at all.
  build_each_form("cumsum", "cuda_pool", 7, [this](int form, Task& k) {
    k.op_class = "pool";
    k.inputs[0].shape = {"B", "1", "1", "1", "N"};
    k.outputs[0].shape = k.inputs[0].shape;
    if (form == 0) k.op_params = {{"nd", 2}, {"max", 1}, {"kh", 4}, {"kw", 4}, {"sh", 1}, {"sw", 1}, {"ph", 1}, {"pw", 1}};
    if (form == 1) k.op_params = {{"nd", 3}, {"max", 1}, {"kd", 3}, {"kh", 3}, {"kw", 3}, {"pd", 1}, {"ph", 1}, {"pw", 1}};
    if (form == 2) k.op_params = {{"nd", 1}, {"max", 1}, {"kw", 8}, {"sw", 1}, {"pw", 4}, {"dw", 3}};
    if (form == 3) k.op_params = {{"nd", 2}, {"max", 0}, {"kh", 4}, {"kw", 4}, {"sh", 1}, {"sw", 1}, {"ph", 1}, {"pw", 1}};
    if (form == 4) k.op_params = {{"nd", 2}, {"max", 1}, {"kh", 4}, {"kw", 4}, {"sh", 1}, {"sw", 2}, {"ph", 1}, {"pw", 1}};
    if (form >= 5)  // level1/43 (a maximum, dilation 3) and 46 (an average)
      k.op_params = {{"nd", 3}, {"max", form == 5}, {"kd", 3}, {"kh", 3}, {"kw", 3}, {"sd", 2}, {"sh", 2}, {"sw", 2}, {"pd", 1}, {"ph", 1}, {"pw", 1},
                     {"dd", form == 5 ? 3 : 1}, {"dh", form == 5 ? 3 : 1}, {"dw", form == 5 ? 3 : 1}, {"in_w", 128}};
    const auto grid = template_named("cuda_pool")->grid(k);
    ASSERT_GE(grid.size(), 4u);
    const size_t marches = std::count_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("march") != 0; });
    EXPECT_EQ(marches, form == 1 || form >= 5 ? 7u : 0u) << form;
    const size_t m0 = form >= 5 ? marches : 0, tail = form >= 5 ? 0 : marches;  // march points before the rest, after it
    for (size_t i = 0; i < grid.size(); ++i) {
      EXPECT_EQ(grid[i].count("march") > 0, i < m0 || i + tail >= grid.size()) << form << " " << format_params(grid[i]);
      EXPECT_EQ(grid[i].count("sep") > 0, form < 2 && i < 2) << form << " " << format_params(grid[i]);
      const bool packed = form >= 5 ? i >= m0 && i < m0 + 5 : form != 2 && i + tail < grid.size() && i + 3 + tail >= grid.size();
      EXPECT_EQ(grid[i].count("pack") > 0, packed) << form << " " << format_params(grid[i]);
      EXPECT_EQ(grid[i].count("vec") > 0, form >= 5 && (i == m0 + 2 || i == m0 + 3)) << form << " " << format_params(grid[i]);
      const size_t mi = i < m0 ? i : i + marches - grid.size();  // its place among the march points
      if (grid[i].count("march")) {
        EXPECT_EQ(grid[i].count("tcols") > 0, form == 5 ? mi >= 3 : mi < 4) << form << " " << format_params(grid[i]);
      }
    }
    if (form == 1) {
      EXPECT_EQ(grid[grid.size() - 7].at("tcols"), "4");  // stride 1: 4 columns a thread
    }
    if (form == 5) {  // 43's first march, an output a thread
      EXPECT_EQ(grid[0].count("tcols"), 0u);
      const auto f = scratch() / "pool_march_5.cu";
      ASSERT_TRUE(write_file_atomic(f, template_named("cuda_pool")->generate(k, grid[0])).has_value());
      auto r = backend_.build(f);
      ASSERT_TRUE(r.ok()) << format_params(grid[0]) << "\n" << r.failure().message;
    }
    if (form == 6) {  // 46's march: 64 output columns a block (its input's 128), a ring in dynamic shared memory;
      // separable, 2 rows x 2 columns a thread: 32 x 2 threads
      EXPECT_EQ(grid[0].at("cols"), "64");
      EXPECT_EQ(grid[0].at("rows"), "4");
      EXPECT_EQ(grid[0].at("trows"), "2");
      EXPECT_EQ(grid[0].at("tcols"), "2");
      EXPECT_EQ(grid[0].at("block"), "64");
      const std::string src = template_named("cuda_pool")->generate(k, grid[0]);
      EXPECT_NE(src.find("constexpr bool MARCH = true;"), std::string::npos);
      EXPECT_NE(src.find("kfab_pool_march<MARCH><<<"), std::string::npos);
      const auto f = scratch() / "pool_march_6.cu";
      ASSERT_TRUE(write_file_atomic(f, src).has_value());
      auto r = backend_.build(f);
      ASSERT_TRUE(r.ok()) << format_params(grid[0]) << "\n" << r.failure().message;
    }
    if (form >= 5) {
      for (size_t i : {m0, m0 + 2}) {
        const std::string src = template_named("cuda_pool")->generate(k, grid[i]);
        EXPECT_NE(src.find("constexpr bool PACK = true;"), std::string::npos) << form;
        EXPECT_EQ(src.find("constexpr bool VEC = true;") != std::string::npos, i == m0 + 2) << form;
        EXPECT_NE(src.find("kfab_pool_packed<PACK><<<"), std::string::npos) << form;
        const auto f = scratch() / ("pool_pack_" + std::to_string(form) + "_" + std::to_string(i) + ".cu");
        ASSERT_TRUE(write_file_atomic(f, src).has_value());
        auto r = backend_.build(f);
        ASSERT_TRUE(r.ok()) << form << " (" << format_params(grid[i]) << ")\n" << r.failure().message;
      }
    }
    if (form >= 2) return;
    EXPECT_EQ(grid[0].at("rows"), "8");
    EXPECT_EQ(grid[1].at("rows"), "4");
    const std::string src = template_named("cuda_pool")->generate(k, grid[0]);
    EXPECT_NE(src.find("constexpr bool SEP = true;"), std::string::npos) << form;
    const auto f = scratch() / ("pool_sep_" + std::to_string(form) + ".cu");
    ASSERT_TRUE(write_file_atomic(f, src).has_value());
    auto r = backend_.build(f);
    ASSERT_TRUE(r.ok()) << form << " (" << format_params(grid[0]) << ")\n" << r.failure().message;
  });
}

// The row-scan template compiles in each of its forms (a sum or a product; reversed, exclusive, masked).
TEST_F(CudaBuild, EveryFormOfTheScanCompiles) {
  build_each_form("cumsum", "cuda_row_scan", 4, [](int form, Task& k) {
    k.op_class = "scan";
    k.op_params = {{"op", form % 2}, {"reverse", form == 1}, {"exclusive", form == 2}, {"masked", form == 3}};
    if (form == 3) {
      k.inputs.push_back(k.inputs[0]);
      k.inputs[1].dtype = DType::Bool;
    }
  });
}

// The dim_reduce template compiles for each of its reductions (sum, mean, max, min, argmax, argmin; the
// last two writing int64; an RMS normalisation, of x's shape), keepdim or not, at its first point.
TEST_F(CudaBuild, EveryReductionOverADimensionCompiles) {
  build_each_form("sum_dim1", "cuda_dim_reduce", 7, [](int op, Task& k) {
    k.op_class = "dim_reduce";
    k.op_params = {{"op", op}, {"dim", 1}, {"keepdim", op % 2}, {"eps", 1e-5}};
    k.outputs[0].dtype = op == 4 || op == 5 ? DType::I64 : DType::F32;
    if (op % 2) k.outputs[0].shape = {k.inputs[0].shape[0], "1", k.inputs[0].shape[2]};
    if (op == 6) k.outputs[0].shape = k.inputs[0].shape;
  });
}

// The group-norm template compiles with affine weights and without them (an instance norm: x alone, a
// group a channel).
TEST_F(CudaBuild, TheGroupNormCompilesWithAndWithoutWeights) {
  build_each_form("group_norm", "cuda_group_norm", 2, [](int form, Task& k) {
    if (form == 0) return;
    k.inputs.resize(1);
    k.op_params["groups"] = 0;
    k.op_params["affine"] = 0;
  });
}

// GEMM + epilogue: the native tasks (B given as [K, N]) at their first SIMT point (every one in the slow
// tier: GemmSimtPointsCompileAtEveryPoint), and a Linear (W given as
// [N, K]) followed by a row-reducing epilogue (the two-kernel path) at one tensor-core point. Each
// CUTLASS point costs nvcc a minute on a small machine, so CI builds one: on Hopper (the default
// without a GPU) the sm90 3xTF32 point with the stream-K scheduler, whose file holds the SM80 3xTF32
// instance at alignment 1 too (tests/templates/sm90_tf32_gemm.cu builds the persistent scheduler, one
// TF32 product, on its own); elsewhere the SM80 point. The native tasks' B [K, N] at an sm90 point (written as [N, K]
// first) is checked for its text only; KFAB_BUILD_EVERY_TC_POINT=1 builds it too.
// GemmSimtPointsCompileAtEveryPoint (slow tier): every SIMT point of the native tasks; here their first.
static void build_gemm_simt_points(CudaBackend& backend, bool every, int& built) {
  for (const char* t : {"matmul", "matmul_bias_relu"}) {
    auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core" / t);
    ASSERT_TRUE(task.has_value()) << t;
    auto gp = task_gemm(*task);
    ASSERT_TRUE(gp.has_value()) << t << ": " << gp.error().message;
    int simt = 0;
    for (const auto& point : gemm_cuda_grid(*gp)) {
      if (point.count("mma") || (!every && simt > 0)) continue;
      const auto f = scratch() / (std::string(t) + "_simt" + std::to_string(simt++) + ".cu");
      ASSERT_TRUE(write_file_atomic(f, generate_gemm_cuda(*gp, point, t)).has_value());
      auto r = backend.build(f);
      ASSERT_TRUE(r.ok()) << t << " (" << format_params(point) << ")\n" << r.failure().message;
      ++built;
    }
    EXPECT_EQ(simt, every ? 5 : 1) << t << ": SIMT points";
  }
}

TEST_F(CudaBuild, GemmSimtPointsCompileAtEveryPoint) {
  int built = 0;
  build_gemm_simt_points(backend_, true, built);
  EXPECT_EQ(built, 10);
}

// A Linear with a LayerNorm and a ReLU after it: a row-reducing epilogue.
static GemmProgram linear_layernorm_relu() {
  GemmProgram ln;
  ln.a = 0, ln.b = 1, ln.trans_b = true, ln.tensors = 4, ln.bind = {2, 3, -1};
  auto p = parse_program("m = rowmean(acc); d = acc - m; y = relu(d * rsqrt(rowmean(d * d) + 1e-5) * g + b)",
                         {{"g", VClass::C}, {"b", VClass::C}, {"acc", VClass::E}}, {"y"});
  EXPECT_TRUE(p.has_value()) << p.error().message;
  if (p) ln.epilogue = *p;
  return ln;
}

// The grid's first sm90 3xTF32 point with the stream-K scheduler.
static std::vector<TemplateParams>::const_iterator stream_k_3xtf32(const std::vector<TemplateParams>& grid) {
  return std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) {
    return q.count("mma") && q.at("mma") == "sm90_3xtf32" && q.count("scheduler") && q.at("scheduler") == "streamk";
  });
}

// Slow tier: the row-reducing epilogue after CUTLASS's sm90 3xTF32 product at the stream-K point (CUTLASS's
// headers, where they are here).
TEST_F(CudaBuild, TheGemmEpilogueOnCutlassCompiles) {
  if (cutlass_include_dir().empty() || cuda_candidate_arch() != "sm_90a") GTEST_SKIP() << "no CUTLASS headers, or not Hopper";
  const GemmProgram ln = linear_layernorm_relu();
  const auto grid = gemm_cuda_grid(ln);
  const auto three = stream_k_3xtf32(grid);
  ASSERT_NE(three, grid.end());
  const auto f = scratch() / "linear_layernorm_relu_sm90.cu";
  ASSERT_TRUE(write_file_atomic(f, generate_gemm_cuda(ln, *three, "linear_layernorm_relu")).has_value());
  auto r = backend_.build(f);
  ASSERT_TRUE(r.ok()) << format_params(*three) << "\n" << r.failure().message;
}

TEST_F(CudaBuild, GemmEpiloguesCompile) {
  int built = 0;
  build_gemm_simt_points(backend_, false, built);
  auto build = [&](const std::string& name, const std::string& src) {
    const auto f = scratch() / (name + "_g" + std::to_string(built) + ".cu");
    ASSERT_TRUE(write_file_atomic(f, src).has_value());
    auto r = backend_.build(f);
    ASSERT_TRUE(r.ok()) << name << "\n" << r.failure().message;
    ++built;
  };
  const bool cutlass = !cutlass_include_dir().empty();
  const bool hopper = cutlass && cuda_candidate_arch() == "sm_90a";
  const bool every = std::getenv("KFAB_BUILD_EVERY_TC_POINT") != nullptr;
  int extra = 0;  // tensor-core points built beyond the one
  for (const char* t : {"matmul", "matmul_bias_relu"}) {
    auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core" / t);
    ASSERT_TRUE(task.has_value()) << t;
    auto gp = task_gemm(*task);
    ASSERT_TRUE(gp.has_value()) << t << ": " << gp.error().message;
    const auto grid = gemm_cuda_grid(*gp);
    const auto tc = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("mma") != 0; });
    if (tc == grid.end() || std::string(t) != "matmul") continue;
    const std::string src = generate_gemm_cuda(*gp, *tc, t);
    if (hopper) {
      // TF32 wgmma reads B K-major: B [K, N] is written as [N, K] into the scratch after the product
      EXPECT_NE(src.find("KfabSm90Gemm<128, 256, 32, 1, true, false>"), std::string::npos) << src.substr(0, 600);
      EXPECT_NE(src.find("kfab_sm90_1xtf32<KfabTile>(a_data, w_data, product, scratch, m32, n32, k32, l32, true, stream)"), std::string::npos);
      // the product is the output (C = acc): written there, no row pass; the scratch holds B [N, K] alone
      EXPECT_NE(src.find("float* const product = a.out0;"), std::string::npos);
      EXPECT_NE(src.find("const int64_t need = batch * gn * K;"), std::string::npos);
      EXPECT_EQ(src.find("kfab_go<P>("), std::string::npos) << "no row kernel launched";
    }
    if (every) build(t, src), ++extra;
    // and at the first three-product point: the product written straight into the output, the split beside it
    const auto three = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("mma") && q.at("mma") == "sm90_3xtf32"; });
    if (hopper && three != grid.end()) {
      const std::string src3 = generate_gemm_cuda(*gp, *three, t);
      EXPECT_NE(src3.find("float* const product = a.out0;"), std::string::npos);
      EXPECT_NE(src3.find("const int64_t need = kfab_3xtf32_scratch_for(a_data, w_data, a.out0, gmb, gn, K, batch);"), std::string::npos);
      // any K and N (KernelBench's level1_8, 8205 x 2949 x 5921): the parts' rows padded, not the SM80 fallback
      EXPECT_NE(src3.find("  if (K > 0) {\n"), std::string::npos) << src3.substr(src3.find("KFAB_EXPORT"));
      if (every) build(std::string(t) + "_3x", src3), ++extra;
    }
  }
  const GemmProgram ln = linear_layernorm_relu();
  const auto grid = gemm_cuda_grid(ln);
  // where CUTLASS's headers are here the grid opens with tensor-core points: on Hopper (the default
  // without a GPU) with one TF32 product, the reduced precision, then three
  ASSERT_FALSE(grid.empty());
  EXPECT_EQ(grid.front().count("mma") != 0, cutlass);
  if (hopper) {
    EXPECT_EQ(grid.front().at("mma"), "sm90_tf32");
    EXPECT_EQ(grid.front().at("precision"), "tf32");
    EXPECT_NE(generate_gemm_cuda(ln, grid.front(), "ln").find("kfab_sm90_1xtf32<KfabTile>(a_data, w_data, product, scratch, m32, n32, k32, l32, false,"),
              std::string::npos);
  }
  if (hopper) {  // the dimensions order the points: few output tiles over a long K take K in slices second, stream-K third
    GemmProgram few = ln, many = ln;
    few.m = 256, few.n = 256, few.k = 524288;  // KernelBench's level1_6: 4 tiles of 128 x 128
    many.m = 1024, many.n = 8192, many.k = 8192;
    const auto fg = gemm_cuda_grid(few), mg = gemm_cuda_grid(many);
    ASSERT_GE(fg.size(), 4u);
    ASSERT_GE(mg.size(), 3u);
    EXPECT_EQ(fg[1].count("splitk"), 1u) << format_params(fg[1]);
    EXPECT_EQ(fg[2].at("scheduler"), "streamk");
    EXPECT_EQ(mg[1].at("scheduler"), "persistent");
    EXPECT_EQ(mg[1].at("mma"), "sm90_mixed");
    // the same points, in another order, and the split-K one, less the two tf32+bf16 ones
    EXPECT_EQ(fg.size() + 2, mg.size() + 1);
  }
  // the Linear at the stream-K point (the matmul above took the persistent scheduler): its source here,
  // its build (CUTLASS's sm90 headers, 46 s of nvcc) in CudaBuild.TheGemmEpilogueOnCutlassCompiles (slow
  // tier); built here at the first SIMT point, whose row kernel is the same
  const auto three = stream_k_3xtf32(grid);
  EXPECT_EQ(three != grid.end(), hopper);
  const TemplateParams& point = three != grid.end() ? *three : grid.front();
  const std::string src = generate_gemm_cuda(ln, point, "linear_layernorm_relu");
  EXPECT_NE(src.find("kfab_rows_cached"), std::string::npos) << "a row-reducing epilogue runs as a row kernel";
  if (hopper) {
    EXPECT_NE(src.find("kfab_sm90_3xtf32<KfabTile>(a_data, w_data, product, scratch, m32, n32, k32, l32, false, false,"), std::string::npos);
    EXPECT_NE(src.find("const int64_t need = (gm * gn + 3) / 4 * 4 + kfab_3xtf32_scratch_for(a_data, w_data, nullptr, gmb, gn, K, batch);"), std::string::npos) << "the operands' big and small parts after the product";
    EXPECT_NE(src.find("KfabSm90Gemm<128, 128, 32, 1, true, true>"), std::string::npos) << "stream-K";
  }
  // a product read only through a row sum of a linear function of it (KernelBench's Gemm_Divide_Sum_Scaling,
  // with a bias): its row sums alone, B given as W [N, K] and as [K, N]; the grid opens with that point
  for (const bool trans : {true, false}) {
    GemmProgram sum;
    sum.a = 0, sum.b = 1, sum.trans_b = trans, sum.tensors = 3, sum.bind = {2, -1};
    auto q = parse_program("y = rowsum((acc + bias) / 2.0) * 1.5", {{"bias", VClass::C}, {"acc", VClass::E}}, {"y"});
    ASSERT_TRUE(q.has_value()) << q.error().message;
    sum.epilogue = *q;
    const auto sgrid = gemm_cuda_grid(sum);
    ASSERT_FALSE(sgrid.empty());
    ASSERT_EQ(sgrid.front().count("fold"), 1u);
    const std::string folded = generate_gemm_cuda(sum, sgrid.front(), "gemm_sum");
    EXPECT_NE(folded.find(std::string("kfab_product_row_sums(ap, bp, sums, scratch, gm, gn, K, ") + (trans ? "true" : "false")),
              std::string::npos);
    EXPECT_EQ(folded.find("cutlass"), std::string::npos) << "no product is formed";
    build(trans ? "gemm_sum_wnk" : "gemm_sum_bkn", folded);
  }
  // the first SIMT point of a GEMM's grid, generated
  auto simt_source = [](const GemmProgram& gp, const std::string& name) {
    const auto grid = gemm_cuda_grid(gp);
    const auto at = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("mma") == 0 && q.count("fold") == 0; });
    return at == grid.end() ? std::string() : generate_gemm_cuda(gp, *at, name);
  };
  const std::string ln_simt = simt_source(ln, "linear_layernorm_relu");
  ASSERT_FALSE(ln_simt.empty()) << "linear_layernorm_relu has a SIMT point";
  EXPECT_NE(ln_simt.find("kfab_rows_cached"), std::string::npos);
  build("linear_layernorm_relu", ln_simt);
  // A given as [K, M] (A.T @ B): transposed into a buffer first, at the first SIMT point
  GemmProgram ta;
  ta.a = 0, ta.b = 1, ta.trans_a = true, ta.tensors = 2, ta.bind = {-1};
  auto tp = parse_program("y = acc", {{"acc", VClass::E}}, {"y"});
  ASSERT_TRUE(tp.has_value()) << tp.error().message;
  ta.epilogue = *tp;
  const std::string tsrc = simt_source(ta, "matmul_trans_a");
  ASSERT_FALSE(tsrc.empty()) << "matmul_trans_a has a SIMT point";
  EXPECT_NE(tsrc.find("kfab_transpose4<<<tgrid, 256, 0, stream>>>(a_data, a_t, K, gmb);"), std::string::npos);
  EXPECT_NE(tsrc.find("const int64_t K = A.shape[0], gm = A.shape[1];"), std::string::npos);
  build("matmul_trans_a", tsrc);
  // a batched product (torch.bmm) with a pointwise epilogue in the GEMM's registers: a GEMM a batch, the
  // batch's rows offset into the outputs
  GemmProgram bm = ta;
  bm.trans_a = false, bm.batched = true, bm.tensors = 2, bm.bind = {-1};
  auto bp = parse_program("y = relu(acc)", {{"acc", VClass::E}}, {"y"});
  ASSERT_TRUE(bp.has_value()) << bp.error().message;
  bm.epilogue = *bp;
  const std::string bsrc = simt_source(bm, "bmm_relu");
  ASSERT_FALSE(bsrc.empty()) << "bmm_relu has a SIMT point";
  EXPECT_NE(bsrc.find("const int64_t batch = A.shape[0];"), std::string::npos);
  EXPECT_NE(bsrc.find("kfab_gemm<true><<<grid, NT, 0, stream>>>(o, a, gmb, gn, K, z * gmb);"), std::string::npos);
  EXPECT_NE(bsrc.find("a.out0[prow * n + c]"), std::string::npos);
  build("bmm_relu", bsrc);
  if (hopper) {  // at the sm90 3xTF32 point: every batch in one launch, B [K, N] written as [N, K] a batch at a time
    const auto bgrid = gemm_cuda_grid(bm);
    const auto at = std::find_if(bgrid.begin(), bgrid.end(), [](const TemplateParams& q) { return q.count("mma") && q.at("mma") == "sm90_3xtf32"; });
    ASSERT_NE(at, bgrid.end());
    const std::string b90 = generate_gemm_cuda(bm, *at, "bmm_relu_sm90");
    EXPECT_NE(b90.find("kfab_sm90_3xtf32<KfabTile>(a_data, w_data, product, scratch, m32, n32, k32, l32, true, true, stream);"), std::string::npos);
    if (every) build("bmm_relu_sm90", b90), ++extra;
  }
  // a pooled product (an AvgPool1d of 16 over a Linear's outputs): the weight's rows and the bias averaged
  // first on the device, then the GEMM on them
  GemmProgram pl;
  pl.a = 0, pl.b = 1, pl.trans_b = true, pl.pool = 16, pl.tensors = 3, pl.bind = {2, -1};
  PInput bias{"bias", VClass::C};
  bias.pool = 16;
  auto pp = parse_program("y = rowmax(gelu_erf(acc + bias) * 2.0)", {bias, {"acc", VClass::E}}, {"y"});
  ASSERT_TRUE(pp.has_value()) << pp.error().message;
  pl.epilogue = *pp;
  const std::string psrc = simt_source(pl, "linear_avgpool");
  ASSERT_FALSE(psrc.empty()) << "linear_avgpool has a SIMT point";
  EXPECT_NE(psrc.find("kfab_pool_windows(w_data, pooled, batch * gn, K, 16, true, stream)"), std::string::npos);
  EXPECT_NE(psrc.find("kfab_numel(in[2]) != n * 16"), std::string::npos) << "the bias is the product's full width";
  build("linear_avgpool", psrc);
  // a max-pooled product (a MaxPool1d of 2 over a Linear's outputs, then a sum): the full product, then a pass
  // of the windows' maxima with the bias added first, then the row program over them; no fused epilogue, no fold
  GemmProgram mp = pl;
  mp.pool = 2, mp.pool_max = true;
  PInput mbias{"bias", VClass::C};
  mbias.pool = 2;
  auto mq = parse_program("y = rowsum(acc) * 0.5", {mbias, {"acc", VClass::E}}, {"y"});
  ASSERT_TRUE(mq.has_value()) << mq.error().message;
  mp.epilogue = *mq;
  EXPECT_EQ(gemm_cuda_grid(mp).front().count("fold"), 0u) << "a max-pooled product's row sums are not the pooled ones";
  const std::string msrc = simt_source(mp, "linear_maxpool");
  ASSERT_FALSE(msrc.empty());
  EXPECT_NE(msrc.find("kfab_max_windows(product, a.in0, pooled, gm, gn, 2, stream)"), std::string::npos) << msrc.substr(0, 400);
  EXPECT_NE(msrc.find("const int64_t rows = gm, n = gn / 2;"), std::string::npos);
  EXPECT_EQ(msrc.find("kfab_pool_windows(w_data"), std::string::npos) << "B is not averaged";
  build("linear_maxpool", msrc);
  // the first SIMT point of both tasks, the Linear, the two folded sums, A transposed, the batched product,
  // the averaged and the max-pooled ones (and, asked, the tensor-core points above)
  EXPECT_EQ(built, 2 + 1 + 2 + 1 + 1 + 1 + 1 + extra);
}

// A candidate built on CUTLASS (issue 23's 3xTF32 probe) gets CUTLASS's headers where the worker's Python
// has nvidia-cutlass (`make` installs it in .venv), and otherwise a build failure saying how to get them.
TEST_F(CudaBuild, ACandidateOnCutlassBuildsWithItsHeadersOrSaysWhereToGetThem) {
  const auto cand = std::filesystem::path(KFAB_SOURCE_DIR) / "bench/gemm_tf32x3/level2_76_cutlass_3xtf32.cu";
  auto has = run_command({python_interpreter(), "-c", "import cutlass_library"}, 60.0);
  const bool headers = (has && has->status.ok()) || std::getenv("KFAB_CUTLASS_INCLUDE") != nullptr;
  auto r = backend_.build(cand);
  if (headers) {
    ASSERT_TRUE(r.ok()) << r.failure().message;
  } else {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.failure().message.find("nvidia-cutlass"), std::string::npos) << r.failure().message;
    if (std::getenv("KFAB_REQUIRE_TORCH")) ADD_FAILURE() << "make test installs nvidia-cutlass in .venv";
  }
}

// Few output tiles over a long K (KernelBench's level1_6, 256 x 256 x 524288): the cuda grid's first
// fp32-accurate point is CUTLASS's SM80 3xTF32 (the operands split in registers, none written out) with K
// in slices over the SMs (serial split-K, its semaphores in a workspace kept between calls). CI checks its
// text; KFAB_BUILD_EVERY_TC_POINT=1 builds it.
TEST_F(CudaBuild, AFewTileProductOverALongKSplitsKInSlices) {
  if (cutlass_include_dir().empty()) GTEST_SKIP() << "CUTLASS's headers are not installed (make venv installs nvidia-cutlass)";
  auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core/matmul");
  ASSERT_TRUE(task.has_value());
  auto gp = task_gemm(*task);
  ASSERT_TRUE(gp.has_value()) << gp.error().message;
  gp->m = 256, gp->n = 256, gp->k = 524288;
  const auto grid = gemm_cuda_grid(*gp);
  const auto split = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.count("splitk") != 0; });
  ASSERT_NE(split, grid.end());
  const auto first_accurate = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return !reduced_precision(q); });
  EXPECT_EQ(split, first_accurate) << format_params(*first_accurate);
  const std::string src = generate_gemm_cuda(*gp, *split, "long_k");
  EXPECT_NE(src.find("constexpr bool SPLIT_K = true;"), std::string::npos);
  EXPECT_NE(src.find("kfab_tc_gemm<4, SPLIT_K>(ap, bp, cp, m32, n32, k32, stream)"), std::string::npos);
  EXPECT_NE(src.find("gemm.initialize(args, workspace, stream)"), std::string::npos);
  // a product of many tiles gets no such point
  gp->m = 4096, gp->n = 4096, gp->k = 4096;
  for (const auto& q : gemm_cuda_grid(*gp)) EXPECT_EQ(q.count("splitk"), 0u) << format_params(q);
  if (std::getenv("KFAB_BUILD_EVERY_TC_POINT") != nullptr) {
    const auto f = scratch() / "long_k_split.cu";
    ASSERT_TRUE(write_file_atomic(f, src).has_value());
    auto r = backend_.build(f);
    ASSERT_TRUE(r.ok()) << r.failure().message;
  }
}

// A short K with a large output (KernelBench's level1_7 and 9: 32768 x 32768 outputs over K = 64 and 32,
// written once by one product over K' = 3K): on Hopper the second point is the sm90 3xTF32 one with
// CUTLASS's ping-pong schedule (one consumer's epilogue over the other's mainloop), which CUTLASS runs
// without the stream-K scheduler; a K that would need slices returns 7 there. CI checks its text;
// KFAB_BUILD_EVERY_TC_POINT=1 builds it.
TEST_F(CudaBuild, AShortKWithALargeOutputTakesThePingPongSchedule) {
  if (cutlass_include_dir().empty() || cuda_candidate_arch() != "sm_90a") GTEST_SKIP() << "the sm90 points need CUTLASS and sm_90a";
  auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core/matmul");
  ASSERT_TRUE(task.has_value());
  auto gp = task_gemm(*task);
  ASSERT_TRUE(gp.has_value()) << gp.error().message;
  gp->m = 32768, gp->n = 32768, gp->k = 64;
  const auto grid = gemm_cuda_grid(*gp);
  ASSERT_GE(grid.size(), 3u);
  EXPECT_EQ(grid[1].at("mma"), "sm90_3xtf32");
  EXPECT_EQ(grid[1].at("schedule"), "pingpong");
  const std::string src = generate_gemm_cuda(*gp, grid[1], "short_k");
  EXPECT_NE(src.find("using KfabTile = KfabSm90Gemm<64, 256, 32, 1, false, false>;"), std::string::npos) << "no stream-K with ping-pong";
  int pingpong = 0;  // once only
  for (const auto& q : grid) pingpong += q.count("schedule") && q.at("schedule") == "pingpong";
  EXPECT_EQ(pingpong, 1);
  // a long K gets no ping-pong point: its big x big product needs slices
  gp->m = 1024, gp->n = 8192, gp->k = 8192;
  for (const auto& q : gemm_cuda_grid(*gp)) EXPECT_FALSE(q.count("schedule") && q.at("schedule") == "pingpong") << format_params(q);
  if (std::getenv("KFAB_BUILD_EVERY_TC_POINT") != nullptr) {
    const auto f = scratch() / "short_k_pingpong.cu";
    ASSERT_TRUE(write_file_atomic(f, src).has_value());
    auto r = backend_.build(f);
    ASSERT_TRUE(r.ok()) << r.failure().message;
  }
}

// One TF32 product and one bf16 product of the cross terms (precision tf32+bf16, a reduced one): on Hopper
// the second point of a long K's grid (after the one-product point), at 128 x 256 and again at 128 x 128,
// the bf16 product at the same tile with twice its K depth; B [K, N] is read N-major by the bf16 product
// (the template's B_KN). No such point for a short K or few tiles over a long K (the split's traffic is
// the cost there). CI checks the text; KFAB_BUILD_EVERY_TC_POINT=1 builds it.
TEST_F(CudaBuild, ALongKTakesOneTf32AndOneBf16ProductOfTheCrossTerms) {
  if (cutlass_include_dir().empty() || cuda_candidate_arch() != "sm_90a") GTEST_SKIP() << "the sm90 points need CUTLASS and sm_90a";
  auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core/matmul");
  ASSERT_TRUE(task.has_value());
  auto gp = task_gemm(*task);
  ASSERT_TRUE(gp.has_value()) << gp.error().message;
  gp->m = 4096, gp->n = 4096, gp->k = 4096;
  const auto grid = gemm_cuda_grid(*gp);
  ASSERT_GE(grid.size(), 3u);
  EXPECT_EQ(grid[0].at("precision"), "tf32");
  EXPECT_EQ(grid[1].at("mma"), "sm90_mixed");
  EXPECT_EQ(grid[1].at("precision"), "tf32+bf16");
  EXPECT_EQ(grid[1].at("tile"), "128x256x32");
  EXPECT_TRUE(reduced_precision(grid[1]));
  int mixed = 0;
  for (const auto& q : grid) mixed += q.count("precision") && q.at("precision") == "tf32+bf16";
  EXPECT_EQ(mixed, 2);
  const std::string src = generate_gemm_cuda(*gp, grid[1], "mixed");
  EXPECT_NE(src.find("using KfabTile = KfabSm90Gemm<128, 256, 32, 1, true, true>;"), std::string::npos) << src.substr(0, 800);
  EXPECT_NE(src.find("kfab_sm90_mixed<KfabTile, true>(a_data, w_data, product, scratch, m32, n32, k32, l32, true, stream)"), std::string::npos);
  EXPECT_NE(src.find("kfab_3xtf32_scratch_for(a_data, w_data"), std::string::npos);
  // a short K, and few tiles over a long K: none
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{32768, 32768, 64}, {256, 256, 524288}}) {
    gp->m = m, gp->n = n, gp->k = k;
    for (const auto& q : gemm_cuda_grid(*gp)) EXPECT_FALSE(q.count("mma") && q.at("mma") == "sm90_mixed") << m << " x " << n << " x " << k;
  }
  if (std::getenv("KFAB_BUILD_EVERY_TC_POINT") != nullptr) {
    const auto f = scratch() / "mixed.cu";
    ASSERT_TRUE(write_file_atomic(f, src).has_value());
    auto r = backend_.build(f);
    ASSERT_TRUE(r.ok()) << r.failure().message;
  }
}

// The tile order is searched too: points whose tiles go out in swizzled groups of 4 (CUTLASS 3's tile
// scheduler's max_swizzle_size on Hopper, GemmIdentityThreadblockSwizzle<4> for the SM80 3xTF32 GEMM).
// CI checks their text; KFAB_BUILD_EVERY_TC_POINT=1 builds them.
TEST_F(CudaBuild, SwizzledTileOrdersAreSearchedToo) {
  if (cutlass_include_dir().empty()) GTEST_SKIP() << "CUTLASS's headers are not installed (make venv installs nvidia-cutlass)";
  auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/core/matmul");
  ASSERT_TRUE(task.has_value());
  auto gp = task_gemm(*task);
  ASSERT_TRUE(gp.has_value()) << gp.error().message;
  const bool hopper = cuda_candidate_arch() == "sm_90a";
  std::vector<std::string> sources;
  for (const auto& q : gemm_cuda_grid(*gp)) {
    if (!q.count("swizzle")) continue;
    EXPECT_EQ(q.at("swizzle"), "4");
    const std::string src = generate_gemm_cuda(*gp, q, "swizzled");
    if (q.at("mma") == "sm90_3xtf32") {
      EXPECT_NE(src.find("using KfabTile = KfabSm90Gemm<128, 128, 32, 1, true, true, 4>;"), std::string::npos);
    } else {
      EXPECT_NE(src.find("GemmIdentityThreadblockSwizzle<4>, 4, ALIGN, ALIGN, SPLIT"), std::string::npos) << src.substr(0, 3000);
    }
    sources.push_back(src);
  }
  EXPECT_EQ(sources.size(), hopper ? 2u : 1u);
  if (std::getenv("KFAB_BUILD_EVERY_TC_POINT") != nullptr)
    for (size_t i = 0; i < sources.size(); ++i) {
      const auto f = scratch() / ("swizzled_" + std::to_string(i) + ".cu");
      ASSERT_TRUE(write_file_atomic(f, sources[i]).has_value());
      auto r = backend_.build(f);
      ASSERT_TRUE(r.ok()) << r.failure().message;
    }
}

// A half-precision task's plain product (tasks/half/matmul_bf16: bf16 A [M, K] and W [N, K], a bf16 C) on
// 16-bit tensor cores: the cuda grid holds CUTLASS's sm90 GEMM on Hopper, then its SM80 one, each at the
// task's own precision (not a reduced one); every operand read in its own layout; the cpu target's
// blocked GEMM, f32 only, does not take it, and a formula after the product is refused with the reason.
// CI builds an SM80 point (tests/templates/sm90_half_gemm.cu builds the sm90 types on their own);
// KFAB_BUILD_EVERY_TC_POINT=1 builds the first sm90 point and the fp16 variant too.
TEST_F(CudaBuild, HalfPrecisionProductsRunOnSixteenBitTensorCores) {
  auto task = load_task(std::filesystem::path(KFAB_SOURCE_DIR) / "tasks/half/matmul_bf16");
  ASSERT_TRUE(task.has_value()) << task.error().message;
  auto gp = task_gemm(*task);
  ASSERT_TRUE(gp.has_value()) << gp.error().message;
  EXPECT_EQ(gp->dtype, DType::BF16);
  EXPECT_TRUE(gp->trans_b);
  EXPECT_FALSE(gemm_cpu_template().applies(*task));
  EXPECT_TRUE(gemm_cpu_grid(*gp).empty());
  const auto grid = gemm_cuda_grid(*gp);
  if (cutlass_include_dir().empty()) {
    EXPECT_TRUE(grid.empty()) << "no CUTLASS, no 16-bit point";
    GTEST_SKIP() << "CUTLASS's headers are not installed (make venv installs nvidia-cutlass)";
  }
  ASSERT_FALSE(grid.empty());
  const bool hopper = cuda_candidate_arch() == "sm_90a";
  EXPECT_EQ(grid.front().at("mma"), hopper ? "sm90_half" : "sm80_half");
  for (const auto& point : grid) {
    EXPECT_EQ(point.at("precision"), "bf16");
    EXPECT_FALSE(reduced_precision(point)) << format_params(point);
  }
  const bool every = std::getenv("KFAB_BUILD_EVERY_TC_POINT") != nullptr;
  int built = 0;
  auto build = [&](const std::string& name, const std::string& src) {
    const auto f = scratch() / (name + "_h" + std::to_string(built) + ".cu");
    ASSERT_TRUE(write_file_atomic(f, src).has_value());
    auto r = backend_.build(f);
    ASSERT_TRUE(r.ok()) << name << "\n" << r.failure().message;
    ++built;
  };
  const auto sm80 = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& q) { return q.at("mma") == "sm80_half"; });
  ASSERT_NE(sm80, grid.end());
  const std::string s80 = generate_gemm_cuda(*gp, *sm80, "matmul_bf16");
  EXPECT_NE(s80.find("using T = cutlass::bfloat16_t;"), std::string::npos);
  EXPECT_NE(s80.find("using LayoutB = cutlass::layout::ColumnMajor;  // W [N, K]"), std::string::npos) << "W read as given";
  EXPECT_NE(s80.find("A.dtype != KFAB_BF16 || W.dtype != KFAB_BF16 || C.dtype != KFAB_BF16"), std::string::npos);
  EXPECT_NE(s80.find("kfab_sm80_half<KfabSimt>"), std::string::npos) << "a shape the tensor cores cannot take goes to SIMT";
  EXPECT_EQ(s80.find("KfabSm90HalfGemm"), std::string::npos);
  build("matmul_bf16", s80);
  if (hopper) {
    const std::string s90 = generate_gemm_cuda(*gp, grid.front(), "matmul_bf16");
    EXPECT_NE(s90.find("using KfabTile = KfabSm90HalfGemm<T, 128, 256, 64, 1, true, false, false, true>;"), std::string::npos)
        << s90.substr(0, 3000);
    EXPECT_NE(s90.find("kfab_sm90_half<KfabTile>(a, b, c, m32, n32, k32, static_cast<int>(batch), stream)"), std::string::npos);
    if (every) build("matmul_bf16_sm90", s90);
  }
  // fp16, B given as [K, N] (read N-major as it is, no pass writes it K-major)
  Task f16 = *task;
  for (auto& t : f16.inputs) t.dtype = DType::F16;
  f16.outputs[0].dtype = DType::F16;
  f16.inputs[1].shape = {"K", "N"};
  auto g16 = task_gemm(f16);
  ASSERT_TRUE(g16.has_value()) << g16.error().message;
  EXPECT_EQ(g16->dtype, DType::F16);
  EXPECT_FALSE(g16->trans_b);
  const std::string h = generate_gemm_cuda(*g16, gemm_cuda_grid(*g16).front(), "matmul_f16");
  EXPECT_NE(h.find("using T = cutlass::half_t;"), std::string::npos);
  EXPECT_NE(h.find("using LayoutB = cutlass::layout::RowMajor;  // B [K, N]"), std::string::npos);
  EXPECT_EQ(h.find("kfab_split_kn(", h.find("KFAB_EXPORT int kfab_run(")), std::string::npos) << "no pass over B";
  if (every) build("matmul_f16", h);
  // epilogues are f32-only: a bf16 product with a formula after it is refused, saying so
  Task epi = *task;
  epi.formula = "C = relu(acc)";
  auto refused = task_gemm(epi);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("plain product"), std::string::npos) << refused.error().message;
  // mixed operand types are refused
  Task mixed = *task;
  mixed.inputs[1].dtype = DType::F32;
  EXPECT_FALSE(task_gemm(mixed).has_value());
}

TEST_F(CudaBuild, ArchitectureComesFromTheDeviceOrDefaultsToHopper) {
  EXPECT_EQ(backend_.arch().rfind("sm_", 0), 0u);
}

// Each fixed-kernel header compiles on its own: tests/templates/NAME.cu with nvcc (it includes the header
// after what a generated candidate puts before it), or NAME.cpp (a host kernel for the cpu target) with the
// cpu target's compiler; its text between kfab:begin and kfab:end is what the generators splice in.
// The CUTLASS headers' units (sm90_tf32_gemm.cuh at its persistent scheduler, about 66 s of nvcc on 2 cores;
// sm90_half_gemm.cuh, about 50 s) are a test of their own in the slow tier CI leaves out (the Makefile's
// SLOW_TESTS); CI builds sm90_tf32_gemm.cuh in GemmEpiloguesCompile (its stream-K scheduler).
static bool slow_header_unit(const std::string& stem) { return stem == "sm90_tf32_gemm" || stem == "sm90_half_gemm"; }

static void build_template_headers(CudaBackend& backend, bool slow_unit) {
  const std::filesystem::path root(KFAB_SOURCE_DIR);
  CpuBackend cpu;
  int built = 0;
  for (const auto& h : std::filesystem::directory_iterator(root / "include/kfab/templates")) {
    const std::string name = h.path().filename().string(), stem = h.path().stem().string();
    if (slow_header_unit(stem) != slow_unit) continue;
    const auto cuda_unit = root / "tests/templates" / (stem + ".cu");
    const auto cpu_unit = root / "tests/templates" / (stem + ".cpp");
    const bool on_cpu = std::filesystem::exists(cpu_unit);
    ASSERT_TRUE(on_cpu || std::filesystem::exists(cuda_unit)) << name << " has no " << cuda_unit << " or " << cpu_unit;
    auto r = on_cpu ? cpu.build(cpu_unit) : backend.build(cuda_unit);
    ASSERT_TRUE(r.ok()) << name << "\n" << r.failure().message;
    auto text = read_file(h.path());
    ASSERT_TRUE(text.has_value());
    const std::string_view embedded = template_text(name);
    ASSERT_FALSE(embedded.empty()) << name << " is not embedded";
    EXPECT_NE(text->find(std::string(embedded)), std::string::npos) << name << ": the embedded text is not the header's";
    ++built;
  }
  if (slow_unit) EXPECT_EQ(built, 2) << "sm90_tf32_gemm.cuh or sm90_half_gemm.cuh is no longer a header";
  else EXPECT_GE(built, 6);
}

TEST_F(CudaBuild, TemplateHeadersCompileOnTheirOwn) { build_template_headers(backend_, false); }

TEST_F(CudaBuild, TheCutlassHeadersCompileOnTheirOwn) { build_template_headers(backend_, true); }

// A plan of several programs (tuner/plan.h) is one source: each stage's kernels in a namespace of their
// own, the #include lines first, buffers between the stages. The traced plans of KernelBench's level2_45
// (two Linears) and level2_75 (a Linear and a GroupNorm, a row minimum, a broadcast into [1, N, M, 1])
// build at a point without tensor cores, and at the first (tensor-core) point where asked
// (KFAB_BUILD_EVERY_TC_POINT).
TEST_F(CudaBuild, PlansOfSeveralProgramsBuildAsOneSource) {
  const bool every = std::getenv("KFAB_BUILD_EVERY_TC_POINT") != nullptr;
  const Printer* printer = printer_for("cuda");
  ASSERT_NE(printer, nullptr);
  int built = 0;
  for (const char* name : {"two_linears_logsumexp", "linear_groupnorm_min_bias"}) {
    auto text = read_file(std::filesystem::path(KFAB_TEST_FIXTURES) / "plans" / (std::string(name) + ".json"));
    ASSERT_TRUE(text.has_value()) << name;
    auto plan = parse_plan(nlohmann::json::parse(*text), "cuda");
    ASSERT_TRUE(plan.has_value()) << name << ": " << plan.error().message;
    const auto grid = plan_grid(*printer, *plan);
    ASSERT_FALSE(grid.empty());
    std::vector<TemplateParams> points;
    const auto simt = std::find_if(grid.begin(), grid.end(), [](const TemplateParams& p) {
      return std::none_of(p.begin(), p.end(), [](const auto& kv) { return kv.first.find(".mma") != std::string::npos; });
    });
    ASSERT_NE(simt, grid.end()) << name << ": every point has a tensor-core stage";
    points.push_back(*simt);
    if (every) points.push_back(grid.front());
    // CUTLASS's headers (a tensor-core stage) come after NDEBUG's definition, which leads the file
    const std::string first = generate_plan(*printer, *plan, grid.front(), name);
    if (first.find("cutlass/") != std::string::npos) {
      EXPECT_LT(first.find("#define NDEBUG"), first.find("#include")) << first.substr(0, 1500);
      EXPECT_EQ(first.find("#define NDEBUG"), first.rfind("#define NDEBUG")) << "defined once";
    }
    for (const auto& point : points) {
      const std::string src = generate_plan(*printer, *plan, point, name);
      // one kfab_run, the stages' own renamed
      size_t runs = 0;
      for (size_t at = src.find("KFAB_EXPORT int kfab_run("); at != std::string::npos; at = src.find("KFAB_EXPORT int kfab_run(", at + 1)) ++runs;
      EXPECT_EQ(runs, 1u) << src.substr(0, 2000);
      for (size_t k = 0; k < plan->stages.size(); ++k)
        EXPECT_NE(src.find(fmt::format("kfab_plan{}::run(args_in", k)), std::string::npos) << name << " stage " << k;
      const auto f = scratch() / fmt::format("plan_{}_{}.cu", name, built);
      ASSERT_TRUE(write_file_atomic(f, src).has_value());
      auto r = backend_.build(f);
      ASSERT_TRUE(r.ok()) << name << " at " << format_params(point) << "\n" << r.failure().message.substr(0, 4000);
      ++built;
    }
  }
  EXPECT_EQ(built, every ? 4 : 2);
}

}  // namespace kfab::test
