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
  nlohmann::json j = {{"shape", shape}, {"heldout", heldout}, {"status", status}, {"correct", correct}};
  if (errors.is_object()) {
    j["max_abs_err"] = errors.value("max_abs_err", nlohmann::json());
    j["max_rel_err"] = errors.value("max_rel_err", nlohmann::json());
    for (const char* k : {"tolerance_used", "first_mismatch", "outputs", "checked", "mismatches", "reference_fp64", "judged_by_float64",
                          "eager_mismatches", "first_eager_mismatch"})
      if (errors.contains(k)) j[k] = errors[k];
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
  nlohmann::json j = {{"task", task},
                      {"target", target},
                      {"dsl", dsl},
                      {"candidate", candidate},
                      {"candidate_hash", candidate_hash},
                      {"disposition", disposition_name(disposition)},
                      {"detail", detail},
                      {"shapes", nlohmann::json::array()},
                      {"speedup", speedup ? nlohmann::json(*speedup) : nlohmann::json()},
                      {"baseline", baseline},
                      {"build", build},
                      {"machine", machine},
                      {"protocol", protocol},
                      {"wall_s", wall_s}};
  for (const auto& s : shapes) j["shapes"].push_back(s.to_json());
  if (!profile.is_null()) j["profile"] = profile;
  for (const auto& [k, val] : extra.items()) j[k] = val;
  return j;
}

namespace {
// What to_json writes from the fields themselves; everything else it wrote came from `extra`.
constexpr std::string_view kShapeKeys[] = {"shape", "heldout", "status", "correct", "max_abs_err", "max_rel_err", "tolerance_used",
                                           "first_mismatch", "outputs", "checked", "mismatches", "reference_fp64", "judged_by_float64",
                                           "eager_mismatches", "first_eager_mismatch", "time_ms", "baseline_ms", "speedup", "bound_ms",
                                           "percent_of_bound"};
constexpr std::string_view kVerdictKeys[] = {"task", "target", "dsl", "candidate", "candidate_hash", "disposition", "detail", "shapes",
                                             "speedup", "baseline", "build", "machine", "protocol", "wall_s", "profile"};

template <size_t N>
bool known(const std::string& k, const std::string_view (&keys)[N]) {
  for (auto s : keys)
    if (s == k) return true;
  return false;
}
}  // namespace

ShapeResult ShapeResult::from_json(const nlohmann::json& j) {
  ShapeResult s;
  if (j.contains("shape") && j["shape"].is_object())
    for (const auto& [k, v] : j["shape"].items())
      if (v.is_number_integer()) s.shape[k] = v.get<int64_t>();
  s.heldout = j.value("heldout", false);
  s.status = j.value("status", std::string("not_run"));
  s.correct = j.value("correct", false);
  if (j.contains("max_abs_err") || j.contains("checked")) {
    s.errors = nlohmann::json::object();
    for (const char* k : {"max_abs_err", "max_rel_err", "tolerance_used", "first_mismatch", "outputs", "checked", "mismatches",
                          "reference_fp64", "judged_by_float64", "eager_mismatches", "first_eager_mismatch"})
      if (j.contains(k)) s.errors[k] = j[k];
    s.errors["correct"] = s.correct;
  }
  if (j.contains("time_ms") && j["time_ms"].is_object()) s.time = TimeStats::from_json(j["time_ms"]);
  if (j.contains("baseline_ms") && j["baseline_ms"].is_object()) s.baseline = TimeStats::from_json(j["baseline_ms"]);
  if (j.contains("bound_ms") && j["bound_ms"].is_number()) s.bound_ms = j["bound_ms"].get<double>();
  for (const auto& [k, v] : j.items())
    if (!known(k, kShapeKeys)) s.extra[k] = v;
  return s;
}

Verdict Verdict::from_json(const nlohmann::json& j) {
  Verdict v;
  v.task = j.value("task", std::string());
  v.target = j.value("target", std::string());
  v.dsl = j.value("dsl", std::string());
  v.candidate = j.value("candidate", std::string());
  v.candidate_hash = j.value("candidate_hash", std::string());
  v.detail = j.value("detail", std::string());
  const std::string d = j.value("disposition", std::string());
  if (auto p = parse_disposition(d)) {
    v.disposition = *p;
  } else {
    v.disposition = Disposition::Crashed;
    v.detail = "a verdict with an unknown disposition \"" + d.substr(0, 40) + "\": " + v.detail;
  }
  if (j.contains("shapes") && j["shapes"].is_array())
    for (const auto& s : j["shapes"]) v.shapes.push_back(ShapeResult::from_json(s));
  if (j.contains("speedup") && j["speedup"].is_number()) v.speedup = j["speedup"].get<double>();
  v.baseline = j.value("baseline", std::string("reference"));
  v.build = j.value("build", nlohmann::json());
  v.machine = j.value("machine", nlohmann::json());
  v.protocol = j.value("protocol", nlohmann::json());
  v.profile = j.value("profile", nlohmann::json());
  v.wall_s = j.value("wall_s", 0.0);
  for (const auto& [k, val] : j.items())
    if (!known(k, kVerdictKeys)) v.extra[k] = val;
  return v;
}

}  // namespace kfab
