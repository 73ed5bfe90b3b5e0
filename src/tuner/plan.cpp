// A plan of several programs (tuner/plan.h): parsed from the trace, searched over its stages' grids
// together, printed as one candidate.
#include "tuner/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "tuner/tuner.h"

namespace kfab {

namespace {

Expected<std::vector<PlanDim>> parse_dims(const nlohmann::json& dims, int tensors) {
  std::vector<PlanDim> out;
  for (const auto& d : dims) {
    PlanDim pd;
    pd.constant = d.at(0).get<int64_t>();
    for (const auto& f : d.at(1)) {
      const int t = f.at(0).get<int>(), k = f.at(1).get<int>();
      if (t < 0 || t >= tensors || k < 0) return make_error("the traced plan is malformed: a dimension of tensor " + std::to_string(t));
      pd.factors.emplace_back(t, k);
    }
    if (pd.constant < 1) return make_error("the traced plan is malformed: a dimension's constant below 1");
    out.push_back(std::move(pd));
  }
  return out;
}

}  // namespace

Expected<Plan> parse_plan(const nlohmann::json& traced, const std::string& target) {
  Plan plan;
  try {
    plan.tensors = traced.at("tensors").get<int>();
    for (const auto& t : traced.at("tmps")) {
      auto dims = parse_dims(t.at("dims"), plan.tensors);
      if (!dims) return Unexpected{dims.error()};
      plan.buffers.push_back(std::move(*dims));
    }
    std::set<int> outputs;
    const auto& stages = traced.at("stages");
    for (size_t k = 0; k < stages.size(); ++k) {
      const auto& sj = stages[k];
      auto one = plan_traced(sj, target);
      if (!one) return make_error(fmt::format("program {} of {}: {}", k + 1, stages.size(), one.error().message));
      if (one->dedicated != nullptr) return make_error(fmt::format("the traced plan is malformed: program {} is a single op", k + 1));
      PlanStage st;
      st.is_gemm = one->is_gemm;
      st.program = std::move(one->program);
      st.gemm = std::move(one->gemm);
      st.gemm.epilogue = st.program;
      st.n = sj.value("n", int64_t{1024});
      const int total = plan.tensors + static_cast<int>(plan.buffers.size());
      for (const auto& b : sj.at("bind")) {
        const int i = b.get<int>();
        if (i < 0 || i >= total) return make_error(fmt::format("the traced plan is malformed: program {} binds tensor {}", k + 1, i));
        st.bind.push_back(i);
      }
      for (const auto& r : sj.at("results")) {
        if (r.contains("tmp")) {
          const int t = r.at("tmp").get<int>();
          if (t < 0 || t >= static_cast<int>(plan.buffers.size()))
            return make_error(fmt::format("the traced plan is malformed: program {} writes buffer {}", k + 1, t));
          st.results.push_back(t);
        } else {
          const int j = r.at("output").get<int>();
          if (j < 0 || !outputs.insert(j).second)
            return make_error(fmt::format("the traced plan is malformed: program {} writes output {}", k + 1, j));
          st.results.push_back(-1 - j);
        }
      }
      if (st.results.size() != st.program.outputs.size())
        return make_error(fmt::format("the traced plan is malformed: program {} has {} outputs for {} results", k + 1,
                                      st.program.outputs.size(), st.results.size()));
      if (st.is_gemm && static_cast<int>(st.bind.size()) != st.gemm.tensors)
        return make_error(fmt::format("the traced plan is malformed: program {} binds {} tensors, its GEMM {}", k + 1, st.bind.size(),
                                      st.gemm.tensors));
      if (sj.contains("view_dims")) {
        auto v = parse_dims(sj.at("view_dims"), plan.tensors);
        if (!v) return Unexpected{v.error()};
        st.view = std::move(*v);
        if (st.is_gemm || st.view.size() > 2) return make_error(fmt::format("the traced plan is malformed: program {}'s view", k + 1));
      }
      plan.stages.push_back(std::move(st));
    }
    plan.outputs = static_cast<int>(outputs.size());
    for (int j = 0; j < plan.outputs; ++j)
      if (!outputs.count(j)) return make_error(fmt::format("the traced plan is malformed: no program writes output {}", j));
  } catch (const nlohmann::json::exception& e) {
    return make_error(std::string("the traced plan is malformed: ") + e.what());
  }
  if (plan.stages.size() < 2) return make_error("the traced plan is malformed: fewer than two programs");
  return plan;
}

namespace {

std::vector<TemplateParams> stage_grid(const Printer& printer, const PlanStage& st) {
  return st.is_gemm ? printer.gemm_grid(st.gemm) : printer.rows_grid(st.program, st.n);
}

int precision_rank(const TemplateParams& p) {
  const auto it = p.find("precision");
  if (it == p.end() || it->second == "fp32") return 4;
  return it->second == "3xtf32" ? 3 : it->second == "tf32+bf16" ? 2 : it->second == "tf32" ? 1 : 0;
}

TemplateParams stage_params(const TemplateParams& point, size_t k) {
  const std::string prefix = fmt::format("s{}.", k);
  TemplateParams out;
  for (const auto& [key, v] : point)
    if (key.rfind(prefix, 0) == 0) out[key.substr(prefix.size())] = v;
  return out;
}

/// `source` split into its leading preprocessor lines and comments (and any `#include` after them), which
/// go before every namespace, and the rest, whose kfab_run becomes the namespace's run.
std::pair<std::vector<std::string>, std::string> split_source(const std::string& source) {
  std::vector<std::string> head;
  std::string body;
  bool in_head = true;
  for (const std::string& line : split_lines(source)) {
    const bool pre = line.rfind("#", 0) == 0 || line.rfind("//", 0) == 0 || line.find_first_not_of(" \t") == std::string::npos;
    if (in_head && pre) {
      head.push_back(line);
      continue;
    }
    in_head = false;
    if (line.rfind("#include", 0) == 0) {
      head.push_back(line);
      continue;
    }
    std::string l = line;
    for (const std::string from : {"KFAB_EXPORT int kfab_run(", "extern \"C\" int kfab_run("})
      if (const auto at = l.find(from); at != std::string::npos) l.replace(at, from.size(), "int run(");
    body += l + '\n';
  }
  return {head, body};
}

std::string dim_expr(const PlanDim& d) {
  std::string s = std::to_string(d.constant);
  for (const auto& [t, k] : d.factors) s += fmt::format(" * kfab_plan_dim(in[{}], {})", t, k);
  return s;
}

/// The kfab_tensor of a stage's argument `name` (`src` its data pointer) as the shape `dims` (a view or
/// a buffer's own shape): its shape and strides arrays, dense; kfab_run returns 3 where the view's size
/// is not the tensor's.
void view_tensor(const std::string& name, const std::string& data, const std::string& numel, const std::vector<std::string>& dims,
                 std::string& s) {
  s += fmt::format("    const int64_t {0}_shape[{1}] = {{", name, std::max<size_t>(dims.size(), 1));
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + dims[i];
  if (dims.empty()) s += "1";
  s += "};\n";
  s += fmt::format("    int64_t {0}_strides[{1}];\n    int64_t {0}_numel = 1;\n", name, std::max<size_t>(dims.size(), 1));
  s += fmt::format("    for (int d = {0} - 1; d >= 0; --d) {1}_strides[d] = {1}_numel, {1}_numel *= {1}_shape[d];\n", std::max<size_t>(dims.size(), 1),
                   name);
  s += fmt::format("    if ({0}_numel != {1}) return 3;\n", name, numel);
  s += fmt::format("    const kfab_tensor {0}{{{1}, KFAB_F32, {2}, {0}_shape, {0}_strides}};\n", name, data, std::max<size_t>(dims.size(), 1));
}

}  // namespace

std::vector<TemplateParams> plan_grid(const Printer& printer, const Plan& plan) {
  std::vector<std::vector<TemplateParams>> grids;
  size_t most = 0;
  for (const auto& st : plan.stages) {
    grids.push_back(stage_grid(printer, st));
    if (grids.back().empty()) return {};
    most = std::max(most, grids.back().size());
  }
  std::vector<TemplateParams> out;
  for (size_t i = 0; i < most; ++i) {
    TemplateParams p;
    int rank = 4;
    std::string precision = "fp32";
    for (size_t k = 0; k < grids.size(); ++k) {
      const TemplateParams& g = grids[k][std::min(i, grids[k].size() - 1)];
      for (const auto& [key, v] : g) p[fmt::format("s{}.{}", k, key)] = v;
      if (precision_rank(g) < rank) rank = precision_rank(g), precision = g.count("precision") ? g.at("precision") : "fp32";
    }
    if (rank < 4) p["precision"] = precision;
    out.push_back(std::move(p));
  }
  return out;
}

std::string generate_plan(const Printer& printer, const Plan& plan, const TemplateParams& point, const std::string& title) {
  const bool cuda = printer.target == "cuda";
  std::vector<std::string> head;
  std::set<std::string> included;
  std::string bodies;
  bool ndebug = false;  // a stage that defines NDEBUG before its headers (CUTLASS's): defined before every stage's
  for (size_t k = 0; k < plan.stages.size(); ++k) {
    const PlanStage& st = plan.stages[k];
    const TemplateParams sp = stage_params(point, k);
    const std::string what = fmt::format("{}, program {} of {}", title, k + 1, plan.stages.size());
    auto [h, body] = split_source(st.is_gemm ? printer.gemm(st.gemm, sp, what) : printer.rows(st.program, sp, what));
    for (size_t i = 0; i < h.size(); ++i) {
      if (i + 2 < h.size() && h[i] == "#ifndef NDEBUG" && h[i + 1] == "#define NDEBUG" && h[i + 2] == "#endif") {
        ndebug = true, i += 2;
        continue;
      }
      if (h[i].rfind("#include", 0) != 0 || included.insert(h[i]).second) head.push_back(h[i]);
    }
    bodies += fmt::format("namespace kfab_plan{} {{\n\n{}\n}}  // namespace kfab_plan{}\n\n", k, body, k);
  }
  std::string s = fmt::format("// Generated by kfab's built-in tuner: {}, a plan of {} programs ({}).\n", title, plan.stages.size(),
                              format_params(point));
  if (!cuda && included.insert("#include <vector>").second) head.push_back("#include <vector>");  // the buffers
  if (ndebug) s += "#ifndef NDEBUG\n#define NDEBUG\n#endif\n";
  for (const std::string& line : head) s += line + '\n';
  s += '\n' + bodies;
  s += R"(namespace {

// a Model tensor's dimension d, or -1 where it has fewer
int64_t kfab_plan_dim(const kfab_tensor& t, int d) { return d < t.ndim && t.shape != nullptr ? t.shape[d] : -1; }
int64_t kfab_plan_numel(const kfab_tensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}

// a buffer between two programs, kept between calls (grown when a shape needs more)
struct KfabPlanBuffer {
  float* data = nullptr;
  int64_t capacity = 0;
)";
  if (cuda) {
    s += R"(  int grow(int64_t need) {
    if (need <= capacity) return 0;
    if (data != nullptr) cudaFree(data);
    data = nullptr, capacity = 0;
    if (cudaMalloc(reinterpret_cast<void**>(&data), sizeof(float) * static_cast<size_t>(need)) != cudaSuccess) return 4;
    capacity = need;
    return 0;
  }
};
)";
  } else {
    s += R"(  std::vector<float> store;
  int grow(int64_t need) {
    if (need > capacity) store.resize(static_cast<size_t>(need)), capacity = need;
    data = store.data();
    return 0;
  }
};
)";
  }
  s += "\n}  // namespace\n\n";
  s += "KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void* stream_) {\n";
  s += fmt::format("  if (in == nullptr || out == nullptr || n_in != {} || n_out != {}) return 1;\n", plan.tensors, plan.outputs);
  s += fmt::format("  static KfabPlanBuffer buffer[{}];\n", std::max<size_t>(plan.buffers.size(), 1));
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    std::string numel = "1";
    for (size_t d = 0; d < plan.buffers[b].size(); ++d) {
      s += fmt::format("  const int64_t b{}_d{} = {};\n", b, d, dim_expr(plan.buffers[b][d]));
      s += fmt::format("  if (b{}_d{} < 0) return 3;\n", b, d);
      numel += fmt::format(" * b{}_d{}", b, d);
    }
    s += fmt::format("  const int64_t b{0}_numel = {1};\n  if (const int rc = buffer[{0}].grow(b{0}_numel); rc != 0) return rc;\n", b, numel);
  }
  for (size_t k = 0; k < plan.stages.size(); ++k) {
    const PlanStage& st = plan.stages[k];
    const Program& p = st.program;
    s += fmt::format("  {{  // program {} of {}\n", k + 1, plan.stages.size());
    std::vector<std::string> view;
    for (size_t d = 0; d < st.view.size(); ++d) {
      s += fmt::format("    const int64_t v{} = {};\n", d, dim_expr(st.view[d]));
      view.push_back(fmt::format("v{}", d));
    }
    // which of the stage's inputs and outputs are per element (passed as the view, where it has one)
    std::vector<bool> in_e(st.bind.size(), false);
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      const int t = st.is_gemm ? st.gemm.bind[i] : static_cast<int>(i);
      if (t >= 0 && t < static_cast<int>(in_e.size())) in_e[t] = in_e[t] || p.inputs[i].cls == VClass::E;
    }
    std::string args_in, args_out;
    for (size_t i = 0; i < st.bind.size(); ++i) {
      const int src = st.bind[i];
      const std::string name = fmt::format("i{}", i);
      if (src < plan.tensors && !(in_e[i] && !view.empty())) {
        args_in += fmt::format("{}in[{}]", i ? ", " : "", src);
        continue;
      }
      if (src < plan.tensors) {
        view_tensor(name, fmt::format("in[{}].data", src), fmt::format("kfab_plan_numel(in[{}])", src), view, s);
      } else {
        const size_t b = static_cast<size_t>(src - plan.tensors);
        std::vector<std::string> dims;
        for (size_t d = 0; d < plan.buffers[b].size(); ++d) dims.push_back(fmt::format("b{}_d{}", b, d));
        view_tensor(name, fmt::format("buffer[{}].data", b), fmt::format("b{}_numel", b), in_e[i] && !view.empty() ? view : dims, s);
      }
      args_in += (i ? ", " : "") + name;
    }
    for (size_t j = 0; j < st.results.size(); ++j) {
      const int r = st.results[j];
      const std::string name = fmt::format("o{}", j);
      const bool e = p.nodes[p.outputs[j].second].cls == VClass::E && !view.empty();
      if (r < 0) {
        if (!e) {
          args_out += fmt::format("{}out[{}]", j ? ", " : "", -1 - r);
          continue;
        }
        view_tensor(name, fmt::format("out[{}].data", -1 - r), fmt::format("kfab_plan_numel(out[{}])", -1 - r), view, s);
      } else {
        std::vector<std::string> dims;
        for (size_t d = 0; d < plan.buffers[r].size(); ++d) dims.push_back(fmt::format("b{}_d{}", r, d));
        view_tensor(name, fmt::format("buffer[{}].data", r), fmt::format("b{}_numel", r), e ? view : dims, s);
      }
      args_out += (j ? ", " : "") + name;
    }
    s += fmt::format("    const kfab_tensor args_in[{}] = {{{}}};\n", std::max<size_t>(st.bind.size(), 1), args_in);
    s += fmt::format("    kfab_tensor args_out[{}] = {{{}}};\n", std::max<size_t>(st.results.size(), 1), args_out);
    s += fmt::format("    if (const int rc = kfab_plan{}::run(args_in, {}, args_out, {}, stream_); rc != 0) return rc;\n  }}\n", k,
                     st.bind.size(), st.results.size());
  }
  s += "  return 0;\n}\n";
  return s;
}

}  // namespace kfab
