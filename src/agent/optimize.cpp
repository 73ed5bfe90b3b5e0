#include "agent/optimize.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <random>
#include <future>
#include <regex>
#include <thread>

#include "agent/extract.h"
#include "agent/llm.h"
#include "backends/backend.h"
#include "backends/cuda/cuda_backend.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/stamp.h"
#include "core/text.h"
#include "eval/torch_harness.h"
#include "eval/roofline.h"
#include "runner/runner_client.h"
#include "store/store.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string dsl_suffix(const std::string& dsl) {
  if (dsl == "cuda") return ".cu";
  if (dsl == "opencl") return ".cl.cpp";
  if (dsl == "triton" || dsl == "python" || dsl == "modelnew") return ".py";
  return ".cpp";
}

namespace {

std::string dsl_rules(const std::string& dsl) {
  if (dsl == "cpp") return "C++20 for the CPU, one file exporting kfab_run (KFAB_EXPORT), built with g++ -O3 -march=native -fopenmp; OpenMP and SIMD intrinsics are allowed.";
  if (dsl == "cuda") return "CUDA C++ for an NVIDIA GPU, one .cu file exporting kfab_run (KFAB_EXPORT), built with nvcc -O3 for the GPU's architecture; enqueue all work on the given stream; no device-wide synchronization, no allocation per call.";
  if (dsl == "opencl") return "OpenCL: a C++ host file exporting kfab_run whose kernels are OpenCL C source strings built at run time; data are cl_mem, the stream is the cl_command_queue.";
  if (dsl == "triton") return "Python with Triton: a module defining run(inputs, outputs) that launches @triton.jit kernels and writes the preallocated outputs in place; no torch operations doing the computation.";
  if (dsl == "modelnew") return "Python: a module defining class ModelNew(nn.Module) with the same constructor and forward signature as Model.";
  return dsl;
}

std::string fill(std::string text, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, v] : vars) {
    const std::string key = "{{" + k + "}}";
    for (size_t pos = text.find(key); pos != std::string::npos; pos = text.find(key, pos + v.size())) text.replace(pos, key.size(), v);
  }
  return text;
}

/// What a proposer may know of the task: held-out shapes withheld.
Expected<std::string> task_text(const LoadedTask& lt) {
  if (lt.kernelbench()) {
    auto src = read_file(lt.path);
    if (!src) return Unexpected{src.error()};
    return "The task, a KernelBench-format PyTorch module (inputs are get_inputs(), then the model's parameters and buffers):\n```python\n" +
           withhold(*src, "KFAB_HELDOUT") + "\n```";
  }
  const Task& t = lt.task;
  auto manifest = read_file(t.manifest);
  auto reference = read_file(t.reference);
  return "The task " + t.name + ": " + t.summary + "\nManifest (tensors, shapes, tolerance, cost):\n```toml\n" +
         withhold(manifest ? *manifest : "", "heldout") +
         "\n```\nThe reference (the correctness oracle):\n```cpp\n" + (reference ? *reference : "") + "\n```";
}

/// The measurements of a verdict, as a proposer sees them (tuning shapes only).
std::string verdict_text(const json& v) {
  std::string s = fmt::format("disposition: {}\ndetail: {}\n", v.value("disposition", ""), v.value("detail", ""));
  for (const auto& sh : v.value("shapes", json::array())) {
    if (sh.value("heldout", false)) continue;
    s += "shape " + sh["shape"].dump() + ": " + sh.value("status", "");
    if (sh.contains("time_ms")) s += fmt::format(", median {:.5g} ms", sh["time_ms"]["median"].get<double>());
    if (sh.contains("baseline_ms")) s += fmt::format(", baseline {:.5g} ms", sh["baseline_ms"]["median"].get<double>());
    if (sh.contains("percent_of_bound")) s += fmt::format(", {:.1f}% of the roofline bound", sh["percent_of_bound"].get<double>());
    if (sh.contains("achieved_GBps")) s += fmt::format(", {:.1f} GB/s", sh["achieved_GBps"].get<double>());
    if (sh.contains("max_abs_err")) s += ", max abs err " + sh["max_abs_err"].dump();
    s += "\n";
  }
  return s;
}

}  // namespace

Expected<json> optimize(const OptimizeOptions& in) {
  OptimizeOptions opt = in;
  const auto start = std::chrono::steady_clock::now();
  auto say = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  auto store_r = Store::open(Store::default_path());
  if (!store_r) return Unexpected{store_r.error()};
  Store& store = **store_r;

  // The run: a new one, or the one to resume (its settings win).
  std::string run = opt.resume;
  std::vector<Store::Step> steps;
  if (!run.empty()) {
    auto info = store.run_info(run);
    if (!info) return Unexpected{info.error()};
    const json& c = (*info)["config"];
    opt.task = (*info)["task_path"].get<std::string>();
    opt.target = (*info)["target"];
    opt.llm = (*info)["llm"];
    opt.strategy = (*info)["strategy"];
    opt.dsl = c.value("dsl", opt.dsl);
    opt.budget_candidates = c.value("budget_candidates", opt.budget_candidates);
    opt.budget_tokens = c.value("budget_tokens", opt.budget_tokens);
    opt.budget_dollars = c.value("budget_dollars", opt.budget_dollars);
    opt.out_dir = c.value("out_dir", opt.out_dir.string());
    if (opt.config.empty()) opt.config = c.value("config_file", std::string());
    auto s = store.run_steps(run);
    if (!s) return Unexpected{s.error()};
    steps = std::move(*s);
  }
  if (opt.strategy != "refine" && opt.strategy != "evolve")
    return make_error("unknown strategy " + opt.strategy, "refine (one trajectory) or evolve (a population)");
  if (opt.dsl.empty()) opt.dsl = opt.target == "cpu" ? "cpp" : opt.target;
  // The task is opened once: its format decides how candidates are evaluated and what a proposer sees.
  auto loaded = open_task(opt.task);
  if (!loaded) return Unexpected{loaded.error()};
  auto text = task_text(*loaded);
  if (!text) return Unexpected{text.error()};
  const std::string task_name = loaded->task.name;

  // The model: a provider, or the exchanges of a recorded run, in order.
  std::unique_ptr<LlmClient> client;
  std::vector<std::string> replay;
  size_t replay_next = 0;
  if (opt.llm.rfind("replay:", 0) == 0) {
    auto rs = store.run_steps(opt.llm.substr(7));
    if (!rs) return Unexpected{rs.error()};
    for (const auto& s : *rs)
      if (!s.call_hash.empty()) replay.push_back(s.call_hash);
    if (replay.empty()) return make_error("run " + opt.llm.substr(7) + " has no recorded LLM exchanges");
    for (const auto& s : steps)
      if (!s.call_hash.empty()) ++replay_next;
  } else {
    auto p = resolve_provider(opt.llm, opt.config);
    if (!p) return Unexpected{p.error()};
    auto c = make_http_client(*p);
    if (!c) return Unexpected{c.error()};
    client = std::move(*c);
  }
  const fs::path prompts = opt.prompts_dir.empty() ? fs::path(KFAB_SOURCE_INCLUDE_DIR) / "../prompts" : opt.prompts_dir;
  auto prompt = [&](const std::string& role) -> Expected<std::string> {
    auto t = read_file(prompts / (role + ".md"));
    if (!t) return make_error("the prompt file for the " + role + " is missing: " + t.error().message);
    return *t;
  };

  if (run.empty()) {
    run = new_run_id();
    if (opt.out_dir.empty()) opt.out_dir = fs::path("kfab-runs") / run;
    json config = {{"dsl", opt.dsl}, {"budget_candidates", opt.budget_candidates}, {"budget_tokens", opt.budget_tokens},
                   {"budget_dollars", opt.budget_dollars}, {"out_dir", fs::absolute(opt.out_dir).string()},
                   {"config_file", opt.config.empty() ? std::string() : fs::absolute(opt.config).string()},
                   {"queue", opt.remote ? opt.remote->where() : json()}};
    if (auto ok = store.create_run(run, task_name, fs::absolute(opt.task).string(), opt.target, opt.llm, opt.strategy, dump_json(config)); !ok)
      return Unexpected{ok.error()};
  }
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (opt.remote) opt.remote->begin_run(run);
  say("run " + run + " (" + opt.llm + "), candidates in " + opt.out_dir.string());

  // State, rebuilt from the stored steps on --resume.
  int64_t seq = 0, tokens_in = 0, tokens_out = 0;
  double cost = 0.0;
  int candidates = 0, since_improvement = 0;
  std::string plan, last_code, last_verdict, last_disposition, recommendation, history;
  std::optional<Store::Step> best;
  std::vector<Store::Step> population;  ///< every passed candidate (evolve's parents)
  json best_verdict;
  for (const auto& s : steps) {
    seq = std::max(seq, s.seq);
    tokens_in += s.tokens_in;
    tokens_out += s.tokens_out;
    cost += s.cost;
    if (s.role == "planner") plan = s.detail;
    if (s.role == "analyst") recommendation = s.detail;
    if (s.role == "final") return make_error("run " + run + " is finished", "start a new run");
    if (s.candidate_hash.empty() && s.disposition != "no_code") continue;
    if (s.role == "coder" && !recommendation.empty()) recommendation.clear();
    ++candidates;
    last_disposition = s.disposition;
    last_verdict = s.detail;
    if (auto src = store.candidate_source(s.candidate_hash)) last_code = *src;
    history += fmt::format("- step {} ({}): {}{}\n", s.seq, s.role, s.disposition, s.speedup ? fmt::format(", {:.3f}x", *s.speedup) : "");
    if (s.disposition == "passed" && s.speedup) population.push_back(s);
    if (s.disposition == "passed" && s.speedup && (!best || *s.speedup > *best->speedup)) {
      best = s;
      since_improvement = 0;
    } else if (best) {
      ++since_improvement;
    }
  }

  std::string stopped;
  auto budget_left = [&]() -> bool {
    if (candidates >= opt.budget_candidates) stopped = "candidate budget spent";
    else if (opt.budget_tokens > 0 && tokens_in + tokens_out >= opt.budget_tokens) stopped = "token budget spent";
    else if (opt.budget_dollars > 0 && cost >= opt.budget_dollars) stopped = "dollar budget spent";
    else if (opt.budget_wall_s > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= opt.budget_wall_s)
      stopped = "wall-time budget spent";
    return stopped.empty();
  };

  using Reply = std::pair<std::string, Store::Step>;
  auto messages = [](const std::string& user) {
    return std::vector<ChatMessage>{{"system", "You are an expert in high-performance compute kernels. Be exact."}, {"user", user}};
  };
  auto replayed = [&](const std::string& role) -> Expected<Reply> {
    Store::Step s;
    s.role = role;
    s.seq = ++seq;
    if (replay_next >= replay.size()) return make_error("the replayed run has no more LLM exchanges (" + std::to_string(replay.size()) + " recorded)");
    s.call_hash = replay[replay_next++];
    auto r = store.llm_response(s.call_hash);
    if (!r) return Unexpected{r.error()};
    return Reply{*r, s};
  };
  // An answer, stored content-addressed with its tokens and dollars (in the order of the calls).
  auto keep = [&](const std::string& role, const std::vector<ChatMessage>& msgs, const Expected<ChatReply>& r) -> Expected<Reply> {
    if (!r) return Unexpected{r.error()};
    Store::Step s;
    s.role = role;
    s.seq = ++seq;
    json req = json::array();
    for (const auto& m : msgs) req.push_back({{"role", m.role}, {"content", m.content}});
    const std::string req_text = dump_json(req);
    s.call_hash = hash_hex(client->describe() + '\0' + req_text + '\0' + r->text);
    if (auto ok = store.put_llm_call(s.call_hash, client->describe(), req_text, r->text, r->tokens_in, r->tokens_out, r->cost); !ok)
      return Unexpected{ok.error()};
    s.tokens_in = r->tokens_in;
    s.tokens_out = r->tokens_out;
    s.cost = r->cost;
    tokens_in += r->tokens_in;
    tokens_out += r->tokens_out;
    cost += r->cost;
    return Reply{r->text, s};
  };
  // One exchange with the model, recorded (or replayed).
  auto ask = [&](const std::string& role, const std::string& user) -> Expected<Reply> {
    if (!replay.empty()) return replayed(role);
    say(role + ": asking " + client->describe());
    const auto msgs = messages(user);
    return keep(role, msgs, client->chat(msgs));
  };
  // Several exchanges in flight at once (the provider's concurrency limit applies), kept in order.
  auto ask_many = [&](const std::string& role, const std::vector<std::string>& users) -> Expected<std::vector<Reply>> {
    std::vector<Reply> out;
    if (!replay.empty()) {
      for (size_t i = 0; i < users.size(); ++i) {
        auto r = replayed(role);
        if (!r) return Unexpected{r.error()};
        out.push_back(std::move(*r));
      }
      return out;
    }
    say(fmt::format("{}: asking {} x{}", role, client->describe(), users.size()));
    std::vector<std::vector<ChatMessage>> msgs;
    for (const auto& u : users) msgs.push_back(messages(u));
    std::vector<std::future<Expected<ChatReply>>> inflight;
    for (const auto& m : msgs) inflight.push_back(std::async(std::launch::async, [&client, m] { return client->chat(m); }));
    std::vector<Expected<ChatReply>> answers;
    for (auto& f : inflight) answers.push_back(f.get());
    for (size_t i = 0; i < answers.size(); ++i) {
      auto r = keep(role, msgs[i], answers[i]);
      if (!r) return Unexpected{r.error()};
      out.push_back(std::move(*r));
    }
    return out;
  };

  // The devices an evolve generation's children are spread over (cuda: every GPU of a host with
  // several, unless --devices says otherwise), each child's evaluator pinned to one; the rest of the
  // run evaluates on the first.
  std::vector<std::vector<std::pair<std::string, std::string>>> pins;
  if (opt.target == "cuda") {
    auto backend = make_backend(opt.target);
    auto devices = spread_devices(*backend, opt.devices);
    if (!devices) return Unexpected{devices.error()};
    for (int d : *devices) {
      auto env = cuda_device_env(d);
      if (!env) return Unexpected{env.error()};
      pins.push_back(std::move(*env));
    }
    opt.devices = std::move(*devices);
  } else {
    pins.resize(opt.devices.size());  // cpu, opencl: evaluations at once, where asked
  }
  auto evaluate_on = [&](const fs::path& file, bool heldout, size_t slot) -> Expected<Verdict> {
    EvalOptions eo = opt.eval;
    eo.heldout = heldout;
    if (opt.remote) return opt.remote->evaluate(file, eo, false);
    if (slot < pins.size())
      for (const auto& [k, v] : pins[slot]) eo.runner.env[k] = v;
    Evaluator ev(*loaded, opt.target, eo);
    return ev.evaluate(file);
  };
  auto evaluate = [&](const fs::path& file, bool heldout) { return evaluate_on(file, heldout, 0); };
  auto record = [&](const fs::path& file, const Verdict& v) -> std::optional<int64_t> {
    auto src = read_file(file);
    auto id = store.record_evaluation(loaded->task, src ? *src : "", v);
    return id ? std::optional<int64_t>(*id) : std::nullopt;
  };

  auto abi = read_file(abi_include_dir() / "kfab/candidate.h");
  // The target's hardware facts for the prompts: the device, its measured copy bandwidth and peaks
  // (measured once and cached, as for the roofline bound).
  std::string hardware = opt.target;
  {
    RunnerOptions ro = opt.eval.runner;
    ro.for_target(opt.target);
    RunnerClient rc(ro);
    auto peaks = opt.target == "cpu" ? cpu_peaks(rc) : device_peaks(rc, opt.target);
    if (peaks)
      hardware = fmt::format("{} ({}); measured copy bandwidth {:.0f} GB/s (bytes read + written), peak bandwidth {:.0f} GB/s, "
                             "peak FP32 about {:.1f} TFLOP/s{}",
                             opt.target, peaks->device, peaks->copy_Bps / 1e9, peaks->bandwidth_Bps / 1e9, peaks->flops_per_s / 1e12,
                             opt.target == "cpu" ? fmt::format(", {} hardware threads", std::thread::hardware_concurrency()) : "");
  }
  std::map<std::string, std::string> vars = {{"task", *text}, {"target", hardware}, {"dsl_rules", dsl_rules(opt.dsl)},
                                             {"abi", abi ? *abi : ""}, {"task_name", task_name}};

  if (plan.empty() && steps.empty()) {
    auto p = prompt("planner");
    if (!p) return Unexpected{p.error()};
    auto r = ask("planner", fill(*p, vars));
    if (!r) return Unexpected{r.error()};
    plan = r->first;
    r->second.detail = plan;
    if (auto ok = store.add_step(run, r->second); !ok) return Unexpected{ok.error()};
  }
  vars["plan"] = plan;

  // A reply that should hold a candidate: extracted and written (`file` empty where it held none),
  // then evaluated (tuning shapes only) and stored by `settle`, in the order of the replies.
  struct Proposed {
    std::string role;
    Reply reply;
    Expected<Extracted> code;
    fs::path file;
  };
  auto propose = [&](const std::string& role, Reply r) -> Expected<Proposed> {
    Proposed p{role, std::move(r), make_error("no reply"), {}};
    p.code = extract_code(p.reply.first, opt.dsl);
    if (!p.code) return p;
    p.file = opt.out_dir / fmt::format("{:03d}_{}{}", p.reply.second.seq, role, dsl_suffix(opt.dsl));
    if (auto ok = write_file_atomic(p.file, p.code->code); !ok) return Unexpected{ok.error()};
    return p;
  };
  auto settle = [&](Proposed& p, std::optional<Expected<Verdict>> verdict) -> Expected<void> {
    const std::string& role = p.role;
    Store::Step step = p.reply.second;
    ++candidates;
    if (!p.code) {
      // No usable code: the fixer is told why (the functional pass goes on).
      step.disposition = "no_code";
      step.detail = p.code.error().message;
      last_disposition = "no_code";
      last_verdict = p.code.error().message;
      last_code = printable(p.reply.first, 4000);
      history += fmt::format("- step {} ({}): no code\n", step.seq, role);
      return store.add_step(run, step);
    }
    const auto& code = p.code;
    const fs::path& file = p.file;
    if (!verdict) {
      say(fmt::format("{}: evaluating {}", role, file.string()));
      verdict = evaluate(file, false);
    }
    auto& v = *verdict;
    if (!v) return Unexpected{v.error()};
    step.candidate_hash = v->candidate_hash;
    step.candidate_path = fs::absolute(file).string();
    step.evaluation_id = record(file, *v);
    step.disposition = std::string(disposition_name(v->disposition));
    step.speedup = v->speedup;
    step.detail = verdict_text(v->to_json());
    if (code->truncated) step.detail += "(the reply was cut off before the code block closed)\n";
    if (auto ok = store.add_step(run, step); !ok) return ok;
    say(fmt::format("{}: {}{}", role, step.disposition, v->speedup ? fmt::format(" ({:.3f}x)", *v->speedup) : ""));
    history += fmt::format("- step {} ({}): {}{}\n", step.seq, role, step.disposition, v->speedup ? fmt::format(", {:.3f}x", *v->speedup) : "");
    last_code = code->code;
    last_verdict = step.detail;
    last_disposition = step.disposition;
    if (v->passed() && v->speedup) population.push_back(step);
    if (v->passed() && v->speedup && (!best || *v->speedup > *best->speedup)) {
      best = step;
      best_verdict = v->to_json();
      since_improvement = 0;
    } else if (best) {
      ++since_improvement;
    }
    return {};
  };
  auto handle = [&](const std::string& role, Reply r) -> Expected<void> {
    auto p = propose(role, std::move(r));
    if (!p) return Unexpected{p.error()};
    return settle(*p, std::nullopt);
  };
  auto analyst_prompt = [&](const Store::Step& parent) -> Expected<std::string> {
    auto p = prompt("analyst");
    if (!p) return Unexpected{p.error()};
    auto src = store.candidate_source(parent.candidate_hash);
    if (!src) return Unexpected{src.error()};
    auto v = vars;
    v["code"] = *src;
    v["verdict"] = best && parent.seq == best->seq && best_verdict.is_object() ? verdict_text(best_verdict) : parent.detail;
    v["speedup"] = fmt::format("{:.3f}", parent.speedup.value_or(0.0));
    v["history"] = history.empty() ? "(none)" : history;
    return fill(*p, v);
  };
  auto coder_prompt = [&](const Store::Step& parent, const std::string& advice) -> Expected<std::string> {
    auto p = prompt("coder");
    if (!p) return Unexpected{p.error()};
    auto src = store.candidate_source(parent.candidate_hash);
    if (!src) return Unexpected{src.error()};
    auto v = vars;
    v["context"] = "The candidate to improve (" + fmt::format("{:.3f}", parent.speedup.value_or(0.0)) + "x the baseline):\n```\n" + *src +
                   "\n```\nApply this recommendation of the performance analyst, keeping the candidate correct:\n" + advice;
    return fill(*p, v);
  };
  // After optimization steps, with budget left, the conductor decides whether to go on.
  auto conductor = [&]() -> Expected<bool> {
    if (!best || !budget_left()) return true;
    auto p = prompt("conductor");
    if (!p) return Unexpected{p.error()};
    auto v = vars;
    v["speedup"] = fmt::format("{:.3f}", best->speedup.value_or(0.0));
    v["percent_of_bound"] = "see the history";
    v["history"] = history;
    v["budget"] = fmt::format("{} candidates", opt.budget_candidates - candidates);
    auto c = ask("conductor", fill(*p, v));
    if (!c) return Unexpected{c.error()};
    c->second.detail = c->first;
    if (auto ok = store.add_step(run, c->second); !ok) return Unexpected{ok.error()};
    if (c->first.substr(0, c->first.find('\n')).find("STOP") != std::string::npos) {
      stopped = "the conductor: " + printable(c->first, 300);
      return false;
    }
    return true;
  };

  while (budget_left()) {
    if (!best) {
      // The functional pass: the coder, then the fixer with kfab's verdict, until a candidate passes.
      const std::string role = last_code.empty() && last_disposition.empty() ? "coder" : "fixer";
      auto p = prompt(role);
      if (!p) return Unexpected{p.error()};
      vars["context"] = "Write the first candidate.";
      vars["code"] = last_code;
      vars["verdict"] = last_verdict;
      vars["disposition"] = last_disposition;
      auto r = ask(role, fill(*p, vars));
      if (!r) return Unexpected{r.error()};
      if (auto ok = handle(role, std::move(*r)); !ok) return Unexpected{ok.error()};
      continue;
    }
    if (opt.strategy == "refine") {
      // One trajectory: the analyst's advice on the best, the coder applies it.
      if (recommendation.empty()) {
        auto ap = analyst_prompt(*best);
        if (!ap) return Unexpected{ap.error()};
        auto r = ask("analyst", *ap);
        if (!r) return Unexpected{r.error()};
        recommendation = r->first;
        r->second.detail = recommendation;
        if (auto ok = store.add_step(run, r->second); !ok) return Unexpected{ok.error()};
      }
      auto cp = coder_prompt(*best, recommendation);
      if (!cp) return Unexpected{cp.error()};
      auto r = ask("coder", *cp);
      if (!r) return Unexpected{r.error()};
      recommendation.clear();
      if (auto ok = handle("coder", std::move(*r)); !ok) return Unexpected{ok.error()};
    } else {
      // evolve: a generation from the two fastest (elites) and one other passed candidate (diversity),
      // their analyst and coder exchanges in flight at once; the children evaluated at once over the
      // devices (one at a time where there is one).
      std::vector<Store::Step> ranked = population;
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return *a.speedup > *b.speedup; });
      std::vector<Store::Step> parents;
      for (const auto& c : ranked)
        if (parents.size() < 2 && std::none_of(parents.begin(), parents.end(), [&](const auto& p) { return p.candidate_hash == c.candidate_hash; }))
          parents.push_back(c);
      std::vector<Store::Step> others;
      for (const auto& c : ranked)
        if (std::none_of(parents.begin(), parents.end(), [&](const auto& p) { return p.candidate_hash == c.candidate_hash; })) others.push_back(c);
      if (!others.empty()) parents.push_back(others[static_cast<size_t>(seq) % others.size()]);
      parents.resize(std::min<size_t>(parents.size(), static_cast<size_t>(opt.budget_candidates - candidates)));
      std::vector<std::string> asks;
      for (const auto& pa : parents) {
        auto ap = analyst_prompt(pa);
        if (!ap) return Unexpected{ap.error()};
        asks.push_back(*ap);
      }
      auto advice = ask_many("analyst", asks);
      if (!advice) return Unexpected{advice.error()};
      asks.clear();
      for (size_t i = 0; i < parents.size(); ++i) {
        (*advice)[i].second.detail = (*advice)[i].first;
        if (auto ok = store.add_step(run, (*advice)[i].second); !ok) return Unexpected{ok.error()};
        auto cp = coder_prompt(parents[i], (*advice)[i].first);
        if (!cp) return Unexpected{cp.error()};
        asks.push_back(*cp);
      }
      auto children = ask_many("coder", asks);
      if (!children) return Unexpected{children.error()};
      std::vector<Proposed> brood;
      for (auto& child : *children) {
        auto p = propose("coder", std::move(child));
        if (!p) return Unexpected{p.error()};
        brood.push_back(std::move(*p));
      }
      // The children are evaluated at once, one per device, then stored in the order they were asked.
      std::vector<std::optional<Expected<Verdict>>> verdicts(brood.size());
      if (opt.remote) {
        // elsewhere: every child to the queue at once
        std::vector<size_t> todo;
        std::vector<fs::path> files;
        EvalOptions eo = opt.eval;
        eo.heldout = false;
        for (size_t i = 0; i < brood.size(); ++i)
          if (!brood[i].file.empty()) {
            todo.push_back(i);
            files.push_back(brood[i].file);
          }
        say(fmt::format("coder: evaluating {} children on {}", todo.size(), opt.remote->describe()));
        auto got = opt.remote->evaluate_all(files, eo, false);
        if (!got) return Unexpected{got.error()};
        for (size_t k = 0; k < todo.size(); ++k) verdicts[todo[k]] = std::move((*got)[k]);
      } else if (pins.size() > 1) {
        std::vector<size_t> todo;
        for (size_t i = 0; i < brood.size(); ++i)
          if (!brood[i].file.empty()) todo.push_back(i);
        say(fmt::format("coder: evaluating {} children on devices {}", todo.size(), fmt::join(opt.devices, ",")));
        std::atomic<size_t> next{0};
        auto work = [&](size_t slot) {
          for (size_t k = next++; k < todo.size(); k = next++) verdicts[todo[k]] = evaluate_on(brood[todo[k]].file, false, slot);
        };
        std::vector<std::thread> threads;
        for (size_t slot = 1; slot < std::min(pins.size(), todo.size()); ++slot) threads.emplace_back(work, slot);
        work(0);
        for (auto& t : threads) t.join();
      }
      for (size_t i = 0; i < brood.size(); ++i)
        if (auto ok = settle(brood[i], std::move(verdicts[i])); !ok) return Unexpected{ok.error()};
    }
    if (since_improvement >= 3) {
      stopped = "three optimization steps without improvement";
      break;
    }
    auto go_on = conductor();
    if (!go_on) return Unexpected{go_on.error()};
    if (!*go_on) break;
  }

  // The final best, on every shape, held-out ones included.
  json result = {{"run", run}, {"steps", 0}, {"out_dir", fs::absolute(opt.out_dir).string()}, {"stopped_because", stopped}};
  if (pins.size() > 1) result["devices"] = opt.devices;  // what an evolve generation was spread over
  if (best) {
    say("final: the best candidate on every shape, held-out ones included");
    auto v = evaluate(best->candidate_path, true);
    if (!v) return Unexpected{v.error()};
    Store::Step fin;
    fin.seq = ++seq;
    fin.role = "final";
    fin.candidate_hash = v->candidate_hash;
    fin.candidate_path = best->candidate_path;
    fin.evaluation_id = record(best->candidate_path, *v);
    fin.disposition = std::string(disposition_name(v->disposition));
    fin.speedup = v->speedup;
    fin.detail = v->detail;
    if (auto ok = store.add_step(run, fin); !ok) return Unexpected{ok.error()};
    const fs::path best_file = opt.out_dir / ("best" + dsl_suffix(opt.dsl));
    if (auto src = store.candidate_source(best->candidate_hash)) (void)write_file_atomic(best_file, *src);
    result["best"] = {{"candidate", fs::absolute(best_file).string()}, {"disposition", fin.disposition},
                      {"speedup", v->speedup ? json(*v->speedup) : json()}, {"source_step", best->seq}};
  } else {
    result["best"] = {{"candidate", nullptr}, {"disposition", last_disposition.empty() ? "none" : last_disposition}, {"speedup", nullptr}};
  }
  (void)store.set_run_status(run, best ? "finished" : "failed");
  auto all = store.run_steps(run);
  result["steps"] = all ? all->size() : 0;
  result["tokens_in"] = tokens_in;
  result["tokens_out"] = tokens_out;
  result["cost"] = cost;
  result["candidates"] = candidates;
  return result;
}

}  // namespace kfab
