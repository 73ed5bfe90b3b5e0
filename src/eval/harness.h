#pragma once
/// What the Evaluator (eval/evaluator.h) needs of the processes that run a task: a harness. The
/// Evaluator owns the protocol of DESIGN.md section 3 (which inputs, how many calls, in which order,
/// what is compared and when, the roofline decision, the speedup); a harness owns the processes and
/// their jobs. Two exist, chosen once when a task is opened (LoadedTask::format):
///   - NativeHarness (eval/native_harness.h): a task.toml with a C++ reference, through kfab-runner;
///   - TorchHarness (eval/torch_harness.h): a KernelBench-format file, through the Python worker.
/// In both, the candidate's process never runs the reference or a baseline, and it is stopped while
/// its outputs are compared.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "core/task.h"
#include "eval/job_evidence.h"
#include "eval/roofline.h"
#include "eval/verdict.h"

namespace kfab {

struct EvalOptions;

/// One shape an evaluation verifies and, for a tuning shape, times.
struct ShapeCase {
  ShapeBinding shape;     ///< its sizes; a KernelBench shape learns them from its first reference job
  nlohmann::json over;    ///< a KernelBench file's overrides for this shape (KFAB_GPU, KFAB_HELDOUT); null for native
  bool heldout = false;

  /// "{M=1024, N=4096}", or the overrides while the sizes are not known yet.
  std::string label() const;
};

/// The declarations of Harness's pure virtual functions that every harness defines in its .cpp, listed
/// once here for the classes below (NativeHarness, TorchHarness); what a harness defines inline it
/// declares itself.
#define KFAB_HARNESS_OVERRIDES                                                                                           \
  Expected<std::vector<ShapeCase>> begin(const std::filesystem::path& candidate, const EvalOptions& opt, Verdict& v)     \
      override;                                                                                                          \
  JobOutcome reference(ShapeCase& s, int index, uint64_t perturb) override;                                              \
  JobOutcome call(const ShapeCase& s, int index, uint64_t perturb, int call, int pattern) override;                      \
  std::vector<std::string> baselines(const ShapeCase& s) override;                                                       \
  JobOutcome prepare_timing(const ShapeCase& s, int64_t seed, int warmup) override;                                      \
  JobOutcome timed_call(uint64_t perturb, bool clocks) override;                                                         \
  JobOutcome timed_baseline(const std::string& which) override;                                                          \
  JobOutcome check_timed(const ShapeCase& s, int64_t seed, uint64_t perturb) override;                                   \
  JobOutcome end_timing() override;                                                                                      \
  void describe_timing(const ShapeCase& s, ShapeResult& sr, const std::map<std::string, std::vector<double>>& times)     \
      override;                                                                                                          \
  std::optional<MachinePeaks> peaks(bool again) override;

class Harness {
 public:
  virtual ~Harness() = default;

  /// Sets up the evaluation of `candidate` under `opt` (kept by reference until end()): starts the
  /// processes, builds, learns the task's shapes. Fills v's dsl, baseline, build and protocol (beside
  /// the Evaluator's entries). A candidate that does not build sets v.disposition (CompileFailed) and
  /// returns no shapes. An Error is the task's, the environment's or the command line's fault.
  virtual Expected<std::vector<ShapeCase>> begin(const std::filesystem::path& candidate, const EvalOptions& opt, Verdict& v) = 0;
  /// Adds what the harness saw of the whole evaluation (peak device memory) to the verdict; called on
  /// every path once begin() returned, before end().
  virtual void finish(Verdict&) {}
  /// Ends the evaluation: the processes it started go (unless kept: keep_workers).
  virtual void end() {}
  /// Later evaluations reuse the processes (the Python worker imports torch once). Only for candidates
  /// kfab generated itself (the built-in tuner): an untrusted candidate's state could reach the next.
  virtual void keep_workers() {}

  // --- verification --------------------------------------------------------------------------------
  /// The trusted answer for verification input set `index` of a shape (changed in four places, the
  /// last element among them, when `perturb` is not 0). Learns the shape's sizes where needed.
  /// A failure here is the task's (task_error), never the candidate's.
  virtual JobOutcome reference(ShapeCase& s, int index, uint64_t perturb) = 0;
  /// One call of the candidate on those inputs, its outputs poisoned with `pattern` first, compared with
  /// the answer while the candidate's process is stopped: the body is the comparison (max_abs_err,
  /// max_rel_err, checked, mismatches, nonfinite, first_mismatch or problem, outputs[]).
  virtual JobOutcome call(const ShapeCase& s, int index, uint64_t perturb, int call, int pattern) = 0;
  /// The tolerance a comparison's first mismatch was held to, where the harness knows it.
  virtual std::optional<Tolerance> tolerance_of(const nlohmann::json& /*errors*/) const { return std::nullopt; }

  // --- timing --------------------------------------------------------------------------------------
  /// What the candidate is timed against on this shape, the first being the speedup's baseline (the
  /// C++ reference or the GPU baseline; torch eager, then torch.compile where it is timed). Asked once
  /// per timed shape, before prepare_timing.
  virtual std::vector<std::string> baselines(const ShapeCase& s) = 0;
  /// Prepares the candidate and the baselines on the timing inputs of `seed` (never used to verify).
  virtual JobOutcome prepare_timing(const ShapeCase& s, int64_t seed, int warmup) = 0;
  /// One timed call of the candidate, its inputs changed anew in four places by `perturb`; body: ms.
  virtual JobOutcome timed_call(uint64_t perturb, bool clocks) = 0;
  /// One timed call of a baseline; body: ms.
  virtual JobOutcome timed_baseline(const std::string& which) = 0;
  /// Compares the outputs of the candidate's last timed call with the trusted answer for the inputs it
  /// had (seed, perturb); body: the comparison, as call()'s.
  virtual JobOutcome check_timed(const ShapeCase& s, int64_t seed, uint64_t perturb) = 0;
  virtual JobOutcome end_timing() = 0;
  /// Adds what the harness saw of a timed shape to its result (timer, replay, clocks, launches, walls,
  /// a second baseline's figures); `times` holds every timed call's ms by name ("candidate", baselines).
  virtual void describe_timing(const ShapeCase& s, ShapeResult& sr, const std::map<std::string, std::vector<double>>& times) = 0;

  // --- the roofline --------------------------------------------------------------------------------
  /// The machine's peaks for the roofline bound (measured again, `again`); none where the task states
  /// no cost or the machine cannot be measured.
  virtual std::optional<MachinePeaks> peaks(bool again) = 0;
  virtual std::optional<double> flops(const ShapeCase& s) const = 0;
  virtual std::optional<double> bytes(const ShapeCase& s) const = 0;
  /// The bytes a shape must move at the least, for its share of the copy bandwidth: the task's own cost
  /// where it states one, else what the harness knows (a KernelBench file: its inputs, weights and
  /// outputs, each moved once). Never a bound: a time below it rejects nothing.
  virtual std::optional<double> least_bytes(const ShapeCase& s) const { return bytes(s); }
  /// Why the shape's bytes cannot bound its time here (its data may stay in a cache between timed calls),
  /// or "" where they can.
  virtual std::string bytes_bound_missing(const ShapeCase&) const { return {}; }
  /// Whether a time below the bound rejects the candidate here, and if not, the warning a shape gets.
  virtual bool roofline_enforced(const MachinePeaks& p) const = 0;
  virtual std::string unenforced_warning() const = 0;

  /// After a passing timing: anything more the options asked for (an ncu profile).
  virtual void after_timing(Verdict&) {}
  /// The hint of an Error that is the task's (its reference failed, its file does not load).
  virtual std::string task_fault_hint() const = 0;
};

}  // namespace kfab
