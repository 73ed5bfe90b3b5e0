#pragma once
/// The evaluations of one run: candidates evaluated one by one here, spread over the devices of this
/// host (an evaluator pinned to each), or sent to a Redis queue's workers (eval/remote.h). The tuner
/// and the LLM agents evaluate through one of these.

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/target.h"
#include "eval/evaluator.h"
#include "eval/remote.h"

namespace kfab {

class Evaluations {
 public:
  /// `pins`: a device's variables per slot (none or one: unpinned, here); `remote`: the queue, or
  /// nullptr. `own`: the candidates are kfab's own, so an evaluator's worker processes are kept from
  /// one candidate to the next (an LLM's candidates each get fresh ones).
  Evaluations(const LoadedTask& task, std::string target, std::vector<DeviceEnv> pins, RemoteEvaluations* remote, bool own);
  ~Evaluations();

  /// One candidate, on the first device (or the queue).
  Expected<Verdict> evaluate(const std::filesystem::path& file, const EvalOptions& eo);
  /// Several candidates: at once over the devices or through the queue, where there are several or a
  /// queue; `done(i, verdict)` then runs for each in order, after all are in. Here with one device,
  /// one by one, `done` after each (a run stopped halfway keeps what was evaluated). An Error from
  /// `done` or the queue ends it.
  using Done = std::function<Expected<void>(size_t, Expected<Verdict>)>;
  Expected<void> evaluate_all(const std::vector<std::filesystem::path>& files, const EvalOptions& eo, const Done& done,
                              const std::function<void(const std::string&)>& say = {});
  /// Two candidates timed interleaved (Evaluator::compare), here on the first device; an Error through a
  /// queue, whose jobs are one candidate each.
  Expected<nlohmann::json> compare(const std::filesystem::path& a, const std::filesystem::path& b, const EvalOptions& eo);
  /// Whether evaluate_all() evaluates several at once.
  bool spreads() const { return remote_ != nullptr || pins_.size() > 1; }
  /// The device indices as given to --devices (for messages); empty when unpinned.
  std::vector<int> devices;

 private:
  EvalOptions pinned(EvalOptions eo, size_t slot) const;
  Expected<Verdict> on_slot(const std::filesystem::path& file, const EvalOptions& eo, size_t slot);

  const LoadedTask& task_;
  std::string target_;
  std::vector<DeviceEnv> pins_;
  RemoteEvaluations* remote_;
  bool own_;
  std::vector<std::unique_ptr<Evaluator>> kept_;  ///< one per slot, for own candidates
};

}  // namespace kfab
