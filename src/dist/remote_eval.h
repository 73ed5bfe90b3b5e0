#pragma once
/// `kfab optimize --redis`: a run's evaluations (the tuner's points and its final check, an agent's
/// candidates) as jobs of a Redis job queue (dist/queue.h), evaluated by `kfab worker` processes on
/// any host. A job's id names the run, the candidate's content and the protocol, so that it is sent
/// once and a resumed run finds the results of what it sent before it stopped; a result is written
/// once (the queue's SET NX), however often its job was delivered.

#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "dist/queue.h"
#include "eval/remote.h"

namespace kfab {

/// What of an EvalOptions travels with a job (the protocol; not the runner's local settings).
nlohmann::json eval_options_to_json(const EvalOptions& eo);
/// Its inverse over `base` (the worker's own defaults for what the job does not say).
EvalOptions eval_options_from_json(const nlohmann::json& j, EvalOptions base);

class QueueEvaluations final : public RemoteEvaluations {
 public:
  /// The task's files are read once here and travel with every job.
  static Expected<std::unique_ptr<QueueEvaluations>> open(const QueueOptions& q, const std::filesystem::path& task, std::string target,
                                                          std::function<void(const std::string&)> say);
  void begin_run(const std::string& run) override { run_ = run; }
  Expected<std::string> send(const std::filesystem::path& candidate, const EvalOptions& eo, bool own) override;
  Expected<std::vector<Expected<Verdict>>> wait(const std::vector<std::string>& jobs) override;
  std::string describe() const override;
  nlohmann::json where() const override { return {{"url", q_.url}, {"name", q_.name}}; }

 private:
  QueueEvaluations(QueueOptions q, JobQueue queue) : q_(std::move(q)), queue_(std::move(queue)) {}
  QueueOptions q_;
  JobQueue queue_;
  nlohmann::json files_;
  std::string target_;
  std::string run_ = "run";
  std::function<void(const std::string&)> say_;
  std::set<std::string> sent_;
  std::map<std::string, std::filesystem::path> local_;  ///< job -> the candidate's path here
  bool told_ = false;
};

}  // namespace kfab
