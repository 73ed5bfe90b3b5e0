#pragma once
/// Evaluations done elsewhere: by the workers of a job queue on other hosts (dist/remote_eval.h). The
/// built-in tuner and the agents hand their candidates to this instead of a local Evaluator; the
/// protocol is the same, run where the worker is.

#include <filesystem>
#include <string>
#include <vector>

#include "core/expected.h"
#include "eval/evaluator.h"
#include "eval/verdict.h"

namespace kfab {

class RemoteEvaluations {
 public:
  virtual ~RemoteEvaluations() = default;
  /// The run the evaluations belong to: a job's id names it, the candidate's content and the
  /// protocol, so that a resumed run finds the results of what it sent before it stopped.
  virtual void begin_run(const std::string& run) = 0;
  /// Sends the evaluation of `candidate` under `eo` (unless the same job has a result already);
  /// `own`: a candidate kfab generated, whose worker processes may be kept from one job to the next.
  /// Its job's id.
  virtual Expected<std::string> send(const std::filesystem::path& candidate, const EvalOptions& eo, bool own) = 0;
  /// The verdicts of sent jobs, in their order, once every one is there. A job whose worker could
  /// not evaluate (a task that does not load there) gives its Error in place of a verdict.
  virtual Expected<std::vector<Expected<Verdict>>> wait(const std::vector<std::string>& jobs) = 0;
  /// Where the jobs go, for messages ("redis://host:6379, queue kfab").
  virtual std::string describe() const = 0;
  /// Where the jobs go, as a run's settings keep it (a resumed run sends its jobs there again).
  virtual nlohmann::json where() const = 0;

  Expected<Verdict> evaluate(const std::filesystem::path& candidate, const EvalOptions& eo, bool own) {
    auto got = evaluate_all({candidate}, eo, own);
    if (!got) return Unexpected{got.error()};
    return std::move(got->front());
  }
  /// Every candidate sent at once, for the workers to share; their verdicts in the same order.
  Expected<std::vector<Expected<Verdict>>> evaluate_all(const std::vector<std::filesystem::path>& candidates, const EvalOptions& eo,
                                                        bool own) {
    std::vector<std::string> jobs;
    for (const auto& c : candidates) {
      auto id = send(c, eo, own);
      if (!id) return Unexpected{id.error()};
      jobs.push_back(*id);
    }
    return wait(jobs);
  }
};

}  // namespace kfab
