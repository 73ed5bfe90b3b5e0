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
};

/// Times the candidate and the baselines on one shape, one call per job, the order rotating. Every
/// timed call of the candidate gets inputs it has not seen: the timing seed's (never used in
/// verification) changed in four places per float input, anew for each call. After some calls, chosen
/// only once the call is done, and after the last, its output is checked against the trusted answer
/// for exactly those inputs: an answer kept from an earlier call, keyed on call counts, time, cache
/// state or sampled values, does not fit.
TimedShape time_shape(Harness& h, const ShapeCase& sc, int min_calls, double min_time_s, int max_calls, double max_time_s,
                      int warmup, int max_checks, std::mt19937_64& rng) {
  TimedShape t;
  const int64_t seed = static_cast<int64_t>(rng() >> 12) + 1000;
  t.baselines = h.baselines(sc);
  std::vector<std::string> order = {"candidate"};
  order.insert(order.end(), t.baselines.begin(), t.baselines.end());
  t.outcome = h.prepare_timing(sc, seed, warmup);
  if (!t.outcome.ok) return t;
  int checks = 0;
  bool last_checked = false;
  uint64_t last_perturb = 0;
  auto check = [&](uint64_t perturb, int n) -> bool {
    t.outcome = h.check_timed(sc, seed, perturb);
    if (!t.outcome.ok) return false;
    ++checks;
    if (t.outcome.body.value("correct", false)) return true;
    t.evidence = t.outcome.body;
    t.outcome = JobOutcome{};
    t.outcome.failure = Disposition::Incorrect;
    t.outcome.detail = "the output of timed call " + std::to_string(n + 1) +
                       " does not match the reference for its inputs: work was skipped while timed, or an answer "
                       "computed for other inputs was served";
    return false;
  };
  std::vector<double>& cand = t.times["candidate"];
  const auto start = Clock::now();
  for (;;) {
    const int n = static_cast<int>(cand.size());
    const double elapsed = since(start);
    if (n >= max_calls || (n >= min_calls && elapsed >= min_time_s) || (n >= 1 && elapsed >= max_time_s)) break;
    const size_t rot = static_cast<size_t>(n) % order.size();
    for (size_t k = 0; k < order.size(); ++k) {
      const std::string& name = order[(rot + k) % order.size()];
      if (name != "candidate") {
        t.outcome = h.timed_baseline(name);
        if (!t.outcome.ok) return t;
        t.times[name].push_back(t.outcome.body.value("ms", 0.0));
        continue;
      }
      // Kept below 2^52: a perturbation travels as a JSON number to Python too.
      const uint64_t perturb = (rng() >> 12) | 1;
      t.outcome = h.timed_call(perturb, n % 10 == 0);
      if (!t.outcome.ok) return t;
      cand.push_back(t.outcome.body.value("ms", 0.0));
      last_perturb = perturb;
      last_checked = checks < max_checks && rng() % 8 == 0;
      if (last_checked && !check(perturb, n)) return t;
    }
  }
  if (!last_checked && !check(last_perturb, static_cast<int>(cand.size()) - 1)) return t;
  t.outcome = h.end_timing();
  if (!t.outcome.ok) return t;
  t.inputs = {{"seed", seed},
              {"perturbed", "four elements of every float input, at places drawn anew, changed before each timed call"},
              {"checked_calls", checks}};
  return t;
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
  const RooflineDecision rd = decide_roofline(sr.time->median, h.flops(sc), h.bytes(sc), *peaks, enforce, [&] {
    say("machine peaks, measured again before a rejection");
    return h.peaks(true);
  });
  v.machine = peaks->to_json();
  sr.bound_ms = rd.bound_ms;
  if (rd.bound_ms) sr.extra["roofline"] = rd.compared_with;
  take_bandwidth(sr, h.bytes(sc), *peaks);
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
  double log_base = 0.0, log_second = 0.0;
  int timed = 0, timed_second = 0;
  const auto time_start = Clock::now();
  for (size_t i = 0; i < cases.size(); ++i) {
    const ShapeCase& sc = cases[i];
    ShapeResult& sr = v.shapes[i];
    if (sc.heldout) continue;
    say("time " + sc.label());
    TimedShape t = time_shape(h, sc, min_calls, min_time_s, opt_.max_calls, opt_.max_time_s, warmup, device ? 4 : 8, rng);
    if (t.outcome.task_error) return task_error(t.outcome);
    if (!take_timing(h, sc, t, peaks, say, v, sr)) return finish();
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
  h.after_timing(v);
  v.detail = fmt::format("correct on {} shapes x {} seeds; {:.3f}x the {} (geometric mean over {} tuning shapes){}", v.shapes.size(),
                         opt_.seeds, v.speedup.value_or(0.0), v.baseline, timed,
                         timed_second ? fmt::format(", {:.3f}x torch.compile", std::exp(log_second / timed_second)) : "");
  return finish();
}

}  // namespace kfab
