#pragma once
/// The evaluation protocol of DESIGN.md section 3 for one candidate: build, verify on every shape
/// (seeds x tuning and held-out shapes), time against the baselines, check the roofline bound; for
/// native tasks and KernelBench-format files alike (eval/harness.h).

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/task.h"
#include "eval/harness.h"
#include "eval/verdict.h"
#include "runner/runner_client.h"

namespace kfab {

struct EvalOptions {
  int seeds = 5;
  uint64_t base_seed = 0x6b666162;  ///< "kfab"
  bool heldout = true;              ///< verify held-out shapes too
  bool time = true;
  int min_calls = 0;  ///< 0: the target's default (cpu 50, cuda 100)
  double min_time_s = -1.0;  ///< < 0: the target's default (cpu 0.5 s, device targets 0.1 s)
  int max_calls = 10000;
  double max_time_s = 30.0;
  int warmup = 0;  ///< 0: the target's default (cpu 3, cuda 10)
  /// A shape whose timing is noisy (eval/noise.h) is timed once more, and the quieter timing kept.
  bool remeasure = true;
  RunnerOptions runner;
  /// Profile the first tuning shape with ncu after a pass (cuda target).
  bool profile = false;
  // KernelBench-format tasks (TorchHarness):
  std::string dtype = "f32";            ///< the reference's and the inputs' float dtype
  bool compile_baseline = true;         ///< time torch.compile too
  /// KernelBench-format tasks: also time the exported ModelNew of a native or run() candidate end to end
  /// (`kfab eval`; the tuner's points are not)
  bool end_to_end = false;
  /// The tuner's final check of a KernelBench winner times its exported ModelNew end to end beside it
  /// (optimize and bench --no-end-to-end: not)
  bool final_end_to_end = true;
  std::string compile_mode = "default"; ///< torch.compile mode (default, max-autotune, ...)
  bool fresh_baselines = false;         ///< measure torch.compile again instead of using the cached time
  std::vector<std::string> forbid;      ///< operations a Python candidate may not call, on top of the task's
  /// The tolerance of every output, where given (--atol, --rtol): over the task's own, and for a
  /// KernelBench-format task over KernelBench's default for the dtype.
  std::optional<double> atol, rtol;
  /// KernelBench-format tasks: a value that differs from torch eager's beyond the tolerance is still correct
  /// where eager's own fp32 answer is outside the tolerance of the Model run in float64 and the candidate's
  /// within it (judged by the float64 answer, and said so); true (--judge eager): eager's answer alone, as
  /// KernelBench's own check.
  bool judge_eager = false;
  /// Receives one line per step ("verify M=512, N=2048"), for progress on long evaluations.
  std::function<void(const std::string&)> progress;
};

/// The evaluation protocol for one task, whatever its format: verification on every shape (seeds x
/// tuning and held-out shapes, each seed's candidate called twice with differently poisoned outputs,
/// then the last seed's inputs changed), timing on inputs never verified (changed anew before each timed
/// call; sampled calls and the last checked), the roofline decision and the speedup. The harness that
/// runs the jobs is chosen here, once, from the task's format.
class Evaluator {
 public:
  /// `target`: cpu, cuda or opencl (a KernelBench file: cpu or cuda).
  Evaluator(LoadedTask task, std::string target, EvalOptions opt);
  ~Evaluator();
  Evaluator(Evaluator&&) noexcept;

  /// A verdict for the candidate; an Error only for problems of the task itself (its reference does
  /// not build or fails), of the environment or of the command line, which are the user's to fix, not
  /// the candidate's.
  Expected<Verdict> evaluate(const std::filesystem::path& candidate);

  /// `kfab compare`: two candidates, each in processes of its own, verified on every tuning shape, then
  /// timed interleaved on each (a call of one, of the other and of the task's baseline, the order
  /// rotating). JSON: each one's disposition, per shape both medians and how much faster `a` is than `b`
  /// (the median over the interleaved pairs, with its 95% interval and the measurement's noise), and
  /// their geometric means. An Error as evaluate()'s.
  Expected<nlohmann::json> compare(const std::filesystem::path& a, const std::filesystem::path& b);

  void set_options(EvalOptions opt) { opt_ = std::move(opt); }
  /// Later evaluations reuse the harness's processes (Harness::keep_workers): for kfab's own candidates.
  void keep_workers();
  const LoadedTask& task() const { return task_; }

 private:
  Expected<Verdict> evaluate_unguarded(const std::filesystem::path& candidate);
  Expected<nlohmann::json> compare_unguarded(const std::filesystem::path& a, const std::filesystem::path& b);

  LoadedTask task_;
  std::string target_;
  EvalOptions opt_;
  std::unique_ptr<Harness> harness_;
};

}  // namespace kfab
