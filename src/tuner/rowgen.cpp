#include "tuner/rowgen.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

namespace kfab::rowgen {

std::string flit(double v) {
  if (std::isnan(v)) return "NAN";
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "(-INFINITY)";
  return fmt::format("{:.9g}f", v).find_first_of(".eEn") == std::string::npos ? fmt::format("{:.1f}f", v) : fmt::format("{:.9g}f", v);
}

namespace {

// The device reads inputs through the read-only cache and has exp and rsqrt intrinsics.
class CudaLang final : public Lang {
 public:
  std::string load(int input, std::string_view index) const override {
    return index.empty() ? fmt::format("kfab_ld(a.in{})", input) : fmt::format("kfab_ld(a.in{} + {})", input, index);
  }
  std::string_view exp() const override { return "expf"; }
  std::string_view rsqrt() const override { return "rsqrtf"; }
  std::string_view stream() const override { return "cudaStream_t stream = static_cast<cudaStream_t>(stream_);"; }
  std::string_view run_end() const override { return "return cudaGetLastError() == cudaSuccess ? 0 : 5;"; }
};

// The host's exp is the prelude's polynomial (it vectorises under omp simd; expf does not).
class CppLang final : public Lang {
 public:
  std::string load(int input, std::string_view index) const override {
    return fmt::format("a.in{}[{}]", input, index.empty() ? std::string_view("0") : index);
  }
  std::string_view exp() const override { return "kfab_exp"; }
  std::string_view rsqrt() const override { return "kfab_rsqrt"; }
  std::string_view function(std::string_view op) const override {
    static const std::map<std::string_view, std::string_view> own = {
        {"tanh", "kfab_tanh"}, {"log", "kfab_log"}, {"log1p", "kfab_log1p"}, {"erf", "kfab_erf"}};
    const auto it = own.find(op);
    return it == own.end() ? std::string_view() : it->second;
  }
  std::string max(const std::string& a, const std::string& b) const override {
    return "(" + a + " != " + a + " || " + a + " >= " + b + " ? " + a + " : " + b + ")";
  }
  std::string min(const std::string& a, const std::string& b) const override {
    return "(" + a + " != " + a + " || " + a + " <= " + b + " ? " + a + " : " + b + ")";
  }
  std::string_view stream() const override { return "(void)stream_;"; }
  std::string_view run_end() const override { return "return 0;"; }
};

}  // namespace

const Lang& cuda_lang() {
  static const CudaLang l;
  return l;
}
const Lang& cpp_lang() {
  static const CppLang l;
  return l;
}

std::string pointwise(const Program& p, const PNode& n, const std::vector<std::string>& a, const Lang& lang) {
  const std::string& o = n.op;
  const std::string exp(lang.exp()), rsqrt(lang.rsqrt());
  if (o == "ncols") return "static_cast<float>(n)";
  if (o == "nrows") return "static_cast<float>(rows)";
  if (o == "rowidx") return "static_cast<float>(row)";  // the row kernels' row (never a flat kernel's: it is per row)
  if (o == "pow") {
    const PNode& e = p.nodes[n.args[1]];
    if (e.op == "const") {
      if (e.value == 1.0) return a[0];
      if (e.value == 2.0) return "(" + a[0] + " * " + a[0] + ")";
      if (e.value == 3.0) return "(" + a[0] + " * " + a[0] + " * " + a[0] + ")";
      if (e.value == 0.5) return "sqrtf(" + a[0] + ")";
      if (e.value == -0.5) return rsqrt + "(" + a[0] + ")";
      if (e.value == -1.0) return "(1.0f / " + a[0] + ")";
    }
    return "powf(" + a[0] + ", " + a[1] + ")";
  }
  if (o == "neg") return "(-" + a[0] + ")";
  if (o == "sigmoid") return "(1.0f / (1.0f + " + exp + "(-" + a[0] + ")))";
  if (o == "silu") return "(" + a[0] + " / (1.0f + " + exp + "(-" + a[0] + ")))";
  if (o == "sign") return "(float)((" + a[0] + " > 0.0f) - (" + a[0] + " < 0.0f))";
  if (o == "not") return "(" + a[0] + " == 0.0f ? 1.0f : 0.0f)";
  if (o == "isnan") return "(" + a[0] + " != " + a[0] + " ? 1.0f : 0.0f)";
  if (o == "reciprocal") return "(1.0f / " + a[0] + ")";
  // one-argument functions
  const std::map<std::string, std::string> fn = {
      {"abs", "fabsf"},   {"exp", exp},     {"log", "logf"},   {"log1p", "log1pf"}, {"expm1", "expm1f"},   {"tanh", "tanhf"},
      {"sqrt", "sqrtf"},  {"rsqrt", rsqrt}, {"erf", "erff"},   {"sin", "sinf"},     {"cos", "cosf"},       {"floor", "floorf"},
      {"ceil", "ceilf"},  {"gelu_erf", "kfab_gelu_erf"},      {"gelu_tanh", "kfab_gelu_tanh"}};
  if (const std::string_view own = lang.function(o); !own.empty()) return std::string(own) + "(" + a[0] + ")";
  if (auto it = fn.find(o); it != fn.end()) return it->second + "(" + a[0] + ")";
  if (o == "relu") return lang.max(a[0], "0.0f");
  const std::map<std::string, std::string> infix = {{"add", "+"}, {"sub", "-"}, {"mul", "*"}, {"div", "/"}};
  if (auto it = infix.find(o); it != infix.end()) return "(" + a[0] + " " + it->second + " " + a[1] + ")";
  if (o == "max") return lang.max(a[0], a[1]);
  if (o == "min") return lang.min(a[0], a[1]);
  const std::map<std::string, std::string> cmp = {{"lt", "<"}, {"le", "<="}, {"gt", ">"}, {"ge", ">="}, {"eq", "=="}, {"ne", "!="}};
  if (auto it = cmp.find(o); it != cmp.end()) return "(" + a[0] + " " + it->second + " " + a[1] + " ? 1.0f : 0.0f)";
  if (o == "and") return "(" + a[0] + " != 0.0f && " + a[1] + " != 0.0f ? 1.0f : 0.0f)";
  if (o == "or") return "(" + a[0] + " != 0.0f || " + a[1] + " != 0.0f ? 1.0f : 0.0f)";
  if (o == "where") return "(" + a[0] + " != 0.0f ? " + a[1] + " : " + a[2] + ")";
  return "";
}

Gen::Gen(const Program& prog, const Lang& l)
    : p(prog),
      lang(l),
      live(prog.nodes.size()),
      allslot(prog.nodes.size(), -1),
      redslot(prog.nodes.size(), -1),
      colslot(prog.nodes.size(), -1),
      colstage(prog.nodes.size(), 0),
      cvslot(prog.nodes.size(), -1) {
  std::function<void(int)> mark = [&](int k) {
    if (live[k]) return;
    live[k] = true;
    for (int a : p.nodes[k].args) mark(a);
  };
  for (const auto& [name, id] : p.outputs) mark(id);
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (!live[k]) continue;
    if (is_all_reduction(p.nodes[k].op)) allslot[k] = n_all++;
    // an all-reduction of a per-element value reduces its row first
    if (is_row_reduction(p.nodes[k].op) || (is_all_reduction(p.nodes[k].op) && p.nodes[p.nodes[k].args[0]].cls == VClass::E))
      redslot[k] = n_red++;
  }
  // a column reduction's pass: one after the latest pass among the column reductions its argument reads
  std::vector<int> latest(p.nodes.size(), 0);  // per node: the latest pass among the column reductions it reads
  for (size_t k = 0; k < p.nodes.size(); ++k) {  // (topological order: arguments first)
    for (int a : p.nodes[k].args) latest[k] = std::max(latest[k], is_col_reduction(p.nodes[a].op) ? colstage[a] : latest[a]);
    if (!is_col_reduction(p.nodes[k].op)) continue;
    colstage[k] = latest[p.nodes[k].args[0]] + 1;
    if (!live[k]) continue;
    colslot[k] = n_col++;
    n_stage = std::max(n_stage, colstage[k]);
  }
  // the per-column values that rest on a column reduction, and of those the ones a value of another class
  // (or an output) reads: each such gets a row of a.cv (not in a grouped program, whose per-channel
  // inputs are read at a row's group)
  if (p.groups > 1) return;
  std::vector<bool> on_cols(p.nodes.size());
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const PNode& n = p.nodes[k];
    if (n.cls != VClass::C || !live[k]) continue;
    on_cols[k] = is_col_reduction(n.op) || std::any_of(n.args.begin(), n.args.end(), [&](int a) { return on_cols[a]; });
  }
  const auto take = [&](int a) {
    if (on_cols[a] && cvslot[a] < 0) cvslot[a] = n_cv++;
  };
  for (size_t k = 0; k < p.nodes.size(); ++k)
    if (live[k] && !on_cols[k])
      for (int a : p.nodes[k].args) take(a);
  for (const auto& o : p.outputs) take(o.second);
}

std::string Gen::value(int k) const {
  const PNode& n = p.nodes[k];
  if (n.cls == VClass::E || n.cls == VClass::C) return fmt::format("e{}", k);
  if (n.op == "const") return flit(n.value);
  return fmt::format("{}{}", n.cls == VClass::K ? 'k' : 'r', k);
}

std::string Gen::scalar_expr(int k) const {
  const PNode& n = p.nodes[k];
  if (n.op == "in") return lang.load(n.input, "");
  std::vector<std::string> args;
  for (int x : n.args) args.push_back(value(x));
  return pointwise(p, n, args, lang);
}

// a per-element (or per-column) quotient whose divisor is the same along the row, not a constant
static bool divides_by_shared(const Program& p, const PNode& n) {
  if (n.op != "div" || (n.cls != VClass::E && n.cls != VClass::C)) return false;
  const PNode& d = p.nodes[n.args[1]];
  return (d.cls == VClass::R || d.cls == VClass::K) && d.op != "const";
}

std::vector<int> Gen::shared_divisors(const std::vector<int>& targets) const {
  std::vector<bool> seen(p.nodes.size());
  std::vector<int> out;
  std::function<void(int)> walk = [&](int k) {
    const PNode& n = p.nodes[k];
    if (seen[k] || (n.cls != VClass::E && n.cls != VClass::C) || is_col_reduction(n.op)) return;
    seen[k] = true;
    if (divides_by_shared(p, n) && std::find(out.begin(), out.end(), n.args[1]) == out.end()) out.push_back(n.args[1]);
    for (int a : n.args) walk(a);
  };
  for (int t : targets) walk(t);
  return out;
}

void Gen::element(const std::vector<int>& targets, const Access& access, const std::string& col, Emitter& e, bool hoisted,
                  const std::map<int, std::string>* over, const std::map<int, std::string>* recips) const {
  std::vector<bool> need(p.nodes.size());
  std::function<void(int)> mark = [&](int k) {
    const PNode& n = p.nodes[k];
    if (need[k] || (n.cls != VClass::E && n.cls != VClass::C)) return;
    need[k] = true;
    if (over != nullptr && over->count(k)) return;
    if (!is_col_reduction(n.op) && !(hoisted && cvslot[k] >= 0))  // read, not computed, per element
      for (int a : n.args) mark(a);
  };
  for (int t : targets) mark(t);
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (!need[k]) continue;
    const PNode& n = p.nodes[k];
    std::string v;
    if (over != nullptr && over->count(k)) {
      v = over->at(k);
    } else if (hoisted && cvslot[k] >= 0) {
      v = fmt::format("a.cv[{} * n + {}]", cvslot[k], col);
    } else if (n.op == "in" && p.inputs[n.input].per_channel) {
      v = lang.load(n.input, fmt::format("(row % {}) * n + {}", p.groups, col));
    } else if (n.op == "in") {
      v = n.cls == VClass::E ? access(n.input) : lang.load(n.input, col);
    } else if (n.op == "colidx") {
      v = fmt::format("static_cast<float>({})", col);
    } else if (is_col_reduction(n.op)) {
      v = fmt::format("static_cast<float>(a.cs[{} * n + {}]{})", colslot[k], col, n.op == "colmean" ? " / static_cast<double>(rows)" : "");
    } else if (recips != nullptr && divides_by_shared(p, n) && recips->count(n.args[1])) {
      v = fmt::format("kfab_div_row({}, {})", value(n.args[0]), recips->at(n.args[1]));
    } else {
      std::vector<std::string> args;
      for (int x : n.args) args.push_back(value(x));
      v = pointwise(p, n, args, lang);
    }
    e.linef("const float e{} = {};", k, v);
  }
}

void Gen::scalars(const std::function<void(int, int, Emitter&)>& sum, const std::function<bool(int)>& in_scope, std::string_view store,
                  Emitter& e) const {
  std::vector<bool> need(p.nodes.size());
  std::function<void(int)> mark = [&](int k) {
    if (need[k] || p.nodes[k].cls != VClass::K) return;
    need[k] = true;
    if (!is_all_reduction(p.nodes[k].op))
      for (int x : p.nodes[k].args) mark(x);
  };
  for (const auto& o : p.outputs)
    if (p.nodes[o.second].cls == VClass::K) mark(o.second);
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const PNode& n = p.nodes[k];
    if (!need[k] || n.op == "const" || in_scope(static_cast<int>(k))) continue;
    if (!is_all_reduction(n.op)) {
      e.linef("const float k{} = {};", k, scalar_expr(static_cast<int>(k)));
      continue;
    }
    const bool per_elem = p.nodes[n.args[0]].cls == VClass::E;
    sum(static_cast<int>(k), allslot[k], e);
    e.linef("const float k{} = static_cast<float>(w{}{});", k, k,
            n.op == "allmean" ? (per_elem ? " / (static_cast<double>(rows) * static_cast<double>(n))" : " / static_cast<double>(rows)") : "");
  }
  for (int j : outputs_of(VClass::K)) e.linef("{}a.out{}[0] = {};", store, j, value(p.outputs[j].second));
}

void Gen::kconsts(Emitter& e) const {
  for (size_t k = 0; k < p.nodes.size(); ++k)
    if (live[k] && p.nodes[k].cls == VClass::K && p.nodes[k].op != "const") e.linef("const float k{} = {};", k, scalar_expr(static_cast<int>(k)));
}

void Gen::kconsts_for(const std::vector<int>& targets, Emitter& e) const {
  std::vector<bool> need(p.nodes.size()), seen(p.nodes.size());
  std::function<void(int)> mark = [&](int k) {
    if (seen[k]) return;
    seen[k] = true;
    const PNode& n = p.nodes[k];
    if (n.cls == VClass::K && n.op != "const" && !is_all_reduction(n.op)) need[k] = true;
    if (!is_col_reduction(n.op) && !is_all_reduction(n.op))
      for (int a : n.args) mark(a);
  };
  for (int t : targets) mark(t);
  for (size_t k = 0; k < p.nodes.size(); ++k)
    if (need[k]) e.linef("const float k{} = {};", k, scalar_expr(static_cast<int>(k)));
}

void Gen::pick(int k, const Access& access, Emitter& e) const {
  const PNode& n = p.nodes[k];
  const PNode& ix = p.nodes[n.args[1]];
  const std::string col = ix.op == "in" && p.inputs[ix.input].integer ? fmt::format("static_cast<int64_t>(qi{})", ix.input)
                                                                      : fmt::format("static_cast<int64_t>({})", value(n.args[1]));
  e.linef("float r{} = NAN;", k).open("");
  e.linef("const int64_t c = {};", col).open("if (c >= 0 && c < n)");
  element({n.args[0]}, access, "c", e);
  e.linef("r{} = {};", k, value(n.args[0])).close().close();
}

std::vector<int> Gen::e_inputs() const {
  std::vector<int> v;
  for (size_t k = 0; k < p.nodes.size(); ++k)
    if (live[k] && p.nodes[k].op == "in" && p.nodes[k].cls == VClass::E) v.push_back(p.nodes[k].input);
  return v;
}

std::vector<int> Gen::col_nodes(int stage) const {
  std::vector<int> v;
  for (size_t k = 0; k < p.nodes.size(); ++k)
    if (colslot[k] >= 0 && colstage[k] == stage) v.push_back(static_cast<int>(k));
  return v;
}

std::vector<int> Gen::outputs_of(VClass c) const {
  std::vector<int> v;
  for (size_t j = 0; j < p.outputs.size(); ++j)
    if (p.nodes[p.outputs[j].second].cls == c) v.push_back(static_cast<int>(j));
  return v;
}

void walk_rows(const Gen& g, RowSteps& steps) {
  const Program& p = g.p;
  std::vector<bool> picked(p.nodes.size());
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const PNode& n = p.nodes[k];
    const int id = static_cast<int>(k);
    if (!g.live[k] || n.op == "const") continue;
    if (n.cls == VClass::K && !n.after_all) {
      steps.scalar(id);
    } else if (n.op == "in" && n.cls == VClass::R) {
      steps.row_input(id);
      for (size_t k2 = k + 1; k2 < p.nodes.size(); ++k2)
        if (g.live[k2] && p.nodes[k2].op == "pick" && p.nodes[k2].args[1] == id && p.nodes[p.nodes[k2].args[0]].op == "in") {
          steps.pick(static_cast<int>(k2));
          picked[k2] = true;
        }
    } else if (n.cls != VClass::R && !is_all_reduction(n.op)) {
      continue;  // per-element and per-column values are computed per element
    } else if (is_row_reduction(n.op) || g.redslot[k] >= 0) {
      steps.reduce(id, n.op == "rowmax" ? 1 : n.op == "rowmin" ? 2 : 0);
    } else if (is_all_reduction(n.op)) {
      steps.share(id);
    } else if (n.op == "pick") {
      if (!picked[k]) steps.pick(id);
    } else {
      std::vector<std::string> args;
      for (int x : n.args) args.push_back(g.value(x));
      steps.row_value(id, pointwise(p, n, args, g.lang));
    }
  }
}

void args_struct(const Program& p, Emitter& e) {
  e.open("struct Args");
  for (size_t i = 0; i < p.inputs.size(); ++i)
    e.linef("const {}* __restrict__ in{};", p.inputs[i].integer ? (p.inputs[i].i32 ? "int32_t" : "long long") : "float", i);
  for (size_t j = 0; j < p.outputs.size(); ++j) e.linef("float* __restrict__ out{};", j);
  e.line("double* ws;").line("double* cs;  // column sums").line("float* cv;  // per-column values computed from them").close("};");
}

Binding default_binding(const Program& p) {
  Binding b;
  b.n_in = static_cast<int>(p.inputs.size());
  int main_in = -1;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    b.tensor.push_back(static_cast<int>(i));
    if (main_in < 0 && p.inputs[i].cls == VClass::E && !p.inputs[i].integer) main_in = static_cast<int>(i);
  }
  Emitter e(1);
  if (main_in >= 0) {
    e.linef("const kfab_tensor& m = in[{}];", main_in);
  } else {  // no per-element input (a plan's broadcast of a per-row and a per-column value): the output's shape
    int main_out = 0;
    while (main_out + 1 < static_cast<int>(p.outputs.size()) && p.nodes[p.outputs[main_out].second].cls != VClass::E) ++main_out;
    e.linef("const kfab_tensor& m = out[{}];", main_out);
  }
  if (p.row_dims <= 1) {
    e.line("if (m.ndim < 1 || !kfab_dense(m)) return 2;").line("const int64_t n = m.shape[m.ndim - 1];");
  } else {  // a row is the last row_dims dimensions
    e.linef("if (m.ndim < {} || !kfab_dense(m)) return 2;", p.row_dims).line("int64_t n = 1;");
    e.nested(fmt::format("for (int32_t d = m.ndim - {}; d < m.ndim; ++d)", p.row_dims), "n *= m.shape[d];");
  }
  e.line("const int64_t total = kfab_numel(m);").line("const int64_t rows = n > 0 ? total / n : 0;");
  b.shape = e.take();
  return b;
}

namespace {

/// For a pooled product (GemmProgram::pool): B's columns, then every pooled per-column input, averaged
/// in windows into buffers kept between calls (on the device with pool_columns.cuh's kernel, or on the
/// host), and w_data and the inputs pointed there. Empty without pooling.
std::string pool_prepare(const GemmProgram& gp, bool cuda) {
  if (gp.pool <= 1 || gp.pool_max) return {};  // a max-pooled product is pooled after the GEMM (max_pool_pass)
  // [rows, cols] averaged along its rows in windows of `pool` columns: W [gnf, K] (trans_b) is K columns
  // of gnf rows, so it is averaged over windows of rows; B [K, gnf] over windows of columns
  std::string s = fmt::format("  // the product's columns averaged in windows of {0}: B's first, then the pooled per-column inputs\n", gp.pool);
  const std::string wjob = gp.trans_b ? "W [batch][gnf, K]: windows of rows" : "B [batch][K, gnf]: windows of columns";
  if (cuda) {
    s += "  static float* pooled = nullptr;\n  static int64_t pooled_cap = 0;\n";
    s += "  int64_t pooled_need = batch * gn * K;\n";
    for (size_t i = 0; i < gp.epilogue.inputs.size(); ++i)
      if (gp.epilogue.inputs[i].pool > 1) s += "  pooled_need += (n + 3) / 4 * 4 + 4;  // a pooled input, 16-byte aligned\n";
    s += R"(  if (pooled_need > pooled_cap) {
    if (pooled != nullptr) cudaFree(pooled);
    pooled = nullptr, pooled_cap = 0;
    if (cudaMalloc(reinterpret_cast<void**>(&pooled), sizeof(float) * static_cast<size_t>(pooled_need)) != cudaSuccess) return 4;
    pooled_cap = pooled_need;
  }
)";
    s += fmt::format("  // {}\n", wjob);
    s += gp.trans_b ? fmt::format("  if (kfab_pool_windows(w_data, pooled, batch * gn, K, {}, true, stream) != 0) return 6;\n", gp.pool)
                    : fmt::format("  if (kfab_pool_windows(w_data, pooled, batch * K, gn, {}, false, stream) != 0) return 6;\n", gp.pool);
    s += "  w_data = pooled;\n  float* pooled_in = pooled + (batch * gn * K + 3) / 4 * 4;\n";
    for (size_t i = 0; i < gp.epilogue.inputs.size(); ++i) {
      if (gp.epilogue.inputs[i].pool <= 1) continue;
      s += fmt::format("  if (kfab_pool_windows(a.in{0}, pooled_in, 1, n, {1}, false, stream) != 0) return 6;\n  a.in{0} = pooled_in;\n  pooled_in += (n + 3) / 4 * 4;\n",
                       i, gp.epilogue.inputs[i].pool);
    }
    return s;
  }
  s += fmt::format(R"(  static std::vector<float> pooled;
  pooled.resize(static_cast<size_t>(batch * gn * K));
  {{  // {0}
    const int64_t outer = {1}, inner = {2}, P = {3};
#pragma omp parallel for schedule(static) if (outer * inner * P > 262144)
    for (int64_t r = 0; r < outer; ++r) {{
      float* y = pooled.data() + r * inner;
      for (int64_t c = 0; c < inner; ++c) {{
        float t = 0.0f;
        for (int64_t q = 0; q < P; ++q) t += {4};
        y[c] = t / static_cast<float>(P);
      }}
    }}
  }}
  w_data = pooled.data();
)",
                   wjob, gp.trans_b ? "batch * gn" : "batch * K", gp.trans_b ? "K" : "gn", gp.pool,
                   gp.trans_b ? "w_data[(r * P + q) * inner + c]" : "w_data[r * inner * P + c * P + q]");
  for (size_t i = 0; i < gp.epilogue.inputs.size(); ++i) {
    if (gp.epilogue.inputs[i].pool <= 1) continue;
    s += fmt::format(R"(  static std::vector<float> pooled{0};
  pooled{0}.resize(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) {{
    float t = 0.0f;
    for (int64_t q = 0; q < {1}; ++q) t += a.in{0}[c * {1} + q];
    pooled{0}[static_cast<size_t>(c)] = t / {1}.0f;
  }}
  a.in{0} = pooled{0}.data();
)",
                     i, gp.epilogue.inputs[i].pool);
  }
  return s;
}

}  // namespace

std::string max_pool_pass(const GemmProgram& gp, int pin, bool cuda) {
  if (gp.pool <= 1 || !gp.pool_max) return {};
  std::string bias = "nullptr";  // the per-column inputs of the product's full width, added before the maximum
  for (size_t i = 0; i < gp.epilogue.inputs.size(); ++i)
    if (gp.epilogue.inputs[i].pool > 1) bias = fmt::format("a.in{}", i);
  if (cuda)
    return fmt::format(R"(  // the product's columns max-pooled in windows of {0} (its bias added first), into a buffer kept between calls
  static float* pooled = nullptr;
  static int64_t pooled_cap = 0;
  if (total > pooled_cap) {{
    if (pooled != nullptr) cudaFree(pooled);
    pooled = nullptr, pooled_cap = 0;
    if (cudaMalloc(reinterpret_cast<void**>(&pooled), sizeof(float) * static_cast<size_t>(total)) != cudaSuccess) return 4;
    pooled_cap = total;
  }}
  if (kfab_max_windows(product, {1}, pooled, gm, gn, {0}, stream) != 0) return 6;
  a.in{2} = pooled;
)",
                       gp.pool, bias, pin);
  return fmt::format(R"(  // the product's columns max-pooled in windows of {0} (its bias added first; a NaN in a window is its maximum,
  // as torch's max pooling), into a buffer kept between calls
  static std::vector<float> pooled;
  pooled.resize(static_cast<size_t>(total));
  {{
    const float* bias = {1};
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < gm; ++r)
      for (int64_t j = 0; j < n; ++j) {{
        float m = -INFINITY;
        for (int64_t t = j * {0}; t < (j + 1) * {0}; ++t) {{
          const float v = product[static_cast<size_t>(r * gn + t)] + (bias != nullptr ? bias[t] : 0.0f);
          m = v > m || v != v ? v : m;
        }}
        pooled[static_cast<size_t>(r * n + j)] = m;
      }}
  }}
  a.in{2} = pooled.data();
)",
                     gp.pool, bias, pin);
}

Binding gemm_binding(const GemmProgram& gp, bool cuda) {
  Binding b;
  b.n_in = gp.tensors;
  b.tensor = gp.bind;
  Emitter e(1);
  e.linef("const kfab_tensor& A = in[{}];", gp.a).linef("const kfab_tensor& W = in[{}];", gp.b);
  const int wn = gp.trans_b ? 0 : 1, wk = gp.trans_b ? 1 : 0;  // W's dimensions of N and K (after the batch)
  if (gp.batched) {
    e.line("if (A.dtype != KFAB_F32 || W.dtype != KFAB_F32 || A.ndim != 3 || W.ndim != 3 || !kfab_dense(A) || !kfab_dense(W)) return 2;");
    e.line("// a batched product: each of `batch` GEMMs [gmb, K] @ [K, gn] on its own slices; the product is [batch * gmb, gn]");
    e.line("const int64_t batch = A.shape[0];").line("if (W.shape[0] != batch) return 2;");
    e.linef("const int64_t K = A.shape[{}], gmb = A.shape[{}], gm = batch * gmb;", gp.trans_a ? 1 : 2, gp.trans_a ? 2 : 1);
    e.linef("const int64_t gnf = W.shape[{}];", wn + 1).linef("if (W.shape[{}] != K) return 2;", wk + 1);
  } else {
    if (gp.trans_a) {
      e.line("if (A.dtype != KFAB_F32 || W.dtype != KFAB_F32 || A.ndim != 2 || W.ndim != 2 || !kfab_dense(A) || !kfab_dense(W)) return 2;");
      e.line("// A given as [K, M] (A.T @ B): the product is [gm, gn]").line("const int64_t K = A.shape[0], gm = A.shape[1];");
    } else {
      e.line("if (A.dtype != KFAB_F32 || W.dtype != KFAB_F32 || A.ndim < 2 || W.ndim != 2 || !kfab_dense(A) || !kfab_dense(W)) return 2;");
      e.line("// A's leading dimensions are the product's rows (a 3-D tensor times a matrix): the product is [gm, gn]");
      e.line("const int64_t K = A.shape[A.ndim - 1];").line("int64_t gm = 1;").nested("for (int32_t d = 0; d + 1 < A.ndim; ++d)", "gm *= A.shape[d];");
    }
    e.line("const int64_t batch = 1, gmb = gm;  // one GEMM");
    e.linef("const int64_t gnf = W.shape[{}];", wn).linef("if (W.shape[{}] != K) return 2;", wk);
  }
  if (gp.pool > 1 && gp.pool_max) {
    e.linef("// the product's columns max-pooled in windows of {0} after the GEMM: the GEMM makes [gm, gnf], the epilogue reads [gm, gnf / {0}]",
            gp.pool);
    e.linef("if (gnf % {} != 0) return 3;", gp.pool).line("const int64_t gn = gnf;  // the GEMM's width");
  } else if (gp.pool > 1) {
    e.linef("// the product's columns averaged in windows of {0}: B's columns averaged first, the product [gm, gnf / {0}]", gp.pool);
    e.linef("if (gnf % {} != 0) return 3;", gp.pool).linef("const int64_t gn = gnf / {};", gp.pool);
  } else {
    e.line("const int64_t gn = gnf;");
  }
  e.line("const float* a_data = static_cast<const float*>(A.data);  // A as [batch][gmb, K], row-major");
  e.line("const float* w_data = static_cast<const float*>(W.data);  // B as given (pooled: its columns' averages)");
  const int groups = gp.epilogue.groups;
  if (gp.pool > 1 && gp.pool_max) {
    e.linef("const int64_t rows = gm, n = gn / {};", gp.pool);
  } else if (groups <= 1) {
    e.line("const int64_t rows = gm, n = gn;");
  } else {
    e.linef("// the epilogue's rows are groups of {0} per product row: [gm * {0}, gn / {0}]", groups);
    e.linef("if (gn % {} != 0) return 3;", groups).linef("const int64_t rows = gm * {0}, n = gn / {0};", groups);
  }
  e.line("const int64_t total = rows * n;");
  b.shape = e.take();
  b.prepare = pool_prepare(gp, cuda);
  if (!gp.trans_a) return b;
  if (cuda) {
    b.prepare += R"(  // A given as [K, gm]: transposed into [gm, K] first (32 x 32 tiles through shared memory), in a buffer
  // kept between calls
  static float* a_t = nullptr;
  static int64_t a_cap = 0;
  if (gm * K > a_cap) {
    if (a_t != nullptr) cudaFree(a_t);
    a_t = nullptr, a_cap = 0;
    if (cudaMalloc(reinterpret_cast<void**>(&a_t), sizeof(float) * static_cast<size_t>(gm * K)) != cudaSuccess) return 4;
    a_cap = gm * K;
  }
  if (gmb > 0 && K > 0) {  // each batch's [K, gmb] to [gmb, K]: blockIdx.z a batch
    const bool tvec = gmb % 4 == 0 && K % 4 == 0 && kfab_aligned16(a_data);
    const int64_t tx = tvec ? (gmb + 32 * KT - 1) / (32 * KT) : (gmb + 31) / 32, ty = (K + 31) / 32;
    if (tx > 2147483647 || ty > 65535 || batch > 65535) return 6;
    const dim3 tgrid(static_cast<unsigned>(tx), static_cast<unsigned>(ty), static_cast<unsigned>(batch));
    if (tvec) kfab_transpose4<<<tgrid, 256, 0, stream>>>(a_data, a_t, K, gmb);
    else kfab_transpose<<<tgrid, dim3(32, 8), 0, stream>>>(a_data, a_t, K, gmb);
  }
  a_data = a_t;
)";
  } else {
    b.prepare += R"(  // A given as [K, gm]: transposed into [gm, K] first (kfab_transpose_blocked), in a buffer kept between calls
  static std::vector<float> a_t;
  a_t.resize(static_cast<size_t>(gm * K));
  for (int64_t z = 0; z < batch; ++z) kfab_transpose_blocked(a_data + z * K * gmb, a_t.data() + z * gmb * K, K, gmb);  // [K, gmb] to [gmb, K]
  a_data = a_t.data();
)";
  }
  return b;
}

void host(const Gen& g, const Binding& b, const std::string& launch, Emitter& e) {
  const Program& p = g.p;
  e.blank().line("}  // namespace").blank();
  e.open("KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void* stream_)");
  e.linef("if (in == nullptr || out == nullptr || n_in != {} || n_out != {}) return 1;", b.n_in, p.outputs.size());
  e.line(g.lang.stream()).raw(b.shape).line("bool vec = n % 4 == 0;").line("Args a{};");
  auto check = [&](const std::string& t, VClass c, const char* dtype, bool per_channel = false) {
    const std::string count = per_channel ? fmt::format("n * {}", p.groups) : c == VClass::E ? "total" : c == VClass::C ? "n" : c == VClass::R ? "rows" : "1";
    e.linef("if ({0}.dtype != {1} || !kfab_dense({0}) || kfab_numel({0}) != {2}) return 3;", t, dtype, count);
  };
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const auto& in = p.inputs[i];
    if (b.tensor[i] < 0) continue;
    const std::string t = fmt::format("in[{}]", b.tensor[i]);
    if (in.pool > 1) {  // the product's full width, averaged before the epilogue reads it (the binding's prepare)
      e.linef("if ({0}.dtype != KFAB_F32 || !kfab_dense({0}) || kfab_numel({0}) != n * {1}) return 3;", t, in.pool);
    } else {
      check(t, in.cls, in.integer ? (in.i32 ? "KFAB_I32" : "KFAB_I64") : "KFAB_F32", in.per_channel);
    }
    e.linef("a.in{0} = static_cast<decltype(a.in{0})>({1}.data);", i, t);
    if (in.cls == VClass::E || in.cls == VClass::C) e.linef("vec = vec && kfab_aligned16({}.data);", t);
  }
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const std::string t = fmt::format("out[{}]", j);
    const VClass c = p.nodes[p.outputs[j].second].cls;
    check(t, c, "KFAB_F32");
    e.linef("a.out{} = static_cast<float*>({}.data);", j, t);
    if (c == VClass::E) e.linef("vec = vec && kfab_aligned16({}.data);", t);
  }
  e.raw(b.prepare).raw(b.setup).raw(launch).line(g.lang.run_end()).close();
}

int param(const TemplateParams& p, const char* k, int dflt) {
  auto it = p.find(k);
  return it == p.end() ? dflt : std::atoi(it->second.c_str());
}

void head(const std::string& title, const TemplateParams& tp, const std::string& what, const Program& p, Emitter& e) {
  e.linef("// Generated by kfab's built-in tuner: {} ({}).", title, format_params(tp)).linef("// {}:", what);
  for (const auto& line : split_lines(p.describe())) e.line("//   " + line);
}

bool pointwise_only(const Gen& g) {
  const Program& p = g.p;
  if (p.groups > 1) return false;  // its rows are groups of the product's: a row kernel over the product
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const PNode& n = p.nodes[k];
    if (g.live[k] && (n.cls == VClass::R || n.after_all || is_row_reduction(n.op) || is_all_reduction(n.op) || is_col_reduction(n.op) ||
                      n.op == "pick"))
      return false;
  }
  for (const auto& o : p.outputs)
    if (p.nodes[o.second].cls != VClass::E) return false;
  return true;
}

std::string_view host_checks() { return template_text("host_checks.h"); }

}  // namespace kfab::rowgen
