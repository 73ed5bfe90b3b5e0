#pragma once
/// The two kfab-runner processes of a native task's evaluation (NativeHarness drives them). The
/// candidate's runner loads the candidate and nothing else, and is frozen
/// whenever kfab is not waiting for one of its jobs. The trusted runner (kfab-runner --trusted) never
/// loads candidate code: it computes the reference's answers, times the baseline and measures the
/// machine. Answers and outputs travel as shared memory; kfab compares them while the candidate's
/// runner is frozen, so no late thread or kernel of the candidate changes what is compared.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/task.h"
#include "core/tensor.h"
#include "eval/job_evidence.h"
#include "runner/runner_client.h"
#include "runner/shared_region.h"

namespace kfab {

/// `o` set for the runner of a target (its Target's memory and process rules); an unknown name gets a
/// host target's rules.
RunnerOptions for_target(RunnerOptions o, std::string_view target);

/// Outputs mapped from a runner's shared memory, as tensors kfab can compare.
struct MappedOutputs {
  SharedRegion region;
  std::vector<HostTensor> tensors;
  size_t bytes = 0;
};

class RunnerPair {
 public:
  /// `base` holds the fields every job carries: task, candidate, reference, gpu_baseline, target.
  RunnerPair(const Task& task, const std::string& target, const RunnerOptions& opt, nlohmann::json base);

  /// Starts both runners now (a device runner opens its driver while kfab builds).
  void start();
  /// The built candidate and reference (shared objects), once built.
  void set_artifacts(const std::string& candidate, const std::string& reference) {
    base_["candidate"] = candidate;
    base_["reference"] = reference;
  }
  /// The task's GPU baseline (reference.cu, built): timed in place of the C++ reference.
  void set_gpu_baseline(const std::string& artifact) { base_["gpu_baseline"] = artifact; }
  bool has_gpu_baseline() const { return base_.contains("gpu_baseline"); }
  RunnerClient& trusted() { return trusted_; }
  RunnerClient& candidate_runner() { return candidate_; }

  /// The reference's answer on (shape, seed) with the inputs changed in four places when `perturb`
  /// is not 0, mapped into `out`. A failure here is the task's (or the machine's), never the candidate's.
  /// `timed`: the change a timed call had (four places anywhere); otherwise verification's (the last
  /// element among them).
  JobOutcome reference(const ShapeBinding& shape, int64_t seed, uint64_t perturb, MappedOutputs& out, bool timed = false);
  /// One checked call of the candidate on the same inputs, outputs poisoned with `pattern`; its
  /// outputs are then in candidate_outputs().
  JobOutcome call(const ShapeBinding& shape, int64_t seed, uint64_t perturb, int pattern);
  /// The candidate's outputs of its last call (call, or timed_call after fetch), read while its runner
  /// is frozen; nullptr when the runner's shared memory no longer holds them (it shrank it).
  const std::vector<HostTensor>* candidate_outputs() const;

  /// Timing: prepares a side on the timing inputs (seed), then one timed call per job.
  JobOutcome prepare_timing(bool candidate_side, const ShapeBinding& shape, int64_t seed, const nlohmann::json& settings);
  /// One timed call of the candidate on the timing inputs changed anew by `perturb`.
  /// `counters`: the CPU runner's perf counters read around the call (its reply's `counters`)
  JobOutcome timed_call(uint64_t perturb, bool flush, bool clocks, bool counters = false);
  /// One timed call of the baseline (the C++ reference, or the task's GPU baseline).
  JobOutcome timed_baseline_call(bool flush);
  /// Brings the outputs of the candidate's last timed call to candidate_outputs() (on a device they
  /// stay there until asked for; on the CPU they came with the call).
  JobOutcome fetch();
  JobOutcome end_timing(bool candidate_side);

 private:
  JobOutcome map(JobReply& r, const ShapeBinding& shape, MappedOutputs& out);
  /// A job of the trusted runner. A runner that dies during it (killed from outside: the reference
  /// itself failing is a reply, not a death) is replaced and the job sent once more, after the timing
  /// preparation it depended on; a second death is the task's failure.
  JobReply run_trusted(const nlohmann::json& req);

  const Task& task_;
  std::string target_;
  nlohmann::json base_;
  RunnerClient candidate_;
  RunnerClient trusted_;
  ShapeBinding shape_;         ///< of the candidate's last job
  MappedOutputs cand_out_;     ///< the candidate's region, mapped once and kept while it is the same
  bool have_outputs_ = false;
  nlohmann::json trusted_prepare_;  ///< the trusted runner's last time_prepare, sent again after a death
};

}  // namespace kfab
