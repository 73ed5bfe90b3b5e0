// KernelBench-format tasks on the GPU through the Python worker (label gpu): Triton and CUDA
// candidates against torch eager and torch.compile, the own-kernel check, and an exported ModelNew.
#include <gtest/gtest.h>

#include <array>

#include "backends/cuda/cuda_backend.h"
#include "core/paths.h"
#include "../integration/harness.h"

namespace kfab::test {

class KbGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    CudaBackend cuda;
    if (cuda.probe() == 0) GTEST_SKIP() << "no GPU here: " << cuda.describe();
    auto r = run_command({python_interpreter(), "-c", "import torch, triton; assert torch.cuda.is_available()"}, 120.0);
    if (!r || !r->status.ok()) GTEST_SKIP() << python_interpreter() << " lacks torch with CUDA, or triton";
  }
  const std::string task_ = std::string(KFAB_SOURCE_DIR) + "/tasks/kb/rms_norm.py";
  const std::string cands_ = std::string(KFAB_SOURCE_DIR) + "/tasks/kb/candidates/rms_norm/";
};

TEST_F(KbGpu, TritonAndCudaCandidatesPassAgainstEagerAndCompile) {
  for (const auto& [file, dsl] : {std::pair{"rowwise_triton.py", "triton"}, std::pair{"rowwise.cu", "cuda"}}) {
    CliResult r = kfab_cli({"eval", task_, cands_ + file, "--target", "cuda", "--json"}, 1200);
    ASSERT_EQ(r.status.code, 0) << file << "\n" << r.out << r.err;
    nlohmann::json j = r.json();
    EXPECT_EQ(j["dsl"], dsl);
    EXPECT_EQ(j["disposition"], "passed") << j["detail"];
    EXPECT_GT(j["speedup"].get<double>(), 0.0);
    EXPECT_GT(j["speedup_vs_compile"].get<double>(), 0.0);
    EXPECT_EQ(j["shapes"][0]["shape"]["batch_size"], 8192);  // KFAB_GPU's shape
    // the problem's footprint at that shape, and the device memory each worker took
    EXPECT_EQ(j["problem_bytes"]["inputs"], 8192 * 4096 * 4) << j.dump();
    // the file states no cost: its share of the copy bandwidth rests on the bytes it must move at the least
    const nlohmann::json& pb = j["problem_bytes"];
    EXPECT_EQ(j["shapes"][0]["least_bytes"].get<double>(),
              pb["inputs"].get<double>() + pb["weights"].get<double>() + pb["outputs"].get<double>()) << j["shapes"][0].dump();
    EXPECT_GT(j["shapes"][0]["percent_of_copy_bandwidth"].get<double>(), 1.0) << j["shapes"][0].dump();
    ASSERT_TRUE(j.contains("device_memory")) << j.dump();
    EXPECT_GE(j["device_memory"]["trusted_worker"]["peak_reserved"].get<double>(), 2.0 * 8192 * 4096 * 4) << j["device_memory"];
    EXPECT_GE(j["device_memory"]["candidate_worker"]["peak_reserved"].get<double>(), 2.0 * 8192 * 4096 * 4) << j["device_memory"];
    EXPECT_GT(j["device_memory"]["device_total"].get<double>(), j["device_memory"]["peak_bytes"].get<double>());
    // the clocks while it was timed (NVML, recorded, never set)
    const nlohmann::json& clocks = j["shapes"][0]["clocks"];
    ASSERT_TRUE(clocks.is_object()) << j["shapes"][0].dump();
    if (clocks.value("recorded", false)) {
      EXPECT_GT(clocks["sm_mhz_min"].get<int>(), 0) << clocks;
      EXPECT_GE(clocks["sm_mhz_max"].get<int>(), clocks["sm_mhz_min"].get<int>()) << clocks;
      EXPECT_GE(clocks["samples"].get<int>(), 2) << clocks;
    }
    std::cout << file << ": clocks " << clocks.dump() << "\n";
    // the timer's launch evidence: a hold kernel was there, and each function's host time to issue a call
    const nlohmann::json& launch = j["shapes"][0]["launch"];
    ASSERT_TRUE(launch.is_object()) << j["shapes"][0].dump();
    EXPECT_EQ(launch["timer_version"], 2) << launch;
    EXPECT_GT(launch["hold_ms"].get<double>(), 0.0) << launch;
    EXPECT_GT(launch["host_ms"]["candidate"].get<double>(), 0.0) << launch;
    EXPECT_EQ(launch["calls"]["candidate"], j["shapes"][0]["time_ms"]["n"]) << launch;
    std::cout << file << ": launch " << launch.dump() << "\n";
    std::cout << file << ": " << j["detail"].get<std::string>() << "\n";
  }
}

// The hold kernel hides the host's launch latency from the events; work done on the host in the call is
// still the candidate's: a call that busy-waits 1 ms before its launch takes at least 1 ms.
TEST_F(KbGpu, HostWorkBehindTheHoldKernelIsCounted) {
  CliResult r = kfab_cli({"eval", task_, fixture("kb/candidates/slow_host.cu"), "--target", "cuda", "--json", "--no-compile"}, 600);
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  nlohmann::json j = r.json();
  ASSERT_EQ(j["disposition"], "passed") << j["detail"];
  const nlohmann::json& s = j["shapes"][0];
  EXPECT_GE(s["time_ms"]["min"].get<double>(), 1.0) << s.dump();
  EXPECT_GE(s["launch"]["host_ms"]["candidate"].get<double>(), 1.0) << s["launch"];
  std::cout << "slow_host.cu: " << s["time_ms"].dump() << " launch " << s["launch"].dump() << "\n";
}

TEST_F(KbGpu, ACandidateMadeOfTorchKernelsIsRejected) {
  CliResult r = kfab_cli({"eval", task_, fixture("kb/candidates/plain_torch.py"), "--target", "cuda", "--json", "--no-compile"}, 600);
  EXPECT_EQ(r.status.code, 1) << r.out << r.err;
  nlohmann::json j = r.json();
  EXPECT_EQ(j["disposition"], "rejected") << j["detail"];
  EXPECT_NE(j["detail"].get<std::string>().find("own kernels take"), std::string::npos) << j["detail"];
}

// The adversarial classes of the Python worker that need a GPU (issue 8): work left on a side stream
// is counted (40 launches on a stream of its own take some 40 times the honest candidate's time, not
// the nothing the events on torch's stream see), and a replaced torch.cuda.Event.elapsed_time is
// rejected.
TEST_F(KbGpu, PythonCheatsOfTheGpuTimerGetTheirVerdicts) {
  auto eval = [&](const std::string& file) {
    CliResult r = kfab_cli({"eval", task_, file, "--target", "cuda", "--json", "--no-compile"}, 900);
    EXPECT_TRUE(r.status.exited) << file << ": " << r.status.describe();
    return r;
  };
  CliResult honest = eval(cands_ + "rowwise_triton.py");
  ASSERT_EQ(honest.status.code, 0) << honest.out << honest.err;
  const double t = honest.json()["shapes"][0]["time_ms"]["median"].get<double>();

  CliResult side = eval(fixture("kb/candidates/side_stream_triton.py"));
  ASSERT_EQ(side.status.code, 0) << side.out << side.err;
  const nlohmann::json s = side.json()["shapes"][0];
  EXPECT_GE(s["time_ms"]["median"].get<double>(), 20.0 * t) << "side-stream work escaped the timer: " << s.dump();
  std::cout << "honest " << t << " ms; side stream x40 " << s["time_ms"]["median"] << " ms (" << s.value("timer", "") << ")\n";

  CliResult patched = eval(fixture("kb/candidates/patches_event.py"));
  EXPECT_EQ(patched.status.code, 1) << patched.out << patched.err;
  EXPECT_EQ(patched.json().value("disposition", ""), "rejected") << patched.out;
  EXPECT_NE(patched.json().value("detail", "").find("Event.elapsed_time"), std::string::npos) << patched.out;
}

TEST_F(KbGpu, ExportedModelNewOfTheTritonCandidatePassesAllclose) {
  const auto out = scratch() / "modelnew_triton.py";
  CliResult r = kfab_cli({"export", cands_ + "rowwise_triton.py", "--task", task_, "--modelnew", out.string()});
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  auto check = run_command({python_interpreter(), std::string(KFAB_SOURCE_DIR) + "/bench/modelnew_allclose.py", task_,
                            out.string(), "--device", "cuda"},
                           600.0);
  ASSERT_TRUE(check.has_value());
  EXPECT_TRUE(check->status.ok()) << check->output;
  std::cout << check->output;
}

// A Linear whose output is only summed over its features (KernelBench's Gemm_Divide_Sum_Scaling, here
// with a bias): the tuner's first cuda point never forms the product (the weight's column sums, then a
// matrix-vector product, in double). At KernelBench's size the row sums cancel, and torch eager's fp32
// answer (cuBLAS) may itself be outside the tolerance of the Model run in float64 at a few values: on 4
// H100s (2026-11-27) level2_14 and 18 failed so (eager outside at 103 and 2 of 5120 values, the fold at
// none), and this test failed too. The float64 judge (kfab's default) decides such values since: the fold
// passes every seed and the held-out shape.
TEST_F(KbGpu, TheTunerFoldsARowSumOfTheProductAndItPasses) {
  const std::string task = std::string(KFAB_SOURCE_DIR) + "/tasks/kb/l2_linear_divide_sum_scale.py";
  CliResult r = kfab_cli({"optimize", task, "--target", "cuda", "--fresh", "--points", "1", "--json", "--quiet", "--out",
                          (scratch() / "kb-fold").string()},
                         900);
  ASSERT_TRUE(r.status.exited) << r.status.describe() << r.err;
  nlohmann::json j = r.json();
  ASSERT_TRUE(j.contains("points") && j["points"].size() == 1u) << r.out << r.err;
  const nlohmann::json& point = j["points"][0];
  EXPECT_EQ(j["tuner"]["template"], "cuda_gemm_epilogue");
  EXPECT_EQ(point["params"].value("fold", ""), "rowsum") << point.dump();
  // eager's own fp32 rounding may be outside the tolerance of the float64 answer (4 H100s, 2026-11-27: 4 of
  // 2048 values, the fold at none): the float64 judge decides those values, and the fold passes
  EXPECT_EQ(point["disposition"], "passed") << point.dump();
  const nlohmann::json& final_check = j.contains("verdict") && j["verdict"].is_object() ? j["verdict"] : j["best"];
  EXPECT_EQ(final_check.value("disposition", ""), "passed") << final_check.dump();
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  ASSERT_TRUE(found_correct(r)) << r.out << r.err;
  EXPECT_EQ(j["best"]["disposition"], "passed") << j.dump(2);
  EXPECT_EQ(j["tuner"]["params"].value("fold", ""), "rowsum") << j["tuner"].dump();
  EXPECT_EQ(j["best"]["precision"], "fp32");
  int heldout = 0;
  for (const auto& s : j["verdict"]["shapes"]) heldout += s.value("heldout", false) && s.value("correct", false);
  EXPECT_EQ(heldout, 1) << j["verdict"].dump(2);
}

// Issue 25: the pooling template's first points pass on the GPU where each takes another path: 1-D
// windows a staged tile and a sliding window in registers; maxima at stride 1 along W over 2-D and 3-D
// windows separably (sep, 8 and 4 rows; its rows' outputs stored through shared memory, rows of 65, 67 and
// 127 outputs); an average's rows reused down the column. Rows are read a float at a time (odd lengths) or a
// float4 at a time from a lead of 0 or 3 (the padding); a maximum (dilated), an average (whose windows at the
// edges divide by their own counts), and maxima over inputs that hold NaN. At these small sizes torch eager
// is faster (kfab optimize exits 4: correct, not faster), which is not what this checks.
struct PoolCase {
  const char* name;
  const char* module;
  const char* input;
  int points;                // the grid's first points run
  std::array<int, 6> kinds;  // how many of them are sliding windows, sep, pack, vec, march and the separable march
  const char* nans = "";     // where the input holds NaN (torch's max pooling: a NaN wins)
};

static void run_pool_cases(const std::vector<PoolCase>& cases) {
  for (const PoolCase& c : cases) {
    const auto file = scratch() / (std::string("pool_") + c.name + ".py");
    ASSERT_TRUE(write_file_atomic(file, std::string("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                                                    "    def __init__(self):\n        super().__init__()\n        self.pool = ") +
                                            c.module + "\n\n    def forward(self, x):\n        return self.pool(x)\n\n\n"
                                            "def get_inputs():\n    x = torch.randn(" + c.input + ")\n" +
                                            (*c.nans ? std::string("    ") + c.nans + " = float('nan')\n" : std::string()) + "    return [x]\n\n\n"
                                            "def get_init_inputs():\n    return []\n")
                    .has_value());
    CliResult r = kfab_cli({"optimize", file.string(), "--target", "cuda", "--fresh", "--points", std::to_string(c.points), "--json", "--quiet",
                            "--no-compile", "--out", (scratch() / (std::string("pool-") + c.name)).string()},
                           600);
    ASSERT_TRUE(r.status.exited) << c.name << ": " << r.status.describe() << r.err;
    nlohmann::json j = r.json();
    EXPECT_EQ(j["tuner"].value("template", ""), "cuda_pool") << c.name << "\n" << r.out;
    ASSERT_TRUE(j.contains("points") && j["points"].size() == static_cast<size_t>(c.points)) << c.name << "\n" << r.out << r.err;
    std::array<int, 6> kinds = {0, 0, 0, 0, 0, 0};
    for (const auto& point : j["points"]) {
      EXPECT_EQ(point["disposition"], "passed") << c.name << " " << point.dump();
      int k = 0;
      for (const char* key : {"slide", "sep", "pack", "vec", "march"}) kinds[k++] += point["params"].value(key, "") == "1";
      kinds[5] += point["params"].contains("tcols");
    }
    EXPECT_EQ(kinds, c.kinds) << c.name << " (sliding, sep, pack, vec, march, separable march)\n" << j["points"].dump(2);
    EXPECT_TRUE(r.status.code == 0 || r.status.code == 4) << c.name << "\n" << r.out << r.err;
  }
}

TEST_F(KbGpu, ThePoolingTemplatesPointsPass) {
  run_pool_cases({
      {"max1d_odd", "nn.MaxPool1d(kernel_size=8, stride=1, padding=4, dilation=3)", "4, 8, 4099", 2, {1, 0, 0, 0, 0, 0}},
      {"max1d_lead3", "nn.MaxPool1d(kernel_size=8, stride=1, padding=1, dilation=3)", "4, 8, 4096", 2, {1, 0, 0, 0, 0, 0}},
      {"avg1d", "nn.AvgPool1d(kernel_size=8, stride=1, padding=4)", "4, 8, 8192", 2, {1, 0, 0, 0, 0, 0}},
      {"max2d_lead3", "nn.MaxPool2d(kernel_size=4, stride=1, padding=1)", "2, 4, 64, 68", 2, {0, 2, 0, 0, 0, 0}},
      {"max2d_odd", "nn.MaxPool2d(kernel_size=4, stride=1, padding=1)", "2, 4, 61, 66", 2, {0, 2, 0, 0, 0, 0}},
      {"max2d_nan", "nn.MaxPool2d(kernel_size=4, stride=1, padding=1)", "2, 4, 64, 68", 2, {0, 2, 0, 0, 0, 0}, "x[..., ::9, ::7]"},
      {"max1d_nan", "nn.MaxPool1d(kernel_size=8, stride=1, padding=4, dilation=3)", "4, 8, 4099", 2, {1, 0, 0, 0, 0, 0}, "x[..., ::29]"},
      {"max2d_g32", "nn.MaxPool2d(kernel_size=4, stride=1, padding=1)", "2, 2, 20, 128", 2, {0, 2, 0, 0, 0, 0}},
      {"avg2d_odd", "nn.AvgPool2d(kernel_size=4, stride=1, padding=1)", "2, 4, 61, 66", 2, {0, 0, 0, 0, 0, 0}},
  });
}

// 3-D windows: at stride 1 sep first; at stride 2 a block's outputs for every od in turn, each input plane
// staged once in a ring in shared memory (march: separable, 2 x 2, 2 x 2, 1 x 2 and 1 x 2 outputs a thread on
// 4, 8, 2 and 4 rows, blocks of 12, 16 and 14 columns for rows of 11, 15 and 14 outputs, after the rest for the
// dilated maxima; an output a thread, 8 and 4 rows, then 4 rows with two ods' planes in flight;
// rows read by cp.async a float4 at a time or a float at a time; a band of rows and a row's second stretch
// cut short), then whole output rows a block
// (pack, 128 and 256 threads; rows of 11, 14, 15 and 16 outputs), then 4 consecutive outputs a slot (vec:
// rows read a float4 at a time where they are whole float4, else output by output; stored a float4 at a
// time where the output rows are whole float4, rows of 16).
TEST_F(KbGpu, ThePooling3dTemplatesPointsPass) {
  run_pool_cases({
      {"max3d", "nn.MaxPool3d(kernel_size=3, stride=1, padding=1)", "2, 3, 10, 12, 20", 2, {0, 2, 0, 0, 0, 0}},
      {"max3d_s2", "nn.MaxPool3d(kernel_size=3, stride=2, padding=1, dilation=3)", "2, 3, 20, 22, 26", 11, {0, 0, 4, 2, 7, 4}},
      {"avg3d_s2", "nn.AvgPool3d(kernel_size=3, stride=2, padding=1)", "2, 3, 16, 18, 30", 11, {0, 0, 4, 2, 7, 4}},
      {"avg3d_s2_v4", "nn.AvgPool3d(kernel_size=3, stride=2, padding=1)", "2, 3, 16, 18, 32", 11, {0, 0, 4, 2, 7, 4}},
      {"max3d_s2_v4", "nn.MaxPool3d(kernel_size=3, stride=2, padding=1, dilation=3)", "2, 3, 20, 22, 32", 11, {0, 0, 4, 2, 7, 4}},
      {"avg3d_s2_wide", "nn.AvgPool3d(kernel_size=3, stride=2, padding=1)", "2, 2, 9, 10, 300", 7, {0, 0, 0, 0, 7, 4}},
  });
}

}  // namespace kfab::test
