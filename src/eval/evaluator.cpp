#include "eval/evaluator.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

#include "backends/target.h"
#include "core/hash.h"
#include "core/compare.h"
#include "eval/device_lock.h"
#include "eval/native_harness.h"
#include "eval/noise.h"
#include "eval/torch_harness.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// What timing one shape gave: the outcome (ok, or what stopped it), every timed call's ms by name, the
/// inputs' account and, for a timed call whose output was wrong, its comparison.
struct TimedShape {
  JobOutcome outcome;
  std::vector<std::string> baselines;  ///< what the candidate was timed against, the speedup's first
  std::map<std::string, std::vector<double>> times;
  json inputs;
  json evidence;
  TimingSeen seen;  ///< the host's load over the timed calls, the candidate's CPU time per call (CPU)
};

/// Times the candidate and the baselines on one shape, one call per job, the order rotating; with a
/// second harness (`kfab compare`), its candidate too ("other"), in the same rotation. Every timed call
/// of a candidate gets inputs it has not seen: the timing seed's (never used in verification) changed in
/// four places per float input, anew for each call. After some calls, chosen only once the call is
/// done, and after the last, its output is checked against the trusted answer for exactly those inputs:
/// an answer kept from an earlier call, keyed on call counts, time, cache state or sampled values, does
/// not fit.
TimedShape time_shape(const std::vector<Harness*>& hs, const ShapeCase& sc, int min_calls, double min_time_s, int max_calls,
                      double max_time_s, int warmup, int max_checks, std::mt19937_64& rng) {
  TimedShape t;
  const int64_t seed = static_cast<int64_t>(rng() >> 12) + 1000;
  static const char* const kNames[] = {"candidate", "other"};
  t.baselines = hs[0]->baselines(sc);
  std::vector<std::string> order(kNames, kNames + hs.size());
  order.insert(order.end(), t.baselines.begin(), t.baselines.end());
  for (Harness* h : hs) {
    if (h != hs[0]) h->baselines(sc);  // its GPU baseline built, as the first's: their timing jobs match
    t.outcome = h->prepare_timing(sc, seed, warmup);
    if (!t.outcome.ok) return t;
  }
  struct Checked {
    int checks = 0;
    bool last_checked = false;
    uint64_t last_perturb = 0;
  };
  std::vector<Checked> state(hs.size());
  auto check = [&](size_t k, uint64_t perturb, int n) -> bool {
    t.outcome = hs[k]->check_timed(sc, seed, perturb);
    if (!t.outcome.ok) return false;
    ++state[k].checks;
    if (t.outcome.body.value("correct", false)) return true;
    t.evidence = t.outcome.body;
    t.outcome = JobOutcome{};
    t.outcome.failure = Disposition::Incorrect;
    t.outcome.detail = std::string(k ? "the other candidate: " : "") + "the output of timed call " + std::to_string(n + 1) +
                       " does not match the reference for its inputs: work was skipped while timed, or an answer "
                       "computed for other inputs was served";
    return false;
  };
  std::vector<double>& cand = t.times["candidate"];
  HostLoad load;
  load.begin();
  const auto start = Clock::now();
  for (;;) {
    const int n = static_cast<int>(cand.size());
    const double elapsed = since(start);
    if (n >= max_calls || (n >= min_calls && elapsed >= min_time_s) || (n >= 1 && elapsed >= max_time_s)) break;
    const size_t rot = static_cast<size_t>(n) % order.size();
    for (size_t i = 0; i < order.size(); ++i) {
      const std::string& name = order[(rot + i) % order.size()];
      const size_t k = name == kNames[0] ? 0 : name == kNames[1] ? 1 : hs.size();
      if (k == hs.size()) {
        t.outcome = hs[0]->timed_baseline(name);
        if (!t.outcome.ok) return t;
        t.times[name].push_back(t.outcome.body.value("ms", 0.0));
        continue;
      }
      // Kept below 2^52: a perturbation travels as a JSON number to Python too.
      const uint64_t perturb = (rng() >> 12) | 1;
      t.outcome = hs[k]->timed_call(perturb, n % 10 == 0);
      if (!t.outcome.ok) return t;
      t.times[name].push_back(t.outcome.body.value("ms", 0.0));
      if (k == 0 && t.outcome.body.contains("cpu_ms")) t.seen.cpu_ms.push_back(t.outcome.body.value("cpu_ms", 0.0));
      if (k == 0 && t.outcome.body.value("preempted", false)) ++t.seen.preempted_calls;
      state[k].last_perturb = perturb;
      state[k].last_checked = state[k].checks < max_checks && rng() % 8 == 0;
      if (state[k].last_checked && !check(k, perturb, n)) return t;
    }
  }
  t.seen.load = load.end();
  for (size_t k = 0; k < hs.size(); ++k) {
    if (!state[k].last_checked && !check(k, state[k].last_perturb, static_cast<int>(cand.size()) - 1)) return t;
    t.outcome = hs[k]->end_timing();
    if (!t.outcome.ok) return t;
  }
  t.inputs = {{"seed", seed},
              {"perturbed", "four elements of every float input, at places drawn anew, changed before each timed call"},
              {"checked_calls", state[0].checks}};
  return t;
}

/// How far a timing's comparison of the candidate with `against` (a baseline, or "other") can be
/// trusted; the host's own load and CPU figures count where the timing ran on the host.
Noise assess_timing(TimedShape& t, const std::string& against, bool device) {
  t.seen.on_host = !device;
  static const std::vector<double> none;
  const auto it = t.times.find(against);
  return assess_noise(t.times["candidate"], it == t.times.end() ? none : it->second, t.seen);
}

std::unique_ptr<Harness> make_harness(const LoadedTask& task, const std::string& target) {
  if (task.kernelbench()) return std::make_unique<TorchHarness>(task.path, target);
  return std::make_unique<NativeHarness>(task.task, target);
}

}  // namespace

std::string ShapeCase::label() const {
  if (!shape.empty() || over.is_null()) return "{" + format_binding(shape) + "}";
  return over.dump();
}

Evaluator::Evaluator(LoadedTask task, std::string target, EvalOptions opt)
    : task_(std::move(task)), target_(std::move(target)), opt_(std::move(opt)), harness_(make_harness(task_, target_)) {}

Evaluator::~Evaluator() = default;
Evaluator::Evaluator(Evaluator&&) noexcept = default;

void Evaluator::keep_workers() { harness_->keep_workers(); }

Expected<Verdict> Evaluator::evaluate(const fs::path& candidate) {
  auto v = guarded_evaluation(task_.task.name, candidate.string(), [&] { return evaluate_unguarded(candidate); });
  harness_->end();
  return v;
}

namespace {

/// Where a shape passed with values judged by the Model run in float64 (job_evidence.h judged_text): its
/// warning, and the verdict's count of them.
void take_judged(ShapeResult& sr, Verdict& v) {
  const std::string judged = sr.correct ? judged_text(sr.errors) : std::string();
  if (judged.empty()) return;
  sr.extra["warning"] = judged;
  v.extra["judged_by_float64"] = v.extra.value("judged_by_float64", int64_t{0}) + sr.errors.value("judged_by_float64", int64_t{0});
}

/// The verdict detail's tail where values were judged by the float64 Model, else empty.
std::string judged_detail(const Verdict& v) {
  if (!v.extra.contains("judged_by_float64")) return {};
  return fmt::format("; {} values judged by the Model run in float64, where torch eager's fp32 answer is outside the tolerance "
                     "(KernelBench's own check fails them)",
                     v.extra["judged_by_float64"].get<int64_t>());
}

/// Verifies one shape: for each seed the trusted answer, then the candidate twice, its outputs
/// poisoned with a different pattern each time (both calls must write every element); then the last
/// seed's inputs changed in four places (`perturb`): a candidate that caches its answer under a sample
/// of the input values replays a stale answer there. Each comparison is made while the candidate's
/// process is stopped; `acc` gathers their statistics.
JobOutcome verify_shape(Harness& h, ShapeCase& sc, int seeds, uint64_t perturb, json& acc) {
  // One step: the trusted answer for (index, perturb), then the candidate's calls (call number,
  // poison pattern).
  auto step = [&](int index, uint64_t change, std::initializer_list<std::pair<int, int>> calls) -> JobOutcome {
    JobOutcome r = h.reference(sc, index, change);
    if (!r.ok) return r;
    for (const auto& [call, pattern] : calls) {
      JobOutcome c = h.call(sc, index, change, call, pattern);
      if (!c.ok) return c;
      acc = merge_stats(acc, c.body);
    }
    return r;
  };
  JobOutcome o;
  o.ok = true;
  for (int seed = 0; seed < seeds && o.ok; ++seed) o = step(seed, 0, {{1, 0x5a}, {2, 0xa5}});
  if (o.ok && seeds > 0) o = step(seeds - 1, perturb, {{kPerturbedCall, 0x5a}});
  return o;
}

/// One timed shape into its result: times, cost, bandwidth and the roofline decision. False where the
/// verdict is decided (a failure while timing, a time below the bound): `v` says which.
bool take_timing(Harness& h, const ShapeCase& sc, TimedShape& t, std::optional<MachinePeaks>& peaks,
                 const std::function<void(const std::string&)>& say, Verdict& v, ShapeResult& sr) {
  if (t.outcome.failure) {
    v.disposition = *t.outcome.failure;
    v.detail = fmt::format("shape {} while timing: {}", sc.label(), t.outcome.detail);
    if (*t.outcome.failure == Disposition::Incorrect) {
      sr.status = "incorrect";
      sr.errors = t.evidence;
    }
    return false;
  }
  sr.time = summarize(t.times["candidate"]);
  if (!t.baselines.empty()) sr.baseline = summarize(t.times[t.baselines.front()]);
  sr.extra["inputs"] = t.inputs;
  h.describe_timing(sc, sr, t.times);
  take_cost(sr, h.flops(sc), h.bytes(sc));
  if (!peaks) return true;
  // Before rejecting, the peaks are measured again: the bound must not rest on a measurement taken on
  // a busy machine (the decision keeps the higher figures, with a margin on top).
  const bool enforce = h.roofline_enforced(*peaks);
  const std::string no_bytes_bound = h.bytes_bound_missing(sc);
  const RooflineDecision rd = decide_roofline(
      sr.time->median, h.flops(sc), h.bytes(sc), *peaks, enforce,
      [&] {
        say("machine peaks, measured again before a rejection");
        return h.peaks(true);
      },
      no_bytes_bound);
  v.machine = peaks->to_json();
  sr.bound_ms = rd.bound_ms;
  if (rd.bound_ms || !no_bytes_bound.empty()) sr.extra["roofline"] = rd.compared_with;
  const auto least = h.least_bytes(sc);
  if (least && !h.bytes(sc)) sr.extra["least_bytes"] = *least;
  take_bandwidth(sr, least, *peaks, no_bytes_bound.empty());
  if (rd.below_bound && !enforce) sr.extra["warning"] = h.unenforced_warning();
  if (rd.reject) {
    v.disposition = Disposition::Rejected;
    v.detail = fmt::format("shape {}: {}", sc.label(), rd.text);
    sr.status = "rejected";
    return false;
  }
  return true;
}

}  // namespace

Expected<Verdict> Evaluator::evaluate_unguarded(const fs::path& candidate) {
  const auto start = Clock::now();
  auto say = [&](const std::string& s) {
    if (opt_.progress) opt_.progress(s);
  };
  Harness& h = *harness_;
  Verdict v;
  v.task = task_.task.name;
  v.target = target_;
  v.candidate = candidate.string();
  // Defaults depend on the target: a device call is cheap to repeat and noisier one by one.
  const Target* tgt = find_target(target_);
  const bool device = tgt != nullptr && !tgt->on_host;
  const auto [min_calls, min_time_s, warmup] = timing_defaults(opt_.min_calls, opt_.min_time_s, opt_.warmup, device);
  bool begun = false;
  auto finish = [&]() -> Expected<Verdict> {
    if (begun) h.finish(v);
    v.wall_s = since(start);
    return v;
  };
  auto source = read_file(candidate);
  if (!source) return Unexpected{source.error()};
  v.candidate_hash = hash_hex(*source);

  v.protocol = {{"seeds", opt_.seeds}, {"base_seed", opt_.base_seed}, {"min_calls", min_calls}, {"min_time_s", min_time_s},
                {"warmup", warmup},    {"timeout_s", opt_.runner.timeout_s}};
  auto shapes = h.begin(candidate, opt_, v);
  if (!shapes) return Unexpected{shapes.error()};
  begun = true;
  if (v.disposition != Disposition::Passed) return finish();  // it did not build
  std::vector<ShapeCase>& cases = *shapes;
  const double build_s = v.build.is_object() ? v.build.value("wall_s", 0.0) : 0.0;  // a Python candidate builds nothing
  for (const auto& sc : cases) {
    ShapeResult r;
    r.shape = sc.shape;
    r.heldout = sc.heldout;
    if (!sc.over.is_null()) r.extra["overrides"] = sc.over;
    v.shapes.push_back(std::move(r));
  }
  auto task_error = [&](const JobOutcome& o) {
    return make_error(v.task + ": " + o.detail, h.task_fault_hint());
  };

  // Changes of the inputs that no worker can foresee: drawn here, for each perturbed call.
  std::mt19937_64 rng(std::random_device{}());
  auto fresh = [&] { return (rng() >> 12) | 1; };
  std::string incorrect_detail;
  const auto verify_start = Clock::now();
  for (size_t i = 0; i < cases.size(); ++i) {
    ShapeCase& sc = cases[i];
    ShapeResult& sr = v.shapes[i];
    say(fmt::format("verify {}{}", sc.label(), sc.heldout ? " (held out)" : ""));
    json acc;
    const JobOutcome o = verify_shape(h, sc, opt_.seeds, fresh(), acc);
    sr.shape = sc.shape;
    if (o.task_error) return task_error(o);
    if (o.failure) {
      sr.status = std::string(disposition_name(*o.failure));
      v.disposition = *o.failure;
      v.detail = fmt::format("shape {}: {}", sc.label(), o.detail);
      v.extra["phases_s"] = {{"build", build_s}, {"verify", since(verify_start)}};
      return finish();
    }
    if (!acc.is_object()) acc = {{"correct", true}, {"checked", 0}, {"mismatches", 0}};  // no seeds: nothing compared
    sr.errors = acc;
    sr.correct = acc.value("correct", false);
    sr.status = sr.correct ? "passed" : "incorrect";
    take_judged(sr, v);
    if (!sr.correct && incorrect_detail.empty())
      incorrect_detail = fmt::format("shape {}{}: {}", sc.label(), sc.heldout ? " (held out)" : "",
                                     mismatch_text(sr.errors, h.tolerance_of(sr.errors)));
  }
  v.extra["phases_s"] = {{"build", build_s}, {"verify", since(verify_start)}};
  if (!incorrect_detail.empty()) {
    v.disposition = Disposition::Incorrect;
    v.detail = incorrect_detail;
    return finish();
  }
  if (!opt_.time) {
    v.detail = "correct on every shape; not timed";
    return finish();
  }

  // From the machine's peaks to the last baseline, this process alone times on its GPU.
  std::optional<DeviceLock> lock;
  if (tgt != nullptr && tgt->lock_key != nullptr) {
    lock.emplace(tgt->lock_key(opt_.runner.env), say);
    if (lock->waited_s() > 0.0) v.extra["waited_for_device_s"] = lock->waited_s();
  }
  std::optional<MachinePeaks> peaks = h.peaks(false);
  if (peaks) v.machine = peaks->to_json();
  auto assess = [device](TimedShape& t) { return assess_timing(t, t.baselines.empty() ? std::string() : t.baselines.front(), device); };
  NoiseSummary noise_all;
  double log_base = 0.0, log_second = 0.0;
  int timed = 0, timed_second = 0;
  const auto time_start = Clock::now();
  for (size_t i = 0; i < cases.size(); ++i) {
    const ShapeCase& sc = cases[i];
    ShapeResult& sr = v.shapes[i];
    if (sc.heldout) continue;
    say("time " + sc.label());
    auto timing = [&] {
      return time_shape({&h}, sc, min_calls, min_time_s, opt_.max_calls, opt_.max_time_s, warmup, device ? 4 : 8, rng);
    };
    TimedShape t = timing();
    if (t.outcome.task_error) return task_error(t.outcome);
    Noise noise = assess(t);
    if (noise.noisy && opt_.remeasure && !t.outcome.failure) {
      // Timed again, and the timing with the narrower interval kept (chosen by its spread, never by
      // its speedup); a failure the second timing finds stands.
      say(fmt::format("time {} again: {}", sc.label(), noise.reasons.front()));
      TimedShape again = timing();
      if (again.outcome.task_error) return task_error(again.outcome);
      Noise second = assess(again);
      const json first = noise.to_json();
      const bool second_kept = again.outcome.failure || second.ci_width() < noise.ci_width();
      if (second_kept) {
        t = std::move(again);
        noise = std::move(second);
      }
      sr.extra["remeasured"] = {{"first", first}, {"kept", second_kept ? "second" : "first"}};
    }
    if (!take_timing(h, sc, t, peaks, say, v, sr)) return finish();
    sr.extra["noise"] = noise.to_json();
    noise_all.add(sc.label(), noise);
    if (sr.baseline) {
      log_base += std::log(sr.baseline->median / sr.time->median);
      ++timed;
    }
    if (sr.extra.contains("speedup_vs_compile")) {
      log_second += std::log(sr.extra["speedup_vs_compile"].get<double>());
      ++timed_second;
    }
  }
  v.extra["phases_s"]["time"] = since(time_start);
  if (timed > 0) v.speedup = std::exp(log_base / timed);
  if (timed_second > 0) v.extra["speedup_vs_compile"] = std::exp(log_second / timed_second);
  v.extra["noise"] = noise_all.to_json();
  h.after_timing(v);
  v.detail = fmt::format("correct on {} shapes x {} seeds; {:.3f}x the {} (geometric mean over {} tuning shapes{}){}{}", v.shapes.size(),
                         opt_.seeds, v.speedup.value_or(0.0), v.baseline, timed, noise_all.interval_text(),
                         timed_second ? fmt::format(", {:.3f}x torch.compile", std::exp(log_second / timed_second)) : "",
                         noise_all.noisy() ? "; NOISY: " + noise_all.reason_text() : "");
  v.detail += judged_detail(v);
  return finish();
}

Expected<json> Evaluator::compare(const fs::path& a, const fs::path& b) {
  Expected<json> out = json();
  // guarded_evaluation's verdict stands for a crash of kfab's own side; compare reports it as an error
  auto v = guarded_evaluation(task_.task.name, a.string(), [&]() -> Expected<Verdict> {
    out = compare_unguarded(a, b);
    return Verdict{};
  });
  harness_->end();
  if (!v) return Unexpected{v.error()};
  if (v->disposition != Disposition::Passed) return make_error("the comparison stopped: " + v->detail);
  return out;
}

Expected<json> Evaluator::compare_unguarded(const fs::path& a, const fs::path& b) {
  auto say = [&](const std::string& s) {
    if (opt_.progress) opt_.progress(s);
  };
  std::unique_ptr<Harness> second = make_harness(task_, target_);
  std::vector<Harness*> hs = {harness_.get(), second.get()};
  const Target* tgt = find_target(target_);
  const bool device = tgt != nullptr && !tgt->on_host;
  const auto [min_calls, min_time_s, warmup] = timing_defaults(opt_.min_calls, opt_.min_time_s, opt_.warmup, device);
  json out = {{"task", task_.task.name}, {"target", target_}, {"a", {{"candidate", a.string()}}}, {"b", {{"candidate", b.string()}}}};
  std::vector<std::vector<ShapeCase>> cases(2);
  std::vector<Verdict> vs(2);
  std::mt19937_64 rng(std::random_device{}());
  struct Ended {
    std::unique_ptr<Harness>& h;
    ~Ended() { h->end(); }
  } end_second{second};
  bool all_correct = true;
  for (size_t k = 0; k < 2; ++k) {
    const fs::path& c = k ? b : a;
    json& side = out[k ? "b" : "a"];
    auto source = read_file(c);
    if (!source) return Unexpected{source.error()};
    side["candidate_hash"] = hash_hex(*source);
    say(fmt::format("build {}", c.filename().string()));
    auto shapes = hs[k]->begin(c, opt_, vs[k]);
    if (!shapes) return Unexpected{shapes.error()};
    side["disposition"] = disposition_name(vs[k].disposition);
    if (vs[k].disposition != Disposition::Passed) {
      side["detail"] = vs[k].detail;
      all_correct = false;
      continue;
    }
    cases[k] = std::move(*shapes);
    for (ShapeCase& sc : cases[k]) {
      if (sc.heldout) continue;  // evaluate's; a comparison is of speed on the tuning shapes
      say(fmt::format("verify {} on {}", c.filename().string(), sc.label()));
      json acc;
      const JobOutcome o = verify_shape(*hs[k], sc, opt_.seeds, (rng() >> 12) | 1, acc);
      if (o.task_error) return make_error(task_.task.name + ": " + o.detail, hs[k]->task_fault_hint());
      if (o.failure || !acc.value("correct", true)) {
        side["disposition"] = o.failure ? disposition_name(*o.failure) : "incorrect";
        side["detail"] = fmt::format("shape {}: {}", sc.label(), o.failure ? o.detail : mismatch_text(acc, hs[k]->tolerance_of(acc)));
        all_correct = false;
        break;
      }
    }
  }
  if (!all_correct) {
    out["verdict"] = "not compared: a candidate did not pass (each side says why)";
    return out;
  }
  std::optional<DeviceLock> lock;
  if (tgt != nullptr && tgt->lock_key != nullptr) lock.emplace(tgt->lock_key(opt_.runner.env), say);
  json shapes = json::array();
  NoiseSummary noise_all;
  double log_ab = 0.0, log_a = 0.0, log_b = 0.0;
  int n = 0, with_baseline = 0;
  for (size_t i = 0; i < cases[0].size(); ++i) {
    const ShapeCase& sc = cases[0][i];
    if (sc.heldout) continue;
    say("time both on " + sc.label());
    TimedShape t = time_shape(hs, sc, min_calls, min_time_s, opt_.max_calls, opt_.max_time_s, warmup, device ? 4 : 8, rng);
    if (t.outcome.task_error) return make_error(task_.task.name + ": " + t.outcome.detail, hs[0]->task_fault_hint());
    if (t.outcome.failure) {
      out["verdict"] = fmt::format("not compared: shape {} while timing: {}", sc.label(), t.outcome.detail);
      return out;
    }
    // a over b: b's time over a's, from the interleaved pairs
    const Noise noise = assess_timing(t, "other", device);
    const TimeStats ta = summarize(t.times["candidate"]), tb = summarize(t.times["other"]);
    const double ab_shape = noise.paired_speedup.value_or(tb.median / ta.median);
    json s = {{"shape", sc.label()}, {"a_ms", ta.to_json()}, {"b_ms", tb.to_json()}, {"a_over_b", ab_shape}, {"noise", noise.to_json()}};
    log_ab += std::log(ab_shape);
    if (!t.baselines.empty()) {
      const TimeStats base = summarize(t.times[t.baselines.front()]);
      s["baseline"] = t.baselines.front();
      s["baseline_ms"] = base.to_json();
      log_a += std::log(base.median / ta.median);
      log_b += std::log(base.median / tb.median);
      ++with_baseline;
    }
    noise_all.add(sc.label(), noise);
    shapes.push_back(std::move(s));
    ++n;
  }
  out["shapes"] = shapes;
  out["noise"] = noise_all.to_json();
  if (n == 0) {
    out["verdict"] = "not compared: the task has no tuning shape";
    return out;
  }
  const double ab = std::exp(log_ab / n);
  out["a_over_b"] = ab;
  if (with_baseline == n) {
    out["a"]["speedup"] = std::exp(log_a / n);
    out["b"]["speedup"] = std::exp(log_b / n);
  }
  out["verdict"] = fmt::format("a is {:.3f}x as fast as b (geometric mean over {} shapes of the interleaved pairs' medians{}){}", ab, n,
                               noise_all.interval_text(), noise_all.noisy() ? "; NOISY: " + noise_all.reason_text() : "");
  return out;
}

}  // namespace kfab
