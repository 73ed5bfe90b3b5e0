#include "tuner/tuner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "backends/backend.h"
#include "backends/target.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/stamp.h"
#include "core/text.h"
#include "store/run.h"
#include "store/store.h"
#include "eval/torch_harness.h"
#include "tuner/fused.h"
#include "tuner/precision.h"
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

}  // namespace

Expected<TracedPlan> plan_traced(const json& traced, const std::string& target) {
  if (!traced.value("supported", false)) return make_error(traced.value("reason", std::string("?")), kTracedHint);
  TracedPlan plan;
  if (const std::string kind = traced.value("kind", std::string()); !kind.empty()) {
    const Printer* printer = printer_for(target);
    const auto it = printer != nullptr ? printer->dedicated.find(kind) : std::map<std::string, std::string>::const_iterator{};
    plan.dedicated = printer == nullptr || it == printer->dedicated.end() ? nullptr : template_named(it->second);
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
  if (traced.contains("stages")) {
    auto staged = parse_plan(traced, target);
    if (!staged) return Unexpected{staged.error()};
    plan.plan = std::move(*staged);
    const Printer* printer = printer_for(target);
    if (printer == nullptr) return make_error("the built-in tuner generates no kernels for " + target, kTracedHint);
    const bool any_gemm = std::any_of(plan.plan.stages.begin(), plan.plan.stages.end(), [](const PlanStage& s) { return s.is_gemm; });
    plan.template_name = (any_gemm ? printer->gemm_template() : printer->rows_template()).name;
    return plan;
  }
  std::vector<PInput> ins;
  std::vector<std::string> outs;
  plan.is_gemm = traced.contains("gemm");
  try {
    for (const auto& i : traced.at("inputs")) {
      const std::string c = i.at("cls").get<std::string>();
      ins.push_back({i.at("name").get<std::string>(), c == "E" ? VClass::E : c == "C" ? VClass::C : c == "R" ? VClass::R : VClass::K,
                     i.value("integer", false), i.value("i32", false), i.value("per_channel", false), i.value("pool", 1)});
      plan.gemm.bind.push_back(i.value("tensor", static_cast<int>(plan.gemm.bind.size())));
    }
    outs = traced.at("outputs").get<std::vector<std::string>>();
    if (plan.is_gemm) {
      const json& g = traced.at("gemm");
      plan.gemm.a = g.at("a").get<int>();
      plan.gemm.b = g.at("b").get<int>();
      plan.gemm.trans_b = g.at("trans_b").get<bool>();
      plan.gemm.trans_a = g.value("trans_a", false);
      plan.gemm.batched = g.value("batched", false);
      plan.gemm.pool = g.value("pool", 1);
      plan.gemm.pool_max = g.value("pool_max", false);
      plan.gemm.m = g.value("m", int64_t{0});
      plan.gemm.n = g.value("n", int64_t{0});
      plan.gemm.k = g.value("k", int64_t{0});
      plan.gemm.batch = g.value("batch", int64_t{1});
      if (plan.gemm.pool < 1) return make_error("the traced program is malformed: gemm.pool < 1");
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
  plan.program.groups = traced.value("groups", 1);
  if (plan.program.groups < 1 || (plan.program.groups > 1 && !plan.is_gemm))
    return make_error("the traced program is malformed: groups of columns are taken after a GEMM only");
  if (plan.program.groups > 1)
    for (const auto& n : plan.program.nodes)
      if (is_col_reduction(n.op)) return make_error("the traced program is malformed: column reductions in a program whose rows are groups");
  for (const auto& in : plan.program.inputs)
    if (in.per_channel && (plan.program.groups <= 1 || in.cls != VClass::C))
      return make_error("the traced program is malformed: a per-channel input " + in.name + " outside a grouped program");
  const Printer* printer = printer_for(target);
  if (printer == nullptr) return make_error("the built-in tuner generates no kernels for " + target, kTracedHint);
  plan.template_name = (plan.is_gemm ? printer->gemm_template() : printer->rows_template()).name;
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

namespace {

struct Point {
  std::string tmpl;
  TemplateParams params;
};

/// What a tune searches: the (template, parameter point) pairs, the source each generates, and the
/// cache key's material (what the task computes, where, with which templates). Not moved once
/// filled: `source` refers to its members.
struct SearchSpace {
  Task task;
  std::vector<Point> points;
  std::function<std::string(const Point&)> source;
  std::string material;
  json program_json;  ///< a KernelBench task's traced program (kept in the cache: a rerun needs no trace)
  Program program;
  GemmProgram gemm_program;
  Plan plan;  ///< a plan of several programs (tuner/plan.h), where the trace made one
  /// The tuner's cache entry for this task here (the winner, a KernelBench Model's traced program).
  fs::path cache_file() const { return cache_dir() / "tuner" / (hash_hex(material).substr(0, 24) + ".json"); }
};

/// The element type of a KernelBench task's traced program at `--dtype` (f32, f16 or bf16): F32 for f32; F16
/// or BF16 where the program is a plain matrix product, which the 16-bit tensor-core GEMMs take (the
/// Model's tensors all in that type); an Error for anything else, whose kernels read and write f32 only.
Expected<DType> half_precision(const std::string& dtype, const TracedPlan& plan, const fs::path& task, const std::string& target) {
  if (dtype == "f32") return DType::F32;
  const auto t = parse_dtype(dtype);
  if (!t || (*t != DType::F16 && *t != DType::BF16)) return make_error("--dtype " + dtype + ": the built-in tuner takes f32, f16 or bf16");
  if (target != "cuda")
    return make_error(fmt::format("the built-in tuner has no {} template on {}: its 16-bit products run on cuda's tensor cores", dtype, target),
                      "run it at --dtype f32, or with --target cuda");
  GemmProgram gp = plan.gemm;
  gp.epilogue = plan.program;
  if (plan.is_gemm && plan.plan.stages.empty() && gp.tensors == 2 && !gp.pool_max && product_is_output(gp, product_input(gp))) return *t;
  return make_error(fmt::format("the built-in tuner has no {} template for {}: at f16 and bf16 it takes a plain matrix product "
                                "(16-bit tensor cores, fp32 accumulation); its epilogues and row programs read and write f32",
                                dtype, task.filename().string()),
                    "run it at --dtype f32, or use --llm PROVIDER:MODEL");
}

/// A KernelBench Model: traced (or its trace taken from the cache), then a dedicated template of a
/// single-op Model, a GEMM with its epilogue, or a fused row program.
Expected<void> traced_space(SearchSpace& sp, const TuneOptions& opt, const LoadedTask& loaded, const Backend& backend,
                            const std::function<void(const std::string&)>& say) {
  const Printer* printer = printer_for(opt.target);
  if (printer == nullptr)
    return make_error("the built-in tuner generates kernels for KernelBench-format tasks on " + printer_targets(),
                      "use --target " + printer_targets() + ", or --llm PROVIDER:MODEL for " + opt.task.string());
  const KernelTemplate& fused = printer->rows_template();
  const KernelTemplate& gemm = printer->gemm_template();
  auto text = read_file(opt.task);
  if (!text) return make_error("cannot read " + opt.task.string());
  sp.task = loaded.task;
  sp.material = *text + '\0' + opt.target + '\0' + backend.describe() + '\0' + fused.name + std::to_string(fused.version) + '\0' +
                gemm.name + std::to_string(gemm.version) + '\0' + "plan" + std::to_string(kPlanVersion);
  // single-op tasks a program cannot state go to a dedicated template (the trace's "kind")
  for (const auto& [kind, name] : printer->dedicated)
    if (const auto* t2 = template_named(name)) sp.material += '\0' + name + std::to_string(t2->version);
  // the cache may hold the traced program; otherwise the Python worker traces the Model
  const fs::path cache_file = sp.cache_file();
  if (!opt.fresh)
    if (auto c = read_file(cache_file)) try {
        sp.program_json = json::parse(*c).at("program");
      } catch (const json::exception&) {
        sp.program_json = nullptr;
      }
  if (sp.program_json.is_null() || !sp.program_json.is_object()) {
    say("tracing the Model (torch make_fx) to find a fusible program");
    std::unique_ptr<TorchInspector> own;
    if (opt.tracer == nullptr) own = std::make_unique<TorchInspector>(opt.target, opt.eval);
    auto tr = (opt.tracer != nullptr ? *opt.tracer : *own).trace(opt.task);
    if (!tr) return Unexpected{tr.error()};
    sp.program_json = *tr;
  }
  if (opt.eval.dtype != "f32") sp.material += std::string(1, '\0') + "dtype " + opt.eval.dtype;  // another task's kernels
  auto plan = plan_traced(sp.program_json, opt.target);
  if (!plan)
    return make_error("the built-in tuner has no template for " + opt.task.filename().string() + ": " + plan.error().message,
                      plan.error().hint);
  const auto dtype = half_precision(opt.eval.dtype, *plan, opt.task, opt.target);
  if (!dtype) return Unexpected{dtype.error()};
  if (plan->dedicated != nullptr) {
    const KernelTemplate* dedicated = plan->dedicated;
    say("the Model is one " + plan->kind + ": template " + dedicated->name);
    // the numbers the template needs beyond the tensors (a group count, eps), from the trace
    if (!plan->op_params.empty()) {
      for (const auto& [k, v] : plan->op_params) sp.task.op_params[k] = v;
      sp.task.op_class = plan->kind;
    }
    for (const auto& g : dedicated->grid(sp.task)) sp.points.push_back({dedicated->name, g});
    sp.source = [&sp, dedicated](const Point& pt) { return dedicated->generate(sp.task, pt.params); };
    return {};
  }
  if (!plan->plan.stages.empty()) {
    sp.plan = std::move(plan->plan);
    say(fmt::format("a plan of {} programs:\n{}", sp.plan.stages.size(), sp.program_json.value("formula", std::string())));
    const std::string name = plan->template_name;
    for (const auto& g : plan_grid(*printer, sp.plan)) sp.points.push_back({name, g});
    sp.source = [&sp, printer](const Point& pt) { return generate_plan(*printer, sp.plan, pt.params, "plan for " + sp.task.name); };
    return {};
  }
  sp.program = std::move(plan->program);
  sp.gemm_program = std::move(plan->gemm);
  sp.gemm_program.dtype = *dtype;
  say(std::string(plan->is_gemm ? "a GEMM (" + gemm.name + "), then the epilogue" : "program") + ":\n" +
      sp.program_json.value("formula", std::string()));
  if (plan->is_gemm) {
    sp.gemm_program.epilogue = sp.program;
    for (const auto& g : printer->gemm_grid(sp.gemm_program)) sp.points.push_back({gemm.name, g});
    sp.source = [&sp, printer](const Point& pt) { return printer->gemm(sp.gemm_program, pt.params, "GEMM + epilogue for " + sp.task.name); };
  } else {
    for (const auto& g : printer->rows_grid(sp.program, sp.program_json.value("n", int64_t{1024}))) sp.points.push_back({fused.name, g});
    sp.source = [&sp, printer](const Point& pt) { return printer->rows(sp.program, pt.params, "fused row program for " + sp.task.name); };
  }
  return {};
}

/// A native task: every template that applies to its op class on the target.
Expected<void> native_space(SearchSpace& sp, const TuneOptions& opt, const LoadedTask& loaded, const Backend& backend) {
  sp.task = loaded.task;
  const auto templates = templates_for(sp.task, opt.target);
  if (templates.empty()) return make_error(no_native_template(sp.task, opt.target), kNativeTemplatesHint);
  const auto manifest = read_file(sp.task.manifest);
  const auto reference = read_file(sp.task.reference);
  if (!manifest || !reference) return make_error("the task's files cannot be read: " + sp.task.manifest.string());
  sp.material = *manifest + '\0' + *reference + '\0' + opt.target + '\0' + backend.describe();
  for (const auto* t2 : templates) {
    sp.material += '\0' + t2->name + std::to_string(t2->version);
    for (auto& g : t2->grid(sp.task)) sp.points.push_back({t2->name, g});
  }
  sp.source = [&sp, templates](const Point& pt) {
    for (const auto* t2 : templates)
      if (t2->name == pt.tmpl) return t2->generate(sp.task, pt.params);
    return std::string("#error no template ") + pt.tmpl + "\n";
  };
  return {};
}

/// The cached winner of an earlier search of this task here, where its template is still searched.
std::optional<std::pair<double, Point>> cached_winner(const fs::path& cache_file, const std::vector<Point>& points,
                                                      const std::function<void(const std::string&)>& say) {
  auto text = read_file(cache_file);
  if (!text) return std::nullopt;
  try {
    const json c = json::parse(*text);
    Point pt{c.at("template").get<std::string>(), c.at("params").get<TemplateParams>()};
    if (std::none_of(points.begin(), points.end(), [&](const Point& q) { return q.tmpl == pt.tmpl; })) return std::nullopt;
    const double speedup = c.value("speedup", 0.0);
    say(fmt::format("cached: {} ({}), {:.2f}x when searched on {}", pt.tmpl, format_params(pt.params), speedup,
                    c.value("measured_at", std::string("?"))));
    return std::pair<double, Point>{speedup, pt};
  } catch (const json::exception&) {
    return std::nullopt;  // a damaged entry: search again
  }
}

/// The built-in tuner as a Proposer: every parameter point at once (up to the budget), written and
/// compiled first, several compilers at once; a point evaluated before the run stopped is taken from
/// the store, not evaluated again.
class TemplateTuner final : public Proposer {
 public:
  TemplateTuner(const TuneOptions& opt, const SearchSpace& sp, Backend& backend, std::string ext,
                std::function<void(const std::string&)> say)
      : opt_(opt), sp_(sp), backend_(backend), ext_(std::move(ext)), say_(std::move(say)) {}

  Expected<std::vector<Proposal>> propose(Run& run) override {
    if (proposed_) return std::vector<Proposal>{};
    proposed_ = true;
    // the points the run evaluated before it stopped, by their source's hash (the same template and
    // point generate the same source), with the step that recorded each
    std::map<std::string, Store::Step> done;
    for (const auto& st : run.earlier())
      if (st.role == "tuner" && !st.candidate_hash.empty()) done.emplace(st.candidate_hash, st);
    std::map<std::string, int> per_template;
    std::vector<fs::path> to_build;
    std::vector<Proposal> out;
    const size_t n = std::min(sp_.points.size(), static_cast<size_t>(std::max(opt_.budget, 0)));
    searched_.assign(n, json());
    if (n < sp_.points.size()) stopped_ = "parameter-point budget spent";
    for (size_t k = 0; k < n; ++k) {
      const Point& pt = sp_.points[k];
      const fs::path file = run.out_dir() / fmt::format("{}_{:02d}{}", pt.tmpl, per_template[pt.tmpl]++, ext_);
      const std::string src = sp_.source(pt);
      if (auto ok = write_file_atomic(file, src); !ok) return Unexpected{ok.error()};
      if (auto d = done.find(hash_hex(src)); d != done.end()) {
        taken_from_store(run, k, d->second);
        continue;
      }
      to_build.push_back(file);
      Proposal p;
      p.role = "tuner";
      p.file = file;
      p.tag = k;
      out.push_back(std::move(p));
    }
    if (!opt_.remote) {
      const size_t workers = std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 1, 8);
      say_(fmt::format("compiling {} parameter point(s), {} at a time", to_build.size(), std::min(workers, to_build.size())));
      std::atomic<size_t> next{0};
      std::vector<std::thread> pool;
      for (size_t w = 0; w < std::min(workers, to_build.size()); ++w)
        pool.emplace_back([&] {
          for (size_t k = next++; k < to_build.size(); k = next++) (void)backend_.build(to_build[k]);  // failures resurface in evaluate()
        });
      for (auto& t : pool) t.join();
    }
    return out;
  }

  std::string detail(const Proposal& p, const Verdict& v) const override {
    const Point& pt = sp_.points[p.tag];
    return pt.tmpl + " (" + format_params(pt.params) + "): " + v.detail;
  }

  Expected<void> observe(Run&, const Proposal& p, const Verdict* v, const Store::Step&) override {
    const Point& pt = sp_.points[p.tag];
    ++evaluated_;
    say_(fmt::format("{} ({}): {}{}", pt.tmpl, format_params(pt.params), disposition_name(v->disposition),
                     v->speedup ? fmt::format(" {:.2f}x", *v->speedup) : (v->passed() ? "" : ": " + printable(v->detail, 300))));
    const double worst = worst_tolerance_used(*v);
    const std::string refused = v->passed() ? precision_refusal(pt.params, worst) : std::string();
    if (!refused.empty()) say_("  not kept: " + refused);
    if (v->passed() && v->speedup && refused.empty()) ranked_.push_back({*v->speedup, pt});
    json copy = json::array();
    for (const auto& sh : v->shapes)
      if (auto it = sh.extra.find("percent_of_copy_bandwidth"); it != sh.extra.end() && it->is_number()) copy.push_back(*it);
    searched_[p.tag] = {{"template", pt.tmpl}, {"params", pt.params}, {"disposition", disposition_name(v->disposition)},
                        {"speedup", v->speedup ? json(*v->speedup) : json()}, {"percent_of_copy_bandwidth", copy}, {"wall_s", v->wall_s},
                        {"detail", v->passed() ? refused : printable(v->detail, 300)}};
    if (v->passed()) searched_[p.tag]["tolerance_used"] = std::isfinite(worst) ? json(worst) : json();
    if (!refused.empty()) searched_[p.tag]["kept"] = false;
    return {};
  }

  std::string stopped() const override { return stopped_; }
  /// Passing points, fastest first.
  std::vector<std::pair<double, Point>> ranked() const {
    auto r = ranked_;
    std::stable_sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    return r;
  }
  json searched() const {
    json out = json::array();
    for (const auto& s : searched_)
      if (!s.is_null()) out.push_back(s);
    return out;
  }
  int evaluated() const { return evaluated_; }
  int resumed() const { return resumed_; }

 private:
  void taken_from_store(Run& run, size_t k, const Store::Step& st) {
    const Point& pt = sp_.points[k];
    ++evaluated_;
    ++resumed_;
    say_(fmt::format("{} ({}): {}{} (evaluated before the run stopped)", pt.tmpl, format_params(pt.params), st.disposition,
                     st.speedup ? fmt::format(" {:.2f}x", *st.speedup) : ""));
    json copy = json::array();
    double wall = 0.0;
    double worst = std::numeric_limits<double>::infinity();
    if (st.evaluation_id)
      if (auto vj = run.store().evaluation_verdict(*st.evaluation_id)) {
        wall = vj->value("wall_s", 0.0);
        if (vj->contains("shapes")) worst = worst_tolerance_used((*vj)["shapes"]);
        if (vj->contains("shapes") && (*vj)["shapes"].is_array())
          for (const auto& sh : (*vj)["shapes"])
            if (sh.contains("percent_of_copy_bandwidth") && sh["percent_of_copy_bandwidth"].is_number() && !sh.value("heldout", false))
              copy.push_back(sh["percent_of_copy_bandwidth"]);
      }
    const std::string refused = st.disposition == "passed" ? precision_refusal(pt.params, worst) : std::string();
    if (st.disposition == "passed" && st.speedup && refused.empty()) ranked_.push_back({*st.speedup, pt});
    searched_[k] = {{"template", pt.tmpl}, {"params", pt.params}, {"disposition", st.disposition},
                    {"speedup", st.speedup ? json(*st.speedup) : json()}, {"percent_of_copy_bandwidth", copy}, {"wall_s", wall},
                    {"detail", st.disposition == "passed" ? refused : printable(st.detail, 300)}, {"resumed", true}};
    if (!refused.empty()) searched_[k]["kept"] = false;
  }

  const TuneOptions& opt_;
  const SearchSpace& sp_;
  Backend& backend_;
  std::string ext_;
  std::function<void(const std::string&)> say_;
  bool proposed_ = false;
  std::string stopped_ = "every parameter point evaluated";
  std::vector<std::pair<double, Point>> ranked_;
  std::vector<json> searched_;
  int evaluated_ = 0, resumed_ = 0;
};

/// The final check: the winner on every shape with the full protocol, written as the run's best
/// file; where it fails (a held-out shape), the runners-up in order (at most three in all).
struct FinalCheck {
  std::optional<Verdict> verdict;
  Point chosen;
  double searched_speedup = 0.0;  ///< what the search measured of it
  fs::path best_file;
  int attempts = 0;
  /// Whether `verdict` is kept: it passed, and a reduced precision stayed within its share of the
  /// tolerance on every seed and shape (else `refused` says why).
  bool kept = false;
  std::string refused;
};
Expected<FinalCheck> final_check(Run& run, Evaluations& evals, const TuneOptions& opt, const SearchSpace& sp,
                                 const std::vector<std::pair<double, Point>>& ranked, const std::string& ext,
                                 const std::function<void(const std::string&)>& say) {
  FinalCheck fc;
  EvalOptions full = opt.eval;
  full.heldout = true;
  // a KernelBench winner's exported ModelNew, timed end to end beside it (unless --no-end-to-end)
  full.end_to_end = !sp.program_json.is_null() && opt.eval.final_end_to_end;
  for (size_t k = 0; k < ranked.size() && k < 3; ++k) {
    const Point& pt = ranked[k].second;
    ++fc.attempts;
    auto file = run.write_best(sp.source(pt), ext);
    if (!file) return Unexpected{file.error()};
    fc.best_file = *file;
    say(fmt::format("final{}: {} ({}) on every shape, held-out ones included", k == 0 ? "" : " (runner-up " + std::to_string(k) + ")",
                    pt.tmpl, format_params(pt.params)));
    auto v = evals.evaluate(fc.best_file, full);
    if (!v) return Unexpected{v.error()};
    fc.refused = v->passed() ? precision_refusal(pt.params, worst_tolerance_used(*v)) : std::string();
    fc.kept = v->passed() && fc.refused.empty();
    // a reduced precision that passed with too little to spare is recorded as what the tuner makes of
    // it: rejected, never as a pass a bench or a report would count
    if (!fc.refused.empty()) *v = refused_verdict(*v, fc.refused);
    if (auto ok = run.record(sp.task, fc.best_file, *v, "final", v->detail); !ok) return Unexpected{ok.error()};
    fc.verdict = *v;
    fc.chosen = pt;
    fc.searched_speedup = ranked[k].first;
    if (fc.kept) break;
    say(!fc.refused.empty() ? "  not kept: " + fc.refused : fmt::format("  {}: {}", disposition_name(v->disposition), printable(v->detail, 300)));
  }
  return fc;
}

/// The finalists timed interleaved before one is picked (issue 24): the search's brief timings of two
/// points a few percent apart say little on a busy machine. The search's fastest is the champion; the
/// runner-up, and the third where the search put it within 15% of the champion, is timed against it in
/// one run (Evaluator::compare) and takes its place only where the 95% interval of their ratio lies wholly
/// on its side. `ranked` is reordered so; what was compared is returned (null with fewer than two).
json runoff(Evaluations& evals, const TuneOptions& opt, const SearchSpace& sp, std::vector<std::pair<double, Point>>& ranked,
            const std::string& ext, const std::function<void(const std::string&)>& say) {
  if (ranked.size() < 2) return json();
  EvalOptions eo = opt.eval;
  eo.seeds = 1;  // both passed the search's seeds; the final check verifies the winner in full
  eo.heldout = false;
  eo.compile_baseline = false;
  eo.progress = nullptr;
  const fs::path dir = opt.out_dir / "finalists";
  json rounds = json::array();
  size_t champion = 0;
  for (size_t k = 1; k < ranked.size() && k < 3; ++k) {
    if (k == 2 && ranked[k].first < ranked[champion].first / 1.15) break;
    const fs::path a = dir / ("finalist_" + std::to_string(champion) + ext), b = dir / ("finalist_" + std::to_string(k) + ext);
    if (!write_file_atomic(a, sp.source(ranked[champion].second)) || !write_file_atomic(b, sp.source(ranked[k].second))) break;
    say(fmt::format("finalists timed interleaved: {} against {}", format_params(ranked[champion].second.params),
                    format_params(ranked[k].second.params)));
    auto c = evals.compare(a, b, eo);
    if (!c || !c->contains("a_over_b")) {
      rounds.push_back({{"a", ranked[champion].second.params}, {"b", ranked[k].second.params},
                        {"error", c ? c->value("verdict", std::string()) : c.error().message}});
      continue;
    }
    const json& ci = (*c)["noise"].value("speedup_ci95", json());
    const bool swap = ci.is_array() && ci.size() == 2 && ci[1].get<double>() < 1.0;  // a slower than b, the whole interval
    rounds.push_back({{"a", ranked[champion].second.params}, {"b", ranked[k].second.params}, {"a_over_b", (*c)["a_over_b"]},
                      {"speedup_ci95", ci}, {"noisy", (*c)["noise"].value("noisy", false)}, {"b_kept", swap}});
    say(fmt::format("  a/b {:.3f}x{}", (*c)["a_over_b"].get<double>(), swap ? ": the runner-up is faster, and takes its place" : ""));
    if (swap) champion = k;
  }
  if (champion != 0) std::rotate(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(champion),
                                 ranked.begin() + static_cast<std::ptrdiff_t>(champion) + 1);
  return {{"rounds", rounds}, {"chosen", ranked.front().second.params}};
}

/// KFAB_TUNER_ONLY="key=value[,key=value..]": the parameters every searched point must have (a probe of one
/// kernel family on a device whose time is short); empty where unset. A malformed entry is an error.
Expected<TemplateParams> tuner_only() {
  const char* env = std::getenv("KFAB_TUNER_ONLY");
  TemplateParams only;
  if (env == nullptr) return only;
  std::string rest = env;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return make_error("KFAB_TUNER_ONLY: '" + item + "' is not key=value", "e.g. KFAB_TUNER_ONLY=l2=1,items=8");
    only[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return only;
}

}  // namespace

Expected<json> tune(const TuneOptions& in) {
  TuneOptions opt = in;
  auto say = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  auto backend = make_backend(opt.target);
  if (!backend) return make_error("unknown target " + opt.target);
  const Target& target = *find_target(opt.target);  // make_backend found it
  // A host with several GPUs: every one of them, unless told otherwise (a bench's kfab sees one).
  auto devices = spread_devices(*backend, opt.devices);
  if (!devices) return Unexpected{devices.error()};
  opt.devices = std::move(*devices);
  auto loaded = open_task(opt.task);
  if (!loaded) return Unexpected{loaded.error()};
  const bool kb = loaded->kernelbench();
  SearchSpace sp;
  if (auto ok = kb ? traced_space(sp, opt, *loaded, *backend, say) : native_space(sp, opt, *loaded, *backend); !ok)
    return Unexpected{ok.error()};
  const std::string ext(target.suffix());
  // a probe of some points only (KFAB_TUNER_ONLY): no cached winner read, none written
  const auto only = tuner_only();
  if (!only) return Unexpected{only.error()};
  if (!only->empty()) {
    std::erase_if(sp.points, [&](const Point& pt) {
      return std::any_of(only->begin(), only->end(), [&](const auto& kv) { return !pt.params.count(kv.first) || pt.params.at(kv.first) != kv.second; });
    });
    if (sp.points.empty()) return make_error("KFAB_TUNER_ONLY=" + format_params(*only) + ": no parameter point of this task has these", "unset it");
    say("KFAB_TUNER_ONLY: only the points with " + format_params(*only));
  }

  // One evaluator per device for the whole search (its workers kept: the candidates are kfab's own);
  // the first runs the winner's final check.
  // (a target that does not pin gets unpinned evaluators that run at once: cpu and opencl slots)
  auto pins = device_pins(target, opt.devices);
  if (!pins) return Unexpected{pins.error()};
  Evaluations evals(*loaded, opt.target, std::move(*pins), opt.remote, true);
  evals.devices = opt.devices;

  auto store_r = Store::open(Store::default_path());
  if (!store_r) return Unexpected{store_r.error()};
  RunSpec spec{sp.task.name, opt.task, opt.target, "tuner", "tune",
               json{{"budget", opt.budget}, {"queue", opt.remote ? opt.remote->where() : json()}}, opt.out_dir, opt.resume};
  auto started = Run::start(**store_r, spec);
  if (!started) return Unexpected{started.error()};
  Run& run = *started;
  opt.out_dir = run.out_dir();
  const std::string stamp = run.id().substr(0, run.id().rfind('-'));  // the run's UTC time, for the cache entry
  const fs::path cache_file = sp.cache_file();
  if (opt.remote) opt.remote->begin_run(run.id());
  size_t before = 0;
  for (const auto& st : run.earlier()) before += st.role == "tuner" && !st.candidate_hash.empty();
  say(fmt::format("run {} (built-in tuner, no LLM): {} parameter point(s) for {}{}", run.id(), sp.points.size(),
                  kb ? "a traced KernelBench Model" : "op class " + sp.task.op_class,
                  run.resumed() ? fmt::format("; resumed, {} evaluated before it stopped", before) : ""));

  // The search: short protocol (2 seeds, tuning shapes, brief timing); the winner gets the full one.
  // A cached winner of an earlier search here skips it.
  std::optional<std::pair<double, Point>> hit;
  if (!opt.fresh && !run.resumed() && only->empty()) hit = cached_winner(cache_file, sp.points, say);
  TemplateTuner tuner(opt, sp, *backend, ext, say);
  std::vector<std::pair<double, Point>> ranked;
  if (hit) {
    ranked.push_back(*hit);
  } else {
    EvalOptions quick = opt.eval;
    quick.seeds = 2;
    quick.heldout = false;
    quick.min_time_s = target.tuner_min_time_s;
    quick.progress = nullptr;
    quick.compile_baseline = false;  // torch.compile is timed for the winner only
    quick.remeasure = false;         // a noisy point is not timed twice: the finalists are, interleaved (runoff)
    if (auto ok = run.drive(tuner, sp.task, evals, quick, say); !ok) return Unexpected{ok.error()};
    ranked = tuner.ranked();
  }
  const std::string stopped = hit ? "cached result (--fresh searches again)" : tuner.stopped();
  json result = {{"run", run.id()}, {"out_dir", fs::absolute(opt.out_dir).string()}, {"candidates", tuner.evaluated()},
                 {"stopped_because", stopped}, {"points", tuner.searched()}};
  if (run.resumed()) result["resumed_points"] = tuner.resumed();  // taken from the store, not evaluated again
  if (evals.spreads() && !opt.remote) result["devices"] = opt.devices;  // what the search was spread over
  if (ranked.empty()) {
    run.finish(false);
    result["best"] = {{"candidate", nullptr}, {"disposition", "none"}, {"speedup", nullptr}};
    result["steps"] = run.seq();
    return result;
  }
  // On the host, where a loaded machine moves brief timings most; a device's two harnesses would also hold
  // a KernelBench problem's gigabytes twice over.
  if (!hit && !opt.remote && target.on_host) {
    auto r = runoff(evals, opt, sp, ranked, ext, say);
    if (!r.is_null()) result["runoff"] = std::move(r);
  }
  auto fc = final_check(run, evals, opt, sp, ranked, ext, say);
  if (!fc) return Unexpected{fc.error()};
  const Verdict& v = *fc->verdict;
  if (fc->kept && !hit && only->empty()) {
    json entry = {{"template", fc->chosen.tmpl}, {"params", fc->chosen.params}, {"speedup", fc->searched_speedup},
                  {"measured_at", stamp}, {"device", backend->describe()}};
    if (kb) entry["program"] = sp.program_json;
    (void)write_file_atomic(cache_file, dump_json(entry, 2));
  }
  run.finish(fc->kept);
  result["best"] = {{"candidate", fs::absolute(fc->best_file).string()}, {"disposition", disposition_name(v.disposition)},
                    {"speedup", v.speedup ? json(*v.speedup) : json()}, {"detail", v.detail}};
  if (!fc->refused.empty()) result["best"]["kept"] = false;
  // the precision the winner computes in, and how much of the tolerance it used (the verdict states both)
  const auto prec = fc->chosen.params.find("precision");
  result["best"]["precision"] = prec != fc->chosen.params.end() ? prec->second : "fp32";
  if (const double w = worst_tolerance_used(v); v.passed() && std::isfinite(w)) result["best"]["tolerance_used"] = w;
  result["tuner"] = {{"template", fc->chosen.tmpl}, {"params", fc->chosen.params}, {"cached", hit.has_value()}};
  if (!only->empty()) result["tuner"]["only"] = *only;  // the points searched were these (KFAB_TUNER_ONLY)
  if (kb) result["tuner"]["program"] = sp.program_json.value("kind", sp.program_json.value("formula", std::string()));
  result["steps"] = run.seq();
  result["final_attempts"] = fc->attempts;
  result["verdict"] = v.to_json();
  return result;
}

}  // namespace kfab
