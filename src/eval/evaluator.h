#pragma once
/// The evaluation protocol of DESIGN.md section 3 for one candidate: build, verify on every shape
/// (seeds x tuning and held-out shapes), time against the reference, check the roofline bound.

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/task.h"
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
  RunnerOptions runner;
  /// Profile the first tuning shape with ncu after a pass (cuda target).
  bool profile = false;
  // KernelBench-format tasks (KbEvaluator):
  std::string dtype = "f32";            ///< the reference's and the inputs' float dtype
  bool compile_baseline = true;         ///< time torch.compile too
  std::string compile_mode = "default"; ///< torch.compile mode (default, max-autotune, ...)
  bool fresh_baselines = false;         ///< measure torch.compile again instead of using the cached time
  std::vector<std::string> forbid;      ///< operations a Python candidate may not call, on top of the task's
  /// Receives one line per step ("verify M=512, N=2048"), for progress on long evaluations.
  std::function<void(const std::string&)> progress;
};

class Evaluator {
 public:
  Evaluator(Backend& backend, EvalOptions opt) : backend_(backend), opt_(std::move(opt)) {}

  /// A verdict for the candidate; an Error only for problems of the task itself (its reference does
  /// not build or fails), which are the user's to fix, not the candidate's.
  Expected<Verdict> evaluate(const Task& task, const std::filesystem::path& candidate);

 private:
  Expected<Verdict> evaluate_unguarded(const Task& task, const std::filesystem::path& candidate);

  Backend& backend_;
  EvalOptions opt_;
};

}  // namespace kfab
