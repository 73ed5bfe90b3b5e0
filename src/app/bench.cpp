#include "app/bench.h"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <regex>

#include <chrono>
#include <cmath>
#include <set>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "agent/optimize.h"
#include "backends/backend.h"
#include "backends/target.h"
#include "core/discover.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/process.h"
#include "dist/queue.h"
#include "app/worker.h"
#include "core/stamp.h"
#include "core/text.h"
#include "eval/evaluator.h"
#include "report/html.h"
#include "tuner/tuner.h"

namespace kfab {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr double kFastP[] = {0.0, 1.0, 1.2, 2.0};

double num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}

json opt_num(double v) { return std::isfinite(v) ? json(v) : json(); }

/// The template a tuner step's detail names ("cuda_fused_rows (block=256): passed ..."), empty otherwise.
std::string template_of(const std::string& detail) {
  const auto sp = detail.find(" (");
  return sp == std::string::npos ? std::string() : detail.substr(0, sp);
}

std::string csv_cell(const json& v) {
  if (v.is_null()) return "";
  if (v.is_number_float()) return fmt::format("{:.6g}", v.get<double>());
  if (v.is_number() || v.is_boolean()) return v.dump();
  std::string s = v.is_string() ? v.get<std::string>() : dump_json(v);
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

/// The final verdict of a run report: the first final step that passed, else the last final step,
/// else (a run with no final check) the fastest passing step, else the last step's verdict (so a task
/// whose only candidate crashed reads `crashed` with its detail, not `none`).
json final_verdict(const json& report, json& row) {
  json last_final, best, last;
  double best_speed = -1.0;
  int finals = 0;
  for (const auto& s : report.value("steps", json::array())) {
    const json& v = s.contains("verdict") ? s["verdict"] : json();
    if (!v.is_object()) continue;
    last = v;
    if (s.value("role", "") == "final") {
      if (++finals == 1) row["retained"] = v.value("disposition", "") == "passed";
      if (v.value("disposition", "") == "passed") return v;
      last_final = v;
    } else if (v.value("disposition", "") == "passed" && num(v, "speedup") > best_speed) {
      best_speed = num(v, "speedup");
      best = v;
    }
  }
  if (finals > 0) return last_final;
  return best.is_null() ? last : best;
}

}  // namespace

double sol_score(double t, double t_base, double t_sol) {
  // 1 at the bound (or below it, within the peaks' margin, where the decision let the time stand), 1/2
  // at the baseline's time, towards 0 beyond: always within [0, 1]
  if (t <= t_sol) return 1.0;
  const double gap = t_base - t_sol;
  if (gap <= 0.0) return 0.0;
  return 1.0 / (1.0 + (t - t_sol) / gap);
}

void score_task(json& row, const json& verdict) {
  if (!verdict.is_object()) {
    if (!row.contains("disposition")) row["disposition"] = "none";
    return;
  }
  row["disposition"] = verdict.value("disposition", "none");
  row["detail"] = verdict.value("detail", "");
  row["candidate"] = verdict.value("candidate", "");
  row["speedup"] = verdict.contains("speedup") ? verdict["speedup"] : json();
  row["speedup_vs_compile"] = verdict.contains("speedup_vs_compile") ? verdict["speedup_vs_compile"] : json();
  // KernelBench-format tasks on a GPU: what the evaluation held of the device (both workers' peaks)
  if (verdict.contains("speedup_end_to_end")) row["speedup_end_to_end"] = verdict["speedup_end_to_end"];
  if (verdict.contains("device_memory") && verdict["device_memory"].is_object())
    row["peak_device_bytes"] = verdict["device_memory"].value("peak_bytes", 0.0);
  double sol = 0.0, bound = 0.0, copy = 0.0;
  int n_sol = 0, n_bound = 0, n_copy = 0, held = 0, held_ok = 0;
  for (const auto& s : verdict.value("shapes", json::array())) {
    if (s.value("heldout", false)) {
      ++held;
      held_ok += s.value("status", "") == "passed";
      continue;
    }
    const double t = s.contains("time_ms") ? num(s["time_ms"], "median") : NAN;
    // the scoring baseline: torch.compile where it was timed (the optimized one), else the task's baseline
    double base = s.contains("compile_ms") ? num(s["compile_ms"], "median") : NAN;
    if (!std::isfinite(base) && s.contains("baseline_ms")) base = num(s["baseline_ms"], "median");
    const double t_sol = num(s, "bound_ms");
    if (std::isfinite(t) && std::isfinite(base) && std::isfinite(t_sol)) {
      sol += sol_score(t, base, t_sol);
      ++n_sol;
    }
    if (const double p = num(s, "percent_of_bound"); std::isfinite(p)) bound += p, ++n_bound;
    if (const double p = num(s, "percent_of_copy_bandwidth"); std::isfinite(p)) copy += p, ++n_copy;
  }
  const bool passed = row["disposition"] == "passed";
  row["sol_score"] = n_sol ? json(passed ? sol / n_sol : 0.0) : json();
  row["percent_of_bound"] = passed && n_bound ? json(bound / n_bound) : json();
  row["percent_of_copy_bandwidth"] = passed && n_copy ? json(copy / n_copy) : json();
  row["heldout"] = {{"passed", held_ok}, {"total", held}};
}

json bench_scores(const json& tasks) {
  const int n = static_cast<int>(tasks.size());
  int correct = 0, n_geo = 0, n_comp = 0, n_sol = 0, n_bound = 0, n_ret = 0, retained = 0;
  double log_geo = 0.0, log_comp = 0.0, sol = 0.0, bound = 0.0;
  std::vector<int> fast(std::size(kFastP), 0);
  for (const auto& t : tasks) {
    const bool ok = t.value("disposition", "") == "passed";
    const double sp = num(t, "speedup");
    correct += ok;
    for (size_t k = 0; k < std::size(kFastP); ++k) fast[k] += ok && std::isfinite(sp) && sp > kFastP[k];
    if (ok && std::isfinite(sp) && sp > 0) log_geo += std::log(sp), ++n_geo;
    if (const double c = num(t, "speedup_vs_compile"); ok && std::isfinite(c) && c > 0) log_comp += std::log(c), ++n_comp;
    if (const double s = num(t, "sol_score"); std::isfinite(s)) sol += s, ++n_sol;
    if (const double b = num(t, "percent_of_bound"); std::isfinite(b)) bound += b, ++n_bound;
    if (t.contains("retained") && t["retained"].is_boolean()) retained += t["retained"].get<bool>(), ++n_ret;
  }
  json fp = json::object();
  for (size_t k = 0; k < std::size(kFastP); ++k) fp[fmt::format("{}", kFastP[k])] = n ? json(static_cast<double>(fast[k]) / n) : json();
  return {{"tasks", n},
          {"correct", correct},
          {"correctness_rate", n ? json(static_cast<double>(correct) / n) : json()},
          {"fast_p", fp},
          {"geomean_speedup", n_geo ? json(std::exp(log_geo / n_geo)) : json()},
          {"geomean_speedup_vs_compile", n_comp ? json(std::exp(log_comp / n_comp)) : json()},
          {"sol_score", n_sol ? json(sol / n_sol) : json()},
          {"mean_percent_of_bound", n_bound ? json(bound / n_bound) : json()},
          {"heldout_retention", n_ret ? json(static_cast<double>(retained) / n_ret) : json()}};
}

Expected<json> run_report(Store& store, const std::string& run) {
  auto info = store.run_info(run);
  if (!info) return Unexpected{info.error()};
  auto steps = store.run_steps(run);
  if (!steps) return Unexpected{steps.error()};
  json r = *info;
  r.erase("config");
  r["run"] = run;
  r["steps"] = json::array();
  std::string previous, best;                         // the last candidate, the fastest that passed
  double best_speed = -1.0;
  std::map<std::string, std::string> last_of_template;  // tuner points: the previous point of the same template
  for (const auto& s : *steps) {
    json j = {{"seq", s.seq},        {"role", s.role},     {"disposition", s.disposition}, {"speedup", opt_num(s.speedup.value_or(NAN))},
              {"detail", s.detail},  {"candidate_hash", s.candidate_hash}, {"candidate_path", s.candidate_path}};
    if (s.evaluation_id)
      if (auto v = store.evaluation_verdict(*s.evaluation_id)) {
        if (!r.contains("machine") && (*v).contains("machine")) r["machine"] = (*v)["machine"];
        j["verdict"] = std::move(*v);
      }
    if (!s.candidate_hash.empty()) {
      if (auto src = store.candidate_source(s.candidate_hash)) j["source"] = *src;
      std::string parent;
      const std::string tmpl = template_of(s.detail);
      if (s.role == "fixer") parent = previous;
      else if (s.role == "tuner") parent = last_of_template.count(tmpl) ? last_of_template[tmpl] : previous;
      else if (s.role != "final") parent = best;
      if (!parent.empty() && parent != s.candidate_hash) j["parent_hash"] = parent;
      if (s.role == "tuner" && !tmpl.empty()) last_of_template[tmpl] = s.candidate_hash;
      if (s.role != "final") previous = s.candidate_hash;
      if (s.role != "final" && s.disposition == "passed" && s.speedup && *s.speedup > best_speed) {
        best_speed = *s.speedup;
        best = s.candidate_hash;
      }
    }
    r["steps"].push_back(std::move(j));
  }
  return r;
}

std::string tasks_csv(const json& tasks) {
  static const char* cols[] = {"task", "path", "format", "disposition", "speedup", "speedup_vs_compile", "sol_score", "percent_of_bound",
                               "percent_of_copy_bandwidth", "heldout_passed", "heldout_total", "retained", "run", "candidate", "wall_s", "error"};
  std::string out;
  for (const char* c : cols) out += (out.empty() ? "" : ",") + std::string(c);
  out += "\n";
  for (const auto& t : tasks) {
    std::string line;
    for (const char* c : cols) {
      json v;
      const std::string col = c;
      if (col == "heldout_passed" || col == "heldout_total") {
        if (t.contains("heldout") && t["heldout"].is_object()) v = t["heldout"].value(col == "heldout_passed" ? "passed" : "total", json());
      } else if (t.contains(col)) {
        v = t[col];
      }
      line += (line.empty() ? "" : ",") + csv_cell(v);
    }
    out += line + "\n";
  }
  return out;
}

std::string scores_csv(const json& scores) {
  std::string out = "metric,value\n";
  for (const auto& [k, v] : scores.items()) {
    if (v.is_object())
      for (const auto& [p, x] : v.items()) out += fmt::format("{}_{},{}\n", k, p, csv_cell(x));
    else
      out += fmt::format("{},{}\n", k, csv_cell(v));
  }
  return out;
}

namespace {

/// The bundled candidates of a task that `target` takes: a native task's candidates/ folder, a
/// KernelBench file's candidates/<name>/ folder beside it.
std::vector<fs::path> bundled_candidates(const TaskEntry& e, const std::string& target) {
  const fs::path dir = e.format == "native" ? (fs::is_directory(e.path) ? e.path : e.path.parent_path()) / "candidates"
                                            : e.path.parent_path() / "candidates" / e.path.stem();
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    auto ends = [&](const std::string& suf) { return name.size() > suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0; };
    const Target* own = target_of_file(f.path());
    bool takes = own != nullptr && own->name == target;
    if (e.format == "kernelbench" && ends(".py")) takes = true;  // Triton or ModelNew, on the worker's device
    if (takes) out.push_back(f.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Evaluates every bundled candidate of a task; a run-shaped object (steps = candidates) for the report.
json eval_bundled(const TaskEntry& e, const BenchOptions& opt, const std::string& target) {
  json r = {{"run", nullptr}, {"task", e.format == "native" && e.task ? e.task->name : e.path.stem().string()},
            {"task_path", fs::absolute(e.path).string()}, {"target", target}, {"llm", "none"}, {"strategy", "eval"}, {"steps", json::array()}};
  const auto cands = bundled_candidates(e, target);
  if (cands.empty()) {
    r["error"] = "no bundled candidate for the " + target + " target";
    return r;
  }
  auto store = Store::open(Store::default_path());
  int seq = 0;
  for (const auto& c : cands) {
    if (opt.detail) opt.detail(fmt::format("{}: {}", r["task"].get<std::string>(), c.filename().string()));
    auto loaded = e.loaded();
    if (!loaded) {
      r["error"] = loaded.error().message;
      return r;
    }
    Evaluator ev(*loaded, target, opt.eval);
    Expected<Verdict> v = ev.evaluate(c);
    const Task& stored = loaded->task;
    json step = {{"seq", ++seq}, {"role", "candidate"}, {"candidate_path", fs::absolute(c).string()}};
    if (!v) {
      step["disposition"] = "error";
      step["detail"] = v.error().message;
    } else {
      auto src = read_file(c);
      if (store) (void)(*store)->record_evaluation(stored, src ? *src : "", *v);
      json vj = v->to_json();
      step["disposition"] = vj["disposition"];
      step["speedup"] = vj.contains("speedup") ? vj["speedup"] : json();
      step["detail"] = v->detail;
      step["candidate_hash"] = v->candidate_hash;
      if (src) step["source"] = *src;
      if (!r.contains("machine") && vj.contains("machine")) r["machine"] = vj["machine"];
      step["verdict"] = std::move(vj);
    }
    r["steps"].push_back(std::move(step));
  }
  return r;
}

}  // namespace

Expected<std::vector<TaskEntry>> select_tasks(std::vector<TaskEntry> entries, const std::string& filter, int sample) {
  if (!filter.empty()) {
    std::regex re;
    try {
      re = std::regex(filter, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return make_error("--filter " + filter + ": not a regular expression (" + e.what() + ")", "an ECMAScript regex, e.g. 'level1/(19|23)_'");
    }
    std::vector<TaskEntry> kept;
    for (auto& e : entries)
      if (std::regex_search(e.path.string(), re)) kept.push_back(std::move(e));
    entries = std::move(kept);
  }
  if (sample > 0 && static_cast<size_t>(sample) < entries.size()) {
    std::vector<TaskEntry> spread;
    const size_t n = entries.size();
    for (size_t i = 0; i < static_cast<size_t>(sample); ++i) spread.push_back(std::move(entries[i * n / static_cast<size_t>(sample)]));
    entries = std::move(spread);
  }
  return entries;
}

std::vector<size_t> longest_first(const std::vector<double>& seconds) {
  std::vector<size_t> order(seconds.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](size_t i) { return seconds[i] < 0 ? std::numeric_limits<double>::infinity() : seconds[i]; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) > key(b); });
  return order;
}

namespace {

/// What a bench was run with, kept in bench.json for --resume.
json bench_settings(const BenchOptions& o) {
  json s = {{"points", o.points},
            {"budget", o.budget},
            {"fresh", o.fresh},
            {"seeds", o.eval.seeds},
            {"base_seed", o.eval.base_seed},
            {"min_time_s", o.eval.min_time_s},
            {"min_calls", o.eval.min_calls},
            {"timeout_s", o.eval.runner.timeout_s},
            {"compile_baseline", o.eval.compile_baseline},
            {"end_to_end", o.eval.final_end_to_end},
            {"compile_mode", o.eval.compile_mode},
            {"dtype", o.eval.dtype}};
  if (o.eval.atol) s["atol"] = *o.eval.atol;
  if (o.eval.rtol) s["rtol"] = *o.eval.rtol;
  if (o.eval.judge_eager) s["judge"] = "eager";
  return s;
}

/// The options of the bench stopped in `dir` (its bench.json), to go on with it.
Expected<std::pair<BenchOptions, json>> resumed(const BenchOptions& given) {
  const fs::path file = given.resume / "bench.json";
  auto text = read_file(file);
  if (!text) return make_error(file.string() + ": no bench to resume here (" + text.error().message + ")",
                               "--resume takes the --out folder of a bench that was stopped");
  json b;
  try {
    b = json::parse(*text);
    BenchOptions o = given;
    o.suite = b.at("suite").get<std::string>();
    o.target = b.at("target").get<std::string>();
    o.mode = b.at("mode").get<std::string>();
    o.llm = b.value("llm", std::string("tuner"));
    if (o.llm == "tuner" || o.llm == "none") o.llm.clear();
    o.filter = b.value("filter", std::string());
    o.sample = b.value("sample", 0);
    o.out_dir = given.resume;
    if (o.report.empty()) o.report = given.resume / "report.html";
    const json& s = b.at("settings");
    o.points = s.at("points").get<int>();
    o.budget = s.at("budget").get<int>();
    o.fresh = s.at("fresh").get<bool>();
    o.eval.seeds = s.at("seeds").get<int>();
    o.eval.base_seed = s.at("base_seed").get<uint64_t>();
    o.eval.min_time_s = s.at("min_time_s").get<double>();
    o.eval.min_calls = s.at("min_calls").get<int>();
    o.eval.runner.timeout_s = s.at("timeout_s").get<double>();
    o.eval.compile_baseline = s.at("compile_baseline").get<bool>();
    o.eval.final_end_to_end = s.value("end_to_end", true);  // benches before it timed end to end
    o.eval.compile_mode = s.at("compile_mode").get<std::string>();
    o.eval.dtype = s.at("dtype").get<std::string>();
    if (s.contains("atol")) o.eval.atol = s["atol"].get<double>();
    if (s.contains("rtol")) o.eval.rtol = s["rtol"].get<double>();
    if (s.contains("judge")) o.eval.judge_eager = s["judge"] == "eager";
    if (!b.at("tasks").is_array()) throw std::runtime_error("tasks is not a list");
    return std::pair{std::move(o), std::move(b)};
  } catch (const std::exception& e) {
    return make_error(file.string() + ": not a bench kfab can resume (" + printable(e.what(), 200) + ")",
                      "a bench.json written by this kfab: an older one lacks its settings; run the bench again");
  }
}

std::string task_name(const TaskEntry& e) { return e.format == "native" && e.task ? e.task->name : e.path.stem().string(); }

/// One task in this process: its row, with its run's report under "report" (wall_s is the caller's).
json run_here(const TaskEntry& e, const BenchOptions& opt, std::unique_ptr<TorchInspector>& tracer) {
  const std::string name = task_name(e);
  json row = {{"task", name}, {"path", e.path.string()}, {"format", e.format}, {"run", nullptr}};
  json report;
  if (e.format == "native" && !e.task) {
    row["disposition"] = "error";
    row["error"] = "the task does not load: " + e.error;
  } else if (opt.mode == "eval") {
    report = eval_bundled(e, opt, opt.target);
    if (report.contains("error")) row["error"] = report["error"];
  } else {
    Expected<json> r = make_error("");
    std::function<void(const std::string&)> progress;
    if (opt.detail) progress = [&](const std::string& s) { opt.detail(name + ": " + s); };
    RunOptions base;
    base.task = e.path;
    base.target = opt.target;
    base.out_dir = opt.out_dir / "runs" / name;
    base.eval = opt.eval;
    base.progress = progress;
    if (opt.llm.empty() || opt.llm == "none") {
      TuneOptions t;
      static_cast<RunOptions&>(t) = base;
      t.budget = opt.points;
      t.fresh = opt.fresh;
      if (e.format == "kernelbench") {
        if (!tracer) tracer = std::make_unique<TorchInspector>(opt.target, opt.eval);
        t.tracer = tracer.get();
      }
      r = tune(t);
    } else {
      OptimizeOptions o;
      static_cast<RunOptions&>(o) = base;
      o.llm = opt.llm;
      o.budget_candidates = opt.budget;
      r = optimize(o);
    }
    if (!r) {
      row["disposition"] = "unsupported";
      row["error"] = r.error().message;
    } else {
      row["run"] = (*r)["run"];
      auto store = Store::open(Store::default_path());
      if (!store) {
        row["error"] = "the run's steps cannot be read: " + store.error().message;
      } else if (auto rep = run_report(**store, (*r)["run"].get<std::string>()); !rep) {
        row["error"] = "the run's steps cannot be read: " + rep.error().message;
      } else {
        report = std::move(*rep);
      }
    }
  }
  if (report.is_object()) {
    score_task(row, final_verdict(report, row));
  } else if (!row.contains("disposition")) {
    row["disposition"] = "error";
  }
  row["report"] = report;
  return row;
}

/// What a kfab started for one task on one device sees: that device alone where the target pins (a
/// GPU, counted as kfab counts them: PCI bus order, within what this kfab was given itself); nothing
/// for targets that do not.
Expected<DeviceEnv> device_env(const std::string& target, int device) {
  const Target* t = find_target(target);
  if (t == nullptr || t->pin == nullptr) return DeviceEnv{};
  return t->pin(device);
}

/// A one-task bench to be resumed (`kfab bench --resume`) with this bench's settings: what a device's
/// kfab and a queue's worker run. The caller adds the suite (the task's path where it runs).
json one_task_bench(const json& bench, const std::string& id) {
  return {{"bench", id},
          {"target", bench["target"]},
          {"mode", bench["mode"]},
          {"llm", bench["llm"]},
          {"settings", bench["settings"]},
          {"started_at", utc_now_iso()},
          {"tasks", json::array()},
          {"finished", false}};
}

/// Rows that came as their tasks finished (on devices, from workers), in the suite's order again.
void in_suite_order(json& rows, const std::vector<TaskEntry>& entries) {
  std::map<std::string, size_t> place;
  for (size_t i = 0; i < entries.size(); ++i) place.emplace(entries[i].path.string(), i);
  auto at = [&](const json& r) {
    const auto it = place.find(r.value("path", std::string()));
    return it == place.end() ? entries.size() : it->second;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) { return at(a) < at(b); });
}

/// What each task took the last time a bench ran it on this machine with the same settings: the
/// order devices and queues hand tasks out in, longest first, so that a long task does not start last
/// and end the bench alone. Kept in the cache (bench/costs.json, {key: seconds}); the key is the
/// task's files, the target, the mode and the settings that decide a task's work.
class TaskCosts {
 public:
  explicit TaskCosts(const json& bench) {
    const json& s = bench.value("settings", json::object());
    material_ = bench.value("target", std::string()) + '\0' + bench.value("mode", std::string()) + '\0' +
                bench.value("llm", std::string()) + '\0' +
                json{{"points", s.value("points", json())}, {"budget", s.value("budget", json())}, {"seeds", s.value("seeds", json())},
                     {"compile_baseline", s.value("compile_baseline", json())}, {"dtype", s.value("dtype", json())}}
                    .dump();
  }
  std::string key(const TaskEntry& e) {
    auto it = keys_.find(e.path.string());
    if (it != keys_.end()) return it->second;
    auto files = task_files_payload(e.path);
    const std::string k = files ? hash_hex(material_ + '\0' + files->value("files", json::object()).dump()).substr(0, 24) : std::string();
    keys_[e.path.string()] = k;
    return k;
  }
  /// Seconds, or a negative number for a task never timed here.
  double of(const TaskEntry& e) {
    const json all = load();
    const std::string k = key(e);
    return !k.empty() && all.contains(k) && all[k].is_number() ? all[k].get<double>() : -1.0;
  }
  void record(const TaskEntry& e, double seconds) {
    const std::string k = key(e);
    if (k.empty() || !(seconds > 0)) return;
    json all = load();  // read, change, write: a lost update between benches costs an ordering only
    all[k] = seconds;
    (void)write_file_atomic(file(), all.dump());
  }
  /// `todo` with the tasks never timed first (in the suite's order: they may be the longest), then the
  /// others longest first; says how many it knew.
  void order(std::vector<const TaskEntry*>& todo, const std::function<void(const std::string&)>& say) {
    std::vector<double> cost;
    size_t known = 0;
    for (const TaskEntry* e : todo) {
      cost.push_back(of(*e));
      known += cost.back() >= 0;
    }
    if (known == 0) return;
    std::vector<const TaskEntry*> ordered;
    for (size_t i : longest_first(cost)) ordered.push_back(todo[i]);
    todo = std::move(ordered);
    if (say) say(fmt::format("{} of {} tasks have taken a known time here before: handed out longest first", known, todo.size()));
  }

 private:
  static fs::path file() { return cache_dir() / "bench" / "costs.json"; }
  static json load() {
    auto text = read_file(file());
    if (!text) return json::object();
    try {
      json j = json::parse(*text);
      return j.is_object() ? j : json::object();
    } catch (const json::exception&) {
      return json::object();
    }
  }
  std::string material_;
  std::map<std::string, std::string> keys_;
};

/// A task's own bench folder under `devices`: OUT/tasks/NNN-NAME (NNN its place in the suite's list).
fs::path task_bench_dir(const BenchOptions& opt, size_t index, const std::string& name) {
  return opt.out_dir / "tasks" / fmt::format("{:03d}-{}", index, name);
}

/// The row a task's own bench wrote (with the device it ran on), or the error that says why there is none.
json task_row_from(const fs::path& dir, const TaskEntry& e, int device, const std::string& ended) {
  json row = {{"task", task_name(e)}, {"path", e.path.string()}, {"format", e.format}, {"run", nullptr}, {"device", device},
              {"bench_dir", fs::absolute(dir).string()}};
  std::string why;
  if (auto text = read_file(dir / "bench.json"); !text) {
    why = "wrote no bench.json";
  } else {
    try {
      const json b = json::parse(*text);
      if (b.value("finished", false) && b.at("tasks").is_array() && b["tasks"].size() == 1) {
        json r = b["tasks"][0];
        for (const char* k : {"path", "device", "bench_dir"}) r[k] = row[k];
        if (b.contains("machine") && r["report"].is_object() && !r["report"].contains("machine")) r["report"]["machine"] = b["machine"];
        return r;
      }
      why = "stopped before the task's row was written";
    } catch (const std::exception& ex) {
      why = std::string("wrote a bench.json kfab cannot read (") + printable(ex.what(), 200) + ")";
    }
  }
  std::string log;
  if (auto text = read_file(dir / "log.txt"); text && !text->empty()) log = printable(*text, 800, Keep::Tail);
  row["disposition"] = "error";
  row["error"] = fmt::format("the kfab that ran this task on device {} {} and {}{}", device, ended, why,
                             log.empty() ? std::string() : "; the end of its log (" + (dir / "log.txt").string() + "): " + log);
  return row;
}

/// A pipe write of a whole line; false when the other end is gone.
bool send_line(int fd, const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

/// The kfabs of run_on_devices: one per slot (an entry of `devices`), started when first needed and
/// again after one died, each given one task at a time.
class DeviceSlots {
 public:
  struct Slot {
    int device = 0;
    std::optional<Child> child;
    const TaskEntry* entry = nullptr;  ///< the task it runs; null: idle
    fs::path dir;
    std::string reply;
  };
  using Finish = std::function<Expected<void>(json)>;

  DeviceSlots(const std::vector<TaskEntry>& entries, const BenchOptions& opt, const json& bench, const std::vector<int>& devices,
              Finish finish, fs::path self, std::vector<std::string> prefix)
      : entries_(entries), opt_(opt), bench_(bench), devices_(devices), finish_(std::move(finish)), self_(std::move(self)),
        prefix_(std::move(prefix)), slots(devices.size()) {
    for (size_t i = 0; i < devices.size(); ++i) slots[i].device = devices[i];
  }

  size_t index_of(const TaskEntry* e) const { return static_cast<size_t>(e - entries_.data()); }

  /// Gives slot i the task `e` in its own folder (a one-task bench to be resumed).
  Expected<void> start(Slot& s, size_t i, const TaskEntry* e) {
    std::error_code ec;
    s.entry = e;
    s.dir = task_bench_dir(opt_, index_of(e), task_name(*e));
    fs::remove_all(s.dir, ec);
    fs::create_directories(s.dir, ec);
    if (ec) return make_error("cannot create " + s.dir.string() + ": " + ec.message());
    // The task's own bench, made to be resumed: this bench's settings, the task as its suite.
    json one = one_task_bench(bench_, bench_["bench"].get<std::string>() + "-" + fs::path(s.dir).filename().string());
    one["suite"] = fs::absolute(e->path).string();
    if (auto ok = write_file_atomic(s.dir / "bench.json", dump_json(one, 1)); !ok) return ok;
    if (auto ok = write_file_atomic(s.dir / "device.txt", std::to_string(s.device) + "\n"); !ok) return ok;
    if (auto ok = ensure(s, i); !ok) {
      s.entry = nullptr;
      return finish_(task_row_from(s.dir, *e, s.device, "did not start (" + ok.error().message + ")"));
    }
    if (!send_line(s.child->request_fd(), fs::absolute(s.dir).string() + "\n")) {
      const ExitStatus how = s.child->wait(std::chrono::steady_clock::now() + std::chrono::seconds(5));
      s.child.reset();
      s.entry = nullptr;
      return finish_(task_row_from(s.dir, *e, s.device, how.describe()));
    }
    return {};
  }

  /// Its reply ("done" or "error MESSAGE") or its end: the task's row.
  Expected<void> collect(Slot& s) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(s.child->reply_fd(), buf, sizeof buf);
      if (n > 0) {
        s.reply.append(buf, static_cast<size_t>(n));
        if (s.reply.find('\n') != std::string::npos) break;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      // the pipe closed: the kfab ended without a reply
      const ExitStatus how = s.child->wait(std::chrono::steady_clock::now() + std::chrono::seconds(10));
      s.child.reset();
      const TaskEntry* e = std::exchange(s.entry, nullptr);
      return finish_(task_row_from(s.dir, *e, s.device, how.describe()));
    }
    const std::string line = s.reply.substr(0, s.reply.find('\n'));
    s.reply.clear();
    const TaskEntry* e = std::exchange(s.entry, nullptr);
    json row = task_row_from(s.dir, *e, s.device, "ended its task");
    if (line.rfind("error ", 0) == 0 && row.value("disposition", "") == "error") row["error"] = printable(line.substr(6), 2000);
    return finish_(std::move(row));
  }

  /// Every task has its row: an empty line ends each kfab.
  void end() {
    for (auto& s : slots)
      if (s.child) {
        send_line(s.child->request_fd(), "\n");
        s.child->wait(std::chrono::steady_clock::now() + std::chrono::seconds(60));
      }
  }

 private:
  /// A slot's kfab, started when it is first needed and again after one died.
  Expected<void> ensure(Slot& s, size_t i) {
    if (s.child) return {};
    auto env = device_env(opt_.target, s.device);
    if (!env) return Unexpected{env.error()};
    SpawnOptions so;
    so.argv = prefix_;
    for (const std::string& a : {self_.string(), std::string("bench"), std::string("--serve-slot")}) so.argv.push_back(a);
    so.env = *env;
    // A GPU named twice is shared: a task waits (within its deadline) for memory the other holds
    // rather than being refused for it.
    if (find_target(opt_.target)->gpu && std::count(devices_.begin(), devices_.end(), s.device) > 1 && !std::getenv("KFAB_ROOM_WAIT_S"))
      so.env.emplace_back("KFAB_ROOM_WAIT_S", "900");
    std::error_code ec;
    fs::create_directories(opt_.out_dir / "tasks", ec);
    so.output_file = opt_.out_dir / "tasks" / fmt::format("slot-{}-device-{}.log", i, s.device);
    so.protocol_pipes = true;
    so.stop_signal = SIGTERM;  // it ends its own runners and workers
    auto child = Child::spawn(so);
    if (!child) return make_error("cannot start a kfab for device " + std::to_string(s.device) + ": " + child.error().message);
    s.child.emplace(std::move(*child));
    s.reply.clear();
    return {};
  }

  const std::vector<TaskEntry>& entries_;
  const BenchOptions& opt_;
  const json& bench_;
  const std::vector<int>& devices_;
  Finish finish_;
  fs::path self_;
  std::vector<std::string> prefix_;

 public:
  std::vector<Slot> slots;
};

/// The tasks spread over `devices`: a kfab per entry of `devices` (`kfab bench --serve-slot`, pinned
/// to its device), each running one task at a time as a one-task bench of this bench's settings in
/// the task's own folder (`--resume` of it), its tracer kept from task to task. A kfab that dies
/// costs the task it had (an `error` row that says how it ended); the next task gets a new one.
Expected<void> run_on_devices(const std::vector<const TaskEntry*>& todo, const std::vector<TaskEntry>& entries,
                              const BenchOptions& opt, const json& bench, const std::vector<int>& devices,
                              const std::function<Expected<void>(json)>& finish, BenchStatus& st,
                              const std::function<double()>& elapsed) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return make_error("cannot find kfab's own executable (/proc/self/exe): " + ec.message());
  // A test's way in (tests/integration/bench_test.cpp): a command each device's kfab is started under.
  const char* p = std::getenv("KFAB_BENCH_TASK_PREFIX");
  DeviceSlots pool(entries, opt, bench, devices, finish, self, p ? split(p, ' ') : std::vector<std::string>{});
  std::deque<const TaskEntry*> queue;
  for (const TaskEntry* e : todo) {
    // A task whose kfab finished before this bench stopped keeps the row it wrote.
    const fs::path dir = task_bench_dir(opt, pool.index_of(e), task_name(*e));
    if (auto text = read_file(dir / "bench.json")) {
      try {
        const json b = json::parse(*text);
        if (b.value("finished", false) && b["tasks"].is_array() && b["tasks"].size() == 1) {
          int device = -1;
          if (auto d = read_file(dir / "device.txt")) device = std::atoi(d->c_str());
          if (auto ok = finish(task_row_from(dir, *e, device, "finished")); !ok) return ok;
          continue;
        }
      } catch (const std::exception&) {
        // run again
      }
    }
    queue.push_back(e);
  }
  for (;;) {
    for (size_t i = 0; i < pool.slots.size(); ++i)
      if (!pool.slots[i].entry && !queue.empty()) {
        const TaskEntry* e = queue.front();
        queue.pop_front();
        if (auto ok = pool.start(pool.slots[i], i, e); !ok) return ok;
      }
    std::vector<pollfd> fds;
    std::vector<DeviceSlots::Slot*> busy;
    for (auto& s : pool.slots)
      if (s.entry) {
        fds.push_back({s.child->reply_fd(), POLLIN, 0});
        busy.push_back(&s);
      }
    if (busy.empty() && queue.empty()) break;
    std::string now;
    for (const auto* s : busy) now += (now.empty() ? "" : ", ") + task_name(*s->entry) + " on " + std::to_string(s->device);
    if (now != st.current) {
      st.current = now;
      st.elapsed_s = elapsed();
      if (opt.status) opt.status(st);
    }
    if (busy.empty()) continue;
    const int n = ::poll(fds.data(), fds.size(), 500);
    if (n < 0 && errno != EINTR) return make_error(std::string("poll: ") + std::strerror(errno));
    for (size_t k = 0; n > 0 && k < fds.size(); ++k)
      if (fds[k].revents != 0)
        if (auto ok = pool.collect(*busy[k]); !ok) return ok;
  }
  pool.end();
  return {};
}

/// The tasks as jobs of a Redis job queue (`--redis`): one per task, run by `kfab worker` processes
/// on any host; each task's row comes back as its job's result, written once. Jobs of a resumed bench
/// that have a result already are not sent again.
Expected<void> run_on_queue(const std::vector<const TaskEntry*>& todo, const std::vector<TaskEntry>& entries,
                            const BenchOptions& opt, const json& bench, const std::function<Expected<void>(json)>& finish,
                            BenchStatus& st, const std::function<double()>& elapsed) {
  auto queue = JobQueue::open(opt.queue);
  if (!queue) return Unexpected{queue.error()};
  auto index_of = [&](const TaskEntry* e) { return static_cast<size_t>(e - entries.data()); };
  std::vector<std::string> jobs;
  std::vector<const TaskEntry*> of;
  for (const TaskEntry* e : todo) {
    jobs.push_back(bench["bench"].get<std::string>() + "/" + fmt::format("{:03d}-{}", index_of(e), task_name(*e)));
    of.push_back(e);
  }
  auto had = queue->results(jobs);
  if (!had) return Unexpected{had.error()};
  size_t sent = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!(*had)[i].is_null()) continue;
    const json one = one_task_bench(bench, jobs[i]);
    auto payload = task_job_payload(*of[i], one);
    if (!payload) {
      json row = {{"task", task_name(*of[i])}, {"path", of[i]->path.string()}, {"format", of[i]->format}, {"run", nullptr},
                  {"disposition", "error"}, {"error", payload.error().message}};
      (*had)[i] = json{{"row", row}};
      continue;
    }
    auto added = queue->submit(jobs[i], *payload);
    if (!added) return Unexpected{added.error()};
    if (*added) ++sent;
  }
  if (opt.say && sent > 0) opt.say(fmt::format("{} jobs on {} (queue {}): waiting for `kfab worker --redis {}`", sent, opt.queue.url, opt.queue.name, opt.queue.url));
  std::vector<bool> done(jobs.size(), false);
  size_t left = jobs.size();
  auto take = [&](size_t i, const json& written) -> Expected<void> {
    const json result = written.is_object() ? written : json{{"error", "a result that is not a JSON object"}};
    done[i] = true;
    --left;
    const TaskEntry& e = *of[i];
    json row;
    // what a worker wrote is read, not trusted: a row without a disposition is an error row
    if (result.contains("row") && result["row"].is_object() && result["row"].contains("disposition") &&
        result["row"]["disposition"].is_string() && result["row"].value("task", json()).is_string()) {
      row = result["row"];
    } else {
      const json why = result.contains("error") ? result["error"] : json(result.contains("row") ? "a row kfab cannot read" : "no row");
      row = {{"task", task_name(e)}, {"format", e.format}, {"run", nullptr}, {"disposition", "error"},
             {"error", "the worker's job failed: " + printable(why.is_string() ? why.get<std::string>() : why.dump(), 600)}};
    }
    row["path"] = e.path.string();
    row["job"] = jobs[i];
    for (const char* k : {"worker", "host", "device"})
      if (result.contains(k)) row[k] = result[k];
    if (result.contains("machine") && row["report"].is_object() && !row["report"].contains("machine")) row["report"]["machine"] = result["machine"];
    return finish(std::move(row));
  };
  for (size_t i = 0; i < jobs.size(); ++i)
    if (!(*had)[i].is_null())
      if (auto ok = take(i, (*had)[i]); !ok) return ok;
  while (left > 0) {
    std::vector<std::string> waiting;
    std::vector<size_t> at;
    for (size_t i = 0; i < jobs.size(); ++i)
      if (!done[i]) {
        waiting.push_back(jobs[i]);
        at.push_back(i);
      }
    const std::string now = fmt::format("{} jobs with the workers", waiting.size());
    if (now != st.current) {
      st.current = now;
      st.elapsed_s = elapsed();
      if (opt.status) opt.status(st);
    }
    auto got = queue->results(waiting);
    if (!got) {
      // The server restarted or the network dropped: the jobs and results it keeps are found again.
      if (opt.say) opt.say("lost the queue (" + got.error().message + "); trying again in 5 s");
      std::this_thread::sleep_for(std::chrono::seconds(5));
      if (auto q = JobQueue::open(opt.queue)) queue = std::move(q);
      continue;
    }
    bool any = false;
    for (size_t k = 0; k < got->size(); ++k)
      if (!(*got)[k].is_null()) {
        any = true;
        if (auto ok = take(at[k], (*got)[k]); !ok) return ok;
      }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  return {};
}

}  // namespace

namespace {

/// A new bench's record (bench.json): its settings and no rows yet; a resumed one's keeps its start,
/// its machine and its rows.
json bench_record(const BenchOptions& opt, const std::string& id, const Backend& backend, const json& previous) {
  json bench = {{"bench", id},
                {"suite", opt.suite.string()},
                {"target", opt.target},
                {"mode", opt.mode},
                {"llm", opt.mode == "optimize" ? (opt.llm.empty() ? "tuner" : opt.llm) : "none"},
                {"device", backend.describe()},
                {"started_at", utc_now_iso()},
                {"out_dir", fs::absolute(opt.out_dir).string()},
                {"tasks", json::array()}};
  if (!opt.filter.empty()) bench["filter"] = opt.filter;
  if (opt.sample > 0) bench["sample"] = opt.sample;
  bench["settings"] = bench_settings(opt);
  if (!previous.is_object()) return bench;
  bench["started_at"] = previous.value("started_at", utc_now_iso());
  bench["resumed_at"] = previous.value("resumed_at", json::array());
  bench["resumed_at"].push_back(utc_now_iso());
  if (previous.contains("machine")) bench["machine"] = previous["machine"];
  for (const auto& row : previous["tasks"])
    if (row.is_object() && row.contains("path")) bench["tasks"].push_back(row);
  return bench;
}

/// A task's row as one line of progress.
std::string row_line(const json& row) {
  return fmt::format("{}: {}{}{}", row.value("task", std::string()), row["disposition"].get<std::string>(),
                     std::isfinite(num(row, "speedup")) ? fmt::format(" {:.2f}x", num(row, "speedup"))
                                                        : (row.contains("error") ? ": " + printable(row["error"].get<std::string>(), 200) : ""),
                     row.contains("device") ? fmt::format(" (device {})", row["device"].get<int>()) : "");
}

}  // namespace

Expected<json> run_bench(const BenchOptions& opt_in) {
  BenchOptions opt = opt_in;
  json previous;
  if (!opt.resume.empty()) {
    auto r = resumed(opt_in);
    if (!r) return Unexpected{r.error()};
    opt = std::move(r->first);
    previous = std::move(r->second);
  }
  std::error_code ec;
  if (!fs::exists(opt.suite, ec)) return make_error(opt.suite.string() + ": no such suite", "a folder of task folders or KernelBench files");
  auto selected = select_tasks(discover_tasks(opt.suite), opt.filter, opt.sample);
  if (!selected) return Unexpected{selected.error()};
  const auto entries = std::move(*selected);
  if (entries.empty())
    return make_error("no tasks under " + opt.suite.string() + (opt.filter.empty() ? "" : " match " + opt.filter),
                      "`kfab tasks PATH` lists what kfab finds there");
  if (opt.target.empty()) opt.target = default_target().name;
  auto backend = make_backend(opt.target);
  if (!backend) return make_error("unknown target \"" + opt.target + "\"", "accepted: " + target_names());
  if (backend->probe() == 0) return make_error("target " + opt.target + " is not available here: " + backend->describe());
  if (opt.mode != "optimize" && opt.mode != "eval") return make_error("unknown bench mode " + opt.mode, "optimize or eval");
  // The devices: as given, else those the stopped bench used, else every GPU of a host with several.
  std::vector<int> given = opt.devices;
  if (given.empty() && previous.is_object() && previous.contains("devices") && previous["devices"].is_array())
    for (const auto& d : previous["devices"])
      if (d.is_number_integer()) given.push_back(d.get<int>());
  auto spread = spread_devices(*backend, given);
  if (!spread) return Unexpected{spread.error()};
  const std::vector<int> devices = std::move(*spread);

  const std::string id = previous.is_object() ? previous.value("bench", new_run_id()) : new_run_id();
  if (opt.out_dir.empty()) opt.out_dir = fs::path("kfab-bench") / id;
  if (opt.report.empty()) opt.report = opt.out_dir / "report.html";
  fs::create_directories(opt.out_dir, ec);
  if (ec) return make_error("cannot create " + opt.out_dir.string() + ": " + ec.message());

  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  json bench = bench_record(opt, id, *backend, previous);
  // Resumed: the finished rows stay (a task that was under way when the bench stopped runs again), and
  // the wall time goes on from where it stopped.
  std::set<std::string> finished;
  for (const auto& row : bench["tasks"]) finished.insert(row["path"].get<std::string>());
  const double wall_before = previous.is_object() ? previous.value("wall_s", 0.0) : 0.0;
  // bench.json after every task: a bench killed half-way keeps what it finished
  auto save = [&](bool final_) -> Expected<void> {
    bench["wall_s"] = wall_before + elapsed();
    bench["finished"] = final_;
    bench["scores"] = bench_scores(bench["tasks"]);
    if (auto ok = write_file_atomic(opt.out_dir / "bench.json", dump_json(bench, 1)); !ok) return ok;
    if (auto ok = write_file_atomic(opt.out_dir / "tasks.csv", tasks_csv(bench["tasks"])); !ok) return ok;
    if (auto ok = write_file_atomic(opt.out_dir / "scores.csv", scores_csv(bench["scores"])); !ok) return ok;
    return write_file_atomic(opt.report, render_bench_html(bench));
  };

  BenchStatus st;
  st.total = static_cast<int>(entries.size());
  double best_speed = 0.0;
  for (const auto& row : bench["tasks"]) {
    ++st.done;
    st.passed += row.value("disposition", std::string()) == "passed";
  }
  if (opt.say && !finished.empty())
    opt.say(fmt::format("resuming {}: {} of {} tasks finished already", opt.out_dir.string(), finished.size(), entries.size()));
  // A task's row is scored, said, stored and saved the same way wherever it ran.
  TaskCosts costs(bench);
  std::map<std::string, const TaskEntry*> entry_of;
  for (const auto& e : entries) entry_of.emplace(e.path.string(), &e);
  auto finish = [&](json row) -> Expected<void> {
    if (auto it = entry_of.find(row.value("path", std::string())); it != entry_of.end() && row.contains("wall_s") && row["wall_s"].is_number())
      costs.record(*it->second, row["wall_s"].get<double>());
    const json& report = row.value("report", json());
    if (!bench.contains("machine") && report.is_object() && report.contains("machine")) bench["machine"] = report["machine"];
    const std::string name = row.value("task", std::string());
    const bool ok = row["disposition"] == "passed";
    st.passed += ok;
    if (ok && std::isfinite(num(row, "speedup")) && num(row, "speedup") > best_speed) {
      best_speed = num(row, "speedup");
      st.best = fmt::format("{} {:.2f}x", name, best_speed);
    }
    if (opt.say) opt.say(row_line(row));
    bench["tasks"].push_back(std::move(row));
    ++st.done;
    st.elapsed_s = elapsed();
    st.left_s = st.elapsed_s / std::max(1, st.done - static_cast<int>(finished.size())) * (st.total - st.done);
    return save(false);
  };

  std::vector<const TaskEntry*> todo;
  for (const auto& e : entries)
    if (!finished.count(e.path.string())) todo.push_back(&e);
  QueueOptions queue = opt.queue;
  if (queue.url.empty() && previous.is_object() && previous.contains("queue") && previous["queue"].is_object()) {
    queue.url = previous["queue"].value("url", std::string());
    queue.name = previous["queue"].value("name", queue.name);
  }
  if (!queue.url.empty() || !devices.empty()) costs.order(todo, opt.say);
  if (!queue.url.empty()) {
    bench["queue"] = {{"url", queue.url}, {"name", queue.name}};
    BenchOptions q = opt;
    q.queue = queue;
    if (auto done = run_on_queue(todo, entries, q, bench, finish, st, elapsed); !done) return Unexpected{done.error()};
    in_suite_order(bench["tasks"], entries);
  } else if (!devices.empty()) {
    bench["devices"] = devices;
    if (auto done = run_on_devices(todo, entries, opt, bench, devices, finish, st, elapsed); !done) return Unexpected{done.error()};
    in_suite_order(bench["tasks"], entries);
  } else {
    // One worker traces every KernelBench file the tuner is given (made at the first).
    std::unique_ptr<TorchInspector> own;
    std::unique_ptr<TorchInspector>& tracer = opt.tracer ? *opt.tracer : own;
    for (const TaskEntry* e : todo) {
      st.current = task_name(*e);
      st.elapsed_s = elapsed();
      if (opt.status) opt.status(st);
      const double task_t0 = elapsed();
      json row = run_here(*e, opt, tracer);
      row["wall_s"] = elapsed() - task_t0;
      if (auto saved = finish(std::move(row)); !saved) return Unexpected{saved.error()};
    }
  }
  st.current.clear();
  if (opt.status) opt.status(st);
  if (auto saved = save(true); !saved) return Unexpected{saved.error()};
  bench["report"] = fs::absolute(opt.report).string();
  return bench;
}

}  // namespace kfab
