#include "tuner/tuner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "backends/backend.h"
#include "backends/cuda/cuda_backend.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/stamp.h"
#include "core/text.h"
#include "store/store.h"
#include "eval/torch_harness.h"
#include "tuner/fused.h"
#include "tuner/templates.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kNativeTemplatesHint =
    "templates on cpu and cuda: cumsum, permute (batched transpose), reduction (a sum over the middle "
    "dimension), group_norm ([op_params] groups, eps), matmul and matmul_epilogue (a GEMM, the formula over acc), "
    "and any task with a `formula` (a fused row program); on cpu also softmax, log_softmax, rms_norm and "
    "layer_norm ([op_params] eps); or use --llm";
constexpr const char* kTracedHint =
    "fused row programs cover pointwise chains, reductions over the last dimension, softmax/norm-like "
    "rows and mean/sum losses, after one 2-D GEMM or none; use --llm PROVIDER:MODEL for the rest";

std::string no_native_template(const Task& task, const std::string& target) {
  return fmt::format("the built-in tuner has no template for op class \"{}\" on {}", task.op_class, target);
}

/// The dedicated templates of single-op Models a program cannot state, by the trace's kind.
const std::map<std::string, std::string>& dedicated_templates(const std::string& target) {
  static const std::map<std::string, std::string> cuda = {
      {"scan", "cuda_row_scan"}, {"middle_sum", "cuda_middle_sum"}, {"transpose", "cuda_tiled_transpose"}, {"group_norm", "cuda_group_norm"},
      {"avg_pool2d", "cuda_avg_pool2d"}};
  static const std::map<std::string, std::string> cpu = {
      {"scan", "cpu_rowwise_cumsum"}, {"middle_sum", "cpu_middle_sum"}, {"transpose", "cpu_tiled_transpose"}, {"group_norm", "cpu_group_norm"},
      {"avg_pool2d", "cpu_avg_pool2d"}};
  return target == "cuda" ? cuda : cpu;
}

}  // namespace

Expected<TracedPlan> plan_traced(const json& traced, const std::string& target) {
  if (!traced.value("supported", false)) return make_error(traced.value("reason", std::string("?")), kTracedHint);
  TracedPlan plan;
  if (const std::string kind = traced.value("kind", std::string()); !kind.empty()) {
    const auto& by_kind = dedicated_templates(target);
    const auto it = by_kind.find(kind);
    plan.dedicated = it == by_kind.end() ? nullptr : template_named(it->second);
    if (plan.dedicated == nullptr) return make_error("the traced Model is a \"" + kind + "\", which has no template on " + target);
    plan.kind = kind;
    plan.template_name = plan.dedicated->name;
    try {
      if (traced.contains("op_params"))
        for (const auto& [k, v] : traced.at("op_params").items()) plan.op_params[k] = v.get<double>();
    } catch (const json::exception& e) {
      return make_error(std::string("the traced program is malformed: ") + e.what());
    }
    return plan;
  }
  std::vector<PInput> ins;
  std::vector<std::string> outs;
  plan.is_gemm = traced.contains("gemm");
  try {
    for (const auto& i : traced.at("inputs")) {
      const std::string c = i.at("cls").get<std::string>();
      ins.push_back({i.at("name").get<std::string>(), c == "E" ? VClass::E : c == "C" ? VClass::C : c == "R" ? VClass::R : VClass::K,
                     i.value("integer", false), i.value("i32", false)});
      plan.gemm.bind.push_back(i.value("tensor", static_cast<int>(plan.gemm.bind.size())));
    }
    outs = traced.at("outputs").get<std::vector<std::string>>();
    if (plan.is_gemm) {
      const json& g = traced.at("gemm");
      plan.gemm.a = g.at("a").get<int>();
      plan.gemm.b = g.at("b").get<int>();
      plan.gemm.trans_b = g.at("trans_b").get<bool>();
      plan.gemm.tensors = traced.at("tensors").get<int>();
    }
  } catch (const json::exception& e) {
    return make_error(std::string("the traced program is malformed: ") + e.what());
  }
  auto p = parse_program(traced.value("formula", std::string()), ins, outs);
  if (!p) return make_error("the traced program does not parse: " + p.error().message);
  if (auto ok = fused_supported(*p); !ok) return make_error("the built-in tuner cannot take this program: " + ok.error().message);
  plan.program = std::move(*p);
  plan.program.row_dims = traced.value("row_dims", 1);
  if (plan.program.row_dims < 1) return make_error("the traced program is malformed: row_dims < 1");
  plan.template_name = plan.is_gemm ? (target == "cuda" ? gemm_cuda_template() : gemm_cpu_template()).name
                                    : (target == "cuda" ? fused_cuda_template() : fused_cpu_template()).name;
  return plan;
}

json tuner_coverage(const LoadedTask& task, const std::string& target, TorchInspector& tracer) {
  json row = {{"path", task.path.string()}, {"format", task.format_name()}, {"taken", false}, {"template", nullptr}, {"reason", nullptr}};
  if (!task.kernelbench()) {
    const auto templates = templates_for(task.task, target);
    if (templates.empty()) row["reason"] = no_native_template(task.task, target);
    else row.update({{"taken", true}, {"template", templates.front()->name}});
    return row;
  }
  auto traced = tracer.trace(task.path);
  if (!traced) {
    row["reason"] = traced.error().message;
    return row;
  }
  auto plan = plan_traced(*traced, target);
  if (!plan) row["reason"] = plan.error().message;
  else row.update({{"taken", true}, {"template", plan->template_name}});
  return row;
}

Expected<json> tune(const TuneOptions& in) {
  TuneOptions opt = in;
  auto say = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  auto backend = make_backend(opt.target);
  if (!backend) return make_error("unknown target " + opt.target);
  // A host with several GPUs: every one of them, unless told otherwise (a bench's kfab sees one).
  auto devices = spread_devices(*backend, opt.devices);
  if (!devices) return Unexpected{devices.error()};
  opt.devices = std::move(*devices);
  auto loaded = open_task(opt.task);
  if (!loaded) return Unexpected{loaded.error()};
  const bool kb = loaded->kernelbench();

  // What is searched: (template, parameter point) pairs, each of which generates a source.
  struct Point {
    std::string tmpl;
    TemplateParams params;
  };
  std::vector<Point> points;
  std::function<std::string(const Point&)> source;
  Task task;
  std::string material;  // the cache key's material: what the task computes, where, which templates
  json program_json;     // a KernelBench task's traced program (kept in the cache: a rerun needs no trace)
  Program program;
  GemmProgram gemm_program;
  // One evaluator for the whole search; for a KernelBench task its workers are kept (torch imports
  // once): the candidates are kfab's own.
  // With devices, each evaluator's runners and workers see one GPU; the first evaluator runs the
  // points the search does not spread and the winner's final check.
  std::vector<std::vector<std::pair<std::string, std::string>>> pins;
  if (opt.target == "cuda")
    for (int d : opt.devices) {
      auto env = cuda_device_env(d);
      if (!env) return Unexpected{env.error()};
      pins.push_back(std::move(*env));
    }
  auto pinned = [&](EvalOptions eo, size_t slot) {
    if (slot < pins.size())
      for (const auto& [k, v] : pins[slot]) eo.runner.env[k] = v;
    return eo;
  };
  Evaluator evaluator(*loaded, opt.target, pinned(opt.eval, 0));
  evaluator.keep_workers();
  auto evaluate = [&](const fs::path& file, const EvalOptions& eo) -> Expected<Verdict> {
    if (opt.remote) return opt.remote->evaluate(file, eo, true);
    evaluator.set_options(pinned(eo, 0));
    return evaluator.evaluate(file);
  };
  const std::string ext = opt.target == "cuda" ? ".cu" : ".cpp";
  if (kb) {
    if (opt.target != "cuda" && opt.target != "cpu")
      return make_error("the built-in tuner generates kernels for KernelBench-format tasks on cuda and cpu",
                        "use --target cuda or cpu, or --llm PROVIDER:MODEL for " + opt.task.string());
    const KernelTemplate& fused = opt.target == "cuda" ? fused_cuda_template() : fused_cpu_template();
    auto text = read_file(opt.task);
    if (!text) return make_error("cannot read " + opt.task.string());
    task = loaded->task;
    const KernelTemplate& gemm = opt.target == "cuda" ? gemm_cuda_template() : gemm_cpu_template();
    material = *text + '\0' + opt.target + '\0' + backend->describe() + '\0' + fused.name + std::to_string(fused.version) + '\0' +
               gemm.name + std::to_string(gemm.version);
    // single-op tasks a program cannot state go to a dedicated template (the trace's "kind")
    const auto& by_kind = dedicated_templates(opt.target);
    for (const auto& [kind, name] : by_kind)
      if (const auto* t2 = template_named(name)) material += '\0' + name + std::to_string(t2->version);
    // the cache may hold the traced program; otherwise the Python worker traces the Model
    const fs::path cache_file = cache_dir() / "tuner" / (hash_hex(material).substr(0, 24) + ".json");
    if (!opt.fresh)
      if (auto c = read_file(cache_file))
        try {
          program_json = json::parse(*c).at("program");
        } catch (const json::exception&) {
          program_json = nullptr;
        }
    if (program_json.is_null() || !program_json.is_object()) {
      say("tracing the Model (torch make_fx) to find a fusible program");
      std::unique_ptr<TorchInspector> own;
      if (opt.tracer == nullptr) own = std::make_unique<TorchInspector>(opt.target, opt.eval);
      auto tr = (opt.tracer != nullptr ? *opt.tracer : *own).trace(opt.task);
      if (!tr) return Unexpected{tr.error()};
      program_json = *tr;
    }
    auto plan = plan_traced(program_json, opt.target);
    if (!plan) return make_error("the built-in tuner has no template for " + opt.task.filename().string() + ": " + plan.error().message,
                                 plan.error().hint);
    if (plan->dedicated != nullptr) {
      const KernelTemplate* dedicated = plan->dedicated;
      say("the Model is one " + plan->kind + ": template " + dedicated->name);
      // the numbers the template needs beyond the tensors (a group count, eps), from the trace
      if (!plan->op_params.empty()) {
        for (const auto& [k, v] : plan->op_params) task.op_params[k] = v;
        task.op_class = plan->kind;
      }
      for (const auto& g : dedicated->grid(task)) points.push_back({dedicated->name, g});
      source = [&, dedicated](const Point& pt) { return dedicated->generate(task, pt.params); };
    } else {
      program = std::move(plan->program);
      gemm_program = std::move(plan->gemm);
      const bool is_gemm = plan->is_gemm;
      say(std::string(is_gemm ? "a GEMM (" + gemm.name + "), then the epilogue" : "program") + ":\n" +
          program_json.value("formula", std::string()));
      if (is_gemm) {
        gemm_program.epilogue = program;
        for (const auto& g : gemm_grid(opt.target)) points.push_back({gemm.name, g});
        source = [&](const Point& pt) {
          return opt.target == "cuda" ? generate_gemm_cuda(gemm_program, pt.params, "GEMM + epilogue for " + task.name)
                                      : generate_gemm_cpp(gemm_program, pt.params, "GEMM + epilogue for " + task.name);
        };
      } else {
        const auto grid = opt.target == "cuda" ? fused_grid(program, program_json.value("n", int64_t{1024})) : fused_cpu_grid();
        for (const auto& g : grid) points.push_back({fused.name, g});
        source = [&](const Point& pt) {
          return opt.target == "cuda" ? generate_fused_cuda(program, pt.params, "fused row program for " + task.name)
                                      : generate_fused_cpp(program, pt.params, "fused row program for " + task.name);
        };
      }
    }
  } else {
    task = loaded->task;
    const auto templates = templates_for(task, opt.target);
    if (templates.empty()) return make_error(no_native_template(task, opt.target), kNativeTemplatesHint);
    const auto manifest = read_file(task.manifest);
    const auto reference = read_file(task.reference);
    if (!manifest || !reference) return make_error("the task's files cannot be read: " + task.manifest.string());
    material = *manifest + '\0' + *reference + '\0' + opt.target + '\0' + backend->describe();
    for (const auto* t2 : templates) {
      material += '\0' + t2->name + std::to_string(t2->version);
      for (auto& g : t2->grid(task)) points.push_back({t2->name, g});
    }
    source = [&, templates](const Point& pt) {
      for (const auto* t2 : templates)
        if (t2->name == pt.tmpl) return t2->generate(task, pt.params);
      return std::string("#error no template ") + pt.tmpl + "\n";
    };
  }
  auto store_r = Store::open(Store::default_path());
  if (!store_r) return Unexpected{store_r.error()};
  Store& store = **store_r;
  const fs::path cache_file = cache_dir() / "tuner" / (hash_hex(material).substr(0, 24) + ".json");

  const std::string run = opt.resume.empty() ? new_run_id() : opt.resume;
  const std::string stamp = run.substr(0, run.rfind('-'));  // the run's UTC time, for the cache entry
  if (opt.out_dir.empty()) opt.out_dir = fs::path("kfab-runs") / run;
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  int64_t seq = 0;
  // On --resume: the points the run evaluated before it stopped, by their source's hash (the same
  // template and point generate the same source), with the step that recorded each.
  std::map<std::string, Store::Step> done;
  if (opt.resume.empty()) {
    if (auto ok = store.create_run(run, task.name, fs::absolute(opt.task).string(), opt.target, "tuner", "tune",
                                   dump_json(json{{"budget", opt.budget},
                                                  {"out_dir", fs::absolute(opt.out_dir).string()},
                                                  {"queue", opt.remote ? opt.remote->where() : json()}}));
        !ok)
      return Unexpected{ok.error()};
  } else {
    auto steps = store.run_steps(run);
    if (!steps) return Unexpected{steps.error()};
    for (const auto& st : *steps) {
      seq = std::max(seq, st.seq);
      if (st.role == "tuner" && !st.candidate_hash.empty()) done.emplace(st.candidate_hash, st);
    }
    (void)store.set_run_status(run, "running");
  }
  if (opt.remote) opt.remote->begin_run(run);
  say(fmt::format("run {} (built-in tuner, no LLM): {} parameter point(s) for {}{}", run, points.size(),
                  kb ? "a traced KernelBench Model" : "op class " + task.op_class,
                  opt.resume.empty() ? "" : fmt::format("; resumed, {} evaluated before it stopped", done.size())));

  int evaluated = 0, resumed = 0;
  auto record = [&](const fs::path& file, const Verdict& v, const std::string& role, const std::string& detail) -> Expected<void> {
    auto src = read_file(file);
    auto id = store.record_evaluation(task, src ? *src : "", v);
    Store::Step s;
    s.seq = ++seq;
    s.role = role;
    s.candidate_hash = v.candidate_hash;
    s.candidate_path = fs::absolute(file).string();
    if (id) s.evaluation_id = *id;
    s.disposition = std::string(disposition_name(v.disposition));
    s.speedup = v.speedup;
    s.detail = detail;
    return store.add_step(run, s);
  };

  // Passing points, fastest first once the search is over; the cache holds the one that passed the
  // final check.
  std::vector<std::pair<double, Point>> ranked;
  bool cached = false;
  if (!opt.fresh && opt.resume.empty())
    if (auto text = read_file(cache_file)) {
      try {
        const json c = json::parse(*text);
        Point pt{c.at("template").get<std::string>(), c.at("params").get<TemplateParams>()};
        bool known = false;
        for (const auto& q : points) known = known || q.tmpl == pt.tmpl;
        if (known) {
          ranked.push_back({c.value("speedup", 0.0), pt});
          cached = true;
          say(fmt::format("cached: {} ({}), {:.2f}x when searched on {}", pt.tmpl, format_params(pt.params), ranked[0].first,
                          c.value("measured_at", std::string("?"))));
        }
      } catch (const json::exception&) {
        ranked.clear();  // a damaged entry: search again
      }
    }
  std::string stopped = cached ? "cached result (--fresh searches again)" : "every parameter point evaluated";
  json searched = json::array();  // every point of the search: its verdict in brief (the trajectory)
  if (!cached) {
    // The search: short protocol (2 seeds, tuning shapes, brief timing); the winner gets the full one.
    EvalOptions quick = opt.eval;
    quick.seeds = 2;
    quick.heldout = false;
    quick.min_time_s = opt.target == "cpu" ? 0.15 : 0.03;
    quick.progress = nullptr;
    quick.compile_baseline = false;  // torch.compile is timed for the winner only
    // Every point's source is written and compiled first, several compilers at once (the builds
    // land in the compile cache, so the evaluations below find them there).
    std::map<std::string, int> per_template;
    std::vector<fs::path> files, to_build;
    std::vector<std::string> hashes;
    for (const auto& pt : points) {
      if (static_cast<int>(files.size()) >= opt.budget) break;
      files.push_back(opt.out_dir / fmt::format("{}_{:02d}{}", pt.tmpl, per_template[pt.tmpl]++, ext));
      const std::string src = source(pt);
      hashes.push_back(hash_hex(src));
      if (auto ok = write_file_atomic(files.back(), src); !ok) return Unexpected{ok.error()};
      if (!done.count(hashes.back())) to_build.push_back(files.back());
    }
    if (!opt.remote) {
      const size_t workers = std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 1, 8);
      say(fmt::format("compiling {} parameter point(s), {} at a time", to_build.size(), std::min(workers, to_build.size())));
      std::atomic<size_t> next{0};
      std::vector<std::thread> pool;
      for (size_t w = 0; w < std::min(workers, to_build.size()); ++w)
        pool.emplace_back([&] {
          for (size_t k = next++; k < to_build.size(); k = next++) (void)backend->build(to_build[k]);  // failures resurface in evaluate()
        });
      for (auto& t : pool) t.join();
    }
    // Spread over devices: every point not evaluated before is evaluated first, an evaluator per
    // device taking the next point as it finishes one; the verdicts are then taken in point order.
    std::vector<std::optional<Expected<Verdict>>> spread(files.size());
    if (opt.remote) {
      // Elsewhere: every point not evaluated before goes to the queue at once, for its workers to share.
      std::vector<size_t> todo;
      std::vector<fs::path> sent;
      for (size_t k = 0; k < files.size() && k < points.size(); ++k)
        if (!done.count(hashes[k])) {
          todo.push_back(k);
          sent.push_back(files[k]);
        }
      say(fmt::format("evaluating {} parameter point(s) on {}", todo.size(), opt.remote->describe()));
      auto got = opt.remote->evaluate_all(sent, quick, true);
      if (!got) return Unexpected{got.error()};
      for (size_t i = 0; i < todo.size(); ++i) spread[todo[i]] = std::move((*got)[i]);
    } else if (opt.devices.size() > 1) {
      std::vector<size_t> todo;
      for (size_t k = 0; k < files.size() && k < points.size(); ++k)
        if (!done.count(hashes[k])) todo.push_back(k);
      say(fmt::format("evaluating {} parameter point(s) on devices {}", todo.size(), fmt::join(opt.devices, ",")));
      std::atomic<size_t> next{0};
      std::mutex say_mu;
      auto work = [&](size_t slot, Evaluator& ev) {
        for (size_t i = next++; i < todo.size(); i = next++) {
          const size_t k = todo[i];
          ev.set_options(pinned(quick, slot));
          spread[k] = ev.evaluate(files[k]);
          std::lock_guard<std::mutex> lock(say_mu);
          if (*spread[k])
            say(fmt::format("  {} ({}) on device {}: {}", points[k].tmpl, format_params(points[k].params), opt.devices[slot],
                            disposition_name((*spread[k])->disposition)));
        }
      };
      std::vector<std::unique_ptr<Evaluator>> others;
      std::vector<std::thread> threads;
      for (size_t slot = 1; slot < opt.devices.size(); ++slot) {
        others.push_back(std::make_unique<Evaluator>(*loaded, opt.target, pinned(quick, slot)));
        others.back()->keep_workers();
      }
      for (size_t slot = 1; slot < opt.devices.size(); ++slot)
        threads.emplace_back(work, slot, std::ref(*others[slot - 1]));
      work(0, evaluator);
      for (auto& t : threads) t.join();
    }
    for (size_t k = 0; k < points.size(); ++k) {
      const Point& pt = points[k];
      if (evaluated >= opt.budget || k >= files.size()) {
        stopped = "parameter-point budget spent";
        break;
      }
      const fs::path& file = files[k];
      if (auto d = done.find(hashes[k]); d != done.end()) {  // evaluated before the run stopped
        const Store::Step& st = d->second;
        ++evaluated;
        ++resumed;
        say(fmt::format("{} ({}): {}{} (evaluated before the run stopped)", pt.tmpl, format_params(pt.params), st.disposition,
                        st.speedup ? fmt::format(" {:.2f}x", *st.speedup) : ""));
        if (st.disposition == "passed" && st.speedup) ranked.push_back({*st.speedup, pt});
        json copy = json::array();
        double wall = 0.0;
        if (st.evaluation_id)
          if (auto vj = store.evaluation_verdict(*st.evaluation_id)) {
            wall = vj->value("wall_s", 0.0);
            if (vj->contains("shapes") && (*vj)["shapes"].is_array())
              for (const auto& sh : (*vj)["shapes"])
                if (sh.contains("percent_of_copy_bandwidth") && sh["percent_of_copy_bandwidth"].is_number() && !sh.value("heldout", false))
                  copy.push_back(sh["percent_of_copy_bandwidth"]);
          }
        searched.push_back({{"template", pt.tmpl}, {"params", pt.params}, {"disposition", st.disposition},
                            {"speedup", st.speedup ? json(*st.speedup) : json()}, {"percent_of_copy_bandwidth", copy}, {"wall_s", wall},
                            {"detail", st.disposition == "passed" ? std::string() : printable(st.detail, 300)}, {"resumed", true}});
        continue;
      }
      auto v = spread[k] ? std::move(*spread[k]) : evaluate(file, quick);
      if (!v) return Unexpected{v.error()};
      ++evaluated;
      say(fmt::format("{} ({}): {}{}", pt.tmpl, format_params(pt.params), disposition_name(v->disposition),
                      v->speedup ? fmt::format(" {:.2f}x", *v->speedup) : (v->passed() ? "" : ": " + printable(v->detail, 300))));
      if (auto ok = record(file, *v, "tuner", pt.tmpl + " (" + format_params(pt.params) + "): " + v->detail); !ok)
        return Unexpected{ok.error()};
      if (v->passed() && v->speedup) ranked.push_back({*v->speedup, pt});
      json copy = json::array();
      for (const auto& sh : v->shapes)
        if (auto it = sh.extra.find("percent_of_copy_bandwidth"); it != sh.extra.end() && it->is_number()) copy.push_back(*it);
      searched.push_back({{"template", pt.tmpl}, {"params", pt.params}, {"disposition", disposition_name(v->disposition)},
                          {"speedup", v->speedup ? json(*v->speedup) : json()}, {"percent_of_copy_bandwidth", copy}, {"wall_s", v->wall_s},
                          {"detail", v->passed() ? std::string() : printable(v->detail, 300)}});
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  }
  json result = {{"run", run}, {"out_dir", fs::absolute(opt.out_dir).string()}, {"candidates", evaluated}, {"stopped_because", stopped},
                 {"points", searched}};
  if (!opt.resume.empty()) result["resumed_points"] = resumed;  // taken from the store, not evaluated again
  if (ranked.empty()) {
    (void)store.set_run_status(run, "failed");
    result["best"] = {{"candidate", nullptr}, {"disposition", "none"}, {"speedup", nullptr}};
    result["steps"] = seq;
    return result;
  }
  // The winner, on every shape with the full protocol; where it fails (a held-out shape), the
  // runners-up in order (at most three in all).
  const fs::path best_file = opt.out_dir / ("best" + ext);
  EvalOptions full = opt.eval;
  full.heldout = true;
  full.end_to_end = kb;  // the winner's exported ModelNew, timed end to end beside it
  std::optional<Verdict> final_v;
  Point chosen;
  int attempts = 0;  // final checks: 1 when the search's winner held on every shape
  for (size_t k = 0; k < ranked.size() && k < 3; ++k) {
    const Point& pt = ranked[k].second;
    ++attempts;
    if (auto ok = write_file_atomic(best_file, source(pt)); !ok) return Unexpected{ok.error()};
    say(fmt::format("final{}: {} ({}) on every shape, held-out ones included", k == 0 ? "" : " (runner-up " + std::to_string(k) + ")",
                    pt.tmpl, format_params(pt.params)));
    auto v = evaluate(best_file, full);
    if (!v) return Unexpected{v.error()};
    if (auto ok = record(best_file, *v, "final", v->detail); !ok) return Unexpected{ok.error()};
    final_v = *v;
    chosen = pt;
    if (v->passed()) {
      if (!cached) {
        json entry = {{"template", pt.tmpl}, {"params", pt.params}, {"speedup", ranked[k].first},
                      {"measured_at", stamp}, {"device", backend->describe()}};
        if (kb) entry["program"] = program_json;
        (void)write_file_atomic(cache_file, dump_json(entry, 2));
      }
      break;
    }
    say(fmt::format("  {}: {}", disposition_name(v->disposition), printable(v->detail, 300)));
  }
  const Verdict& v = *final_v;
  (void)store.set_run_status(run, v.passed() ? "finished" : "failed");
  result["best"] = {{"candidate", fs::absolute(best_file).string()}, {"disposition", disposition_name(v.disposition)},
                    {"speedup", v.speedup ? json(*v.speedup) : json()}, {"detail", v.detail}};
  result["tuner"] = {{"template", chosen.tmpl}, {"params", chosen.params}, {"cached", cached}};
  if (kb) result["tuner"]["program"] = program_json.value("kind", program_json.value("formula", std::string()));
  result["steps"] = seq;
  result["final_attempts"] = attempts;
  result["verdict"] = v.to_json();
  return result;
}

}  // namespace kfab
