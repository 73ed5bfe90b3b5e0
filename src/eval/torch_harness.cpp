#include "eval/torch_harness.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "core/expr.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/process.h"
#include "core/stamp.h"
#include "core/text.h"
#include "eval/evaluator.h"
#include "eval/runner_pair.h"
#include "core/stats.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool is_python_dsl(std::string_view dsl) { return dsl == "modelnew" || dsl == "triton" || dsl == "python"; }

std::string python_dsl_rules(std::string_view dsl) {
  if (dsl == "triton")
    return "Python with Triton: a module defining run(inputs, outputs) that launches @triton.jit kernels and writes the "
           "preallocated outputs in place; no torch operations doing the computation.";
  if (dsl == "modelnew") return "Python: a module defining class ModelNew(nn.Module) with the same constructor and forward signature as Model.";
  return {};
}

std::string kb_candidate_dsl(const fs::path& candidate) {
  // a native candidate: its target's language, where that target runs KernelBench-format tasks
  if (const Target* t = target_of_file(candidate)) return t->torch_device.empty() ? std::string() : std::string(t->dsl);
  const std::string name = candidate.filename().string();
  if (name.size() < 3 || name.compare(name.size() - 3, 3, ".py") != 0) return {};
  auto text = read_file(candidate);
  if (!text) return {};
  if (text->find("class ModelNew") != std::string::npos) return "modelnew";
  if (text->find("def run(") == std::string::npos) return {};
  return text->find("triton") != std::string::npos ? "triton" : "python";
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

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct JobDeadline {
  double seconds;
  std::string rule;
};

/// A job's deadline for a problem of this footprint ({"inputs", "outputs", "weights", "flops"} at the
/// tuning shape): `base` (--timeout) plus a second per GB it moves and per Tflop it computes on a GPU,
/// ten of each on the CPU. Those rates lie far below any machine's: a deadline is there to end a hang,
/// and no honest job of a problem of 17 GB (KernelBench's largest) comes near it.
JobDeadline job_deadline(double base, const json& fp, const std::string& target) {
  const Target* t = find_target(target);
  const bool device = t != nullptr && !t->on_host;
  const double per_gb = device ? 1.0 : 10.0, per_tflop = device ? 1.0 : 10.0;
  std::string rule = fmt::format("--timeout ({:g} s), plus {:g} s per GB of inputs, outputs and weights and {:g} s per "
                                 "Tflop of one forward (FlopCounterMode, fake tensors)",
                                 base, per_gb, per_tflop);
  if (!fp.is_object() || fp.contains("error") || !fp.contains("inputs")) {
    rule = fmt::format("--timeout ({:g} s): the problem's size is unknown{}", base,
                       fp.is_object() && fp.contains("error") ? " (" + fp["error"].get<std::string>() + ")" : std::string());
    return {base, rule};
  }
  const double gb = (fp.value("inputs", 0.0) + fp.value("outputs", 0.0) + fp.value("weights", 0.0)) / 1e9;
  const double tflop = fp.value("flops", 0.0) / 1e12;
  return {std::ceil(base + per_gb * gb + per_tflop * tflop), rule};
}

/// The seed of verification input set `index`: the worker seeds torch with it before get_inputs().
int64_t verify_seed(const EvalOptions& opt, int index) { return static_cast<int64_t>(opt.base_seed) * 1000003 + index; }

}  // namespace

TorchHarness::TorchHarness(fs::path task_file, std::string target)
    : task_file_(std::move(task_file)), task_abs_(fs::absolute(task_file_).string()), target_(std::move(target)),
      tgt_(find_target(target_)) {}

TorchHarness::~TorchHarness() = default;

RunnerOptions torch_worker_options(const RunnerOptions& base, double timeout_s, bool trusted) {
  RunnerOptions ro = base;
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
  ro.env["PYTHONPATH"] = path;  // beside what the caller gives (a device pinned by `--devices`)
  ro.env["PYTHONDONTWRITEBYTECODE"] = "1";
  return ro;
}

void TorchHarness::finish(Verdict& v) {
  // The end-to-end speedup: a ModelNew's is its speedup; another candidate's that of its exported
  // ModelNew (geometric mean over the shapes where it was timed).
  if (v.disposition == Disposition::Passed && v.speedup) {
    double log_sum = 0.0;
    int n = 0;
    for (const auto& s : v.shapes)
      if (s.extra.contains("speedup_end_to_end")) {
        log_sum += std::log(s.extra.at("speedup_end_to_end").get<double>());
        ++n;
      }
    if (dsl_ == "modelnew") v.extra["speedup_end_to_end"] = *v.speedup;
    else if (n > 0) v.extra["speedup_end_to_end"] = std::exp(log_sum / n);
    if (v.extra.contains("speedup_end_to_end") && dsl_ != "modelnew")
      v.detail += fmt::format("; end to end (the exported ModelNew) {:.3f}x", v.extra["speedup_end_to_end"].get<double>());
  }
  // Each worker's peak of device memory over this evaluation (torch's allocator: what it took from
  // the device, its own context aside), and the device's size.
  if (tgt_ == nullptr || !tgt_->gpu || !trusted_ || !worker_) return;
  json mem = json::object();
  double sum = 0.0;
  for (auto [name, w] : {std::pair<const char*, RunnerClient*>{"trusted_worker", trusted_.get()}, {"candidate_worker", worker_.get()}}) {
    if (w->pid() == 0) continue;  // it died (a crash): a fresh one would know nothing of this evaluation
    JobReply r = w->run({{"op", "memory"}, {"reset", false}});
    if (r.kind != JobReply::Kind::Ok || !r.body.value("device", false)) continue;
    mem[name] = {{"peak_reserved", r.body.value("peak_reserved", 0.0)}, {"peak_allocated", r.body.value("peak_allocated", 0.0)}};
    sum += r.body.value("peak_reserved", 0.0);
    mem["device_total"] = r.body.value("total", 0.0);
  }
  if (mem.empty()) return;
  mem["peak_bytes"] = sum;
  mem["note"] = "each worker's peak of torch's reserved memory, summed (an upper bound: the peaks need not coincide); "
                "CUDA contexts not counted";
  v.extra["device_memory"] = mem;
}

void TorchHarness::end() {
  if (!keep_workers_) {
    worker_.reset();
    trusted_.reset();
  }
  last_call_ = JobReply{};
  opt_ = nullptr;
}

JobOutcome TorchHarness::trusted_job(const json& req) {
  JobOutcome o = interpret(trusted_->run(req));
  if (!o.ok) o.task_error = true;
  return o;
}

Expected<std::vector<ShapeCase>> TorchHarness::begin(const fs::path& candidate, const EvalOptions& opt, Verdict& v) {
  opt_ = &opt;
  auto say = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  if (tgt_ == nullptr || tgt_->torch_device.empty()) {
    std::string torch_targets;
    for (const Target* t : targets())
      if (!t->torch_device.empty()) torch_targets += (torch_targets.empty() ? "" : " or ") + std::string(t->name);
    return make_error("a KernelBench-format task runs on " + torch_targets + ", not " + target_, "choose with --target");
  }
  if (opt.dtype != "f32" && opt.dtype != "f16" && opt.dtype != "bf16" && opt.dtype != "f64")
    return make_error("unknown --dtype " + opt.dtype, "accepted: f32, f16, bf16, f64");
  v.dsl = kb_candidate_dsl(candidate);
  if (v.dsl.empty())
    return make_error(candidate.string() + ": not a candidate for a KernelBench task",
                      "give a .cpp (cpu) or .cu (cuda) file exporting kfab_run, a .py defining ModelNew, or a .py "
                      "defining run(inputs, outputs)");
  std::unique_ptr<Backend> native;
  if (const Target* own = is_python_dsl(v.dsl) ? nullptr : target_of_file(candidate)) {
    if (own != tgt_)
      return make_error(candidate.string() + ": a " + std::string(own->suffix()) + " candidate runs on the " + std::string(own->name) +
                            " target, not " + target_,
                        "choose the target with --target");
    native = own->make_backend();
    // A device's compiler builds where no device is (torch then says there is none); a missing host
    // compiler is said here.
    if (native->probe() == 0 && own->on_host)
      return make_error("the " + std::string(native->target()) + " backend is not available here: " + native->describe());
  }

  // The workers start (and import torch: seconds) while a native candidate builds; kept ones are
  // reused (a fresh one replaces one that died). Two workers: the candidate's, and the trusted one,
  // which runs the Model, times torch eager and torch.compile and compares; it never loads a candidate.
  const double first_timeout = std::max(opt.runner.timeout_s, 120.0);
  RunnerOptions wo = torch_worker_options(opt.runner, first_timeout), to = torch_worker_options(opt.runner, first_timeout, true);
  host_wait_policy(wo, tgt_->on_host);
  host_wait_policy(to, tgt_->on_host);
  if (!worker_) worker_ = std::make_unique<RunnerClient>(wo);
  if (!trusted_) trusted_ = std::make_unique<RunnerClient>(to);
  worker_->set_timeout(first_timeout);
  trusted_->set_timeout(first_timeout);
  (void)worker_->start();
  (void)trusted_->start();

  std::string artifact = fs::absolute(candidate).string();
  if (native) {
    say("build " + candidate.filename().string());
    auto b = native->build(candidate);
    if (!b.ok() && b.failure().no_space)
      return make_error(b.failure().message, "free some space, or set KFAB_CACHE_DIR (and TMPDIR) to a folder on another disk");
    if (!b.ok()) {
      v.disposition = Disposition::CompileFailed;
      v.detail = b.failure().message;
      return std::vector<ShapeCase>{};
    }
    v.build = {{"cached", b.value().cached}, {"seconds", b.value().seconds}, {"key", b.value().key}};
    artifact = b.value().artifact.string();
  }

  say("start the Python worker (torch)");
  for (RunnerClient* w : {trusted_.get(), worker_.get()}) {
    JobReply hello = w->run({{"op", "hello"}});
    if (hello.kind != JobReply::Kind::Ok || !hello.body.value("ok", false))
      return make_error("the Python worker did not start: " + (hello.detail.empty() ? hello.body.dump() : hello.detail),
                        "it needs python3 with torch: `make test` installs torch into .venv; KFAB_PYTHON names another "
                        "interpreter");
    if (w == trusted_.get()) info_ = hello.body;
  }
  if (!tgt_->on_host && !info_.value(std::string(tgt_->torch_device), false))
    return make_error("torch sees no CUDA device here (torch " + info_.value("torch", std::string("?")) + ")",
                      "use --target cpu, or a torch built with CUDA");
  if (v.dsl == "triton" && info_["triton"].is_null())
    return make_error("the candidate uses Triton, which the worker's Python lacks", "install triton");
  json tolerance = json::object();
  if (opt.atol) tolerance["atol"] = *opt.atol;
  if (opt.rtol) tolerance["rtol"] = *opt.rtol;
  JobOutcome d = interpret(trusted_->run({{"op", "describe"}, {"task", task_abs_}, {"dtype", opt.dtype}, {"tolerance", tolerance},
                                          {"target", target_}, {"footprint", true}}));
  if (!d.ok) return make_error(d.detail.empty() ? "the task did not load" : d.detail, "fix the task file");
  desc_ = d.body;
  // The first job's deadline covered torch's import; the others grow with what the problem moves.
  const JobDeadline deadline = job_deadline(opt.runner.timeout_s, desc_.value("footprint", json::object()), target_);
  timeout_s_ = deadline.seconds;
  worker_->set_timeout(timeout_s_);
  trusted_->set_timeout(timeout_s_);
  v.protocol["timeout_s"] = timeout_s_;
  v.protocol["timeout_rule"] = deadline.rule;
  if (desc_.contains("footprint") && !desc_["footprint"].contains("error")) v.extra["problem_bytes"] = desc_["footprint"];
  if (tgt_->gpu)
    for (RunnerClient* w : {trusted_.get(), worker_.get()}) (void)w->run({{"op", "memory"}, {"reset", true}});
  v.baseline = "torch eager " + info_.value("torch", std::string());
  // What `speedup` compares: a ModelNew is timed end to end (its forward, as KernelBench times it); any
  // other candidate by its call on outputs made before the timing (what an exported ModelNew adds to it,
  // allocating the outputs and the call from Python, is not in it).
  v.extra["speedup_measures"] =
      v.dsl == "modelnew"
          ? "end to end: ModelNew.forward against Model.forward (torch eager), each call as KernelBench times it"
          : "kernel: the candidate's call on preallocated outputs (" +
                std::string(!is_python_dsl(v.dsl) ? "kfab_run, through ctypes" : "run(inputs, outputs)") +
                ") against Model.forward (torch eager); an exported ModelNew adds allocating the outputs and a call "
                "through its torch extension";
  v.protocol.update(
      {{"dtype", opt.dtype},
       {"order", "reference (trusted worker), candidate, candidate; then the last seed's inputs changed in four places"},
       {"isolation", "the Model runs, and the baselines are timed, in a trusted worker that never loads candidate "
                     "code; it compares the candidate's outputs (shared memory, CUDA IPC) while the candidate's "
                     "worker is stopped"},
       {"timed_inputs", "the timing seed's inputs (never verified), four elements changed anew before each "
                        "timed call; sampled calls and the last checked against the Model"},
       {"inputs", "get_inputs() after torch.manual_seed(seed); float inputs scaled by 1, 1, 2, 0.5, 1 by seed"},
       {"weights", "Model(*get_init_inputs()) after torch.manual_seed(42)"},
       {"worker", "python " + python_interpreter() + ", torch " + info_.value("torch", std::string())}});
  v.extra["baselines"] = {{"eager", "torch eager, timed side by side with the candidate"},
                          {"compile", opt.compile_baseline ? "torch.compile (" + opt.compile_mode + ")" : "not timed"}};

  dsl_ = v.dsl;
  candidate_ = fs::absolute(candidate);
  artifact_ = artifact;
  base_ = {{"task", task_abs_}, {"candidate", {{"path", artifact}}}, {"base_seed", opt.base_seed},
           {"target", target_}, {"dtype", opt.dtype}, {"forbidden", opt.forbid}};
  if (!tolerance.empty()) base_["tolerance"] = tolerance;
  if (opt.judge_eager) base_["judge"] = "eager";
  if (desc_.contains("tolerance_used")) v.protocol["tolerance"] = desc_["tolerance_used"];
  shape_outputs_.clear();
  std::vector<ShapeCase> shapes;
  json tune = json::object();
  if (tgt_->gpu && desc_.contains("gpu") && !desc_["gpu"].empty()) {
    tune = desc_["gpu"];
    v.protocol["tuning_shapes"] = "KFAB_GPU (a GPU)";
  }
  shapes.push_back({ShapeBinding{}, tune, false});
  if (opt.heldout)
    for (const auto& h : desc_.value("heldout", json::array())) shapes.push_back({ShapeBinding{}, h, true});
  return shapes;
}

JobOutcome TorchHarness::reference(ShapeCase& s, int index, uint64_t perturb) {
  json rq = base_;
  rq.erase("candidate");
  rq.update({{"op", "reference"}, {"shape", s.over}, {"seed", verify_seed(*opt_, index)}, {"index", index},
             {"perturb", perturb}, {"perturb_last", true}, {"scaled", true}});
  JobOutcome r = trusted_job(rq);
  if (!r.ok) return r;
  output_shapes_ = r.body.value("output_shapes", json::array());
  shape_outputs_[s.over.dump()] = output_shapes_;
  scale_ = r.body.value("scale", 1.0);
  if (r.body.contains("shape")) s.shape = binding(r.body["shape"]);
  return r;
}

JobOutcome TorchHarness::call(const ShapeCase& s, int index, uint64_t perturb, int call, int pattern) {
  json cq = base_;
  cq.update({{"op", "call"}, {"shape", s.over}, {"seed", verify_seed(*opt_, index)}, {"scale", scale_}, {"perturb", perturb},
             {"perturb_last", true}, {"pattern", pattern}, {"output_shapes", output_shapes_}});
  last_call_ = worker_->run(cq);
  JobOutcome c = interpret(last_call_);
  if (!c.ok) return c;
  return compare_last(verify_seed(*opt_, index), call);
}

JobOutcome TorchHarness::compare_last(int64_t seed, int call) {
  // The candidate's outputs of its last job (shared memory on the CPU, CUDA IPC handles on a GPU),
  // compared in the trusted worker with the answer it holds, while the candidate's worker is stopped.
  json q = {{"op", "compare"}, {"seed", seed}, {"call", call}, {"outputs", last_call_.body.value("outputs", json::array())}};
  std::vector<int> pass;
  if (!last_call_.fds.empty()) {
    q["fds"] = 1;
    pass.push_back(last_call_.fds[0]);
  }
  return interpret(trusted_->run(q, pass));
}

std::optional<Tolerance> TorchHarness::tolerance_of(const json&) const {
  if (!desc_.contains("tolerance_used") || !desc_["tolerance_used"].is_object()) return std::nullopt;
  const json& t = desc_["tolerance_used"];
  return Tolerance{t.value("atol", 0.0), t.value("rtol", 0.0)};
}

fs::path TorchHarness::compile_cache_file(const ShapeCase& s) const {
  // compiling costs far more than timing, and its time does not change while these do not
  const auto task_source = read_file(task_file_);
  const std::string key = hash_hex((task_source ? *task_source : std::string()) + '\0' + target_ + '\0' +
                                   info_.value("device", std::string("cpu")) + '\0' + opt_->dtype + '\0' + s.over.dump() + '\0' +
                                   info_.value("torch", std::string()) + '\0' + opt_->compile_mode + '\0' +
                                   std::to_string(info_.value("timer", 1)))
                              .substr(0, 24);
  return cache_dir() / "baselines" / (key + ".json");
}

std::vector<std::string> TorchHarness::baselines(const ShapeCase& s) {
  // torch.compile is timed where no time of it on this shape is cached (or --fresh-baselines).
  cached_compile_ = json();
  if (opt_->compile_baseline && !opt_->fresh_baselines)
    if (auto text = read_file(compile_cache_file(s))) {
      try {
        cached_compile_ = json::parse(*text);
      } catch (const json::exception&) {
        cached_compile_ = json();  // measured again
      }
    }
  time_compile_ = opt_->compile_baseline && !cached_compile_.is_object();
  if (time_compile_) return {"eager", "compile"};
  return {"eager"};
}

JobOutcome TorchHarness::prepare_timing(const ShapeCase& s, int64_t seed, int warmup) {
  hosts_.clear();
  late_.clear();
  walls_.clear();
  cand_prep_ = end_body_ = trusted_end_body_ = json();
  if (time_compile_ && opt_->progress) opt_->progress("and torch.compile (it compiles first)");
  const json outs = shape_outputs_.count(s.over.dump()) ? shape_outputs_[s.over.dump()] : output_shapes_;
  json prep = base_;
  prep.update({{"op", "time_prepare"}, {"shape", s.over}, {"seed", seed}, {"warmup", warmup}, {"output_shapes", outs}});
  JobOutcome c = interpret(worker_->run(prep));
  if (!c.ok) return c;
  cand_prep_ = c.body;
  prep.erase("candidate");
  prep["baselines"] = time_compile_ ? json::array({"eager", "compile"}) : json::array({"eager"});
  prep["compile_mode"] = opt_->compile_mode;
  // Compiling takes minutes on a slow machine: the trusted worker's warm-up gets a longer deadline.
  if (time_compile_) trusted_->set_timeout(std::max(timeout_s_, 900.0));
  JobOutcome t = trusted_job(prep);
  trusted_->set_timeout(timeout_s_);
  if (!t.ok) return t;
  return c;
}

JobOutcome TorchHarness::timed_call(uint64_t perturb, bool clocks) {
  JobOutcome o = interpret(worker_->run({{"op", "time_call"}, {"perturb", perturb}, {"clocks", clocks}}));
  if (!o.ok) return o;
  hosts_["candidate"].push_back(o.body.value("host_ms", 0.0));
  late_["candidate"] += o.body.value("late", false) ? 1 : 0;
  walls_.push_back(o.body.value("wall_ms", 0.0));
  return o;
}

JobOutcome TorchHarness::timed_baseline(const std::string& which) {
  JobOutcome o = trusted_job({{"op", "time_call"}, {"which", which}});
  if (!o.ok) return o;
  hosts_[which].push_back(o.body.value("host_ms", 0.0));
  late_[which] += o.body.value("late", false) ? 1 : 0;
  return o;
}

JobOutcome TorchHarness::check_timed(const ShapeCase& s, int64_t seed, uint64_t perturb) {
  last_call_ = worker_->run({{"op", "export"}});
  JobOutcome e = interpret(last_call_);
  if (!e.ok) return e;
  json rq = base_;
  rq.erase("candidate");
  rq.update({{"op", "reference"}, {"shape", s.over}, {"seed", seed}, {"index", 0}, {"perturb", perturb},
             {"perturb_last", false}, {"scaled", false}});
  JobOutcome r = trusted_job(rq);
  if (!r.ok) return r;
  return compare_last(seed, 3);
}

JobOutcome TorchHarness::end_timing() {
  JobOutcome end = interpret(worker_->run({{"op", "time_end"}}));
  if (!end.ok) return end;
  end_body_ = end.body;
  JobOutcome t = trusted_job({{"op", "time_end"}});
  if (!t.ok) return t;
  trusted_end_body_ = t.body;
  return end;
}

void TorchHarness::describe_timing(const ShapeCase& s, ShapeResult& sr, const std::map<std::string, std::vector<double>>& times) {
  json b;
  sr.extra["timer"] = cand_prep_.value("timer", "");
  if (cand_prep_.contains("own_kernels")) sr.extra["own_kernels"] = cand_prep_["own_kernels"];
  if (tgt_ != nullptr && tgt_->gpu) {
    b["candidate_wall"] = summarize(walls_).to_json();
    b["empty_call_wall"] = cand_prep_.value("empty_call_wall", json::object());
    if (end_body_.contains("clocks")) b["clocks"] = end_body_["clocks"];
    json host_ms = json::object(), calls = json::object();
    for (const auto& [name, ts] : times) {
      host_ms[name] = median_of(hosts_[name]);
      calls[name] = ts.size();
    }
    b["launch"] = {{"hold_ms", end_body_.value("hold_ms", 0.0)}, {"timer_version", end_body_.value("timer_version", 1)},
                   {"host_ms", host_ms}, {"late_starts", late_}, {"calls", calls},
                   {"baseline_hold_ms", trusted_end_body_.value("hold_ms", 0.0)}};
  }
  take_clocks(b, sr);
  take_launch(b, sr);
  take_wall_clock(b, sr, "torch's stream");

  // torch.compile: timed in this run (and cached), or its cached time.
  json compile_stats;
  const auto compiled = times.find("compile");
  if (time_compile_ && compiled != times.end()) {
    compile_stats = summarize(compiled->second).to_json();
    json entry = {{"compile_ms", compile_stats}, {"measured_at", utc_now_iso()}, {"mode", opt_->compile_mode},
                  {"torch", info_.value("torch", std::string())}, {"device", info_.value("device", std::string("cpu"))}};
    if (sr.baseline) entry["eager_ms"] = sr.baseline->to_json();  // timed interleaved with it: their ratio travels
    (void)write_file_atomic(compile_cache_file(s), entry.dump(2));
    sr.extra["compile_baseline"] = "torch.compile (" + opt_->compile_mode + "), timed in this run";
  } else if (cached_compile_.is_object()) {
    compile_stats = cached_compile_["compile_ms"];
    sr.extra["compile_baseline"] = "torch.compile (" + opt_->compile_mode + "), timed on " +
                                   cached_compile_.value("measured_at", std::string("?")) + " with the same protocol and cached (" +
                                   compile_cache_file(s).string() + "; --fresh-baselines times it again)";
  }
  if (compile_stats.is_object() && sr.time) {
    const TimeStats c = TimeStats::from_json(compile_stats);
    sr.extra["compile_ms"] = compile_stats;
    sr.extra["speedup_vs_compile"] = c.median / sr.time->median;
    // A cached time beside a fresh one would divide a quiet machine's figure by a loaded one's (issue 24):
    // where the cache holds the eager time timed with it, compile's ratio to eager is carried over to this
    // run's eager time, which was timed interleaved with the candidate.
    if (!time_compile_ && cached_compile_.contains("eager_ms") && sr.baseline && sr.baseline->median > 0) {
      const double then_eager = TimeStats::from_json(cached_compile_["eager_ms"]).median;
      if (then_eager > 0 && c.median > 0) {
        const double ratio = c.median / then_eager;
        sr.extra["compile_vs_eager_cached"] = ratio;
        sr.extra["speedup_vs_compile"] = sr.baseline->median * ratio / sr.time->median;
        sr.extra["compile_baseline"] = sr.extra["compile_baseline"].get<std::string>() +
                                       fmt::format("; its time was {:.3f}x eager's in that run, carried over to this run's eager time", ratio);
      }
    }
  }
  if (opt_->end_to_end && dsl_ != "modelnew" && sr.time && sr.baseline) time_end_to_end(sr);
}

Expected<std::string> run_export(std::vector<std::string> args, double timeout_s) {
  std::vector<std::string> argv = {"/usr/bin/env", "PYTHONPATH=" + python_worker_dir().string(), python_interpreter(), "-m",
                                   "kfab_worker.export", "--header", (abi_include_dir() / "kfab/candidate.h").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, timeout_s);
  if (!r) return Unexpected{r.error()};
  if (!r->status.ok()) {
    std::string msg = printable(r->output, 4000);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    return make_error(msg.empty() ? "the export failed: " + r->status.describe() : msg);
  }
  return r->output;
}

namespace {

/// The torch extension of exported ModelNews, built once per machine, Python and header into kfab's
/// cache (a minute the first time); its library, remembered in a file beside it.
Expected<std::string> modelnew_extension() {
  static std::mutex mu;  // evaluators of several devices (tune's --devices) may ask at once
  std::lock_guard<std::mutex> lock(mu);
  static std::optional<std::string> built;
  if (built) return *built;
  const fs::path dir = cache_dir() / "export";
  std::error_code ec;
  const auto py = fs::canonical(python_interpreter(), ec);
  const auto stamp = ec ? 0 : fs::last_write_time(py, ec).time_since_epoch().count();
  const auto header = read_file(abi_include_dir() / "kfab/candidate.h");
  const auto source = read_file(python_worker_dir() / "kfab_worker/modelnew_abi.cpp");
  const fs::path note = dir / ("extension-of-" + hash_hex(py.string() + '\0' + std::to_string(stamp) + '\0' +
                                                           (header ? *header : "") + '\0' + (source ? *source : ""))
                                                      .substr(0, 16) + ".txt");
  if (auto p = read_file(note); p && !p->empty() && fs::exists(*p, ec)) return *(built = *p);
  auto out = run_export({"--build-extension", dir.string()}, 900.0);
  if (!out) return Unexpected{out.error()};
  std::string path = *out;
  while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
  path = path.substr(path.rfind('\n') + 1);
  if (!fs::exists(path, ec)) return make_error("the extension build named no library: " + printable(*out, 300));
  (void)write_file_atomic(note, path);
  return *(built = path);
}

}  // namespace

void TorchHarness::time_end_to_end(ShapeResult& sr) {
  auto fail = [&](const std::string& why) { sr.extra["end_to_end"] = {{"error", why}}; };
  if (opt_->progress) opt_->progress("the exported ModelNew, end to end");
  std::string extension;
  if (!is_python_dsl(dsl_)) {
    auto e = modelnew_extension();
    if (!e) return fail("the ModelNew extension does not build: " + e.error().message);
    extension = *e;
  }
  std::error_code ec;
  fs::create_directories(cache_dir() / "export", ec);
  const auto cand_source = read_file(candidate_);
  const auto task_source = read_file(task_file_);
  const fs::path modelnew = cache_dir() / "export" /
                            ("modelnew-" + hash_hex((task_source ? *task_source : "") + '\0' + (cand_source ? *cand_source : "")).substr(0, 16) + ".py");
  if (auto out = run_export({"--task", task_abs_, "--candidate", candidate_.string(), "--out", modelnew.string()}, 60.0); !out)
    return fail("the export failed: " + out.error().message);
  json q = {{"op", "time_modelnew"}, {"modelnew", modelnew.string()}, {"calls", opt_->min_calls > 0 ? opt_->min_calls : 100},
            {"min_time_s", opt_->min_time_s >= 0 ? opt_->min_time_s : 0.1}};
  if (!extension.empty()) q.update({{"library", artifact_}, {"extension", extension}});
  JobOutcome o = interpret(worker_->run(q));
  if (!o.ok) return fail(o.detail.empty() ? "the worker did not answer" : o.detail);
  if (o.body.contains("error")) return fail(o.body["error"].get<std::string>());
  const TimeStats t = TimeStats::from_json(o.body["ms"]);
  sr.extra["end_to_end_ms"] = o.body["ms"];
  sr.extra["end_to_end_host_ms"] = o.body.value("host_ms", json::object());
  if (t.median > 0) sr.extra["speedup_end_to_end"] = sr.baseline->median / t.median;
}

std::optional<double> TorchHarness::cost(const char* key, const ShapeCase& s) const {
  const json c = desc_.value("cost", json::object());
  if (!c.contains(key) || !c[key].is_string()) return std::nullopt;
  auto v = eval_expr(c[key].get<std::string>(), s.shape);
  if (!v) return std::nullopt;
  return *v;
}

std::optional<double> TorchHarness::least_bytes(const ShapeCase& s) const {
  if (auto b = bytes(s)) return b;
  const json fp = desc_.value("footprint", json::object());
  // the footprint is the tuning shape's (KFAB_GPU's sizes on a GPU), the one ShapeCase that is not held out
  if (s.heldout || !fp.contains("inputs") || fp.contains("error")) return std::nullopt;
  const double b = fp.value("inputs", 0.0) + fp.value("weights", 0.0) + fp.value("outputs", 0.0);
  return b > 0.0 ? std::optional<double>(b) : std::nullopt;
}

std::optional<MachinePeaks> TorchHarness::peaks(bool again) {
  // The machine's peaks for the roofline bound come from kfab-runner (cached after the first time). A
  // file without a cost needs them only for its share of the copy bandwidth, which a CPU reports only for
  // data too large for its caches.
  if (desc_.value("cost", json::object()).empty()) {
    if (tgt_ == nullptr) return std::nullopt;
    const ShapeCase tuning{ShapeBinding{}, json(), false};
    const auto least = least_bytes(tuning);
    if (!least || (tgt_->on_host && !bytes_bound_missing_for(*least).empty())) return std::nullopt;
  }
  RunnerClient runner(for_target(opt_->runner, target_));
  return target_peaks(runner, target_, again);
}

TorchInspector::TorchInspector(std::string target, EvalOptions opt)
    : target_(std::move(target)), opt_(std::make_unique<EvalOptions>(std::move(opt))) {}

TorchInspector::~TorchInspector() = default;

RunnerClient& TorchInspector::worker() {
  if (!worker_) worker_ = std::make_unique<RunnerClient>(torch_worker_options(opt_->runner, std::max(opt_->runner.timeout_s, 120.0)));
  return *worker_;
}

Expected<json> TorchInspector::check(const fs::path& task_file) {
  const std::string abs_task = fs::absolute(task_file).string();
  JobOutcome d = interpret(worker().run({{"op", "describe"}, {"task", abs_task}}));
  if (!d.ok) return make_error(d.detail.empty() ? "the Python worker did not answer" : d.detail,
                               "it needs python3 with torch (KFAB_PYTHON names the interpreter)");
  std::vector<json> sets = {json::object()};
  for (const auto& h : d.body.value("heldout", json::array())) sets.push_back(h);
  json shapes = json::array();
  bool degenerate = false;
  for (const auto& over : sets) {
    JobOutcome o = interpret(worker().run({{"op", "check"}, {"task", abs_task}, {"shape", over}, {"target", target_},
                                           {"dtype", opt_->dtype}, {"seeds", 4}}));
    if (!o.ok) return make_error(o.detail, "fix the task file");
    degenerate = degenerate || o.body.value("degenerate", false);
    shapes.push_back({{"shape", o.body["shape"]}, {"findings", o.body["findings"]}});
  }
  return json{{"task", abs_task}, {"degenerate", degenerate}, {"shapes", shapes}};
}

Expected<json> TorchInspector::trace(const fs::path& task_file) {
  JobOutcome o = interpret(worker().run({{"op", "trace"}, {"task", fs::absolute(task_file).string()}, {"target", target_}}));
  if (!o.ok) return make_error(o.detail.empty() ? "the Python worker did not answer" : o.detail,
                               "it needs python3 with torch (KFAB_PYTHON names the interpreter)");
  return o.body;
}

std::string TorchHarness::bytes_bound_missing(const ShapeCase& s) const {
  const auto b = least_bytes(s);
  return b ? bytes_bound_missing_for(*b) : std::string();
}

std::string TorchHarness::bytes_bound_missing_for(double b) const {
  if (tgt_ == nullptr || !tgt_->on_host) return {};
  const uint64_t llc = last_level_cache_bytes();
  if (llc == 0 || b > 2.0 * static_cast<double>(llc)) return {};
  return fmt::format("the shape's {:.3g} MB fit in the {:.3g} MB last-level cache, and the Python worker times without flushing "
                     "it (Python cannot evict lines): memory bandwidth does not bound this time",
                     b / 1e6, static_cast<double>(llc) / 1e6);
}

void TorchHarness::after_timing(Verdict& v) {
  if (opt_ == nullptr || !opt_->profile) return;
  v.profile = {{"error",
                "kfab eval --profile profiles native tasks only; for a KernelBench-format task export the ModelNew (kfab export) and run "
                "it under ncu (the repository's scripts/kb_ncu.py)"}};
}

}  // namespace kfab
