#include "tuner/tuner.h"

#include <fmt/format.h>

#include <ctime>
#include <random>

#include "backends/backend.h"
#include "core/hash.h"
#include "core/paths.h"
#include "store/store.h"
#include "tuner/templates.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

Expected<json> tune(const TuneOptions& in) {
  TuneOptions opt = in;
  auto say = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  if (opt.task.extension() == ".py")
    return make_error("the built-in tuner takes native tasks (task.toml) for now; KernelBench-format tasks are an open issue",
                      "use --llm PROVIDER:MODEL for " + opt.task.string());
  auto task = load_task(opt.task);
  if (!task) return Unexpected{task.error()};
  auto backend = make_backend(opt.target);
  if (!backend) return make_error("unknown target " + opt.target);
  const auto templates = templates_for(*task, opt.target);
  if (templates.empty())
    return make_error(fmt::format("the built-in tuner has no template for op class \"{}\" on {}", task->op_class, opt.target),
                      "templates on cpu: softmax, log_softmax, rms_norm and layer_norm (with [op_params] eps), cumsum, permute "
                      "(batched transpose), matmul, reduction (a sum over the middle dimension); or use --llm");
  auto store_r = Store::open(Store::default_path());
  if (!store_r) return Unexpected{store_r.error()};
  Store& store = **store_r;

  // The cache key: what the task computes, where, and the templates' versions.
  const auto manifest = read_file(task->manifest);
  const auto reference = read_file(task->reference);
  if (!manifest || !reference) return make_error("the task's files cannot be read: " + task->manifest.string());
  std::string material = *manifest + '\0' + *reference + '\0' + opt.target + '\0' + backend->describe();
  for (const auto* t : templates) material += '\0' + t->name + std::to_string(t->version);
  const fs::path cache_file = cache_dir() / "tuner" / (hash_hex(material).substr(0, 24) + ".json");

  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
  const std::string run = fmt::format("{}-{:04x}", stamp, std::random_device{}() & 0xffff);
  if (opt.out_dir.empty()) opt.out_dir = fs::path("kfab-runs") / run;
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (auto ok = store.create_run(run, task->name, fs::absolute(opt.task).string(), opt.target, "tuner", "tune",
                                 json{{"budget", opt.budget}, {"out_dir", fs::absolute(opt.out_dir).string()}}.dump());
      !ok)
    return Unexpected{ok.error()};
  say("run " + run + " (built-in tuner, no LLM): " + std::to_string(templates.size()) + " template(s) for " + task->op_class);

  int64_t seq = 0;
  int evaluated = 0;
  auto record = [&](const fs::path& file, const Verdict& v, const std::string& role, const std::string& detail) -> Expected<void> {
    auto src = read_file(file);
    auto id = store.record_evaluation(*task, src ? *src : "", v);
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

  const KernelTemplate* best_t = nullptr;
  TemplateParams best_p;
  double best_speedup = 0.0;
  bool cached = false;
  if (!opt.fresh)
    if (auto text = read_file(cache_file)) {
      try {
        const json c = json::parse(*text);
        for (const auto* t : templates)
          if (t->name == c.at("template").get<std::string>()) best_t = t;
        best_p = c.at("params").get<TemplateParams>();
        best_speedup = c.value("speedup", 0.0);
        cached = best_t != nullptr;
        if (cached) say(fmt::format("cached: {} ({}), {:.2f}x when searched on {}", best_t->name, format_params(best_p), best_speedup,
                                    c.value("measured_at", std::string("?"))));
      } catch (const json::exception&) {
        best_t = nullptr;  // a damaged entry: search again
      }
    }
  std::string stopped = cached ? "cached result (--fresh searches again)" : "every parameter point evaluated";
  if (!cached) {
    // The search: short protocol (2 seeds, tuning shapes, brief timing); the winner gets the full one.
    EvalOptions quick = opt.eval;
    quick.seeds = 2;
    quick.heldout = false;
    quick.min_time_s = opt.target == "cpu" ? 0.15 : 0.03;
    quick.progress = nullptr;
    for (const auto* t : templates) {
      const auto grid = t->grid(*task);
      for (size_t i = 0; i < grid.size(); ++i) {
        if (evaluated >= opt.budget) {
          stopped = "parameter-point budget spent";
          break;
        }
        const fs::path file = opt.out_dir / fmt::format("{}_{:02d}{}", t->name, i, opt.target == "cuda" ? ".cu" : ".cpp");
        if (auto ok = write_file_atomic(file, t->generate(*task, grid[i])); !ok) return Unexpected{ok.error()};
        Evaluator ev(*backend, quick);
        auto v = ev.evaluate(*task, file);
        if (!v) return Unexpected{v.error()};
        ++evaluated;
        say(fmt::format("{} ({}): {}{}", t->name, format_params(grid[i]), disposition_name(v->disposition),
                        v->speedup ? fmt::format(" {:.2f}x", *v->speedup) : ""));
        if (auto ok = record(file, *v, "tuner", t->name + " (" + format_params(grid[i]) + "): " + v->detail); !ok)
          return Unexpected{ok.error()};
        if (v->passed() && v->speedup && *v->speedup > best_speedup) {
          best_speedup = *v->speedup;
          best_t = t;
          best_p = grid[i];
        }
      }
    }
  }
  json result = {{"run", run}, {"out_dir", fs::absolute(opt.out_dir).string()}, {"candidates", evaluated}, {"stopped_because", stopped}};
  if (best_t == nullptr) {
    (void)store.set_run_status(run, "failed");
    result["best"] = {{"candidate", nullptr}, {"disposition", "none"}, {"speedup", nullptr}};
    result["steps"] = seq;
    return result;
  }
  // The winner, on every shape with the full protocol.
  const fs::path best_file = opt.out_dir / (std::string("best") + (opt.target == "cuda" ? ".cu" : ".cpp"));
  if (auto ok = write_file_atomic(best_file, best_t->generate(*task, best_p)); !ok) return Unexpected{ok.error()};
  say("final: " + best_t->name + " (" + format_params(best_p) + ") on every shape, held-out ones included");
  EvalOptions full = opt.eval;
  full.heldout = true;
  Evaluator ev(*backend, full);
  auto v = ev.evaluate(*task, best_file);
  if (!v) return Unexpected{v.error()};
  if (auto ok = record(best_file, *v, "final", v->detail); !ok) return Unexpected{ok.error()};
  if (!cached && v->passed())
    (void)write_file_atomic(cache_file, json{{"template", best_t->name}, {"params", best_p}, {"speedup", best_speedup},
                                             {"measured_at", stamp}, {"device", backend->describe()}}.dump(2));
  (void)store.set_run_status(run, v->passed() ? "finished" : "failed");
  result["best"] = {{"candidate", fs::absolute(best_file).string()}, {"disposition", disposition_name(v->disposition)},
                    {"speedup", v->speedup ? json(*v->speedup) : json()}, {"detail", v->detail}};
  result["tuner"] = {{"template", best_t->name}, {"params", best_p}, {"cached", cached}};
  result["steps"] = seq;
  result["verdict"] = v->to_json();
  return result;
}

}  // namespace kfab
