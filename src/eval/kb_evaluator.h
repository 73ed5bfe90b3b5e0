#pragma once
/// The evaluation protocol for KernelBench-format tasks (a Python file with Model, get_inputs and
/// get_init_inputs): the same verify-then-time steps as Evaluator, run by the Python worker
/// (python/kfab_worker) in a process of its own, with torch eager as the reference and baseline and
/// torch.compile as a second baseline.

#include <filesystem>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "eval/evaluator.h"

namespace kfab {

/// The kind of candidate a file is for a KernelBench task: "cpp" (.cpp, cpu), "cuda" (.cu),
/// "modelnew" (a .py defining ModelNew), "triton" (a .py with run() that uses Triton), "python"
/// (a .py with run() that does not); empty when the file is none of these.
std::string kb_candidate_dsl(const std::filesystem::path& candidate);

/// The store keys a task by its path and content: for a KernelBench file both are the file's. This is
/// the Task the store records for one (name: the file's stem).
Task kb_store_task(const std::filesystem::path& task_file);

/// `source` with every assignment to `key` at the start of a line (KFAB_HELDOUT in a KernelBench
/// file, heldout in a task.toml) replaced by a comment, continuation lines included (brackets are
/// balanced): what a proposer may see of a task.
std::string withhold(const std::string& source, const std::string& key);

class KbEvaluator {
 public:
  /// `target` is cpu or cuda; `native` builds .cpp/.cu candidates for it (may be null when the
  /// candidate is a Python file).
  KbEvaluator(std::string target, Backend* native, EvalOptions opt)
      : target_(std::move(target)), native_(native), opt_(std::move(opt)) {}

  /// A verdict; an Error only where the task or the environment is at fault (no torch, a task
  /// file that does not import, a reference that raises).
  Expected<Verdict> evaluate(const std::filesystem::path& task_file, const std::filesystem::path& candidate);

  /// Later evaluate() calls share one worker process (torch imports once). Only for candidates kfab
  /// generated itself (the built-in tuner): an untrusted candidate's state could reach the next one.
  void keep_worker() { keep_worker_ = true; }
  void set_options(EvalOptions opt) { opt_ = std::move(opt); }

  /// `kfab tasks --check`: findings that make the task degenerate (outputs that barely vary).
  Expected<nlohmann::json> check(const std::filesystem::path& task_file);

  /// The Model traced into a fused row program (python/kfab_worker/trace.py): {"supported",
  /// "reason" | "formula", "inputs", "outputs", "n" (the row length at this target's tuning shape)}.
  Expected<nlohmann::json> trace(const std::filesystem::path& task_file);

 private:
  Expected<Verdict> evaluate_unguarded(const std::filesystem::path& task_file, const std::filesystem::path& candidate);
  /// A candidate's worker (stopped between its jobs) or, `trusted`, the worker that runs the Model, times
  /// the baselines and compares (python -m kfab_worker --trusted: it never loads a candidate).
  RunnerOptions worker_options(double timeout_s, bool trusted = false) const;

  std::string target_;
  Backend* native_;
  EvalOptions opt_;
  std::unique_ptr<RunnerClient> check_worker_;  ///< one worker for every check() (torch imports once)
  bool keep_worker_ = false;
  std::unique_ptr<RunnerClient> kept_worker_;
  std::unique_ptr<RunnerClient> kept_trusted_;
};

}  // namespace kfab
