#pragma once
/// The built-in tuner: kfab optimize with no LLM. For the task's op class and target it searches the
/// templates' parameter points by measurement (each point an ordinary candidate, verified and timed
/// against the reference), checks the best on every shape, held-out ones included, and caches the
/// winning point per task content, target and device, so a rerun is a single evaluation.

#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "eval/evaluator.h"

namespace kfab {

struct TuneOptions {
  std::filesystem::path task;
  std::string target = "cpu";
  int budget = 64;                ///< parameter points to evaluate, at most
  bool fresh = false;             ///< search again even when a cached result exists
  std::filesystem::path out_dir;  ///< default kfab-runs/RUN
  /// A stopped tuner run to go on with (kfab optimize --resume): the points it evaluated are taken from
  /// the store, not evaluated again; task, target, budget and out_dir must be the run's.
  std::string resume;
  EvalOptions eval;               ///< the final evaluation's protocol (the search uses 2 seeds and short timing)
  std::function<void(const std::string&)> progress;
};

/// {"run", "best": {"candidate", "disposition", "speedup"}, "steps", "candidates", "tuner":
/// {"template", "params", "cached"}, "stopped_because"}; an Error where no template applies.
Expected<nlohmann::json> tune(const TuneOptions& opt);

}  // namespace kfab
