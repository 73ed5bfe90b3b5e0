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
#include "store/run.h"

namespace kfab {

/// The LLM agents' run (RunOptions: with devices, an evolve generation's children are evaluated at
/// once, one per device; with `remote`, every candidate goes to the queue).
struct OptimizeOptions : RunOptions {
  std::string dsl;                     ///< cpp, cuda, opencl, triton, modelnew (default: the target's)
  std::string llm;                     ///< PROVIDER:MODEL or replay:RUN
  std::filesystem::path config;        ///< provider config (empty: ~/.config/kfab/config.toml)
  std::string strategy = "refine";
  int budget_candidates = 8;
  double budget_wall_s = 0.0;          ///< 0: none
  int64_t budget_tokens = 0;           ///< 0: none
  double budget_dollars = 0.0;         ///< 0: none
  std::filesystem::path prompts_dir;   ///< role prompt files (default: the source tree's prompts/)
};

/// {"run", "best": {"candidate", "disposition", "speedup"}, "steps", "out_dir", "tokens_in",
/// "tokens_out", "cost", "stopped_because"}; an Error for bad input (task, provider, run id).
Expected<nlohmann::json> optimize(const OptimizeOptions& opt);

/// The file suffix of a DSL's candidates.
std::string dsl_suffix(const std::string& dsl);

}  // namespace kfab
