#pragma once
/// `kfab optimize` with LLM agents (after KForge and CudaForge): a planner, then a functional pass
/// (coder, then fixer turns until a candidate passes), then optimization passes (performance analyst
/// recommends one change, coder applies it), with a conductor deciding whether to go on. Every step
/// is stored as it completes (kill -9 loses at most the step in flight; --resume goes on from the
/// store); every LLM exchange is stored content-addressed, and `--llm replay:RUN` replays a run's
/// exchanges in order with no network. Held-out shapes are checked on the final best only and never
/// appear in a prompt.

#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "eval/evaluator.h"
#include "eval/remote.h"

namespace kfab {

struct OptimizeOptions {
  std::filesystem::path task;          ///< a native task folder or a KernelBench-format .py file
  std::string target;                  ///< cpu, cuda, opencl
  std::string dsl;                     ///< cpp, cuda, opencl, triton, modelnew (default: the target's)
  std::string llm;                     ///< PROVIDER:MODEL or replay:RUN
  std::filesystem::path config;        ///< provider config (empty: ~/.config/kfab/config.toml)
  std::string strategy = "refine";
  int budget_candidates = 8;
  double budget_wall_s = 0.0;          ///< 0: none
  int64_t budget_tokens = 0;           ///< 0: none
  double budget_dollars = 0.0;         ///< 0: none
  std::filesystem::path out_dir;       ///< candidates and best.<ext> (default: kfab-runs/RUN)
  std::string resume;                  ///< a run id to continue
  std::filesystem::path prompts_dir;   ///< role prompt files (default: the source tree's prompts/)
  EvalOptions eval;
  /// cuda: the GPUs an evolve generation's children are evaluated on at once, one per device (empty:
  /// every GPU of a host with several); the other steps use the first.
  std::vector<int> devices;
  /// Evaluations done elsewhere (`--redis`: the workers of a job queue): every candidate goes there,
  /// an evolve generation's children at once. Null: here.
  RemoteEvaluations* remote = nullptr;
  std::function<void(const std::string&)> progress;
};

/// {"run", "best": {"candidate", "disposition", "speedup"}, "steps", "out_dir", "tokens_in",
/// "tokens_out", "cost", "stopped_because"}; an Error for bad input (task, provider, run id).
Expected<nlohmann::json> optimize(const OptimizeOptions& opt);

/// The file suffix of a DSL's candidates.
std::string dsl_suffix(const std::string& dsl);

}  // namespace kfab
