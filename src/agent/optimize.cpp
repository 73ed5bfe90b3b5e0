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
#include "backends/target.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/stamp.h"
#include "core/text.h"
#include "eval/torch_harness.h"
#include "eval/roofline.h"
#include "eval/runner_pair.h"
#include "runner/runner_client.h"
#include "store/run.h"
#include "store/store.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string dsl_suffix(const std::string& dsl) {
  for (const Target* t : targets())
    if (t->dsl == dsl) return std::string(t->suffix());
  if (is_python_dsl(dsl)) return ".py";
  return ".cpp";
}

namespace {

std::string dsl_rules(const std::string& dsl) {
  for (const Target* t : targets())
    if (t->dsl == dsl) return std::string(t->dsl_rules);
  if (auto rules = python_dsl_rules(dsl); !rules.empty()) return rules;
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

namespace {

using Reply = std::pair<std::string, Store::Step>;

/// The model's side of a run: a provider's client, or the exchanges of a recorded run replayed in
/// order. Every exchange is stored content-addressed with its tokens and dollars and takes the run's
/// next step number.
class Exchanges {
 public:
  /// `llm`: PROVIDER:MODEL or replay:RUN; `earlier`: the run's steps before a resume (a replay goes
  /// on after the exchanges they hold).
  static Expected<Exchanges> open(Store& store, const std::string& llm, const fs::path& config, const std::vector<Store::Step>& earlier) {
    Exchanges x;
    x.store_ = &store;
    if (llm.rfind("replay:", 0) == 0) {
      auto rs = store.run_steps(llm.substr(7));
      if (!rs) return Unexpected{rs.error()};
      for (const auto& s : *rs)
        if (!s.call_hash.empty()) x.replay_.push_back(s.call_hash);
      if (x.replay_.empty()) return make_error("run " + llm.substr(7) + " has no recorded LLM exchanges");
      for (const auto& s : earlier)
        if (!s.call_hash.empty()) ++x.replay_next_;
      return x;
    }
    auto p = resolve_provider(llm, config);
    if (!p) return Unexpected{p.error()};
    auto c = make_http_client(*p);
    if (!c) return Unexpected{c.error()};
    x.client_ = std::move(*c);
    return x;
  }

  int64_t tokens_in = 0, tokens_out = 0;
  double cost = 0.0;

  /// One exchange with the model, recorded (or replayed).
  Expected<Reply> ask(Run& run, const std::string& role, const std::string& user, const std::function<void(const std::string&)>& say) {
    if (!replay_.empty()) return replayed(run, role);
    say(role + ": asking " + client_->describe());
    const auto msgs = messages(user);
    return keep(run, role, msgs, client_->chat(msgs));
  }
  /// Several exchanges in flight at once (the provider's concurrency limit applies), kept in order.
  Expected<std::vector<Reply>> ask_many(Run& run, const std::string& role, const std::vector<std::string>& users,
                                        const std::function<void(const std::string&)>& say) {
    std::vector<Reply> out;
    if (!replay_.empty()) {
      for (size_t i = 0; i < users.size(); ++i) {
        auto r = replayed(run, role);
        if (!r) return Unexpected{r.error()};
        out.push_back(std::move(*r));
      }
      return out;
    }
    say(fmt::format("{}: asking {} x{}", role, client_->describe(), users.size()));
    std::vector<std::vector<ChatMessage>> msgs;
    for (const auto& u : users) msgs.push_back(messages(u));
    std::vector<std::future<Expected<ChatReply>>> inflight;
    LlmClient* client = client_.get();
    for (const auto& m : msgs) inflight.push_back(std::async(std::launch::async, [client, m] { return client->chat(m); }));
    std::vector<Expected<ChatReply>> answers;
    for (auto& f : inflight) answers.push_back(f.get());
    for (size_t i = 0; i < answers.size(); ++i) {
      auto r = keep(run, role, msgs[i], answers[i]);
      if (!r) return Unexpected{r.error()};
      out.push_back(std::move(*r));
    }
    return out;
  }

 private:
  static std::vector<ChatMessage> messages(const std::string& user) {
    return {{"system", "You are an expert in high-performance compute kernels. Be exact."}, {"user", user}};
  }
  Expected<Reply> replayed(Run& run, const std::string& role) {
    Store::Step s;
    s.role = role;
    s.seq = run.next_seq();
    if (replay_next_ >= replay_.size())
      return make_error("the replayed run has no more LLM exchanges (" + std::to_string(replay_.size()) + " recorded)");
    s.call_hash = replay_[replay_next_++];
    auto r = store_->llm_response(s.call_hash);
    if (!r) return Unexpected{r.error()};
    return Reply{*r, s};
  }
  Expected<Reply> keep(Run& run, const std::string& role, const std::vector<ChatMessage>& msgs, const Expected<ChatReply>& r) {
    if (!r) return Unexpected{r.error()};
    Store::Step s;
    s.role = role;
    s.seq = run.next_seq();
    json req = json::array();
    for (const auto& m : msgs) req.push_back({{"role", m.role}, {"content", m.content}});
    const std::string req_text = dump_json(req);
    s.call_hash = hash_hex(client_->describe() + '\0' + req_text + '\0' + r->text);
    if (auto ok = store_->put_llm_call(s.call_hash, client_->describe(), req_text, r->text, r->tokens_in, r->tokens_out, r->cost); !ok)
      return Unexpected{ok.error()};
    s.tokens_in = r->tokens_in;
    s.tokens_out = r->tokens_out;
    s.cost = r->cost;
    tokens_in += r->tokens_in;
    tokens_out += r->tokens_out;
    cost += r->cost;
    return Reply{r->text, s};
  }

  Store* store_ = nullptr;
  std::unique_ptr<LlmClient> client_;
  std::vector<std::string> replay_;
  size_t replay_next_ = 0;
};

/// The LLM agents as a Proposer. The functional pass: the coder, then the fixer with kfab's verdict,
/// until a candidate passes. Then rounds of optimization: refine (the analyst's advice on the best,
/// applied by the coder: one trajectory) or evolve (a generation bred from the two fastest and one
/// other passed candidate, its exchanges in flight at once). After a round, three without improvement
/// end the run, and the conductor may.
class LlmAgents final : public Proposer {
 public:
  LlmAgents(const OptimizeOptions& opt, Store& store, Exchanges& x, std::map<std::string, std::string> vars, fs::path prompts,
            std::chrono::steady_clock::time_point start, std::function<void(const std::string&)> say)
      : opt_(opt), store_(store), x_(x), vars_(std::move(vars)), prompts_(std::move(prompts)), start_(start), say_(std::move(say)) {}

  /// The state of a resumed run, from its steps (optimize() refuses a finished one).
  void resume(const Run& run) {
    for (const auto& s : run.earlier()) {
      x_.tokens_in += s.tokens_in;
      x_.tokens_out += s.tokens_out;
      x_.cost += s.cost;
      if (s.role == "planner") plan_ = s.detail;
      if (s.role == "analyst") recommendation_ = s.detail;
      if (s.candidate_hash.empty() && s.disposition != "no_code") continue;
      if (s.role == "coder" && !recommendation_.empty()) recommendation_.clear();
      ++candidates_;
      last_disposition_ = s.disposition;
      last_verdict_ = s.detail;
      if (auto src = store_.candidate_source(s.candidate_hash)) last_code_ = *src;
      note(s);
    }
  }

  /// The planner's plan, asked once at the start of a run.
  Expected<void> plan(Run& run) {
    if (plan_.empty() && run.earlier().empty()) {
      auto p = prompt("planner");
      if (!p) return Unexpected{p.error()};
      auto r = x_.ask(run, "planner", fill(*p, vars_), say_);
      if (!r) return Unexpected{r.error()};
      plan_ = r->first;
      r->second.detail = plan_;
      if (auto ok = run.add(r->second); !ok) return Unexpected{ok.error()};
    }
    vars_["plan"] = plan_;
    return {};
  }

  Expected<std::vector<Proposal>> propose(Run& run) override {
    if (after_round_) {
      after_round_ = false;
      if (since_improvement_ >= 3) {
        stopped_ = "three optimization steps without improvement";
        return std::vector<Proposal>{};
      }
      auto go_on = conductor(run);
      if (!go_on) return Unexpected{go_on.error()};
      if (!*go_on) return std::vector<Proposal>{};
    }
    if (!budget_left()) return std::vector<Proposal>{};
    if (!best_) return functional(run);
    after_round_ = true;
    return opt_.strategy == "refine" ? refine(run) : evolve(run);
  }

  std::string detail(const Proposal& p, const Verdict& v) const override {
    std::string d = verdict_text(v.to_json());
    if (codes_[p.tag].code && codes_[p.tag].code->truncated) d += "(the reply was cut off before the code block closed)\n";
    return d;
  }

  Expected<void> observe(Run&, const Proposal& p, const Verdict* v, const Store::Step& step) override {
    ++candidates_;
    if (v == nullptr) {
      // No usable code: the fixer is told why (the functional pass goes on).
      last_disposition_ = "no_code";
      last_verdict_ = p.why;
      last_code_ = printable(codes_[p.tag].reply, 4000);
      history_ += fmt::format("- step {} ({}): no code\n", step.seq, p.role);
      return {};
    }
    say_(fmt::format("{}: {}{}", p.role, step.disposition, v->speedup ? fmt::format(" ({:.3f}x)", *v->speedup) : ""));
    last_code_ = codes_[p.tag].code->code;
    last_verdict_ = step.detail;
    last_disposition_ = step.disposition;
    if (note(step)) best_verdict_ = v->to_json();
    return {};
  }

  std::string stopped() const override { return stopped_; }
  const std::optional<Store::Step>& best() const { return best_; }
  int candidates() const { return candidates_; }
  const std::string& last_disposition() const { return last_disposition_; }

 private:
  /// A step with a verdict into the history, the population and the best; whether it is the new best.
  bool note(const Store::Step& s) {
    history_ += fmt::format("- step {} ({}): {}{}\n", s.seq, s.role, s.disposition, s.speedup ? fmt::format(", {:.3f}x", *s.speedup) : "");
    const bool passed = s.disposition == "passed" && s.speedup;
    if (passed) population_.push_back(s);
    if (passed && (!best_ || *s.speedup > *best_->speedup)) {
      best_ = s;
      since_improvement_ = 0;
      return true;
    }
    if (best_) ++since_improvement_;
    return false;
  }

  bool budget_left() {
    if (candidates_ >= opt_.budget_candidates) stopped_ = "candidate budget spent";
    else if (opt_.budget_tokens > 0 && x_.tokens_in + x_.tokens_out >= opt_.budget_tokens) stopped_ = "token budget spent";
    else if (opt_.budget_dollars > 0 && x_.cost >= opt_.budget_dollars) stopped_ = "dollar budget spent";
    else if (opt_.budget_wall_s > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() >= opt_.budget_wall_s)
      stopped_ = "wall-time budget spent";
    return stopped_.empty();
  }

  Expected<std::string> prompt(const std::string& role) const {
    auto t = read_file(prompts_ / (role + ".md"));
    if (!t) return make_error("the prompt file for the " + role + " is missing: " + t.error().message);
    return *t;
  }

  /// A reply that should hold a candidate: its code extracted and written (no file where it held none).
  Expected<Proposal> proposal(Run& run, const std::string& role, Reply r) {
    Proposal p;
    p.role = role;
    p.step = r.second;
    p.tag = codes_.size();
    codes_.push_back({r.first, extract_code(r.first, opt_.dsl)});
    const auto& code = codes_.back().code;
    if (!code) {
      p.why = code.error().message;
      return p;
    }
    p.file = run.out_dir() / fmt::format("{:03d}_{}{}", p.step.seq, role, dsl_suffix(opt_.dsl));
    if (auto ok = write_file_atomic(p.file, code->code); !ok) return Unexpected{ok.error()};
    return p;
  }

  Expected<std::vector<Proposal>> functional(Run& run) {
    const std::string role = last_code_.empty() && last_disposition_.empty() ? "coder" : "fixer";
    auto p = prompt(role);
    if (!p) return Unexpected{p.error()};
    vars_["context"] = "Write the first candidate.";
    vars_["code"] = last_code_;
    vars_["verdict"] = last_verdict_;
    vars_["disposition"] = last_disposition_;
    return one(run, role, fill(*p, vars_));
  }

  Expected<std::vector<Proposal>> one(Run& run, const std::string& role, const std::string& ask) {
    auto r = x_.ask(run, role, ask, say_);
    if (!r) return Unexpected{r.error()};
    auto p = proposal(run, role, std::move(*r));
    if (!p) return Unexpected{p.error()};
    if (!p->file.empty()) say_(fmt::format("{}: evaluating {}", role, p->file.string()));
    return std::vector<Proposal>{std::move(*p)};
  }

  Expected<std::vector<Proposal>> refine(Run& run) {
    if (recommendation_.empty()) {
      auto ap = analyst_prompt(*best_);
      if (!ap) return Unexpected{ap.error()};
      auto r = x_.ask(run, "analyst", *ap, say_);
      if (!r) return Unexpected{r.error()};
      recommendation_ = r->first;
      r->second.detail = recommendation_;
      if (auto ok = run.add(r->second); !ok) return Unexpected{ok.error()};
    }
    auto cp = coder_prompt(*best_, recommendation_);
    if (!cp) return Unexpected{cp.error()};
    recommendation_.clear();
    return one(run, "coder", *cp);
  }

  /// The parents of a generation: the two fastest passed candidates (elites) and one other (diversity).
  std::vector<Store::Step> parents(const Run& run) const {
    std::vector<Store::Step> ranked = population_;
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return *a.speedup > *b.speedup; });
    auto among = [](const std::vector<Store::Step>& v, const Store::Step& c) {
      return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.candidate_hash == c.candidate_hash; });
    };
    std::vector<Store::Step> out;
    for (const auto& c : ranked)
      if (out.size() < 2 && !among(out, c)) out.push_back(c);
    std::vector<Store::Step> others;
    for (const auto& c : ranked)
      if (!among(out, c)) others.push_back(c);
    if (!others.empty()) out.push_back(others[static_cast<size_t>(run.seq()) % others.size()]);
    out.resize(std::min<size_t>(out.size(), static_cast<size_t>(opt_.budget_candidates - candidates_)));
    return out;
  }

  Expected<std::vector<Proposal>> evolve(Run& run) {
    const auto pa = parents(run);
    std::vector<std::string> asks;
    for (const auto& parent : pa) {
      auto ap = analyst_prompt(parent);
      if (!ap) return Unexpected{ap.error()};
      asks.push_back(*ap);
    }
    auto advice = x_.ask_many(run, "analyst", asks, say_);
    if (!advice) return Unexpected{advice.error()};
    asks.clear();
    for (size_t i = 0; i < pa.size(); ++i) {
      (*advice)[i].second.detail = (*advice)[i].first;
      if (auto ok = run.add((*advice)[i].second); !ok) return Unexpected{ok.error()};
      auto cp = coder_prompt(pa[i], (*advice)[i].first);
      if (!cp) return Unexpected{cp.error()};
      asks.push_back(*cp);
    }
    auto children = x_.ask_many(run, "coder", asks, say_);
    if (!children) return Unexpected{children.error()};
    std::vector<Proposal> brood;
    for (auto& child : *children) {
      auto p = proposal(run, "coder", std::move(child));
      if (!p) return Unexpected{p.error()};
      brood.push_back(std::move(*p));
    }
    return brood;
  }

  Expected<std::string> analyst_prompt(const Store::Step& parent) {
    auto p = prompt("analyst");
    if (!p) return Unexpected{p.error()};
    auto src = store_.candidate_source(parent.candidate_hash);
    if (!src) return Unexpected{src.error()};
    auto v = vars_;
    v["code"] = *src;
    v["verdict"] = best_ && parent.seq == best_->seq && best_verdict_.is_object() ? verdict_text(best_verdict_) : parent.detail;
    v["speedup"] = fmt::format("{:.3f}", parent.speedup.value_or(0.0));
    v["history"] = history_.empty() ? "(none)" : history_;
    return fill(*p, v);
  }

  Expected<std::string> coder_prompt(const Store::Step& parent, const std::string& advice) {
    auto p = prompt("coder");
    if (!p) return Unexpected{p.error()};
    auto src = store_.candidate_source(parent.candidate_hash);
    if (!src) return Unexpected{src.error()};
    auto v = vars_;
    v["context"] = "The candidate to improve (" + fmt::format("{:.3f}", parent.speedup.value_or(0.0)) + "x the baseline):\n```\n" + *src +
                   "\n```\nApply this recommendation of the performance analyst, keeping the candidate correct:\n" + advice;
    return fill(*p, v);
  }

  /// After a round, with budget left, the conductor decides whether to go on.
  Expected<bool> conductor(Run& run) {
    if (!best_ || !budget_left()) return true;
    auto p = prompt("conductor");
    if (!p) return Unexpected{p.error()};
    auto v = vars_;
    v["speedup"] = fmt::format("{:.3f}", best_->speedup.value_or(0.0));
    v["percent_of_bound"] = "see the history";
    v["history"] = history_;
    v["budget"] = fmt::format("{} candidates", opt_.budget_candidates - candidates_);
    auto c = x_.ask(run, "conductor", fill(*p, v), say_);
    if (!c) return Unexpected{c.error()};
    c->second.detail = c->first;
    if (auto ok = run.add(c->second); !ok) return Unexpected{ok.error()};
    if (c->first.substr(0, c->first.find('\n')).find("STOP") != std::string::npos) {
      stopped_ = "the conductor: " + printable(c->first, 300);
      return false;
    }
    return true;
  }

  struct Code {
    std::string reply;
    Expected<Extracted> code;
  };
  const OptimizeOptions& opt_;
  Store& store_;
  Exchanges& x_;
  std::map<std::string, std::string> vars_;
  fs::path prompts_;
  std::chrono::steady_clock::time_point start_;
  std::function<void(const std::string&)> say_;
  std::string plan_, recommendation_, history_, last_code_, last_verdict_, last_disposition_, stopped_;
  std::optional<Store::Step> best_;
  json best_verdict_;
  std::vector<Store::Step> population_;  ///< every passed candidate (evolve's parents)
  std::vector<Code> codes_;              ///< each proposal's reply and code, by its tag
  int candidates_ = 0, since_improvement_ = 0;
  bool after_round_ = false;
};

/// The target's hardware facts for the prompts: the device, its measured copy bandwidth and peaks
/// (measured once and cached, as for the roofline bound).
std::string hardware_facts(const OptimizeOptions& opt, const Target& target) {
  RunnerClient rc(for_target(opt.eval.runner, opt.target));
  auto peaks = target_peaks(rc, opt.target);
  if (!peaks) return opt.target;
  return fmt::format("{} ({}); measured copy bandwidth {:.0f} GB/s (bytes read + written), peak bandwidth {:.0f} GB/s, "
                     "peak FP32 about {:.1f} TFLOP/s{}",
                     opt.target, peaks->device, peaks->copy_Bps / 1e9, peaks->bandwidth_Bps / 1e9, peaks->flops_per_s / 1e12,
                     target.prompt_facts != nullptr ? ", " + target.prompt_facts() : std::string());
}

/// A resumed run's settings, which win over the command line's.
Expected<void> resumed_settings(Store& store, OptimizeOptions& opt) {
  auto info = store.run_info(opt.resume);
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
  return {};
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
  if (!opt.resume.empty())
    if (auto ok = resumed_settings(store, opt); !ok) return Unexpected{ok.error()};
  if (opt.strategy != "refine" && opt.strategy != "evolve")
    return make_error("unknown strategy " + opt.strategy, "refine (one trajectory) or evolve (a population)");
  const Target* target_found = find_target(opt.target);
  if (target_found == nullptr) return make_error("unknown target \"" + opt.target + "\"", "accepted: " + target_names());
  const Target& target = *target_found;
  if (opt.dsl.empty()) opt.dsl = target.dsl;
  // The task is opened once: its format decides how candidates are evaluated and what a proposer sees.
  auto loaded = open_task(opt.task);
  if (!loaded) return Unexpected{loaded.error()};
  auto text = task_text(*loaded);
  if (!text) return Unexpected{text.error()};
  const std::string task_name = loaded->task.name;

  RunSpec spec{task_name, opt.task, opt.target, opt.llm, opt.strategy,
               json{{"dsl", opt.dsl},
                    {"budget_candidates", opt.budget_candidates},
                    {"budget_tokens", opt.budget_tokens},
                    {"budget_dollars", opt.budget_dollars},
                    {"config_file", opt.config.empty() ? std::string() : fs::absolute(opt.config).string()},
                    {"queue", opt.remote ? opt.remote->where() : json()}},
               opt.out_dir, opt.resume};
  // The model's exchanges go on after a resumed run's (a replay, after those it replayed).
  std::vector<Store::Step> earlier;
  if (!opt.resume.empty()) {
    auto s = store.run_steps(opt.resume);
    if (!s) return Unexpected{s.error()};
    earlier = std::move(*s);
    for (const auto& st : earlier)
      if (st.role == "final") return make_error("run " + opt.resume + " is finished", "start a new run");
  }
  auto exchanges = Exchanges::open(store, opt.llm, opt.config, earlier);
  if (!exchanges) return Unexpected{exchanges.error()};
  const fs::path prompts = opt.prompts_dir.empty() ? fs::path(KFAB_SOURCE_INCLUDE_DIR) / "../prompts" : opt.prompts_dir;

  auto started = Run::start(store, spec);
  if (!started) return Unexpected{started.error()};
  Run& run = *started;
  opt.out_dir = run.out_dir();
  if (opt.remote) opt.remote->begin_run(run.id());
  say("run " + run.id() + " (" + opt.llm + "), candidates in " + opt.out_dir.string());

  // The devices an evolve generation's children are spread over (a GPU target: every GPU of a host
  // with several, unless --devices says otherwise), each child's evaluator pinned to one where the
  // target pins; the rest of the run evaluates on the first.
  auto devices = spread_devices(*target.make_backend(), opt.devices);
  if (!devices) return Unexpected{devices.error()};
  auto pins = device_pins(target, *devices);
  if (!pins) return Unexpected{pins.error()};
  opt.devices = std::move(*devices);
  const size_t slots = pins->size();
  Evaluations evals(*loaded, opt.target, std::move(*pins), opt.remote, false);
  evals.devices = opt.devices;

  auto abi = read_file(abi_include_dir() / "kfab/candidate.h");
  std::map<std::string, std::string> vars = {{"task", *text}, {"target", hardware_facts(opt, target)}, {"dsl_rules", dsl_rules(opt.dsl)},
                                             {"abi", abi ? *abi : ""}, {"task_name", task_name}};
  LlmAgents agents(opt, store, *exchanges, std::move(vars), prompts, start, say);
  agents.resume(run);
  if (auto ok = agents.plan(run); !ok) return Unexpected{ok.error()};
  EvalOptions tuning = opt.eval;
  tuning.heldout = false;
  if (auto ok = run.drive(agents, loaded->task, evals, tuning, say); !ok) return Unexpected{ok.error()};

  // The final best, on every shape, held-out ones included.
  json result = {{"run", run.id()}, {"steps", 0}, {"out_dir", fs::absolute(opt.out_dir).string()}, {"stopped_because", agents.stopped()}};
  if (slots > 1) result["devices"] = opt.devices;  // what an evolve generation was spread over
  const auto& best = agents.best();
  if (best) {
    say("final: the best candidate on every shape, held-out ones included");
    EvalOptions full = opt.eval;
    full.heldout = true;
    auto v = evals.evaluate(best->candidate_path, full);
    if (!v) return Unexpected{v.error()};
    auto fin = run.record(loaded->task, best->candidate_path, *v, "final", v->detail);
    if (!fin) return Unexpected{fin.error()};
    fs::path best_file = opt.out_dir / ("best" + dsl_suffix(opt.dsl));
    if (auto src = store.candidate_source(best->candidate_hash))
      if (auto f = run.write_best(*src, dsl_suffix(opt.dsl))) best_file = *f;
    result["best"] = {{"candidate", fs::absolute(best_file).string()}, {"disposition", fin->disposition},
                      {"speedup", v->speedup ? json(*v->speedup) : json()}, {"source_step", best->seq}};
  } else {
    const std::string& last = agents.last_disposition();
    result["best"] = {{"candidate", nullptr}, {"disposition", last.empty() ? "none" : last}, {"speedup", nullptr}};
  }
  run.finish(best.has_value());
  auto all = store.run_steps(run.id());
  result["steps"] = all ? all->size() : 0;
  result["tokens_in"] = exchanges->tokens_in;
  result["tokens_out"] = exchanges->tokens_out;
  result["cost"] = exchanges->cost;
  result["candidates"] = agents.candidates();
  return result;
}

}  // namespace kfab
