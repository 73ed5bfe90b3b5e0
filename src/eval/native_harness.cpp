#include "eval/native_harness.h"

#include <chrono>
#include <future>

#include "core/compare.h"
#include "eval/evaluator.h"
#include "eval/profile.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

Error no_space(const BuildFailure& f) {
  return Error{f.message, "free some space, or set KFAB_CACHE_DIR (and TMPDIR) to a folder on another disk"};
}

}  // namespace

NativeHarness::NativeHarness(Task task, std::string target)
    : task_(std::move(task)), target_(std::move(target)), tgt_(find_target(target_)), backend_(make_backend(target_)) {}

fs::path NativeHarness::task_baseline() const {
  // a task's [reference] names its own baseline per target by the target's key (`cuda = ...`)
  return tgt_->task_baseline == "cuda" ? task_.reference_cuda : fs::path();
}

void NativeHarness::end() {
  runners_.reset();
  want_ = MappedOutputs{};
  if (baseline_build_.valid()) baseline_build_.wait();
  baseline_build_ = {};
  opt_ = nullptr;
}

Expected<std::vector<ShapeCase>> NativeHarness::begin(const fs::path& candidate, const EvalOptions& opt, Verdict& v) {
  opt_ = &opt;
  auto say = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  if (!backend_ || tgt_ == nullptr) return make_error("unknown target \"" + target_ + "\"", "accepted: " + target_names());
  v.dsl = std::string(backend_->dsl());
  if (!tgt_->on_host) v.baseline = "cpu reference (the task's oracle, timed on the host)";
  v.protocol.update({{"order", "reference (trusted runner), candidate, candidate"},
                     {"isolation", "the reference runs in a trusted runner that never loads candidate code; outputs are "
                                   "compared by kfab while the candidate's runner is stopped"},
                     {"timed_inputs", "the timing seed's inputs (never verified), four elements changed anew before each "
                                      "timed call; sampled calls and the last checked against the reference"},
                     {"flush", tgt_->flush},
                     {"timer", tgt_->timer}});

  json tolerances = json::object();
  for (const auto& o : task_.outputs) {
    const Tolerance t = tolerance(o);
    tolerances[o.name] = {{"atol", t.atol}, {"rtol", t.rtol}};
  }
  v.protocol["tolerance"] = {{"outputs", tolerances},
                             {"source", opt.atol || opt.rtol ? "--atol/--rtol over the task's" : "the task's (per output, else its dtype's default)"}};

  // Both runners start now (a device runner opens its driver: a good part of a warm evaluation) while
  // the sources are hashed and looked up in the compile cache.
  json base = {{"task", task_.manifest.string()}, {"base_seed", opt.base_seed}, {"target", target_}};
  RunnerOptions ro = opt.runner;
  ro.perf_events = opt.profile && tgt_->on_host;  // --profile on the CPU: the runner counts its calls
  host_wait_policy(ro, tgt_->on_host);
  runners_ = std::make_unique<RunnerPair>(task_, target_, ro, base);
  runners_->start();

  // The reference, the candidate and (on a GPU) the task's GPU baseline build at once: a cold
  // evaluation waits for the slowest compiler, not for their sum.
  say("build reference " + task_.reference.filename().string() + " and " + candidate.filename().string());
  const auto build_start = std::chrono::steady_clock::now();
  auto ref_build = std::async(std::launch::async, [&] { return backend_->build(task_.reference); });
  gpu_baseline_error_.clear();
  if (!task_baseline().empty() && opt.time) {
    baseline_build_ = std::async(std::launch::async, [this] { return backend_->build(task_baseline()); });
    v.baseline = "gpu baseline " + task_baseline().filename().string();
  }
  // On a GPU the trusted runner, idle while nvcc works, measures the device's peaks meanwhile (a cold
  // cache measures the copy bandwidth once): they are needed right after the build. An OpenCL device
  // may be this CPU, which the compilers keep busy: it is measured after the build.
  has_cost_ = !task_.cost_flops.empty() || !task_.cost_bytes.empty();
  std::future<std::optional<MachinePeaks>> peaks_early;
  const bool peaks_during_build = tgt_->gpu;
  if (peaks_during_build)
    peaks_early = std::async(std::launch::async, [this] { return device_peaks(runners_->trusted(), target_, false); });
  auto cand = backend_->build(candidate);
  auto ref = ref_build.get();
  const double build_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - build_start).count();
  device_peaks_.reset();
  if (peaks_early.valid()) device_peaks_ = peaks_early.get();
  if (!ref.ok() && ref.failure().no_space) return Unexpected{no_space(ref.failure())};
  if (!ref.ok())
    return make_error(task_.reference.string() + ": the task's reference does not build:\n" + ref.failure().message,
                      "fix the reference of task " + task_.name);
  if (!cand.ok() && cand.failure().no_space) return Unexpected{no_space(cand.failure())};
  if (!cand.ok()) {
    v.disposition = Disposition::CompileFailed;
    v.detail = cand.failure().message;
    return std::vector<ShapeCase>{};
  }
  v.build = {{"cached", cand.value().cached}, {"seconds", cand.value().seconds}, {"key", cand.value().key},
             {"wall_s", build_wall_s}};
  candidate_artifact_ = cand.value().artifact.string();
  reference_artifact_ = ref.value().artifact.string();
  runners_->set_artifacts(candidate_artifact_, reference_artifact_);

  // The device's peaks come first on a device: whether it is a GPU picks the tuning shapes.
  if (!tgt_->on_host && !peaks_during_build) {
    say("device peaks");
    device_peaks_ = device_peaks(runners_->trusted(), target_, false);
  }
  if (device_peaks_ && has_cost_) v.machine = device_peaks_->to_json();
  const bool gpu_device = tgt_->gpu || (device_peaks_ && device_peaks_->enforce);
  if (gpu_device && !task_.tune_gpu.empty()) v.protocol["tuning_shapes"] = "shapes.gpu.tune (a GPU)";
  std::vector<ShapeCase> shapes;
  for (const auto& s : task_.tune_for(gpu_device)) shapes.push_back({s, json(), false});
  if (opt.heldout)
    for (const auto& s : task_.heldout) shapes.push_back({s, json(), true});
  return shapes;
}

JobOutcome NativeHarness::reference(ShapeCase& s, int index, uint64_t perturb) {
  return runners_->reference(s.shape, index, perturb, want_);
}

JobOutcome NativeHarness::compare_last(const MappedOutputs& want, int64_t seed, int call) {
  const std::vector<HostTensor>* got = runners_->candidate_outputs();
  if (got == nullptr) return JobOutcome::failed(Disposition::Crashed, "the candidate's runner shrank the shared memory that holds its outputs");
  CompareStats all;
  json outputs = json::array();
  for (size_t i = 0; i < task_.outputs.size(); ++i) {
    CompareStats st;
    compare_output((*got)[i], want.tensors[i], tolerance(task_.outputs[i]), task_.outputs[i].name, seed, call, st);
    json o = st.to_json();
    o["name"] = task_.outputs[i].name;
    outputs.push_back(o);
    all.max_abs = std::max(all.max_abs, st.max_abs);
    all.max_rel = std::max(all.max_rel, st.max_rel);
    all.tol_used = std::max(all.tol_used, st.tol_used);
    all.checked += st.checked;
    all.mismatches += st.mismatches;
    all.nonfinite += st.nonfinite;
    if (!all.first && st.first) all.first = st.first;
  }
  JobOutcome o;
  o.ok = true;
  o.body = all.to_json();
  o.body["correct"] = all.ok();
  o.body["outputs"] = outputs;
  return o;
}

JobOutcome NativeHarness::call(const ShapeCase& s, int index, uint64_t perturb, int call, int pattern) {
  JobOutcome o = runners_->call(s.shape, index, perturb, pattern);
  if (!o.ok) return o;
  return compare_last(want_, index, call);
}

Tolerance NativeHarness::tolerance(const TensorSpec& out) const {
  Tolerance t = task_.tolerance_for(out);
  if (opt_ && opt_->atol) t.atol = *opt_->atol;
  if (opt_ && opt_->rtol) t.rtol = *opt_->rtol;
  return t;
}

std::optional<Tolerance> NativeHarness::tolerance_of(const json& errors) const {
  const std::string name = errors.contains("first_mismatch") ? errors["first_mismatch"].value("output", "") : "";
  for (const auto& o : task_.outputs)
    if (o.name == name) return tolerance(o);
  return std::nullopt;
}

std::vector<std::string> NativeHarness::baselines(const ShapeCase&) {
  if (!task_baseline().empty() && !runners_->has_gpu_baseline()) {
    // The GPU baseline (built beside the candidate) is timed in place of the C++ reference.
    if (opt_ && opt_->progress) opt_->progress("build GPU baseline " + task_baseline().filename().string());
    auto b = baseline_build_.valid() ? baseline_build_.get() : backend_->build(task_baseline());
    if (b.ok()) runners_->set_gpu_baseline(b.value().artifact.string());
    else gpu_baseline_error_ = b.failure().message;
  }
  return {"baseline"};
}

JobOutcome NativeHarness::prepare_timing(const ShapeCase& s, int64_t seed, int warmup) {
  if (!gpu_baseline_error_.empty()) {
    JobOutcome o;
    o.task_error = true;
    o.detail = task_.reference_cuda.string() + ": the task's GPU baseline does not build:\n" + gpu_baseline_error_;
    return o;
  }
  RunnerPair& h = *runners_;
  walls_.clear();
  cand_prep_ = base_prep_ = cand_end_ = json();
  json settings = {{"warmup", warmup}, {"flush", true}, {"replay", true}};
  json base_settings = settings;
  // A C++ reference baseline warms up beside the candidate (nothing is timed yet); a GPU baseline is
  // replayed as a CUDA graph exactly when the candidate is, so it waits for the candidate's decision.
  std::future<JobOutcome> early;
  const bool overlapped = !h.has_gpu_baseline();
  if (overlapped) {
    base_settings["replay"] = false;
    early = std::async(std::launch::async, [&] { return h.prepare_timing(false, s.shape, seed, base_settings); });
  }
  JobOutcome c = h.prepare_timing(true, s.shape, seed, settings);
  JobOutcome b = overlapped ? early.get() : JobOutcome{};
  if (!c.ok) return c;
  cand_prep_ = c.body;
  const bool replayed = cand_prep_.contains("replay") && cand_prep_["replay"].value("used", false);
  if (!overlapped) {
    if (replayed) base_settings["force_replay"] = true;
    else base_settings["replay"] = false;
    b = h.prepare_timing(false, s.shape, seed, base_settings);
  }
  if (!b.ok) return b;
  base_prep_ = b.body;
  return c;
}

JobOutcome NativeHarness::timed_call(uint64_t perturb, bool clocks) {
  const bool counting = opt_ && opt_->profile && tgt_->on_host;
  JobOutcome o = runners_->timed_call(perturb, true, clocks, counting);
  if (o.ok && o.body.contains("wall_ms")) walls_.push_back(o.body.value("wall_ms", 0.0));
  if (o.ok && o.body.contains("counters")) {
    for (const auto& [k, v] : o.body["counters"].items()) counters_[k] = counters_.value(k, uint64_t{0}) + v.get<uint64_t>();
    counters_missing_ = o.body.value("counters_missing", std::string());
    ++counted_calls_;
    counted_ms_ += o.body.value("ms", 0.0);
  }
  return o;
}

JobOutcome NativeHarness::timed_baseline(const std::string&) { return runners_->timed_baseline_call(true); }

JobOutcome NativeHarness::check_timed(const ShapeCase& s, int64_t seed, uint64_t perturb) {
  JobOutcome o = runners_->fetch();
  if (!o.ok) return o;
  MappedOutputs want;
  o = runners_->reference(s.shape, seed, perturb, want, true);
  if (!o.ok) return o;
  return compare_last(want, seed, 3);
}

JobOutcome NativeHarness::end_timing() {
  JobOutcome c = runners_->end_timing(true);
  if (!c.ok) return c;
  cand_end_ = c.body;
  return runners_->end_timing(false);
}

void NativeHarness::describe_timing(const ShapeCase&, ShapeResult& sr, const std::map<std::string, std::vector<double>>&) {
  json body;
  const bool on_device = cand_prep_.contains("empty_call_wall");
  if (on_device) {
    body["candidate_wall"] = summarize(walls_).to_json();
    body["empty_call_wall"] = cand_prep_["empty_call_wall"];
  }
  if (cand_prep_.contains("replay")) {
    json note = cand_prep_["replay"];
    const bool replayed = note.value("used", false);
    if (replayed && runners_->has_gpu_baseline() && base_prep_.contains("replay") && !base_prep_["replay"].value("used", false))
      note["baseline"] = "not replayed: " + base_prep_["replay"].value("why", std::string());
    sr.extra["replay"] = note;
  }
  if (cand_end_.contains("clocks")) body["clocks"] = cand_end_["clocks"];
  take_clocks(body, sr);
  if (on_device) sr.extra["timer"] = "device timestamps around the call on the runner's stream";
  take_wall_clock(body, sr, "the runner's stream");
}

std::optional<MachinePeaks> NativeHarness::peaks(bool again) {
  if (!has_cost_) return std::nullopt;
  if (!tgt_->on_host) {
    if (again) device_peaks_ = device_peaks(runners_->trusted(), target_, true);
    return device_peaks_;
  }
  if (opt_ && opt_->progress && !again) opt_->progress("machine peaks");
  return cpu_peaks(runners_->trusted(), again);
}

/// --profile on the CPU: the counters of every timed call of the candidate, per call, with what they
/// say (instructions per cycle, the cache-miss share, the bytes those misses moved per second).
json cpu_profile(const json& sums, int calls, double ms, const std::string& missing) {
  json per = json::object();
  for (const auto& [k, v] : sums.items()) per[k] = static_cast<double>(v.get<uint64_t>()) / std::max(1, calls);
  json p = {{"counters", "perf events of the candidate's runner (user space), read around each timed call outside its timed span"},
            {"calls", calls}, {"per_call", per}, {"hardware", !sums.contains("cycles") ? json(false) : json(true)}};
  if (sums.contains("cycles") && sums.contains("instructions") && sums["cycles"].get<uint64_t>() > 0)
    p["instructions_per_cycle"] = static_cast<double>(sums["instructions"].get<uint64_t>()) / static_cast<double>(sums["cycles"].get<uint64_t>());
  if (sums.contains("cache_misses") && sums.contains("cache_references") && sums["cache_references"].get<uint64_t>() > 0)
    p["cache_miss_share"] = static_cast<double>(sums["cache_misses"].get<uint64_t>()) / static_cast<double>(sums["cache_references"].get<uint64_t>());
  if (sums.contains("cache_misses") && ms > 0)  // a last-level miss moves a 64-byte line from memory
    p["miss_bandwidth_GBps"] = static_cast<double>(sums["cache_misses"].get<uint64_t>()) * 64.0 / (ms * 1e6);
  if (!missing.empty())
    p["why_no_hardware"] = per.empty() ? "no counters at all here: " + missing
                                       : "no hardware counters here: " + missing + "; the kernel's software ones are shown";
  return p;
}

void NativeHarness::after_timing(Verdict& v) {
  if (!opt_ || !opt_->profile) return;
  if (tgt_->on_host) {
    v.profile = counted_calls_ > 0 ? cpu_profile(counters_, counted_calls_, counted_ms_, counters_missing_)
                                   : json{{"error", "no timed call was counted"}};
    return;
  }
  if (tgt_->profiler != "ncu") {
    std::string with;
    for (const Target* t : targets())
      if (!t->profiler.empty()) with += (with.empty() ? "" : ", ") + std::string(t->name) + " (" + std::string(t->profiler) + ")";
    v.profile = {{"error", "profiling is for targets with a profiler: " + with}};
    return;
  }
  if (opt_->progress) opt_->progress("profile with ncu");
  const ShapeBinding& shape = task_.tune_for(true).front();
  auto p = ncu_profile(task_, candidate_artifact_, reference_artifact_, target_, shape, opt_->base_seed,
                       std::max(120.0, opt_->runner.timeout_s));
  v.profile = p ? json{{"shape", shape}, {"kernels", *p}} : json{{"error", p.error().message}};
}

}  // namespace kfab
