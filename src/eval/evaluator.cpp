#include "eval/evaluator.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <future>
#include <random>

#include "core/hash.h"
#include "eval/compare.h"
#include "eval/job_evidence.h"
#include "eval/native_harness.h"
#include "eval/profile.h"
#include "eval/roofline.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

/// The tolerance of the output a mismatch names.
std::optional<Tolerance> tolerance_of(const json& errors, const Task& task) {
  const std::string name = errors.contains("first_mismatch") ? errors["first_mismatch"].value("output", "") : "";
  for (const auto& o : task.outputs)
    if (o.name == name) return task.tolerance_for(o);
  return std::nullopt;
}

/// The verify evidence of a shape: every output's comparison and their sum.
json verify_evidence(const Task& task, const std::vector<CompareStats>& stats) {
  CompareStats all;
  json outputs = json::array();
  for (size_t i = 0; i < stats.size(); ++i) {
    json o = stats[i].to_json();
    o["name"] = task.outputs[i].name;
    outputs.push_back(o);
    all.max_abs = std::max(all.max_abs, stats[i].max_abs);
    all.max_rel = std::max(all.max_rel, stats[i].max_rel);
    all.checked += stats[i].checked;
    all.mismatches += stats[i].mismatches;
    all.nonfinite += stats[i].nonfinite;
    if (!all.first && stats[i].first) all.first = stats[i].first;
  }
  json r = all.to_json();
  r["correct"] = all.ok();
  r["outputs"] = outputs;
  return r;
}

/// What timing one shape gave: the outcome, the timing body the verdict reads (candidate, baseline,
/// walls, clocks, replay, inputs) and, for a timed call whose output was wrong, its evidence.
struct TimedShape {
  JobOutcome outcome;
  json body;
  json evidence;
};

/// Times the candidate and the baseline on one shape, one call per job, alternating which goes first.
/// Every timed call of the candidate gets inputs it has not seen: the timing seed's (never used in
/// verification) changed in four places per float input, anew for each call. After some calls, chosen
/// only once the call is done, and after the last, its output is checked against the trusted
/// runner's answer for exactly those inputs: an answer kept from an earlier call, keyed on call
/// counts, time, cache state or sampled values, does not fit.
TimedShape time_shape(NativeHarness& h, const Task& task, const ShapeBinding& shape, int min_calls, double min_time_s,
                      int max_calls, double max_time_s, int warmup, std::mt19937_64& rng) {
  TimedShape t;
  const int64_t seed = static_cast<int64_t>(rng() >> 2) + 1000;
  json settings = {{"warmup", warmup}, {"flush", true}, {"replay", true}};
  json base_settings = settings;
  // A C++ reference baseline warms up beside the candidate (nothing is timed yet); a GPU baseline is
  // replayed as a CUDA graph exactly when the candidate is, so it waits for the candidate's decision.
  std::future<JobOutcome> early;
  const bool overlapped = !h.has_gpu_baseline();
  if (overlapped) {
    base_settings["replay"] = false;
    early = std::async(std::launch::async, [&] { return h.prepare_timing(false, shape, seed, base_settings); });
  }
  t.outcome = h.prepare_timing(true, shape, seed, settings);
  JobOutcome base_outcome = overlapped ? early.get() : JobOutcome{};
  if (!t.outcome.ok) return t;
  const json cand_prep = t.outcome.body;
  const bool replayed = cand_prep.contains("replay") && cand_prep["replay"].value("used", false);
  if (!overlapped) {
    if (replayed) base_settings["force_replay"] = true;
    else base_settings["replay"] = false;
    base_outcome = h.prepare_timing(false, shape, seed, base_settings);
  }
  t.outcome = base_outcome;
  if (!t.outcome.ok) return t;
  const json base_prep = t.outcome.body;

  const bool on_device = cand_prep.contains("empty_call_wall");
  const int max_checks = on_device ? 4 : 8;  // on a device each check runs the C++ reference at GPU sizes
  std::vector<double> cand, base, wall;
  int checks = 0;
  bool last_checked = false;
  uint64_t last_perturb = 0;
  MappedOutputs want;
  auto check = [&](uint64_t perturb, int n) -> bool {
    t.outcome = h.fetch();
    if (!t.outcome.ok) return false;
    t.outcome = h.reference(shape, seed, perturb, want, true);
    if (!t.outcome.ok) return false;
    const std::vector<HostTensor>* got = h.candidate_outputs();
    if (got == nullptr) {
      t.outcome = JobOutcome{};
      t.outcome.failure = Disposition::Crashed;
      t.outcome.detail = "the candidate's runner shrank the shared memory that holds its outputs";
      return false;
    }
    CompareStats st;
    for (size_t i = 0; i < task.outputs.size(); ++i)
      compare_output((*got)[i], want.tensors[i], task.tolerance_for(task.outputs[i]), task.outputs[i].name, seed, 3, st);
    ++checks;
    if (st.ok()) return true;
    t.outcome = JobOutcome{};
    t.outcome.failure = Disposition::Incorrect;
    t.outcome.detail = "the output of timed call " + std::to_string(n + 1) +
                       " does not match the reference for its inputs: work was skipped while timed, or an answer "
                       "computed for other inputs was served";
    t.evidence = st.to_json();
    return false;
  };
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const int n = static_cast<int>(cand.size());
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (n >= max_calls) break;
    if (n >= min_calls && elapsed >= min_time_s) break;
    if (n >= 1 && elapsed >= max_time_s) break;
    for (int k = 0; k < 2; ++k) {
      const bool is_cand = (k == 0) == (n % 2 == 0);
      if (!is_cand) {
        t.outcome = h.timed_baseline_call(true);
        if (!t.outcome.ok) return t;
        base.push_back(t.outcome.body.value("ms", 0.0));
        continue;
      }
      const uint64_t perturb = rng() | 1;
      t.outcome = h.timed_call(perturb, true, n % 10 == 0);
      if (!t.outcome.ok) return t;
      cand.push_back(t.outcome.body.value("ms", 0.0));
      if (t.outcome.body.contains("wall_ms")) wall.push_back(t.outcome.body.value("wall_ms", 0.0));
      last_perturb = perturb;
      last_checked = checks < max_checks && rng() % 8 == 0;
      if (last_checked && !check(perturb, n)) return t;
    }
  }
  if (!last_checked && !check(last_perturb, static_cast<int>(cand.size()) - 1)) return t;
  t.outcome = h.end_timing(true);
  if (!t.outcome.ok) return t;
  const json cand_end = t.outcome.body;
  t.outcome = h.end_timing(false);
  if (!t.outcome.ok) return t;
  t.body = {{"candidate", summarize(cand).to_json()}, {"baseline", summarize(base).to_json()},
            {"inputs", {{"seed", seed}, {"perturbed", "four elements of every float input, at places drawn anew, changed before each timed call"},
                        {"checked_calls", checks}}}};
  if (on_device) {
    t.body["candidate_wall"] = summarize(wall).to_json();
    t.body["empty_call_wall"] = cand_prep["empty_call_wall"];
  }
  if (cand_prep.contains("replay")) {
    json note = cand_prep["replay"];
    if (replayed && h.has_gpu_baseline() && base_prep.contains("replay") && !base_prep["replay"].value("used", false))
      note["baseline"] = "not replayed: " + base_prep["replay"].value("why", std::string());
    t.body["replay"] = note;
  }
  if (cand_end.contains("clocks")) t.body["clocks"] = cand_end["clocks"];
  t.outcome.ok = true;
  return t;
}

}  // namespace

Expected<Verdict> Evaluator::evaluate(const Task& task, const fs::path& candidate) {
  return guarded_evaluation(task.name, candidate.string(), [&] { return evaluate_unguarded(task, candidate); });
}

Expected<Verdict> Evaluator::evaluate_unguarded(const Task& task, const fs::path& candidate) {
  const auto start = std::chrono::steady_clock::now();
  auto say = [&](const std::string& s) {
    if (opt_.progress) opt_.progress(s);
  };
  Verdict v;
  v.task = task.name;
  v.target = std::string(backend_.target());
  v.dsl = std::string(backend_.dsl());
  v.candidate = candidate.string();
  if (backend_.target() != "cpu") v.baseline = "cpu reference (the task's oracle, timed on the host)";
  // Defaults depend on the target: a device call is cheap to repeat and noisier one by one.
  const bool device = backend_.target() != "cpu";
  const auto [min_calls, min_time_s, warmup] = timing_defaults(opt_.min_calls, opt_.min_time_s, opt_.warmup, device);
  v.protocol = {{"seeds", opt_.seeds},         {"base_seed", opt_.base_seed}, {"min_calls", min_calls},
                {"min_time_s", min_time_s},     {"warmup", warmup},            {"timeout_s", opt_.runner.timeout_s},
                {"order", "reference (trusted runner), candidate, candidate"},
                {"isolation", "the reference runs in a trusted runner that never loads candidate code; outputs are "
                              "compared by kfab while the candidate's runner is stopped"},
                {"timed_inputs", "the timing seed's inputs (never verified), four elements changed anew before each "
                                 "timed call; sampled calls and the last checked against the reference"},
                {"flush", backend_.target() == "cpu" ? "clflushopt of every operand before each timed call"
                                                      : "a read of 2x L2 on the stream before each timed call"},
                {"timer", backend_.target() == "cpu" ? "steady_clock around the call"
                                                      : "CUDA events on the runner's stream; context synchronized after each call"}};
  auto finish = [&]() -> Expected<Verdict> {
    v.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return v;
  };

  auto source = read_file(candidate);
  if (!source) return Unexpected{source.error()};
  v.candidate_hash = hash_hex(*source);

  const std::string target(backend_.target());
  json base = {{"task", task.manifest.string()}, {"base_seed", opt_.base_seed}, {"target", target}};
  // Both runners start now (a device runner opens its driver: a good part of a warm evaluation) while
  // the sources are hashed and looked up in the compile cache.
  NativeHarness h(task, target, opt_.runner, base);
  h.start();

  // The reference, the candidate and (on a GPU) the task's GPU baseline build at once: a cold
  // evaluation waits for the slowest compiler, not for their sum.
  say("build reference " + task.reference.filename().string() + " and " + candidate.filename().string());
  const auto build_start = std::chrono::steady_clock::now();
  auto ref_build = std::async(std::launch::async, [&] { return backend_.build(task.reference); });
  const bool gpu_target = target == "cuda";
  std::future<decltype(backend_.build(task.reference))> baseline_build;
  if (gpu_target && !task.reference_cuda.empty() && opt_.time)
    baseline_build = std::async(std::launch::async, [&] { return backend_.build(task.reference_cuda); });
  auto cand = backend_.build(candidate);
  auto ref = ref_build.get();
  if (!ref.ok() && ref.failure().no_space)
    return make_error(ref.failure().message, "free some space, or set KFAB_CACHE_DIR (and TMPDIR) to a folder on another disk");
  if (!ref.ok())
    return make_error(task.reference.string() + ": the task's reference does not build:\n" + ref.failure().message,
                      "fix the reference of task " + task.name);
  if (!cand.ok() && cand.failure().no_space)
    return make_error(cand.failure().message, "free some space, or set KFAB_CACHE_DIR (and TMPDIR) to a folder on another disk");
  if (!cand.ok()) {
    v.disposition = Disposition::CompileFailed;
    v.detail = cand.failure().message;
    return finish();
  }
  v.build = {{"cached", cand.value().cached}, {"seconds", cand.value().seconds}, {"key", cand.value().key},
             {"wall_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - build_start).count()}};
  h.set_artifacts(cand.value().artifact.string(), ref.value().artifact.string());

  // The device's peaks come first on a device: whether it is a GPU picks the tuning shapes.
  const bool has_cost = !task.cost_flops.empty() || !task.cost_bytes.empty();
  std::optional<MachinePeaks> peaks;
  if (device) {
    say("device peaks");
    peaks = device_peaks(h.trusted(), target, false);
    if (peaks && has_cost) v.machine = peaks->to_json();
  }
  const bool gpu_device = target == "cuda" || (peaks && peaks->enforce);
  const std::vector<ShapeBinding>& tune = task.tune_for(gpu_device);
  if (gpu_device && !task.tune_gpu.empty()) v.protocol["tuning_shapes"] = "shapes.gpu.tune (a GPU)";
  std::vector<std::pair<const ShapeBinding*, bool>> shapes;
  for (const auto& s : tune) shapes.emplace_back(&s, false);
  if (opt_.heldout)
    for (const auto& s : task.heldout) shapes.emplace_back(&s, true);
  for (const auto& [s, held] : shapes) {
    ShapeResult r;
    r.shape = *s;
    r.heldout = held;
    v.shapes.push_back(std::move(r));
  }

  // Changes of the inputs that no runner can foresee: drawn here, for each perturbed call.
  std::mt19937_64 rng(std::random_device{}());
  auto fresh = [&] { return rng() | 1; };
  auto outputs_of = [&](const std::vector<HostTensor>* got, const MappedOutputs& want, int64_t seed, int call,
                        std::vector<CompareStats>& stats) -> std::optional<std::string> {
    if (got == nullptr) return "the candidate's runner shrank the shared memory that holds its outputs";
    for (size_t i = 0; i < task.outputs.size(); ++i)
      compare_output((*got)[i], want.tensors[i], task.tolerance_for(task.outputs[i]), task.outputs[i].name, seed, call, stats[i]);
    return std::nullopt;
  };

  std::optional<Disposition> stop;
  std::string incorrect_detail;
  const auto verify_start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  for (auto& sr : v.shapes) {
    say(fmt::format("verify {}{}", format_binding(sr.shape), sr.heldout ? " (held out)" : ""));
    std::vector<CompareStats> stats(task.outputs.size());
    MappedOutputs want;
    auto step = [&](int64_t seed, uint64_t perturb, std::initializer_list<std::pair<int, int>> calls) -> JobOutcome {
      JobOutcome r = h.reference(sr.shape, seed, perturb, want);
      if (!r.ok) return r;
      for (const auto& [call, pattern] : calls) {
        JobOutcome o = h.call(sr.shape, seed, perturb, pattern);
        if (!o.ok) return o;
        if (auto bad = outputs_of(h.candidate_outputs(), want, seed, call, stats)) {
          JobOutcome f;
          f.failure = Disposition::Crashed;
          f.detail = *bad;
          return f;
        }
      }
      return r;
    };
    JobOutcome o;
    o.ok = true;
    // Each seed: the candidate twice, its outputs poisoned with a different pattern each time (both
    // calls must write every element), against the reference's answer from the trusted runner.
    for (int seed = 0; seed < opt_.seeds && o.ok; ++seed) o = step(seed, 0, {{1, 0x5a}, {2, 0xa5}});
    // The last seed's inputs changed in four places: a candidate that caches its answer under a sample
    // of the input values replays a stale answer here.
    if (o.ok && opt_.seeds > 0) o = step(opt_.seeds - 1, fresh(), {{kPerturbedCall, 0x5a}});
    if (o.task_error) return make_error(task.name + ": " + o.detail, "the task's reference or manifest (or the device) is at fault");
    if (o.failure) {
      sr.status = std::string(disposition_name(*o.failure));
      stop = o.failure;
      v.detail = fmt::format("shape {{{}}}: {}", format_binding(sr.shape), o.detail);
      break;
    }
    sr.errors = verify_evidence(task, stats);
    sr.correct = sr.errors.value("correct", false);
    sr.status = sr.correct ? "passed" : "incorrect";
    if (!sr.correct && incorrect_detail.empty())
      incorrect_detail = fmt::format("shape {{{}}}{}: {}", format_binding(sr.shape), sr.heldout ? " (held out)" : "",
                                     mismatch_text(sr.errors, tolerance_of(sr.errors, task)));
  }
  v.extra["phases_s"] = {{"build", v.build.value("wall_s", 0.0)}, {"verify", since(verify_start)}};
  if (stop) {
    v.disposition = *stop;
    return finish();
  }
  if (!incorrect_detail.empty()) {
    v.disposition = Disposition::Incorrect;
    v.detail = incorrect_detail;
    return finish();
  }
  if (!opt_.time) {
    v.detail = "correct on every shape; not timed";
    return finish();
  }

  const bool gpu = target == "cuda";
  auto measure_peaks = [&](bool again) {
    return device ? device_peaks(h.trusted(), target, again) : cpu_peaks(h.trusted(), again);
  };
  if (!has_cost) {
    peaks.reset();
  } else if (!device) {
    say("machine peaks");
    peaks = measure_peaks(false);
    if (peaks) v.machine = peaks->to_json();
  }
  if (gpu && !task.reference_cuda.empty()) {
    say("build GPU baseline " + task.reference_cuda.filename().string());
    auto b = baseline_build.valid() ? baseline_build.get() : backend_.build(task.reference_cuda);
    if (!b.ok())
      return make_error(task.reference_cuda.string() + ": the task's GPU baseline does not build:\n" + b.failure().message,
                        "fix reference.cu of task " + task.name);
    h.set_gpu_baseline(b.value().artifact.string());
    v.baseline = "gpu baseline " + task.reference_cuda.filename().string();
  }
  double log_sum = 0.0;
  int timed = 0;
  const auto time_start = std::chrono::steady_clock::now();
  for (auto& sr : v.shapes) {
    if (sr.heldout) continue;
    say("time " + format_binding(sr.shape));
    TimedShape t = time_shape(h, task, sr.shape, min_calls, min_time_s, opt_.max_calls, opt_.max_time_s, warmup, rng);
    if (t.outcome.task_error) return make_error(task.name + ": " + t.outcome.detail, "the task's reference or manifest is at fault");
    if (t.outcome.failure) {
      v.disposition = *t.outcome.failure;
      v.detail = fmt::format("shape {{{}}} while timing: {}", format_binding(sr.shape), t.outcome.detail);
      if (*t.outcome.failure == Disposition::Incorrect) {
        sr.status = "incorrect";
        sr.errors = t.evidence;
      }
      return finish();
    }
    const json& body = t.body;
    sr.time = TimeStats::from_json(body["candidate"]);
    sr.baseline = TimeStats::from_json(body["baseline"]);
    sr.extra["inputs"] = body["inputs"];
    if (body.contains("replay")) sr.extra["replay"] = body["replay"];
    take_clocks(body, sr);
    if (body.contains("candidate_wall")) sr.extra["timer"] = "device timestamps around the call on the runner's stream";
    take_wall_clock(body, sr, "the runner's stream");
    if (peaks) {
      // Before rejecting, the peaks are measured again: the bound must not rest on a measurement
      // taken on a busy machine (the decision keeps the higher figures, with a margin on top).
      const RooflineDecision rd = decide_roofline(sr.time->median, task.flops(sr.shape), task.bytes(sr.shape), *peaks, peaks->enforce, [&] {
        say("machine peaks, measured again before a rejection");
        return measure_peaks(true);
      });
      v.machine = peaks->to_json();
      sr.bound_ms = rd.bound_ms;
      if (rd.bound_ms) sr.extra["roofline"] = rd.compared_with;
      if (rd.below_bound && !peaks->enforce)
        sr.extra["warning"] = "below the roofline bound, which is not enforced on this device: its caches cannot be flushed";
      if (rd.reject) {
        v.disposition = Disposition::Rejected;
        v.detail = fmt::format("shape {{{}}}: {}", format_binding(sr.shape), rd.text);
        sr.status = "rejected";
        return finish();
      }
    }
    take_cost(sr, task.flops(sr.shape), task.bytes(sr.shape));
    if (peaks) take_bandwidth(sr, task.bytes(sr.shape), *peaks);
    log_sum += std::log(sr.baseline->median / sr.time->median);
    ++timed;
  }
  if (timed > 0) v.speedup = std::exp(log_sum / timed);
  v.extra["phases_s"]["time"] = since(time_start);
  if (opt_.profile) {
    if (!gpu) {
      v.profile = {{"error", "profiling is for the cuda target (ncu)"}};
    } else {
      say("profile with ncu");
      const ShapeBinding& shape = tune.front();
      auto p = ncu_profile(task, cand.value().artifact, ref.value().artifact, "cuda", shape, opt_.base_seed,
                           std::max(120.0, opt_.runner.timeout_s));
      v.profile = p ? json{{"shape", shape}, {"kernels", *p}} : json{{"error", p.error().message}};
    }
  }
  v.detail = fmt::format("correct on {} shapes x {} seeds; {:.3f}x the {} (geometric mean over {} tuning shapes)",
                         v.shapes.size(), opt_.seeds, v.speedup.value_or(0.0), v.baseline, timed);
  return finish();
}

}  // namespace kfab
