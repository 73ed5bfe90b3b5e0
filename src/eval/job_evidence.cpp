#include "eval/job_evidence.h"

#include <fmt/format.h>

#include <limits>

#include "core/compare.h"

namespace kfab {

using json = nlohmann::json;

JobOutcome interpret(const JobReply& r) {
  JobOutcome o;
  switch (r.kind) {
    case JobReply::Kind::Timeout:
      o.failure = Disposition::Timeout;
      o.detail = r.detail;
      return o;
    case JobReply::Kind::Crashed:
    case JobReply::Kind::Broken:
      o.failure = Disposition::Crashed;
      o.detail = r.detail;
      return o;
    case JobReply::Kind::Forged:
      o.failure = Disposition::Rejected;
      o.detail = r.detail;
      return o;
    case JobReply::Kind::Ok: break;
  }
  o.body = r.body;
  if (r.body.value("ok", false)) {
    o.ok = true;
    return o;
  }
  const std::string kind = r.body.value("kind", "");
  o.detail = r.body.value("detail", "");
  if (kind == "task_error" || kind == "reference_failed" || kind == "protocol_error" || kind == "device_error") {
    o.task_error = true;
  } else if (kind == "load_failed") {
    o.failure = Disposition::CompileFailed;
  } else if (auto d = parse_disposition(kind)) {
    o.failure = *d;
  } else {
    o.failure = Disposition::Crashed;
    o.detail = "unexpected reply: " + r.body.dump();
  }
  return o;
}

json merge_stats(const json& acc, const json& m) {
  if (!acc.is_object()) return m;
  json out = acc;
  const auto num = [](const json& j) { return j.is_number() ? j.get<double>() : std::numeric_limits<double>::infinity(); };
  const auto merge_one = [&](json& a, const json& b) {
    for (const char* k : {"max_abs_err", "max_rel_err", "tolerance_used"})
      if (b.contains(k) && (!a.contains(k) || num(b[k]) > num(a[k]))) a[k] = b[k];
    for (const char* k : {"checked", "mismatches", "nonfinite"}) a[k] = a.value(k, int64_t{0}) + b.value(k, int64_t{0});
    for (const char* k : {"first_mismatch", "problem", "first_eager_mismatch"})
      if (!a.contains(k) && b.contains(k)) a[k] = b[k];
    // values judged by the Model run in float64 where eager's answer is outside the tolerance (python worker)
    for (const char* k : {"judged_by_float64", "eager_mismatches"})
      if (a.contains(k) || b.contains(k)) a[k] = a.value(k, int64_t{0}) + b.value(k, int64_t{0});
  };
  merge_one(out, m);
  // the Model run in float64, where a comparison failed: the counts summed, the worst kept
  if (m.contains("reference_fp64") && m["reference_fp64"].is_object()) {
    const json& b = m["reference_fp64"];
    if (!out.contains("reference_fp64") || out["reference_fp64"].contains("skipped")) {
      out["reference_fp64"] = b;
    } else if (!b.contains("skipped")) {
      json& a = out["reference_fp64"];
      for (const char* k : {"checked", "reference_outside", "candidate_outside", "rescued", "unrescued"})
        a[k] = a.value(k, int64_t{0}) + b.value(k, int64_t{0});
      for (const char* k : {"reference_tolerance_used", "candidate_tolerance_used", "judged_tolerance_used"})
        if (b.contains(k) && (!a.contains(k) || num(b[k]) > num(a[k]))) a[k] = b[k];
    }
  }
  if (out.contains("outputs") && m.contains("outputs") && out["outputs"].size() == m["outputs"].size())
    for (size_t i = 0; i < out["outputs"].size(); ++i) merge_one(out["outputs"][i], m["outputs"][i]);
  out["correct"] = out.value("mismatches", int64_t{0}) == 0 && !out.contains("problem");
  return out;
}

TimingDefaults timing_defaults(int min_calls, double min_time_s, int warmup, bool device) {
  return {min_calls > 0 ? min_calls : (device ? 100 : 50), min_time_s >= 0 ? min_time_s : (device ? 0.05 : 0.5),
          warmup > 0 ? warmup : (device ? 10 : 3)};
}

namespace {

/// What the Model run in float64 (the Python worker's compare, where it failed) says of the reference.
std::string fp64_text(const json& errors) {
  if (!errors.contains("reference_fp64") || !errors["reference_fp64"].is_object()) return {};
  const json& f = errors["reference_fp64"];
  const auto share = [](const json& v) { return v.is_number() ? fmt::format("{:.3g}", v.get<double>()) : v.dump(); };
  if (f.value("reference_outside", int64_t{0}) == 0) return {};
  std::string text = fmt::format(
      "; the reference itself is outside the tolerance of the Model run in float64 at {} of {} values (worst {} of it), this "
      "candidate at {} (worst {})",
      f.value("reference_outside", int64_t{0}), f.value("checked", int64_t{0}), share(f.value("reference_tolerance_used", json())),
      f.value("candidate_outside", int64_t{0}), share(f.value("candidate_tolerance_used", json())));
  if (f.value("judge", std::string()) == "float64" && f.contains("unrescued"))
    return text + fmt::format("; {} of the values that differ from eager's are outside the float64 answer's tolerance too",
                              f.value("unrescued", int64_t{0}));
  return text + ": the check asks for eager's own fp32 rounding there (--judge eager)";
}

}  // namespace

std::string judged_text(const json& errors) {
  const int64_t n = errors.value("judged_by_float64", int64_t{0});
  if (n <= 0) return {};
  const json f = errors.value("reference_fp64", json::object());
  const auto share = [](const json& v) { return v.is_number() ? fmt::format("{:.3g}", v.get<double>()) : v.dump(); };
  return fmt::format(
      "{} values differ from torch eager's by more than the tolerance, where eager's fp32 answer is itself outside the tolerance "
      "of the Model run in float64 (at {} of {} values, worst {} of it) and this candidate is within it (worst {}): judged by the "
      "float64 answer there (KernelBench's own check, against eager, fails them; --judge eager to require it)",
      n, f.value("reference_outside", int64_t{0}), f.value("checked", int64_t{0}), share(f.value("reference_tolerance_used", json())),
      share(f.value("candidate_tolerance_used", json())));
}

std::string mismatch_text(const json& errors, std::optional<Tolerance> tol) {
  if (errors.contains("problem") && errors["problem"].is_string()) return errors["problem"].get<std::string>();
  if (!errors.contains("first_mismatch")) return "outputs differ from the reference";
  const json& m = errors["first_mismatch"];
  std::string coord;
  for (const auto& c : m.value("coord", json::array())) coord += (coord.empty() ? "" : ", ") + c.dump();
  std::string text = fmt::format("{} of {} values differ; first at {}[{}] (seed {}, call {}): got {}, want {}",
                                 errors.value("mismatches", 0), errors.value("checked", 0), m.value("output", ""), coord,
                                 m.value("seed", int64_t{0}), m.value("call", 0), m.value("got", json()).dump(),
                                 m.value("want", json()).dump());
  if (tol) text += fmt::format(" (atol {:g}, rtol {:g})", tol->atol, tol->rtol);
  if (m.value("call", 0) == kPerturbedCall)
    text += "; call 5 had the last seed's inputs changed in four places only: an answer cached under a sample of the input values";
  return text + fp64_text(errors);
}

namespace {

void add_warning(ShapeResult& sr, const std::string& text) {
  const std::string before = sr.extra.value("warning", std::string());
  sr.extra["warning"] = before.empty() ? text : before + "; " + text;
}

}  // namespace

void take_clocks(const json& body, ShapeResult& sr) {
  if (!body.contains("clocks")) return;
  sr.extra["clocks"] = body["clocks"];
  if (body["clocks"].value("drift", false)) add_warning(sr, "the SM clock drifted by more than 5% while timing");
}

void take_launch(const json& body, ShapeResult& sr) {
  if (!body.contains("launch") || !body["launch"].is_object()) return;
  const json& l = body["launch"];
  sr.extra["launch"] = l;
  const int late = l.contains("late_starts") ? l["late_starts"].value("candidate", 0) : 0;
  const int calls = l.contains("calls") ? l["calls"].value("candidate", 0) : 0;
  if (calls > 0 && 10 * late > calls)
    add_warning(sr, fmt::format("{} of {} timed calls reached the device after their start event (a hold of {:.2f} ms "
                                "did not cover the host's launch): their spans may hold idle time",
                                late, calls, l.value("hold_ms", 0.0)));
}

void take_wall_clock(const json& body, ShapeResult& sr, std::string_view stream) {
  if (!body.contains("candidate_wall") || !sr.time) return;
  const TimeStats wall = TimeStats::from_json(body["candidate_wall"]);
  const double overhead = body.contains("empty_call_wall") ? TimeStats::from_json(body["empty_call_wall"]).median : 0.0;
  sr.extra["wall_ms"] = wall.to_json();
  sr.extra["empty_call_wall_ms"] = overhead;
  if (wall.q1 > 2.0 * sr.time->median + 2.0 * overhead + 0.05) {
    sr.time = wall;
    sr.extra["timer"] = "wall clock: the call's work did not all run between the events on " + std::string(stream);
  }
}

void take_cost(ShapeResult& sr, std::optional<double> flops, std::optional<double> bytes) {
  if (flops) sr.extra["flops"] = *flops;
  if (bytes) sr.extra["bytes"] = *bytes;
}

void take_bandwidth(ShapeResult& sr, std::optional<double> bytes, const MachinePeaks& peaks, bool from_memory) {
  if (!bytes || peaks.copy_Bps <= 0 || !sr.time) return;
  const double gbps = *bytes / (sr.time->median * 1e-3) / 1e9;
  sr.extra["achieved_GBps"] = gbps;
  // a share of the memory's copy bandwidth only where the bytes came from memory
  if (from_memory) sr.extra["percent_of_copy_bandwidth"] = 100.0 * gbps * 1e9 / peaks.copy_Bps;
}

}  // namespace kfab
