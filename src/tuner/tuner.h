#pragma once
/// The built-in tuner: kfab optimize with no LLM. For the task's op class and target it searches the
/// templates' parameter points by measurement (each point an ordinary candidate, verified and timed
/// against the reference), checks the best on every shape, held-out ones included, and caches the
/// winning point per task content, target and device, so a rerun is a single evaluation.

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "eval/evaluator.h"
#include "eval/remote.h"
#include "eval/torch_harness.h"
#include "store/run.h"
#include "tuner/fused.h"
#include "tuner/plan.h"
#include "tuner/templates.h"

namespace kfab {

/// The built-in tuner's run (RunOptions: on --resume the points it evaluated are taken from the
/// store, not evaluated again, and task, target, budget and out_dir must be the run's; the search
/// uses 2 seeds and short timing, the winner's final check `eval`; with devices, the search's points
/// are spread over them and the final check runs on the first; with `remote`, every point and the
/// final check go to the queue and nothing is built or run here).
struct TuneOptions : RunOptions {
  TuneOptions() { target = "cpu"; }
  int budget = 64;     ///< parameter points to evaluate, at most
  bool fresh = false;  ///< search again even when a cached result exists
  /// Traces KernelBench files: a bench passes one for all its tasks (torch imports once, and a task
  /// the tuner refuses costs a trace, not a worker's start). Null: the tuner starts its own.
  TorchInspector* tracer = nullptr;
};

/// What the built-in tuner makes of a traced KernelBench Model (python/kfab_worker/trace.py): the
/// template it searches and what that template needs, or the first thing that did not fit.
struct TracedPlan {
  std::string template_name;
  const KernelTemplate* dedicated = nullptr;  ///< a single-op Model (the trace's "kind"): its own template
  std::string kind;
  std::map<std::string, double> op_params;    ///< what a dedicated template needs beyond the tensors
  bool is_gemm = false;                       ///< a GEMM, then `program` as its epilogue
  Program program;
  GemmProgram gemm;
  Plan plan;                                  ///< a plan of several programs (tuner/plan.h): its stages, else none
};
Expected<TracedPlan> plan_traced(const nlohmann::json& traced, const std::string& target);

/// Whether the built-in tuner takes a task on `target`, by tracing alone (nothing is built or run):
/// {"path", "format", "taken", "template", "reason"} with `reason` the first thing that did not fit.
/// `tracer` traces KernelBench files (one worker for every task).
nlohmann::json tuner_coverage(const LoadedTask& task, const std::string& target, TorchInspector& tracer);

/// {"run", "best": {"candidate", "disposition", "speedup"}, "steps", "candidates", "tuner":
/// {"template", "params", "cached"}, "stopped_because"}; an Error where no template applies.
Expected<nlohmann::json> tune(const TuneOptions& opt);

}  // namespace kfab
