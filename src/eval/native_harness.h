#pragma once
/// The harness of a native task (task.toml with a C++ reference): the candidate built by the target's
/// backend and run in its own kfab-runner, the reference (and a GPU baseline) in a trusted one
/// (eval/runner_pair.h); outputs compared by kfab from shared memory while the candidate's runner is
/// stopped.

#include <future>
#include <memory>
#include <optional>
#include <string>

#include "backends/backend.h"
#include "backends/target.h"
#include "eval/harness.h"
#include "eval/runner_pair.h"

namespace kfab {

class NativeHarness final : public Harness {
 public:
  NativeHarness(Task task, std::string target);

  KFAB_HARNESS_OVERRIDES
  void end() override;

  std::optional<Tolerance> tolerance_of(const nlohmann::json& errors) const override;

  std::optional<double> flops(const ShapeCase& s) const override { return task_.flops(s.shape); }
  std::optional<double> bytes(const ShapeCase& s) const override { return task_.bytes(s.shape); }
  bool roofline_enforced(const MachinePeaks& p) const override { return p.enforce; }
  std::string unenforced_warning() const override {
    return "below the roofline bound, which is not enforced on this device: its caches cannot be flushed";
  }
  void after_timing(Verdict& v) override;
  std::string task_fault_hint() const override { return "the task's reference or manifest (or the device) is at fault"; }

 private:
  /// An output's tolerance: the task's, or --atol / --rtol where given.
  Tolerance tolerance(const TensorSpec& out) const;
  /// The comparison of the candidate's last outputs with `want`, as the verdict reports it.
  JobOutcome compare_last(const MappedOutputs& want, int64_t seed, int call);

  Task task_;
  std::string target_;
  const Target* tgt_ = nullptr;  ///< nullptr for a name no target has (begin() says so)
  std::unique_ptr<Backend> backend_;
  /// The task's own baseline on this target (reference.cuda); empty: the C++ reference is timed.
  std::filesystem::path task_baseline() const;
  const EvalOptions* opt_ = nullptr;
  std::unique_ptr<RunnerPair> runners_;
  std::optional<MachinePeaks> device_peaks_;  ///< measured at begin() on a device: they pick the shapes
  std::string candidate_artifact_, reference_artifact_;
  std::future<BuildOutcome<BuildResult>> baseline_build_;  ///< the GPU baseline, built beside the candidate
  std::string gpu_baseline_error_;            ///< why it did not build (the task's fault, said when timing)
  MappedOutputs want_;                        ///< the trusted answer of the last reference job
  nlohmann::json cand_prep_, base_prep_, cand_end_;  ///< the timing of the shape in hand
  std::vector<double> walls_;
  /// --profile on the CPU: the perf counters summed over the timed calls, the calls and their ms
  nlohmann::json counters_ = nlohmann::json::object();
  std::string counters_missing_;
  int counted_calls_ = 0;
  double counted_ms_ = 0.0;
  bool has_cost_ = false;
};

}  // namespace kfab
