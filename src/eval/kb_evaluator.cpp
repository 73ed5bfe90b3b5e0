#include "eval/kb_evaluator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <random>

#include "core/expr.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/stamp.h"
#include "eval/job_evidence.h"
#include "eval/roofline.h"
#include "eval/stats.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string kb_candidate_dsl(const fs::path& candidate) {
  const std::string name = candidate.filename().string();
  auto ends = [&](const std::string& s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
  if (ends(".cu")) return "cuda";
  if (ends(".cl.cpp")) return {};
  if (ends(".cpp")) return "cpp";
  if (!ends(".py")) return {};
  auto text = read_file(candidate);
  if (!text) return {};
  if (text->find("class ModelNew") != std::string::npos) return "modelnew";
  if (text->find("def run(") == std::string::npos) return {};
  return text->find("triton") != std::string::npos ? "triton" : "python";
}

Task kb_store_task(const fs::path& task_file) {
  Task t;
  t.name = task_file.stem().string();
  t.dir = fs::absolute(task_file);
  t.manifest = t.dir;
  t.reference = t.dir;
  return t;
}

std::string withhold(const std::string& source, const std::string& key) {
  std::string out;
  size_t pos = 0;
  while (pos < source.size()) {
    size_t eol = source.find('\n', pos);
    if (eol == std::string::npos) eol = source.size();
    const bool match = source.compare(pos, key.size(), key) == 0 && pos + key.size() < source.size() &&
                       (source[pos + key.size()] == ' ' || source[pos + key.size()] == '=');
    if (!match) {
      out.append(source, pos, eol - pos);
      if (eol < source.size()) out += '\n';
      pos = eol + 1;
      continue;
    }
    // Skip the statement: up to the end of the line on which its brackets balance.
    int depth = 0;
    size_t i = pos;
    for (; i < source.size(); ++i) {
      const char c = source[i];
      if (c == '[' || c == '(' || c == '{') ++depth;
      else if (c == ']' || c == ')' || c == '}') --depth;
      else if (c == '\n' && depth <= 0) break;
    }
    out += "# (held-out shapes withheld)";
    if (i < source.size()) out += '\n';
    pos = i + 1;
  }
  return out;
}

namespace {

ShapeBinding binding(const json& j) {
  ShapeBinding b;
  for (const auto& [k, v] : j.items())
    if (v.is_number_integer()) b[k] = v.get<int64_t>();
  return b;
}

std::optional<double> cost(const json& desc, const char* key, const ShapeBinding& shape) {
  const json c = desc.value("cost", json::object());
  if (!c.contains(key) || !c[key].is_string()) return std::nullopt;
  auto v = eval_expr(c[key].get<std::string>(), shape);
  if (!v) return std::nullopt;
  return *v;
}

/// The comparisons of one shape, summed: the largest errors, the counts added, the first mismatch
/// and the first problem kept; per output and in all.
json merge_stats(const json& acc, const json& m) {
  if (!acc.is_object()) return m;
  json out = acc;
  const auto num = [](const json& j) { return j.is_number() ? j.get<double>() : std::numeric_limits<double>::infinity(); };
  const auto merge_one = [&](json& a, const json& b) {
    for (const char* k : {"max_abs_err", "max_rel_err"})
      if (b.contains(k) && (!a.contains(k) || num(b[k]) > num(a[k]))) a[k] = b[k];
    for (const char* k : {"checked", "mismatches", "nonfinite"}) a[k] = a.value(k, int64_t{0}) + b.value(k, int64_t{0});
    for (const char* k : {"first_mismatch", "problem"})
      if (!a.contains(k) && b.contains(k)) a[k] = b[k];
  };
  merge_one(out, m);
  if (out.contains("outputs") && m.contains("outputs") && out["outputs"].size() == m["outputs"].size())
    for (size_t i = 0; i < out["outputs"].size(); ++i) merge_one(out["outputs"][i], m["outputs"][i]);
  out["correct"] = out.value("mismatches", int64_t{0}) == 0 && !out.contains("problem");
  return out;
}

/// The candidate's outputs of its last job (shared memory on the CPU, CUDA IPC handles on a GPU)
/// compared in the trusted worker with the answer it holds, while the candidate's worker is stopped.
JobOutcome compare_in(RunnerClient& trusted, JobReply& from, int64_t seed, int call) {
  json q = {{"op", "compare"}, {"seed", seed}, {"call", call}, {"outputs", from.body.value("outputs", json::array())}};
  std::vector<int> pass;
  if (!from.fds.empty()) {
    q["fds"] = 1;
    pass.push_back(from.fds[0]);
  }
  return interpret(trusted.run(q, pass));
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Times one shape, one call per job: the candidate in its worker, torch eager (and torch.compile) in
/// the trusted worker, the order rotating. Every timed call of the candidate gets inputs it has not
/// seen: the timing seed's (never verified) changed in four places drawn anew; some calls, chosen once
/// they are done, and the last are compared with the Model's answer for exactly those inputs.
JobOutcome time_shape(RunnerClient& worker, RunnerClient& trusted, const json& base, const json& over,
                      const json& output_shapes, bool time_compile, int min_calls, double min_time_s, int warmup,
                      std::mt19937_64& rng) {
  const int64_t seed = static_cast<int64_t>(rng() >> 12) + 7;
  json prep = base;
  prep.update({{"op", "time_prepare"}, {"shape", over}, {"seed", seed}, {"warmup", warmup}, {"output_shapes", output_shapes}});
  JobOutcome c = interpret(worker.run(prep));
  if (!c.ok) return c;
  const json cand_prep = c.body;
  prep.erase("candidate");
  const json baselines = time_compile ? json::array({"eager", "compile"}) : json::array({"eager"});
  prep["baselines"] = baselines;
  prep["compile_mode"] = base.value("compile_mode", "default");
  JobOutcome t = interpret(trusted.run(prep));
  if (!t.ok) {
    t.task_error = true;
    return t;
  }
  const bool cuda = base.value("target", "cpu") == "cuda";
  std::vector<std::string> order = {"candidate"};
  for (const auto& b : baselines) order.push_back(b.get<std::string>());
  std::map<std::string, std::vector<double>> times, hosts;
  std::map<std::string, int> late;
  std::vector<double> walls;
  const int max_checks = cuda ? 4 : 8;
  int checks = 0;
  int64_t last_perturb = 0;
  bool last_checked = false;
  JobOutcome fail;
  auto check = [&](int64_t perturb, int n) -> bool {
    JobReply e = worker.run({{"op", "export"}});
    JobOutcome eo = interpret(e);
    if (!eo.ok) {
      fail = eo;
      return false;
    }
    json rq = base;
    rq.erase("candidate");
    rq.update({{"op", "reference"}, {"shape", over}, {"seed", seed}, {"index", 0}, {"perturb", perturb},
               {"perturb_last", false}, {"scaled", false}});
    JobOutcome r = interpret(trusted.run(rq));
    if (!r.ok) {
      r.task_error = true;
      fail = r;
      return false;
    }
    JobOutcome m = compare_in(trusted, e, seed, 3);
    if (!m.ok) {
      fail = m;
      return false;
    }
    ++checks;
    if (m.body.value("correct", false)) return true;
    fail = JobOutcome{};
    fail.failure = Disposition::Incorrect;
    fail.detail = "the output of timed call " + std::to_string(n + 1) +
                  " does not match the reference for its inputs: work was skipped while timed, or an answer computed "
                  "for other inputs was served";
    fail.body = {{"evidence", m.body}};
    return false;
  };
  const auto start = std::chrono::steady_clock::now();
  const double max_ms = base.value("max_time_s", 30.0) * 1e3;
  const int max_calls = base.value("max_calls", 10000);
  for (;;) {
    const int n = static_cast<int>(times["candidate"].size());
    const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (n >= max_calls || (n >= min_calls && elapsed >= min_time_s * 1e3) || (n >= 1 && elapsed >= max_ms)) break;
    const size_t rot = static_cast<size_t>(n) % order.size();
    for (size_t k = 0; k < order.size(); ++k) {
      const std::string& name = order[(rot + k) % order.size()];
      if (name == "candidate") {
        const int64_t perturb = static_cast<int64_t>(rng() >> 12) | 1;
        JobOutcome o = interpret(worker.run({{"op", "time_call"}, {"perturb", perturb}, {"clocks", n % 10 == 0}}));
        if (!o.ok) return o;
        times[name].push_back(o.body.value("ms", 0.0));
        hosts[name].push_back(o.body.value("host_ms", 0.0));
        late[name] += o.body.value("late", false) ? 1 : 0;
        walls.push_back(o.body.value("wall_ms", 0.0));
        last_perturb = perturb;
        last_checked = checks < max_checks && rng() % 8 == 0;
        if (last_checked && !check(perturb, n)) return fail;
        continue;
      }
      JobOutcome o = interpret(trusted.run({{"op", "time_call"}, {"which", name}}));
      if (!o.ok) {
        o.task_error = true;
        return o;
      }
      times[name].push_back(o.body.value("ms", 0.0));
      hosts[name].push_back(o.body.value("host_ms", 0.0));
      late[name] += o.body.value("late", false) ? 1 : 0;
    }
  }
  if (!last_checked && !check(last_perturb, static_cast<int>(times["candidate"].size()) - 1)) return fail;
  JobOutcome end = interpret(worker.run({{"op", "time_end"}}));
  if (!end.ok) return end;
  JobOutcome tend = interpret(trusted.run({{"op", "time_end"}}));
  if (!tend.ok) {
    tend.task_error = true;
    return tend;
  }
  JobOutcome out;
  out.ok = true;
  json& b = out.body;
  b["candidate"] = summarize(times["candidate"]).to_json();
  b["baselines"] = json::object();
  for (size_t k = 1; k < order.size(); ++k) b["baselines"][order[k]] = summarize(times[order[k]]).to_json();
  b["timer"] = cand_prep.value("timer", "");
  b["inputs"] = {{"seed", seed},
                 {"perturbed", "four elements of every float input, at places drawn anew, changed before each timed call"},
                 {"checked_calls", checks}};
  if (cand_prep.contains("own_kernels")) b["own_kernels"] = cand_prep["own_kernels"];
  if (cuda) {
    b["candidate_wall"] = summarize(walls).to_json();
    b["empty_call_wall"] = cand_prep.value("empty_call_wall", json::object());
    b["device"] = end.body.value("device", "");
    if (end.body.contains("clocks")) b["clocks"] = end.body["clocks"];
    json host_ms = json::object(), calls = json::object();
    for (const auto& name : order) {
      host_ms[name] = median_of(hosts[name]);
      calls[name] = times[name].size();
    }
    b["launch"] = {{"hold_ms", end.body.value("hold_ms", 0.0)}, {"timer_version", end.body.value("timer_version", 1)},
                   {"host_ms", host_ms}, {"late_starts", late}, {"calls", calls},
                   {"baseline_hold_ms", tend.body.value("hold_ms", 0.0)}};
  }
  return out;
}

}  // namespace

RunnerOptions KbEvaluator::worker_options(double timeout_s, bool trusted) const {
  RunnerOptions ro = opt_.runner;
  ro.timeout_s = timeout_s;
  ro.limit_address_space = false;  // torch maps far more address space than it uses
  ro.confine_signals = false;      // torch.compile starts workers and signals them; Landlock's signal
  ro.deny_processes = false;       // scope still keeps kfab out of reach
  ro.argv = {python_interpreter(), "-m", "kfab_worker"};
  if (trusted) ro.argv.push_back("--trusted");
  ro.trusted = trusted;
  ro.freeze_between_jobs = !trusted;
  std::string path = python_worker_dir().string();
  if (const char* pp = std::getenv("PYTHONPATH"); pp && *pp) path += std::string(":") + pp;
  ro.env = {{"PYTHONPATH", path}, {"PYTHONDONTWRITEBYTECODE", "1"}};
  return ro;
}

Expected<Verdict> KbEvaluator::evaluate(const fs::path& task_file, const fs::path& candidate) {
  return guarded_evaluation(task_file.stem().string(), candidate.string(),
                            [&] { return evaluate_unguarded(task_file, candidate); });
}

Expected<Verdict> KbEvaluator::evaluate_unguarded(const fs::path& task_file, const fs::path& candidate) {
  const auto start = std::chrono::steady_clock::now();
  auto say = [&](const std::string& s) {
    if (opt_.progress) opt_.progress(s);
  };
  Verdict v;
  v.task = task_file.stem().string();
  v.target = target_;
  v.dsl = kb_candidate_dsl(candidate);
  v.candidate = candidate.string();
  const bool device = target_ != "cpu";
  const auto [min_calls, min_time_s, warmup] = timing_defaults(opt_.min_calls, opt_.min_time_s, opt_.warmup, device);
  auto finish = [&]() -> Expected<Verdict> {
    v.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return v;
  };
  if (v.dsl.empty())
    return make_error(candidate.string() + ": not a candidate for a KernelBench task",
                      "give a .cpp (cpu) or .cu (cuda) file exporting kfab_run, a .py defining ModelNew, or a .py "
                      "defining run(inputs, outputs)");
  auto source = read_file(candidate);
  if (!source) return Unexpected{source.error()};
  v.candidate_hash = hash_hex(*source);

  // The worker starts (and imports torch: seconds) while a native candidate builds; a kept one is
  // reused (a fresh one replaces it when it died).
  // Two workers: the candidate's, and the trusted one, which runs the Model, times torch eager and
  // torch.compile and compares; it never loads a candidate.
  std::unique_ptr<RunnerClient> own, own_trusted;
  RunnerClient* wp = nullptr;
  RunnerClient* tp = nullptr;
  const double first_timeout = std::max(opt_.runner.timeout_s, 120.0);
  if (keep_worker_) {
    if (!kept_worker_) kept_worker_ = std::make_unique<RunnerClient>(worker_options(first_timeout));
    if (!kept_trusted_) kept_trusted_ = std::make_unique<RunnerClient>(worker_options(first_timeout, true));
    kept_worker_->set_timeout(first_timeout);
    kept_trusted_->set_timeout(first_timeout);
    wp = kept_worker_.get();
    tp = kept_trusted_.get();
  } else {
    own = std::make_unique<RunnerClient>(worker_options(first_timeout));
    own_trusted = std::make_unique<RunnerClient>(worker_options(first_timeout, true));
    wp = own.get();
    tp = own_trusted.get();
  }
  RunnerClient& worker = *wp;
  RunnerClient& trusted = *tp;
  (void)worker.start();
  (void)trusted.start();

  std::string artifact = fs::absolute(candidate).string();
  if (v.dsl == "cpp" || v.dsl == "cuda") {
    if (native_ == nullptr || (v.dsl == "cuda") != (target_ == "cuda"))
      return make_error(candidate.string() + ": a ." + (v.dsl == "cuda" ? "cu" : "cpp") + " candidate runs on the " +
                            (v.dsl == "cuda" ? "cuda" : "cpu") + " target, not " + target_,
                        "choose the target with --target");
    say("build " + candidate.filename().string());
    auto b = native_->build(candidate);
    if (!b.ok() && b.failure().no_space)
      return make_error(b.failure().message, "free some space, or set KFAB_CACHE_DIR (and TMPDIR) to a folder on another disk");
    if (!b.ok()) {
      v.disposition = Disposition::CompileFailed;
      v.detail = b.failure().message;
      return finish();
    }
    v.build = {{"cached", b.value().cached}, {"seconds", b.value().seconds}, {"key", b.value().key}};
    artifact = b.value().artifact.string();
  }

  say("start the Python worker (torch)");
  for (RunnerClient* w : {&trusted, &worker}) {
    JobReply hello = w->run({{"op", "hello"}});
    if (hello.kind != JobReply::Kind::Ok || !hello.body.value("ok", false))
      return make_error("the Python worker did not start: " + (hello.detail.empty() ? hello.body.dump() : hello.detail),
                        "it needs python3 with torch: `make test` installs torch into .venv; KFAB_PYTHON names another "
                        "interpreter");
  }
  JobReply hello = trusted.run({{"op", "hello"}});
  const json info = hello.body;
  if (target_ == "cuda" && !info.value("cuda", false))
    return make_error("torch sees no CUDA device here (torch " + info.value("torch", std::string("?")) + ")",
                      "use --target cpu, or a torch built with CUDA");
  if (v.dsl == "triton" && info["triton"].is_null())
    return make_error("the candidate uses Triton, which the worker's Python lacks", "install triton");
  const std::string abs_task = fs::absolute(task_file).string();
  JobOutcome d = interpret(trusted.run({{"op", "describe"}, {"task", abs_task}}));
  if (!d.ok) return make_error(d.detail.empty() ? "the task did not load" : d.detail, "fix the task file");
  const json desc = d.body;
  worker.set_timeout(opt_.runner.timeout_s);  // the first job's deadline covered torch's import
  trusted.set_timeout(opt_.runner.timeout_s);
  v.baseline = "torch eager " + info.value("torch", std::string());
  v.protocol = {{"seeds", opt_.seeds},
                {"base_seed", opt_.base_seed},
                {"min_calls", min_calls},
                {"min_time_s", min_time_s},
                {"warmup", warmup},
                {"dtype", opt_.dtype},
                {"order", "reference (trusted worker), candidate, candidate; then the last seed's inputs changed in four places"},
                {"isolation", "the Model runs, and the baselines are timed, in a trusted worker that never loads candidate "
                              "code; it compares the candidate's outputs (shared memory, CUDA IPC) while the candidate's "
                              "worker is stopped"},
                {"timed_inputs", "the timing seed's inputs (never verified), four elements changed anew before each "
                                 "timed call; sampled calls and the last checked against the Model"},
                {"inputs", "get_inputs() after torch.manual_seed(seed); float inputs scaled by 1, 1, 2, 0.5, 1 by seed"},
                {"weights", "Model(*get_init_inputs()) after torch.manual_seed(42)"},
                {"worker", "python " + python_interpreter() + ", torch " + info.value("torch", std::string())}};

  json json_base = {{"task", abs_task}, {"candidate", {{"path", artifact}}}, {"base_seed", opt_.base_seed},
                    {"target", target_}, {"dtype", opt_.dtype}, {"forbidden", opt_.forbid}};
  std::vector<std::pair<json, bool>> shapes;
  json tune = json::object();
  if (device && desc.contains("gpu") && !desc["gpu"].empty()) {
    tune = desc["gpu"];
    v.protocol["tuning_shapes"] = "KFAB_GPU (a GPU)";
  }
  shapes.emplace_back(tune, false);
  if (opt_.heldout)
    for (const auto& h : desc.value("heldout", json::array())) shapes.emplace_back(h, true);
  std::mt19937_64 rng(std::random_device{}());
  auto fresh = [&] { return static_cast<int64_t>(rng() >> 12) | 1; };
  // One step of verification: the Model's answer on (seed, perturb) in the trusted worker, then the
  // candidate's calls (call number, poison pattern), each compared there while the candidate's worker
  // is stopped. `acc` gathers the comparisons of a shape.
  json output_shapes;
  auto step = [&](const json& over, int64_t seed, int index, int64_t perturb, bool last, bool scaled,
                  std::initializer_list<std::pair<int, int>> calls, json& acc) -> JobOutcome {
    json rq = json_base;
    rq.erase("candidate");
    rq.update({{"op", "reference"}, {"shape", over}, {"seed", seed}, {"index", index}, {"perturb", perturb},
               {"perturb_last", last}, {"scaled", scaled}});
    JobOutcome r = interpret(trusted.run(rq));
    if (!r.ok) {
      r.task_error = true;
      return r;
    }
    output_shapes = r.body.value("output_shapes", json::array());
    for (const auto& [call, pattern] : calls) {
      json cq = json_base;
      cq.update({{"op", "call"}, {"shape", over}, {"seed", seed}, {"scale", r.body.value("scale", 1.0)}, {"perturb", perturb},
                 {"perturb_last", last}, {"pattern", pattern}, {"output_shapes", output_shapes}});
      JobReply cr = worker.run(cq);
      JobOutcome c = interpret(cr);
      if (!c.ok) return c;
      JobOutcome m = compare_in(trusted, cr, seed, call);
      if (!m.ok) return m;
      acc = merge_stats(acc, m.body);
    }
    r.body["compared"] = acc;
    return r;
  };
  std::string incorrect;
  std::vector<json> shape_outputs;  // the Model's output shapes and dtypes at each shape
  for (auto& [over, held] : shapes) {
    ShapeResult sr;
    sr.heldout = held;
    say(fmt::format("verify {}{}", over.dump(), held ? " (held out)" : ""));
    json acc;
    JobOutcome o;
    o.ok = true;
    for (int i = 0; i < opt_.seeds && o.ok; ++i)
      o = step(over, static_cast<int64_t>(opt_.base_seed) * 1000003 + i, i, 0, true, true, {{1, 0x5a}, {2, 0xa5}}, acc);
    // The last seed's inputs changed in four places (the last element among them): a candidate that
    // caches its answer under a sample of the input values replays a stale one here.
    const int last = std::max(0, opt_.seeds - 1);
    if (o.ok && opt_.seeds > 0)
      o = step(over, static_cast<int64_t>(opt_.base_seed) * 1000003 + last, last, fresh(), true, true, {{5, 0x5a}}, acc);
    if (o.task_error) return make_error(v.task + ": " + o.detail, "the task file (or the device) is at fault");
    if (o.failure) {
      sr.status = std::string(disposition_name(*o.failure));
      v.shapes.push_back(sr);
      v.disposition = *o.failure;
      v.detail = fmt::format("shape {}: {}", over.dump(), o.detail);
      return finish();
    }
    sr.shape = binding(o.body.value("shape", json::object()));
    shape_outputs.push_back(output_shapes);
    sr.errors = acc;
    sr.correct = acc.value("correct", false);
    sr.status = sr.correct ? "passed" : "incorrect";
    sr.extra["overrides"] = over;
    if (!sr.correct && incorrect.empty())
      incorrect = fmt::format("shape {}{}: {}", format_binding(sr.shape), held ? " (held out)" : "", mismatch_text(acc));
    v.shapes.push_back(sr);
  }
  if (!incorrect.empty()) {
    v.disposition = Disposition::Incorrect;
    v.detail = incorrect;
    return finish();
  }
  if (!opt_.time) {
    v.detail = "correct on every shape; not timed";
    return finish();
  }

  // Machine peaks for the roofline bound come from kfab-runner (cached after the first time).
  std::optional<MachinePeaks> peaks;
  if (desc.value("cost", json::object()).size() > 0) {
    RunnerOptions ro = opt_.runner;
    ro.for_target(target_);
    RunnerClient native_runner(ro);
    peaks = device ? device_peaks(native_runner, target_) : cpu_peaks(native_runner);
    if (peaks) v.machine = peaks->to_json();
  }
  double log_eager = 0.0, log_compile = 0.0;
  int timed = 0, timed_compile = 0;
  for (size_t i = 0; i < v.shapes.size(); ++i) {
    ShapeResult& sr = v.shapes[i];
    if (sr.heldout) continue;
    const json& over = shapes[i].first;
    // torch.compile's time is cached per task, device, dtype, shape, torch, mode and the worker's
    // timer: compiling costs far more than timing, and it does not change while those do not.
    const auto task_source = read_file(task_file);
    const std::string key = hash_hex((task_source ? *task_source : std::string()) + '\0' + target_ + '\0' + info.value("device", std::string("cpu")) +
                                     '\0' + opt_.dtype + '\0' + over.dump() + '\0' + info.value("torch", std::string()) +
                                     '\0' + opt_.compile_mode + '\0' + std::to_string(info.value("timer", 1)))
                                .substr(0, 24);
    const fs::path cache_file = cache_dir() / "baselines" / (key + ".json");
    json cached;
    if (opt_.compile_baseline && !opt_.fresh_baselines)
      if (auto text = read_file(cache_file)) {
        try {
          cached = json::parse(*text);
        } catch (const json::exception&) {
          cached = json();  // measured again
        }
      }
    const bool time_compile = opt_.compile_baseline && !cached.is_object();
    say(fmt::format("time {}{}", format_binding(sr.shape), time_compile ? " (and torch.compile: it compiles first)" : ""));
    // Compiling takes minutes on a slow machine: the trusted worker's warm-up gets a longer deadline.
    if (time_compile) trusted.set_timeout(std::max(opt_.runner.timeout_s, 900.0));
    json timing = json_base;
    timing.update({{"max_time_s", opt_.max_time_s}, {"max_calls", opt_.max_calls}, {"compile_mode", opt_.compile_mode}});
    JobOutcome o = time_shape(worker, trusted, timing, over, shape_outputs[i], time_compile, min_calls, min_time_s, warmup, rng);
    trusted.set_timeout(opt_.runner.timeout_s);
    if (o.task_error) return make_error(v.task + ": " + o.detail, "the task's Model or torch.compile failed");
    if (o.failure) {
      v.disposition = *o.failure;
      v.detail = fmt::format("shape {} while timing: {}", format_binding(sr.shape), o.detail);
      if (*o.failure == Disposition::Incorrect) {
        sr.status = "incorrect";
        sr.errors = o.body.value("evidence", json());
      }
      return finish();
    }
    sr.time = TimeStats::from_json(o.body["candidate"]);
    sr.baseline = TimeStats::from_json(o.body["baselines"]["eager"]);
    sr.extra["timer"] = o.body.value("timer", "");
    if (o.body.contains("own_kernels")) sr.extra["own_kernels"] = o.body["own_kernels"];
    take_clocks(o.body, sr);
    take_launch(o.body, sr);
    take_wall_clock(o.body, sr, "torch's stream");
    json compile_stats;
    if (time_compile && o.body["baselines"].contains("compile")) {
      compile_stats = o.body["baselines"]["compile"];
      json entry = {{"compile_ms", compile_stats}, {"measured_at", utc_now_iso()}, {"mode", opt_.compile_mode},
                    {"torch", info.value("torch", std::string())}, {"device", info.value("device", std::string("cpu"))}};
      (void)write_file_atomic(cache_file, entry.dump(2));
      sr.extra["compile_baseline"] = "torch.compile (" + opt_.compile_mode + "), timed in this run";
    } else if (cached.is_object()) {
      compile_stats = cached["compile_ms"];
      sr.extra["compile_baseline"] = "torch.compile (" + opt_.compile_mode + "), timed on " +
                                     cached.value("measured_at", std::string("?")) + " with the same protocol and cached (" +
                                     cache_file.string() + "; --fresh-baselines times it again)";
    }
    if (compile_stats.is_object()) {
      const TimeStats c = TimeStats::from_json(compile_stats);
      sr.extra["compile_ms"] = compile_stats;
      sr.extra["speedup_vs_compile"] = c.median / sr.time->median;
      log_compile += std::log(c.median / sr.time->median);
      ++timed_compile;
    }
    if (peaks) {
      const auto flops = cost(desc, "flops", sr.shape);
      const auto bytes = cost(desc, "bytes", sr.shape);
      // On the CPU the worker cannot evict the operands from the caches between calls (DESIGN.md wants
      // it; Python cannot clflush): a time below the bound is reported, not rejected. Before a
      // rejection the peaks are measured again; the decision keeps the higher figures.
      const bool enforce = peaks->enforce && device;
      const RooflineDecision rd = decide_roofline(sr.time->median, flops, bytes, *peaks, enforce, [&] {
        RunnerOptions ro = opt_.runner;
        ro.for_target(target_);
        RunnerClient again(ro);
        return device ? device_peaks(again, target_, true) : cpu_peaks(again, true);
      });
      v.machine = peaks->to_json();
      sr.bound_ms = rd.bound_ms;
      if (rd.bound_ms) sr.extra["roofline"] = rd.compared_with;
      take_cost(sr, flops, bytes);
      take_bandwidth(sr, bytes, *peaks);
      if (rd.below_bound && !enforce)
        sr.extra["warning"] = "below the roofline bound, which is not enforced here: the Python worker does not flush the CPU's caches";
      if (rd.reject) {
        v.disposition = Disposition::Rejected;
        v.detail = fmt::format("shape {{{}}}: {}", format_binding(sr.shape), rd.text);
        sr.status = "rejected";
        return finish();
      }
    }
    log_eager += std::log(sr.baseline->median / sr.time->median);
    ++timed;
  }
  if (timed > 0) v.speedup = std::exp(log_eager / timed);
  if (timed_compile > 0) v.extra["speedup_vs_compile"] = std::exp(log_compile / timed_compile);
  v.extra["baselines"] = {{"eager", "torch eager, timed side by side with the candidate"},
                          {"compile", opt_.compile_baseline ? "torch.compile (" + opt_.compile_mode + ")" : "not timed"}};
  v.detail = fmt::format("correct on {} shapes x {} seeds; {:.3f}x torch eager{}", v.shapes.size(), opt_.seeds,
                         v.speedup.value_or(0.0),
                         timed_compile ? fmt::format(", {:.3f}x torch.compile", std::exp(log_compile / timed_compile)) : "");
  return finish();
}

Expected<json> KbEvaluator::check(const fs::path& task_file) {
  if (!check_worker_) check_worker_ = std::make_unique<RunnerClient>(worker_options(std::max(opt_.runner.timeout_s, 120.0)));
  RunnerClient& worker = *check_worker_;
  const std::string abs_task = fs::absolute(task_file).string();
  JobOutcome d = interpret(worker.run({{"op", "describe"}, {"task", abs_task}}));
  if (!d.ok) return make_error(d.detail.empty() ? "the Python worker did not answer" : d.detail,
                               "it needs python3 with torch (KFAB_PYTHON names the interpreter)");
  json findings = json::array();
  std::vector<json> sets = {json::object()};
  for (const auto& h : d.body.value("heldout", json::array())) sets.push_back(h);
  json shapes = json::array();
  bool degenerate = false;
  for (const auto& over : sets) {
    JobOutcome o = interpret(worker.run({{"op", "check"}, {"task", abs_task}, {"shape", over}, {"target", target_},
                                      {"dtype", opt_.dtype}, {"seeds", 4}}));
    if (!o.ok) return make_error(o.detail, "fix the task file");
    degenerate = degenerate || o.body.value("degenerate", false);
    shapes.push_back({{"shape", o.body["shape"]}, {"findings", o.body["findings"]}});
  }
  return json{{"task", abs_task}, {"degenerate", degenerate}, {"shapes", shapes}};
}

Expected<json> KbEvaluator::trace(const fs::path& task_file) {
  if (!check_worker_) check_worker_ = std::make_unique<RunnerClient>(worker_options(std::max(opt_.runner.timeout_s, 120.0)));
  JobOutcome o = interpret(check_worker_->run({{"op", "trace"}, {"task", fs::absolute(task_file).string()}, {"target", target_}}));
  if (!o.ok) return make_error(o.detail.empty() ? "the Python worker did not answer" : o.detail,
                               "it needs python3 with torch (KFAB_PYTHON names the interpreter)");
  return o.body;
}

}  // namespace kfab
