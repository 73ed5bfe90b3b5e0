#pragma once
/// What the harnesses (native tasks through kfab-runner, KernelBench-format tasks through the Python
/// worker) and the Evaluator make of a worker's replies: the job's outcome, and the timing evidence of a shape.

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "eval/roofline.h"
#include "eval/verdict.h"
#include "runner/runner_client.h"

namespace kfab {

/// How a job ended, folded into what the verdict needs.
struct JobOutcome {
  bool ok = false;  ///< the worker answered with a result
  nlohmann::json body;
  std::optional<Disposition> failure;
  std::string detail;
  bool task_error = false;  ///< the reference, the task file or the device is at fault, not the candidate

  static JobOutcome failed(Disposition d, std::string why) {
    JobOutcome o;
    o.failure = d;
    o.detail = std::move(why);
    return o;
  }
};

JobOutcome interpret(const JobReply& r);

/// The calls, time and warm-up of a timing, where the options leave them to the target: a device call
/// is cheap to repeat and noisier one by one (100 calls, 0.05 s, 10 warm-ups; the CPU 50, 0.5 s, 3).
struct TimingDefaults {
  int min_calls;
  double min_time_s;
  int warmup;
};
TimingDefaults timing_defaults(int min_calls, double min_time_s, int warmup, bool device);

/// The first mismatch of a comparison in words: how many values differ, where, got and want, and (with
/// `tol`) the tolerance; a problem (an output of the wrong shape or kind) as it was said.
std::string mismatch_text(const nlohmann::json& errors, std::optional<Tolerance> tol = std::nullopt);

/// Empty, or where a shape's comparisons passed with values judged by the Model run in float64 (the Python
/// worker's `judged_by_float64`: values that differ from eager's, where eager's own fp32 answer is outside the
/// tolerance of the float64 one and the candidate within it), what was judged so and why.
std::string judged_text(const nlohmann::json& errors);

/// Two comparisons summed (a shape's calls): the largest errors, the counts added, the first mismatch
/// and the first problem kept, per output and in all; `correct` when nothing differs. `acc` may be null.
nlohmann::json merge_stats(const nlohmann::json& acc, const nlohmann::json& m);

/// Runs an evaluation whose replies may be malformed: a reply kfab cannot read (a field missing or of
/// the wrong type) is the runner's failure, never kfab's (a candidate may have written it), and ends as
/// a `crashed` verdict.
template <typename Fn>
Expected<Verdict> guarded_evaluation(const std::string& task, const std::string& candidate, Fn&& fn) {
  try {
    return fn();
  } catch (const nlohmann::json::exception& e) {
    Verdict v;
    v.task = task;
    v.candidate = candidate;
    v.disposition = Disposition::Crashed;
    v.detail = std::string("the runner's reply could not be read (") + e.what() + "): a candidate may have written to the protocol";
    return v;
  }
}

/// Work a call leaves on other streams (or on the host) escapes the events but not the device-wide
/// sync: when the wall clock says much more than the events, the wall clock is the shape's time.
/// Reads candidate_wall and empty_call_wall from a time job's reply; `stream` names the stream the
/// events were on, for the verdict.
void take_wall_clock(const nlohmann::json& body, ShapeResult& sr, std::string_view stream);

/// The SM and memory clock ranges a GPU time job recorded (`clocks`), with a warning on the shape when
/// the SM clock moved by more than 5% while it was timed.
void take_clocks(const nlohmann::json& body, ShapeResult& sr);

/// The Python worker's launch evidence (`launch`: the hold kernel's length, each timed function's
/// median host time to issue a call, and how many calls reached the start event before they were
/// issued), with a warning on the shape when more than a tenth of the candidate's calls did.
void take_launch(const nlohmann::json& body, ShapeResult& sr);

/// achieved_GBps and percent_of_copy_bandwidth of a shape, from the bytes its cost says it moves.
void take_bandwidth(ShapeResult& sr, std::optional<double> bytes, const MachinePeaks& peaks, bool from_memory = true);
/// flops and bytes of a shape, from the task's cost, where it states them (for reports' rooflines).
void take_cost(ShapeResult& sr, std::optional<double> flops, std::optional<double> bytes);

}  // namespace kfab
