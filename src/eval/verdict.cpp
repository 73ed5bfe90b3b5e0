#include "eval/verdict.h"

#include <array>

namespace kfab {

namespace {
constexpr std::array<std::pair<Disposition, std::string_view>, 7> kNames = {{
    {Disposition::Passed, "passed"},
    {Disposition::Incorrect, "incorrect"},
    {Disposition::CompileFailed, "compile_failed"},
    {Disposition::RuntimeFailed, "runtime_failed"},
    {Disposition::Crashed, "crashed"},
    {Disposition::Timeout, "timeout"},
    {Disposition::Rejected, "rejected"},
}};
}

std::string_view disposition_name(Disposition d) {
  for (const auto& [k, v] : kNames)
    if (k == d) return v;
  return "?";
}

std::optional<Disposition> parse_disposition(std::string_view s) {
  for (const auto& [k, v] : kNames)
    if (v == s) return k;
  return std::nullopt;
}

nlohmann::json ShapeResult::to_json() const {
  nlohmann::json j;
  j["shape"] = shape;
  j["heldout"] = heldout;
  j["status"] = status;
  j["correct"] = correct;
  if (errors.is_object()) {
    j["max_abs_err"] = errors.value("max_abs_err", nlohmann::json());
    j["max_rel_err"] = errors.value("max_rel_err", nlohmann::json());
    if (errors.contains("first_mismatch")) j["first_mismatch"] = errors["first_mismatch"];
    if (errors.contains("outputs")) j["outputs"] = errors["outputs"];
    if (errors.contains("checked")) j["checked"] = errors["checked"];
    if (errors.contains("mismatches")) j["mismatches"] = errors["mismatches"];
  }
  if (time) j["time_ms"] = time->to_json();
  if (baseline) j["baseline_ms"] = baseline->to_json();
  if (time && baseline && time->median > 0) j["speedup"] = baseline->median / time->median;
  if (bound_ms) {
    j["bound_ms"] = *bound_ms;
    if (time && time->median > 0) j["percent_of_bound"] = 100.0 * *bound_ms / time->median;
  }
  for (const auto& [k, val] : extra.items()) j[k] = val;
  return j;
}

nlohmann::json Verdict::to_json() const {
  nlohmann::json j;
  j["task"] = task;
  j["target"] = target;
  j["dsl"] = dsl;
  j["candidate"] = candidate;
  j["candidate_hash"] = candidate_hash;
  j["disposition"] = disposition_name(disposition);
  j["detail"] = detail;
  j["shapes"] = nlohmann::json::array();
  for (const auto& s : shapes) j["shapes"].push_back(s.to_json());
  j["speedup"] = speedup ? nlohmann::json(*speedup) : nlohmann::json();
  j["baseline"] = baseline;
  j["build"] = build;
  j["machine"] = machine;
  j["protocol"] = protocol;
  j["wall_s"] = wall_s;
  if (!profile.is_null()) j["profile"] = profile;
  for (const auto& [k, val] : extra.items()) j[k] = val;
  return j;
}

}  // namespace kfab
