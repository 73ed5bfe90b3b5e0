// The cuda target end to end; skips itself where there is no GPU (label gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <regex>

#include "backends/cuda/cuda_backend.h"
#include "core/hash.h"
#include "core/task.h"
#include "eval/evaluator.h"
#include "tuner/fused.h"
#include "tuner/templates.h"
#include "../integration/harness.h"

namespace kfab::test {

class CudaEval : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("KFAB_RUNNER", KFAB_RUNNER_BINARY, 1);
    ::setenv("KFAB_CACHE_DIR", (std::string(KFAB_BINARY) + ".test-cache").c_str(), 1);
    if (backend_.probe() == 0) GTEST_SKIP() << "no GPU here: " << backend_.describe();
  }
  CudaBackend backend_;
};

TEST_F(CudaEval, CorrectCandidatePassesAndIsTimedWithEvents) {
  CliResult r = kfab_cli({"eval", fixture("tasks/affine"), fixture("tasks/affine/candidates/good.cu"), "--json"});
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  nlohmann::json j = r.json();
  EXPECT_EQ(j["target"], "cuda");
  EXPECT_EQ(j["disposition"], "passed");
  for (const auto& s : j["shapes"]) {
    if (s["heldout"].get<bool>()) continue;
    EXPECT_GE(s["time_ms"]["n"].get<int>(), 50);
    // A kernel of a few microseconds is recorded once as a CUDA graph and replayed.
    ASSERT_TRUE(s.contains("replay")) << s.dump(2);
    EXPECT_TRUE(s["replay"].value("used", false)) << s["replay"].dump();
  }
}

// Affine kernels written to one file: the kernel, then a body that makes kfab_run unrecordable.
std::string affine_with(const std::string& body) {
  return R"(#include <cuda_runtime.h>
#include "kfab/candidate.h"
__global__ void k(const float* x, float* y, long n) { long i = blockIdx.x * 256L + threadIdx.x; if (i < n) y[i] = 2.0f * x[i] + 1.0f; }
KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* s) {
  long n = in[0].shape[0] * in[0].shape[1];
  const float* x = (const float*)in[0].data;
  float* y = (float*)out[0].data;
)" + body + "\n  return 0;\n}\n";
}

TEST_F(CudaEval, ACallThatSynchronizesIsTimedDirectlyAndPasses) {
  const auto f = scratch() / "syncs.cu";
  ASSERT_TRUE(write_file_atomic(f, affine_with(R"(  k<<<(n + 255) / 256, 256, 0, (cudaStream_t)s>>>(x, y, n);
  cudaStreamSynchronize((cudaStream_t)s);)")).has_value());
  CliResult r = kfab_cli({"eval", fixture("tasks/affine"), f.string(), "--json"});
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  for (const auto& s : r.json()["shapes"]) {
    if (s["heldout"].get<bool>()) continue;
    EXPECT_FALSE(s["replay"].value("used", true)) << s["replay"].dump();
    EXPECT_NE(s["replay"].value("why", "").find("launched directly"), std::string::npos) << s["replay"].dump();
  }
}

TEST_F(CudaEval, WorkOnASideStreamIsNotReplayed) {
  const auto f = scratch() / "side.cu";
  ASSERT_TRUE(write_file_atomic(f, affine_with(R"(  static cudaStream_t side = [] { cudaStream_t t; cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking); return t; }();
  k<<<(n + 255) / 256, 256, 0, side>>>(x, y, n);
  cudaStreamSynchronize(side);)")).has_value());
  CliResult r = kfab_cli({"eval", fixture("tasks/affine"), f.string(), "--json"});
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  for (const auto& s : r.json()["shapes"]) {
    if (s["heldout"].get<bool>()) continue;
    // Recorded, the kernel on the side stream is not in the graph: a replay leaves the outputs
    // poisoned, so the call is launched directly.
    EXPECT_FALSE(s["replay"].value("used", true)) << s["replay"].dump();
  }
}

TEST_F(CudaEval, OutOfBoundsWriteCrashesNamingTheErrorAndTheNextCandidateRuns) {
  auto task = open_task(fixture("tasks/affine"));
  ASSERT_TRUE(task.has_value());
  EvalOptions opt;
  opt.min_time_s = 0.05;
  Evaluator ev(*task, "cuda", opt);
  auto bad = ev.evaluate(fixture("broken/oob_write.cu"));
  ASSERT_TRUE(bad.has_value()) << bad.error().to_string();
  EXPECT_EQ(bad->disposition, Disposition::Crashed);
  EXPECT_NE(bad->detail.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << bad->detail;
  auto good = ev.evaluate(fixture("tasks/affine/candidates/good.cu"));
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->disposition, Disposition::Passed) << good->detail;
}

TEST_F(CudaEval, ProfileReportsNcuMetricsPerKernel) {
  CliResult r = kfab_cli({"eval", fixture("tasks/affine"), fixture("tasks/affine/candidates/good.cu"), "--json", "--profile"});
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  nlohmann::json j = r.json();
  ASSERT_TRUE(j.contains("profile")) << j.dump(2);
  ASSERT_TRUE(j["profile"].contains("kernels")) << j["profile"].dump(2);
  bool found = false;
  for (const auto& [name, k] : j["profile"]["kernels"].items()) {
    found = found || name.find("affine") != std::string::npos;
    EXPECT_GT(k.value("duration_ns", 0.0), 0.0) << name;
    EXPECT_TRUE(k.contains("registers_per_thread")) << k.dump();
  }
  EXPECT_TRUE(found) << j["profile"].dump(2);
}

TEST_F(CudaEval, BundledSoftmaxPasses) {
  CliResult r = kfab_cli({"eval", "tasks/core/softmax", "tasks/core/softmax/candidates/block_softmax.cu", "--json"});
  EXPECT_EQ(r.status.code, 0) << r.out << r.err;
  EXPECT_EQ(r.json().value("disposition", ""), "passed");
}

// A bundled row task (tasks/core/<task>) at other shapes (`shapes`: its [shapes] table, and what else
// stood between it and [reference]), evaluated with its fused row program generated at the first point
// of the grid for rows of n that `wanted` accepts (with `extra`'s parameters set on it): it passes.
static void row_task_passes_at(const std::string& task_name, const std::string& name, const std::string& shapes, int64_t n,
                               const std::function<bool(const TemplateParams&)>& wanted, const TemplateParams& extra = {},
                               CliResult* got = nullptr) {
  namespace fs = std::filesystem;
  const fs::path task = scratch() / name;
  fs::remove_all(task);
  fs::copy(fs::path(KFAB_SOURCE_DIR) / "tasks/core" / task_name, task, fs::copy_options::recursive);
  auto text = read_file(task / "task.toml");
  ASSERT_TRUE(text.has_value());
  std::string toml = std::regex_replace(*text, std::regex(R"(\[shapes\][\s\S]*?\[reference\])"), "[shapes]\n" + shapes + "\n[reference]");
  ASSERT_NE(toml, *text);
  ASSERT_TRUE(write_file_atomic(task / "task.toml", toml).has_value());
  auto t = load_task(task);
  ASSERT_TRUE(t.has_value()) << t.error().message;
  auto p = task_program(*t);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  const auto grid = fused_grid(*p, n);
  const auto point = std::find_if(grid.begin(), grid.end(), wanted);
  ASSERT_NE(point, grid.end()) << name;
  TemplateParams q = *point;
  for (const auto& [k, v] : extra) q[k] = v;
  const auto f = scratch() / (name + ".cu");
  ASSERT_TRUE(write_file_atomic(f, generate_fused_cuda(*p, q, task_name)).has_value());
  CliResult r = kfab_cli({"eval", task.string(), f.string(), "--json"});
  EXPECT_EQ(r.status.code, 0) << format_params(q) << "\n" << r.out << r.err;
  EXPECT_EQ(r.json().value("disposition", ""), "passed") << format_params(q) << "\n" << r.out;
  if (got != nullptr) *got = r;
}

// Issue 25: the tuner's row kernel with each row split over a cluster of blocks (rows longer than a
// block holds) passes on rows of 393216 (float4, 16 blocks a row), 65535 and 100001 (a float at a time),
// and on short rows, which the same candidate takes a block or a warp a row. Again with the rows whose
// length is not a multiple of 4 read a float4 at a time from the 16-byte boundary before them (shift):
// 40 rows of 65535 start at each of the 4 places in a float4; the last row's last float4 would reach past
// the tensor; a part may hold one vector more than IT.
TEST_F(CudaEval, ARowSplitOverAClusterPasses) {
  const std::string shapes =
      "tune = [ { M = 64, N = 393216 }, { M = 40, N = 65535 } ]\n"
      "heldout = [ { M = 3, N = 100001 }, { M = 100, N = 1000 } ]\n";
  row_task_passes_at("softmax", "softmax_long", shapes, 393216, [](const TemplateParams& q) { return q.count("cluster") > 0; });
  row_task_passes_at("softmax", "softmax_long_shift", shapes, 65535, [](const TemplateParams& q) { return q.count("shift") > 0; });
}

// Issue 25: rows longer than a cluster holds (4M floats, level1/40's layer norm's length) split over a
// group of the grid's blocks pass, and a row read a float at a time (too long for the split's groups
// then: streamed) and short rows still pass with the same file: a softmax's maximum and sum met apart and
// at once (defer); a softmax and a layer norm (mean and squared deviations at once) with each block's part
// of its next row copied into shared memory during the meeting (prefetch; 5 rows: 4 turns take theirs); a
// softmax whose outputs read exp(x - the block's maximum) kept in x's registers, rescaled (reuse); a layer
// norm whose weight's part each block keeps in shared memory for the whole run (colsm).
TEST_F(CudaEval, ARowSplitOverTheGridPasses) {
  const std::string shapes =
      "tune = [ { M = 5, N = 4194304 } ]\n"
      "heldout = [ { M = 2, N = 4194303 }, { M = 100, N = 1000 } ]\n";
  row_task_passes_at("softmax", "softmax_very_long", shapes, 4194304, [](const TemplateParams& q) { return q.count("split") && !q.count("defer"); });
  const auto prefetching = [](const TemplateParams& q) { return q.count("prefetch") > 0; };
  row_task_passes_at("softmax", "softmax_very_long_defer", shapes, 4194304, [](const TemplateParams& q) { return q.count("defer") > 0; });
  row_task_passes_at("softmax", "softmax_very_long_prefetch", shapes, 4194304, prefetching);
  row_task_passes_at("softmax", "softmax_very_long_reuse", shapes, 4194304, [](const TemplateParams& q) { return q.count("reuse") > 0; });
  row_task_passes_at("layer_norm", "layer_norm_very_long_prefetch", shapes + "\n[op_params]\neps = 1e-5\n", 4194304, prefetching);
  row_task_passes_at("layer_norm", "layer_norm_very_long_colsm", shapes + "\n[op_params]\neps = 1e-5\n", 4194304,
                     [](const TemplateParams& q) { return q.count("colsm") > 0; });
}

// Issue 25: rows in tiles read twice, the second time from L2 (l2: a grid of resident blocks taking tickets,
// a tile's second pass waiting for its row's first passes) pass: a softmax (maximum and sum made at once) and a
// layer norm (mean and squared deviations) over rows of 4M floats (256 tiles a row), 393216 and 40000 (2000
// rows of 3 tiles: tiles of many rows in flight at once), a float at a time (4194303) and short rows with the
// same file; an RMS norm's one row reduction (made from its tiles' shares alone) likewise.
TEST_F(CudaEval, RowsReadTwiceInTilesPass) {
  const std::string shapes =
      "tune = [ { M = 5, N = 4194304 }, { M = 2000, N = 40000 } ]\n"
      "heldout = [ { M = 2, N = 4194303 }, { M = 64, N = 393216 }, { M = 100, N = 1000 } ]\n";
  const auto l2 = [](const char* items) { return [items](const TemplateParams& q) { return q.count("l2") && !q.count("ring") && q.at("items") == items; }; };
  row_task_passes_at("softmax", "softmax_l2", shapes, 4194304, l2("16"));
  row_task_passes_at("softmax", "softmax_l2_8", shapes, 4194304, l2("8"));
  const std::string eps = "\n[op_params]\neps = 1e-5\n";
  row_task_passes_at("layer_norm", "layer_norm_l2", shapes + eps, 4194304, l2("16"));
  row_task_passes_at("rms_norm", "rms_norm_l2", shapes + "\n[op_params]\neps = 1e-6\n", 4194304, [](const TemplateParams& q) { return q.count("split") > 0; }, {{"l2", "1"}});
}

// Issue 25: rows in tiles kept in a ring of shared-memory slots (ring: each read once by the bulk copy; a
// tile's outputs written L of the block's tiles after its shares) pass: a softmax with tiles of 16 float4 a
// thread (64 rows of 393216: 24 tiles a row; 2000 of 40000: 3 tiles, the last shorter; one block an SM) and
// of 8 (three slots, two blocks an SM; 5 rows of 4M floats: 512 tiles a row, a lag of 4 and six slots, one
// block an SM, on 132 SMs), a layer norm with tiles of 8; rows a float at a time (4194303: not float4,
// streamed) and short rows with the same file.
TEST_F(CudaEval, RowsInTilesInSharedMemoryPass) {
  const std::string shapes =
      "tune = [ { M = 64, N = 393216 }, { M = 2000, N = 40000 } ]\n"
      "heldout = [ { M = 5, N = 4194304 }, { M = 2, N = 4194303 }, { M = 100, N = 1000 } ]\n";
  const auto ring = [](const char* items) { return [items](const TemplateParams& q) { return q.count("ring") && q.at("items") == items; }; };
  row_task_passes_at("softmax", "softmax_ring", shapes, 393216, ring("16"));
  row_task_passes_at("softmax", "softmax_ring_8", shapes, 393216, ring("8"));
  row_task_passes_at("layer_norm", "layer_norm_ring_8", shapes + "\n[op_params]\neps = 1e-5\n", 393216, ring("8"));
}

// The ring kernel's calls replayed as a CUDA graph (kfab's timing replays calls under 100 us): its share
// words are zeroed on the stream each call. Until session 29 they were stamped with a count of calls kept
// on the host, which a replay does not advance, and a tile's second pass could take the share the replay
// before had left for its row: on an H200 layer norm's 64 x 393216 failed the timed calls' checks in 12 of
// 12 evaluations (off by up to 8e-5), and passed 3 of 3 with the words zeroed each call. Skipped where the
// call takes 100 us or more (not replayed, so not what this checks).
TEST_F(CudaEval, RowsInTilesInSharedMemoryPassWhenReplayedAsAGraph) {
  const std::string shapes = "tune = [ { M = 32, N = 393216 } ]\nheldout = [ { M = 100, N = 1000 } ]\n\n[op_params]\neps = 1e-5\n";
  CliResult r;
  row_task_passes_at("layer_norm", "layer_norm_ring_replayed", shapes, 393216,
                     [](const TemplateParams& q) { return q.count("ring") && q.at("items") == "8"; }, {}, &r);
  const nlohmann::json first = r.json().value("shapes", nlohmann::json::array());
  ASSERT_FALSE(first.empty()) << r.out;
  if (!first[0].value("replay", nlohmann::json::object()).value("used", false)) GTEST_SKIP() << "not replayed here: " << first[0].value("replay", nlohmann::json::object()).dump();
}

TEST_F(CudaEval, WrongResultOnTheGpuIsIncorrect) {
  const auto f = scratch() / "wrong.cu";
  ASSERT_TRUE(write_file_atomic(f, R"(#include <cuda_runtime.h>
#include "kfab/candidate.h"
__global__ void k(const float* x, float* y, long n) { long i = blockIdx.x * 256L + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }
KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t, kfab_tensor* out, int32_t, void* s) {
  long n = in[0].shape[0] * in[0].shape[1];
  k<<<(n + 255) / 256, 256, 0, (cudaStream_t)s>>>((const float*)in[0].data, (float*)out[0].data, n);
  return 0;
})").has_value());
  CliResult r = kfab_cli({"eval", fixture("tasks/affine"), f.string(), "--json"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_EQ(r.json().value("disposition", ""), "incorrect");
}

}  // namespace kfab::test
