#include "eval/evaluator.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "core/hash.h"
#include "eval/compare.h"
#include "eval/job_evidence.h"
#include "eval/profile.h"
#include "eval/roofline.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string mismatch_text(const json& errors, const Task& task) {
  if (!errors.contains("first_mismatch")) return "outputs differ from the reference";
  const json& m = errors["first_mismatch"];
  std::string coord;
  for (const auto& c : m["coord"]) coord += (coord.empty() ? "" : ", ") + std::to_string(c.get<int64_t>());
  const std::string name = m.value("output", "");
  Tolerance tol;
  for (const auto& o : task.outputs)
    if (o.name == name) tol = task.tolerance_for(o);
  std::string text = fmt::format("{} of {} values differ; first at {}[{}] (seed {}, call {}): got {}, want {} (atol {:g}, rtol {:g})",
                                 errors.value("mismatches", 0), errors.value("checked", 0), name, coord,
                                 m.value("seed", 0), m.value("call", 0), m["got"].dump(), m["want"].dump(), tol.atol, tol.rtol);
  if (m.value("call", 0) == kPerturbedCall)
    text += "; call 5 had the last seed's inputs changed in four places only: an answer cached under a sample of the input values";
  return text;
}

}  // namespace

// A reply the evaluation cannot read (a field missing or of the wrong type) is the runner's failure,
// never kfab's: the candidate shares the runner's process and may have written it.
Expected<Verdict> Evaluator::evaluate(const Task& task, const fs::path& candidate) {
  try {
    return evaluate_unguarded(task, candidate);
  } catch (const nlohmann::json::exception& e) {
    Verdict v;
    v.task = task.name;
    v.candidate = candidate.string();
    v.disposition = Disposition::Crashed;
    v.detail = std::string("the runner's reply could not be read (") + e.what() + "): a candidate may have written to the protocol";
    return v;
  }
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
  const int min_calls = opt_.min_calls > 0 ? opt_.min_calls : (device ? 100 : 50);
  const double min_time_s = opt_.min_time_s >= 0 ? opt_.min_time_s : (device ? 0.05 : 0.5);
  const int warmup = opt_.warmup > 0 ? opt_.warmup : (device ? 10 : 3);
  v.protocol = {{"seeds", opt_.seeds},         {"base_seed", opt_.base_seed}, {"min_calls", min_calls},
                {"min_time_s", min_time_s},     {"warmup", warmup},            {"timeout_s", opt_.runner.timeout_s},
                {"order", "candidate, reference, candidate"},
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

  RunnerOptions ro = opt_.runner;
  ro.for_target(std::string(backend_.target()));
  ro.preopen = device ? std::string(backend_.target()) : std::string();
  RunnerClient runner(ro);
  // A device runner opens the driver (cuInit: a good part of a warm evaluation) while the sources
  // are hashed and looked up in the compile cache.
  if (device) (void)runner.start();

  say("build reference " + task.reference.filename().string());
  auto ref = backend_.build(task.reference);
  if (!ref.ok() && ref.failure().no_space)
    return make_error(ref.failure().message, "free some space, or set KFAB_CACHE_DIR (and TMPDIR) to a folder on another disk");
  if (!ref.ok())
    return make_error(task.reference.string() + ": the task's reference does not build:\n" + ref.failure().message,
                      "fix the reference of task " + task.name);
  say("build " + candidate.filename().string());
  auto cand = backend_.build(candidate);
  if (!cand.ok() && cand.failure().no_space)
    return make_error(cand.failure().message, "free some space, or set KFAB_CACHE_DIR (and TMPDIR) to a folder on another disk");
  if (!cand.ok()) {
    v.disposition = Disposition::CompileFailed;
    v.detail = cand.failure().message;
    return finish();
  }
  v.build = {{"cached", cand.value().cached}, {"seconds", cand.value().seconds}, {"key", cand.value().key}};

  json base = {{"task", task.manifest.string()},
               {"candidate", cand.value().artifact.string()},
               {"reference", ref.value().artifact.string()},
               {"base_seed", opt_.base_seed},
               {"target", backend_.target()}};

  // The device's peaks come first on a device: whether it is a GPU picks the tuning shapes.
  const bool has_cost = !task.cost_flops.empty() || !task.cost_bytes.empty();
  std::optional<MachinePeaks> peaks;
  if (device) {
    say("device peaks");
    peaks = device_peaks(runner, std::string(backend_.target()), false);
    if (peaks && has_cost) v.machine = peaks->to_json();
  }
  const bool gpu_device = backend_.target() == "cuda" || (peaks && peaks->enforce);
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

  json seeds = json::array();
  for (int i = 0; i < opt_.seeds; ++i) seeds.push_back(i);
  std::optional<Disposition> stop;
  std::string incorrect_detail;
  for (auto& sr : v.shapes) {
    say(fmt::format("verify {}{}", format_binding(sr.shape), sr.heldout ? " (held out)" : ""));
    json req = base;
    req["op"] = "verify";
    req["shape"] = sr.shape;
    req["seeds"] = seeds;
    JobOutcome o = interpret(runner.run(req));
    if (o.task_error) return make_error(task.name + ": " + o.detail, "the task's reference or manifest (or the device) is at fault");
    if (o.failure) {
      sr.status = std::string(disposition_name(*o.failure));
      stop = o.failure;
      v.detail = fmt::format("shape {{{}}}: {}", format_binding(sr.shape), o.detail);
      break;
    }
    sr.errors = o.body;
    sr.correct = o.body.value("correct", false);
    sr.status = sr.correct ? "passed" : "incorrect";
    if (!sr.correct && incorrect_detail.empty())
      incorrect_detail = fmt::format("shape {{{}}}{}: {}", format_binding(sr.shape), sr.heldout ? " (held out)" : "",
                                     mismatch_text(o.body, task));
  }
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

  const bool gpu = backend_.target() == "cuda";
  auto measure_peaks = [&](bool again) {
    return device ? device_peaks(runner, std::string(backend_.target()), again) : cpu_peaks(runner, again);
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
    auto b = backend_.build(task.reference_cuda);
    if (!b.ok())
      return make_error(task.reference_cuda.string() + ": the task's GPU baseline does not build:\n" + b.failure().message,
                        "fix reference.cu of task " + task.name);
    base["gpu_baseline"] = b.value().artifact.string();
    v.baseline = "gpu baseline " + task.reference_cuda.filename().string();
  }
  double log_sum = 0.0;
  int timed = 0;
  for (auto& sr : v.shapes) {
    if (sr.heldout) continue;
    say("time " + format_binding(sr.shape));
    json req = base;
    req["op"] = "time";
    req["shape"] = sr.shape;
    req["seed"] = 0;
    req["min_calls"] = min_calls;
    req["min_time_s"] = min_time_s;
    req["max_calls"] = opt_.max_calls;
    req["max_time_s"] = opt_.max_time_s;
    req["warmup"] = warmup;
    JobOutcome o = interpret(runner.run(req));
    if (o.task_error) return make_error(task.name + ": " + o.detail, "the task's reference or manifest is at fault");
    if (o.failure) {
      v.disposition = *o.failure;
      v.detail = fmt::format("shape {{{}}} while timing: {}", format_binding(sr.shape), o.detail);
      if (*o.failure == Disposition::Incorrect) {
        sr.status = "incorrect";
        sr.errors = o.body.value("evidence", json());
      }
      return finish();
    }
    sr.time = TimeStats::from_json(o.body["candidate"]);
    sr.baseline = TimeStats::from_json(o.body["baseline"]);
    if (o.body.contains("replay")) sr.extra["replay"] = o.body["replay"];
    take_clocks(o.body, sr);
    if (o.body.contains("candidate_wall")) sr.extra["timer"] = "device timestamps around the call on the runner's stream";
    take_wall_clock(o.body, sr, "the runner's stream");
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
