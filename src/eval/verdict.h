#pragma once
/// What an evaluation concluded (CUTLASS-style disposition) and the evidence behind it.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expr.h"
#include "core/stats.h"

namespace kfab {

enum class Disposition { Passed, Incorrect, CompileFailed, RuntimeFailed, Crashed, Timeout, Rejected };

std::string_view disposition_name(Disposition d);
std::optional<Disposition> parse_disposition(std::string_view s);

struct ShapeResult {
  ShapeBinding shape;
  bool heldout = false;
  /// "passed", "incorrect", or the failure that stopped this shape; "not_run" after an earlier stop.
  std::string status = "not_run";
  bool correct = false;
  nlohmann::json errors;  ///< max_abs_err, max_rel_err, first_mismatch, per-output detail
  std::optional<TimeStats> time;
  std::optional<TimeStats> baseline;
  std::optional<double> bound_ms;  ///< roofline bound from the task's cost, if any
  nlohmann::json extra = nlohmann::json::object();  ///< target-specific evidence: clocks, timer, bandwidth

  nlohmann::json to_json() const;
  /// The inverse of to_json (a verdict that travelled: a queue worker's).
  static ShapeResult from_json(const nlohmann::json& j);
};

struct Verdict {
  std::string task;
  std::string target;
  std::string dsl;
  std::string candidate;       ///< path as given
  std::string candidate_hash;  ///< content hash of its source
  Disposition disposition = Disposition::Passed;
  std::string detail;
  std::vector<ShapeResult> shapes;
  std::optional<double> speedup;  ///< geometric mean over tuning shapes of baseline / candidate median
  std::string baseline = "reference";  ///< what the candidate was timed against
  nlohmann::json build;           ///< compile time, cache hit
  nlohmann::json machine;         ///< peaks used for the roofline bound
  nlohmann::json protocol;        ///< seeds, calls, timeout: how the verdict was obtained
  nlohmann::json profile;         ///< ncu metrics per kernel, or {"error": why not}; null when not asked
  nlohmann::json extra = nlohmann::json::object();  ///< format-specific fields (KernelBench: speedup_vs_compile)
  double wall_s = 0.0;

  bool passed() const { return disposition == Disposition::Passed; }
  nlohmann::json to_json() const;
  /// The inverse of to_json; an unknown disposition reads as crashed (said in the detail).
  static Verdict from_json(const nlohmann::json& j);
};

}  // namespace kfab
