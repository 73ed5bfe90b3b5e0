#pragma once
/// The harness of a KernelBench-format task (a Python file with Model, get_inputs and
/// get_init_inputs): two Python workers (python/kfab_worker). The candidate's worker loads the
/// candidate and is stopped between its jobs; the trusted one (--trusted) runs the Model, times torch
/// eager and torch.compile and compares the candidate's outputs (shared memory on the CPU, CUDA IPC on
/// a GPU), and never loads a candidate.

#include <filesystem>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/target.h"
#include "eval/harness.h"
#include "runner/runner_client.h"

namespace kfab {

/// The kind of candidate a file is for a KernelBench task: "cpp" (.cpp, cpu), "cuda" (.cu),
/// "modelnew" (a .py defining ModelNew), "triton" (a .py with run() that uses Triton), "python"
/// (a .py with run() that does not); empty when the file is none of these.
std::string kb_candidate_dsl(const std::filesystem::path& candidate);
/// The languages of Python candidates (modelnew, triton, python), which the Python worker runs.
bool is_python_dsl(std::string_view dsl);
/// What a candidate in such a language is, for the prompts; empty for another language.
std::string python_dsl_rules(std::string_view dsl);

/// `source` with every assignment to `key` at the start of a line (KFAB_HELDOUT in a KernelBench
/// file, heldout in a task.toml) replaced by a comment, continuation lines included (brackets are
/// balanced): what a proposer may see of a task.
std::string withhold(const std::string& source, const std::string& key);

/// A Python worker's options: a candidate's worker (stopped between its jobs) or, `trusted`, the worker
/// that runs the Model, times the baselines and compares (python -m kfab_worker --trusted: it never
/// loads a candidate).
RunnerOptions torch_worker_options(const RunnerOptions& base, double timeout_s, bool trusted = false);

/// `python -m kfab_worker.export --header <the ABI header> ARGS` (`kfab export`, and the end-to-end timing
/// of an exported ModelNew); its output, or what it printed when it failed. No torch import unless it
/// builds the ModelNew extension (--build-extension).
Expected<std::string> run_export(std::vector<std::string> args, double timeout_s);

/// What kfab asks of KernelBench files outside an evaluation, through one worker for all of them
/// (torch imports once).
class TorchInspector {
 public:
  /// `target` is cpu or cuda.
  TorchInspector(std::string target, EvalOptions opt);
  ~TorchInspector();
  /// `kfab tasks --check`: findings that make the task degenerate (outputs that barely vary).
  Expected<nlohmann::json> check(const std::filesystem::path& task_file);
  /// The Model traced into a fused row program (python/kfab_worker/trace.py): {"supported",
  /// "reason" | "formula", "inputs", "outputs", "n" (the row length at this target's tuning shape)}.
  Expected<nlohmann::json> trace(const std::filesystem::path& task_file);

 private:
  RunnerClient& worker();
  std::string target_;
  std::unique_ptr<EvalOptions> opt_;
  std::unique_ptr<RunnerClient> worker_;
};

class TorchHarness final : public Harness {
 public:
  /// `target` is cpu or cuda.
  TorchHarness(std::filesystem::path task_file, std::string target);
  ~TorchHarness() override;

  KFAB_HARNESS_OVERRIDES
  void end() override;
  void finish(Verdict& v) override;
  void keep_workers() override { keep_workers_ = true; }
  /// --profile: not taken for KernelBench-format tasks (a clear message in the verdict, not silence).
  void after_timing(Verdict& v) override;

  /// The tolerance every output was held to (the worker's tolerance_used).
  std::optional<Tolerance> tolerance_of(const nlohmann::json& errors) const override;

  std::optional<double> flops(const ShapeCase& s) const override { return cost("flops", s); }
  std::optional<double> bytes(const ShapeCase& s) const override { return cost("bytes", s); }
  /// A file without a cost: its inputs, weights and outputs at the size timed (the footprint the
  /// describe job found on fake tensors), on the tuning shape only.
  std::optional<double> least_bytes(const ShapeCase& s) const override;
  /// On the CPU the worker cannot evict the operands from the caches between calls (Python cannot
  /// clflush): a time below the bound is reported there, not rejected.
  bool roofline_enforced(const MachinePeaks& p) const override { return p.enforce && tgt_ != nullptr && !tgt_->on_host; }
  std::string unenforced_warning() const override {
    return "below the roofline bound, which is not enforced here: the Python worker does not flush the CPU's caches";
  }
  /// On the CPU: a shape whose bytes fit twice over in the last-level cache is timed from that cache.
  std::string bytes_bound_missing(const ShapeCase& s) const override;
  std::string task_fault_hint() const override { return "the task file, its Model or torch.compile (or the device) is at fault"; }

 private:
  /// A job of the trusted worker: whatever goes wrong there is the task's (or the machine's).
  JobOutcome trusted_job(const nlohmann::json& req);
  /// The candidate's outputs of its last job compared in the trusted worker with the answer it holds.
  JobOutcome compare_last(int64_t seed, int call);
  std::optional<double> cost(const char* key, const ShapeCase& s) const;
  /// bytes_bound_missing for a shape that moves `b` bytes.
  std::string bytes_bound_missing_for(double b) const;
  /// The file where torch.compile's time on a shape is cached: per task, device, dtype, shape, torch,
  /// mode and the worker's timer.
  std::filesystem::path compile_cache_file(const ShapeCase& s) const;

  std::filesystem::path task_file_;
  std::string task_abs_;
  std::string target_;
  const Target* tgt_ = nullptr;  ///< nullptr for a name no target has (begin() says so)
  const EvalOptions* opt_ = nullptr;
  bool keep_workers_ = false;
  std::unique_ptr<RunnerClient> worker_, trusted_;
  nlohmann::json info_;      ///< the trusted worker's hello: torch, device, timer
  nlohmann::json desc_;      ///< the task's description: shapes, cost
  nlohmann::json base_;      ///< what every job carries: task, candidate, base_seed, target, dtype, forbidden
  nlohmann::json output_shapes_;  ///< the Model's outputs at the shape in hand (from its reference job)
  std::map<std::string, nlohmann::json> shape_outputs_;  ///< the same, by shape (overrides' dump), for timing
  JobReply last_call_;       ///< the candidate's last call: what compare passes to the trusted worker
  double scale_ = 1.0;       ///< the scale of the inputs of the last reference job (by seed)
  double timeout_s_ = 60.0;  ///< a job's deadline, from --timeout and the problem's footprint
  std::string dsl_;          ///< the candidate's kind (kb_candidate_dsl)
  std::filesystem::path candidate_;  ///< its source
  std::string artifact_;     ///< what the worker loads: kfab's build of a native one, else the source
  /// The exported ModelNew of the candidate timed end to end on a timed shape (EvalOptions::end_to_end).
  void time_end_to_end(ShapeResult& sr);
  // the timing of the shape in hand
  nlohmann::json cand_prep_, cached_compile_;
  bool time_compile_ = false;
  std::map<std::string, std::vector<double>> hosts_;
  std::map<std::string, int> late_;
  std::vector<double> walls_;
  nlohmann::json end_body_, trusted_end_body_;
};

}  // namespace kfab
