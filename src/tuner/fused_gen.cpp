// The CUDA generator for fused row programs (tuner/program.h): one kernel per program, either a
// flat elementwise kernel (no row structure) or a row kernel in which a group of G threads owns a
// row, keeps its per-element inputs in registers (float4 where the row length and the pointers
// allow), computes the row reductions in dependency order with shuffles (and one barrier each when
// the group is a whole block), and writes per-element and per-row outputs; all-reductions go
// through double atomics and a one-thread finishing kernel.
#include "tuner/fused.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <set>

namespace kfab {

namespace {

std::string flit(double v) {
  if (std::isnan(v)) return "NAN";
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "(-INFINITY)";
  return fmt::format("{:.9g}f", v).find_first_of(".eEn") == std::string::npos ? fmt::format("{:.1f}f", v) : fmt::format("{:.9g}f", v);
}

// A pointwise op on float operand strings.
std::string pointwise(const Program& p, const PNode& n, const std::vector<std::string>& a) {
  const std::string& o = n.op;
  if (o == "ncols") return "static_cast<float>(n)";
  if (o == "nrows") return "static_cast<float>(rows)";
  if (o == "neg") return "(-" + a[0] + ")";
  if (o == "abs") return "fabsf(" + a[0] + ")";
  if (o == "exp") return "expf(" + a[0] + ")";
  if (o == "log") return "logf(" + a[0] + ")";
  if (o == "log1p") return "log1pf(" + a[0] + ")";
  if (o == "expm1") return "expm1f(" + a[0] + ")";
  if (o == "tanh") return "tanhf(" + a[0] + ")";
  if (o == "sigmoid") return "(1.0f / (1.0f + expf(-" + a[0] + ")))";
  if (o == "relu") return "fmaxf(" + a[0] + ", 0.0f)";
  if (o == "sqrt") return "sqrtf(" + a[0] + ")";
  if (o == "rsqrt") return "rsqrtf(" + a[0] + ")";
  if (o == "erf") return "erff(" + a[0] + ")";
  if (o == "reciprocal") return "(1.0f / " + a[0] + ")";
  if (o == "sin") return "sinf(" + a[0] + ")";
  if (o == "cos") return "cosf(" + a[0] + ")";
  if (o == "gelu_erf") return "kfab_gelu_erf(" + a[0] + ")";
  if (o == "gelu_tanh") return "kfab_gelu_tanh(" + a[0] + ")";
  if (o == "silu") return "(" + a[0] + " / (1.0f + expf(-" + a[0] + ")))";
  if (o == "floor") return "floorf(" + a[0] + ")";
  if (o == "ceil") return "ceilf(" + a[0] + ")";
  if (o == "sign") return "(float)((" + a[0] + " > 0.0f) - (" + a[0] + " < 0.0f))";
  if (o == "not") return "(" + a[0] + " == 0.0f ? 1.0f : 0.0f)";
  if (o == "add") return "(" + a[0] + " + " + a[1] + ")";
  if (o == "sub") return "(" + a[0] + " - " + a[1] + ")";
  if (o == "mul") return "(" + a[0] + " * " + a[1] + ")";
  if (o == "div") return "(" + a[0] + " / " + a[1] + ")";
  if (o == "pow") {
    const PNode& e = p.nodes[n.args[1]];
    if (e.op == "const") {
      if (e.value == 1.0) return a[0];
      if (e.value == 2.0) return "(" + a[0] + " * " + a[0] + ")";
      if (e.value == 3.0) return "(" + a[0] + " * " + a[0] + " * " + a[0] + ")";
      if (e.value == 0.5) return "sqrtf(" + a[0] + ")";
      if (e.value == -0.5) return "rsqrtf(" + a[0] + ")";
      if (e.value == -1.0) return "(1.0f / " + a[0] + ")";
    }
    return "powf(" + a[0] + ", " + a[1] + ")";
  }
  if (o == "max") return "fmaxf(" + a[0] + ", " + a[1] + ")";
  if (o == "min") return "fminf(" + a[0] + ", " + a[1] + ")";
  const std::map<std::string, std::string> cmp = {{"lt", "<"}, {"le", "<="}, {"gt", ">"}, {"ge", ">="}, {"eq", "=="}, {"ne", "!="}};
  if (auto it = cmp.find(o); it != cmp.end()) return "(" + a[0] + " " + it->second + " " + a[1] + " ? 1.0f : 0.0f)";
  if (o == "and") return "(" + a[0] + " != 0.0f && " + a[1] + " != 0.0f ? 1.0f : 0.0f)";
  if (o == "or") return "(" + a[0] + " != 0.0f || " + a[1] + " != 0.0f ? 1.0f : 0.0f)";
  if (o == "where") return "(" + a[0] + " != 0.0f ? " + a[1] + " : " + a[2] + ")";
  return "";
}

struct Gen {
  const Program& p;
  std::vector<bool> live;       // needed by an output
  std::vector<int> allslot;     // all-reduction node -> ws slot
  std::vector<int> redslot;     // row reduction node -> shared slot
  int n_all = 0, n_red = 0;

  explicit Gen(const Program& prog) : p(prog), live(prog.nodes.size()), allslot(prog.nodes.size(), -1), redslot(prog.nodes.size(), -1) {
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
  }

  bool row_level(const PNode& n) const { return n.cls == VClass::R || (n.cls == VClass::K && !n.after_all); }

  // The name of a row-level (R or K) value.
  std::string rname(int k) const {
    const PNode& n = p.nodes[k];
    if (n.op == "const") return flit(n.value);
    return fmt::format("{}{}", n.cls == VClass::K ? 'k' : 'r', k);
  }

  // Statements computing the E/C values `targets` need for one element, given the element's input
  // access (input index -> expression) and its column expression.
  std::string element(const std::vector<int>& targets, const std::function<std::string(int)>& access, const std::string& col,
                      const std::string& indent) const {
    std::vector<bool> need(p.nodes.size());
    std::function<void(int)> mark = [&](int k) {
      const PNode& n = p.nodes[k];
      if (need[k] || (n.cls != VClass::E && n.cls != VClass::C)) return;
      need[k] = true;
      for (int a : n.args) mark(a);
    };
    for (int t : targets) mark(t);
    std::string s;
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      if (!need[k]) continue;
      const PNode& n = p.nodes[k];
      std::string v;
      if (n.op == "in") {
        v = n.cls == VClass::E ? access(n.input) : fmt::format("__ldg(a.in{} + {})", n.input, col);
      } else {
        std::vector<std::string> args;
        for (int x : n.args) args.push_back(value(x));
        v = pointwise(p, n, args);
      }
      s += fmt::format("{}const float e{} = {};\n", indent, k, v);
    }
    return s;
  }
  std::string value(int k) const {
    const PNode& n = p.nodes[k];
    return n.cls == VClass::E || n.cls == VClass::C ? fmt::format("e{}", k) : rname(k);
  }

  // Statements that compute the scalar outputs once the row work is done and store them: `sum(k,
  // slot)` gives the statements that leave all-reduction k's total (of sum slot `slot`) in double
  // w{k}; `in_scope(k)` says whether scalar value k is already declared where they go.
  std::string scalars(const std::function<std::string(int, int)>& sum, const std::function<bool(int)>& in_scope) const {
    std::vector<bool> need(p.nodes.size());
    std::function<void(int)> mark = [&](int k) {
      if (need[k] || p.nodes[k].cls != VClass::K) return;
      need[k] = true;
      if (!is_all_reduction(p.nodes[k].op))
        for (int x : p.nodes[k].args) mark(x);
    };
    for (const auto& o : p.outputs)
      if (p.nodes[o.second].cls == VClass::K) mark(o.second);
    std::string s;
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      const PNode& n = p.nodes[k];
      if (!need[k] || n.op == "const" || in_scope(static_cast<int>(k))) continue;
      if (is_all_reduction(n.op)) {
        const bool per_elem = p.nodes[n.args[0]].cls == VClass::E;
        s += sum(static_cast<int>(k), allslot[k]);
        s += fmt::format("  const float k{} = static_cast<float>(w{}{});\n", k, k,
                         n.op == "allmean" ? (per_elem ? " / (static_cast<double>(rows) * static_cast<double>(n))" : " / static_cast<double>(rows)")
                                           : "");
        continue;
      }
      std::vector<std::string> args;
      for (int x : n.args) args.push_back(value(x));
      s += fmt::format("  const float k{} = {};\n", k, n.op == "in" ? fmt::format("__ldg(a.in{})", n.input) : pointwise(p, n, args));
    }
    for (size_t j = 0; j < p.outputs.size(); ++j)
      if (p.nodes[p.outputs[j].second].cls == VClass::K) s += fmt::format("  a.out{}[0] = {};\n", j, value(p.outputs[j].second));
    return s;
  }

  // Statements computing every live scalar (K) value, all-reductions aside (their programs have rows).
  std::string kconsts() const {
    std::string s;
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      const PNode& n = p.nodes[k];
      if (!live[k] || n.cls != VClass::K || n.op == "const") continue;
      std::vector<std::string> args;
      for (int x : n.args) args.push_back(value(x));
      s += fmt::format("  const float k{} = {};\n", k, n.op == "in" ? fmt::format("__ldg(a.in{})", n.input) : pointwise(p, n, args));
    }
    return s;
  }

  std::vector<int> e_inputs() const {
    std::vector<int> v;
    for (size_t k = 0; k < p.nodes.size(); ++k)
      if (live[k] && p.nodes[k].op == "in" && p.nodes[k].cls == VClass::E) v.push_back(p.nodes[k].input);
    return v;
  }
};

// Host-side checks both kinds of generated file carry.
constexpr const char* kHostHelpers = R"(
bool kfab_dense(const kfab_tensor& t) {
  if (t.data == nullptr || (t.ndim > 0 && t.shape == nullptr)) return false;
  int64_t expect = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0) return false;
    if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}
int64_t kfab_numel(const kfab_tensor& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}
bool kfab_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
)";

constexpr const char* kPrelude = R"(#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kfab/candidate.h"

namespace {

__device__ __forceinline__ float kfab_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
__device__ __forceinline__ float kfab_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
)";

std::string args_struct(const Program& p) {
  std::string s = "struct Args {\n";
  for (size_t i = 0; i < p.inputs.size(); ++i)
    s += fmt::format("  const {}* __restrict__ in{};\n", p.inputs[i].integer ? (p.inputs[i].i32 ? "int32_t" : "long long") : "float", i);
  for (size_t j = 0; j < p.outputs.size(); ++j) s += fmt::format("  float* __restrict__ out{};\n", j);
  s += "  double* ws;\n};\n";
  return s;
}

// Where kfab_run finds a program's inputs and the [rows, n] shape: by default input i is in[i] and the
// first per-element f32 input sets the shape; a GEMM's epilogue reads the product, which no tensor
// holds (tensor -1), over the shape its operands set.
struct Binding {
  int n_in = 0;             // tensors kfab_run takes
  std::vector<int> tensor;  // program input -> in[] index, or -1: set by `setup`
  std::string shape;        // statements that check the shape-setting tensors and define n, total and rows
  std::string setup;        // statements after the checks (the product's buffer)
};

Binding default_binding(const Program& p) {
  Binding b;
  b.n_in = static_cast<int>(p.inputs.size());
  int main_in = -1;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    b.tensor.push_back(static_cast<int>(i));
    if (main_in < 0 && p.inputs[i].cls == VClass::E && !p.inputs[i].integer) main_in = static_cast<int>(i);
  }
  if (p.row_dims <= 1)
    b.shape = fmt::format(R"(  const kfab_tensor& m = in[{}];
  if (m.ndim < 1 || !kfab_dense(m)) return 2;
  const int64_t n = m.shape[m.ndim - 1];
  const int64_t total = kfab_numel(m);
  const int64_t rows = n > 0 ? total / n : 0;
)",
                          main_in);
  else  // a row is the last row_dims dimensions
    b.shape = fmt::format(R"(  const kfab_tensor& m = in[{0}];
  if (m.ndim < {1} || !kfab_dense(m)) return 2;
  int64_t n = 1;
  for (int32_t d = m.ndim - {1}; d < m.ndim; ++d) n *= m.shape[d];
  const int64_t total = kfab_numel(m);
  const int64_t rows = n > 0 ? total / n : 0;
)",
                          main_in, p.row_dims);
  return b;
}

// kfab_run: checks every tensor against its class, then launches.
std::string host(const Program& p, const Gen& g, const std::string& launch, bool cuda = true, const Binding* bind = nullptr) {
  const Binding dflt = bind == nullptr ? default_binding(p) : Binding{};
  const Binding& b = bind == nullptr ? dflt : *bind;
  std::string s = fmt::format(R"(
}}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void* stream_) {{
  if (in == nullptr || out == nullptr || n_in != {ni} || n_out != {no}) return 1;
  {stream}
{shape}  bool vec = n % 4 == 0;
  Args a{{}};
)",
                              fmt::arg("ni", b.n_in), fmt::arg("no", p.outputs.size()), fmt::arg("shape", b.shape),
                              fmt::arg("stream", cuda ? "cudaStream_t stream = static_cast<cudaStream_t>(stream_);" : "(void)stream_;"));
  auto check = [&](const std::string& t, VClass c, const char* dtype) {
    const char* count = c == VClass::E ? "total" : c == VClass::C ? "n" : c == VClass::R ? "rows" : "1";
    return fmt::format("  if ({t}.dtype != {dt} || !kfab_dense({t}) || kfab_numel({t}) != {cnt}) return 3;\n", fmt::arg("t", t),
                       fmt::arg("dt", dtype), fmt::arg("cnt", count));
  };
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const auto& in = p.inputs[i];
    if (b.tensor[i] < 0) continue;
    const std::string t = fmt::format("in[{}]", b.tensor[i]);
    s += check(t, in.cls, in.integer ? (in.i32 ? "KFAB_I32" : "KFAB_I64") : "KFAB_F32");
    s += fmt::format("  a.in{} = static_cast<decltype(a.in{})>({}.data);\n", i, i, t);
    if (in.cls == VClass::E || in.cls == VClass::C) s += fmt::format("  vec = vec && kfab_aligned16({}.data);\n", t);
  }
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const std::string t = fmt::format("out[{}]", j);
    const VClass c = p.nodes[p.outputs[j].second].cls;
    s += check(t, c, "KFAB_F32");
    s += fmt::format("  a.out{} = static_cast<float*>({}.data);\n", j, t);
    if (c == VClass::E) s += fmt::format("  vec = vec && kfab_aligned16({}.data);\n", t);
  }
  s += b.setup;
  if (g.n_all > 0 && cuda) {
    // kfab_ws is zero between calls: zero at module load, and zeroed again by the block that reads it
    s += R"(  static double* ws = nullptr;
  if (ws == nullptr && cudaGetSymbolAddress(reinterpret_cast<void**>(&ws), kfab_ws) != cudaSuccess) return 4;
  a.ws = ws;
)";
  }
  s += launch;
  s += cuda ? "  return cudaGetLastError() == cudaSuccess ? 0 : 5;\n}\n" : "  return 0;\n}\n";
  return s;
}

int param(const TemplateParams& p, const char* k, int dflt) {
  auto it = p.find(k);
  return it == p.end() ? dflt : std::atoi(it->second.c_str());
}

std::string generate_flat(const Program& p, const TemplateParams& tp, const std::string& title) {
  Gen g(p);
  const int B = param(tp, "block", 256), U = param(tp, "unroll", 4);
  bool cols = false;
  for (size_t k = 0; k < p.nodes.size(); ++k)
    if (g.live[k] && p.nodes[k].op == "in" && p.nodes[k].cls == VClass::C) cols = true;
  std::string s = fmt::format("// Generated by kfab's built-in tuner: {} ({}).\n// A flat elementwise kernel; the program:\n", title,
                              format_params(tp));
  for (const auto& line : split_lines(p.describe())) s += "//   " + line + "\n";
  s += kPrelude;
  s += kHostHelpers;
  s += fmt::format("\nconstexpr int B = {}, U = {};  // threads per block, vectors per thread\n\n", B, U);
  s += args_struct(p);
  const std::string kconst = g.kconsts();
  const auto ein = g.e_inputs();
  std::string loads, body;
  for (int i : ein) {
    loads += fmt::format("  float x{}[U * V];\n", i);
  }
  loads += "#pragma unroll\n  for (int u = 0; u < U; ++u) {\n    const int64_t i = (base + static_cast<int64_t>(u) * B) * V;\n"
           "    if (i < total) {\n";
  for (int i : ein)
    loads += fmt::format(
        "      if constexpr (V == 4) {{\n        const float4 q = __ldcs(reinterpret_cast<const float4*>(a.in{0} + i));\n"
        "        x{0}[u * 4] = q.x, x{0}[u * 4 + 1] = q.y, x{0}[u * 4 + 2] = q.z, x{0}[u * 4 + 3] = q.w;\n"
        "      }} else {{\n        x{0}[u] = __ldcs(a.in{0} + i);\n      }}\n",
        i);
  loads += "    }\n  }\n";
  std::vector<int> outs;
  for (const auto& o : p.outputs) outs.push_back(o.second);
  const std::string elem = g.element(outs, [](int i) { return fmt::format("x{}[u * V + v]", i); }, "c", "        ");
  body += "#pragma unroll\n  for (int u = 0; u < U; ++u) {\n    const int64_t i = (base + static_cast<int64_t>(u) * B) * V;\n"
          "    if (i < total) {\n";
  if (cols) body += "      const int64_t c0 = i % n;\n";
  for (size_t j = 0; j < p.outputs.size(); ++j) body += fmt::format("      float o{}[V];\n", j);
  body += "#pragma unroll\n      for (int v = 0; v < V; ++v) {\n";
  if (cols) body += "        const int64_t c = c0 + v;\n";
  body += elem;
  for (size_t j = 0; j < p.outputs.size(); ++j) body += fmt::format("        o{}[v] = {};\n", j, g.value(p.outputs[j].second));
  body += "      }\n";
  for (size_t j = 0; j < p.outputs.size(); ++j)
    body += fmt::format(
        "      if constexpr (V == 4) __stcs(reinterpret_cast<float4*>(a.out{0} + i), make_float4(o{0}[0], o{0}[1], o{0}[2], o{0}[3]));\n"
        "      else __stcs(a.out{0} + i, o{0}[0]);\n",
        j);
  body += "    }\n  }\n";
  s += fmt::format(R"(
template <int V>
__global__ void __launch_bounds__(B) kfab_flat(Args a, int64_t total, int64_t n) {{
  const int64_t rows = n > 0 ? total / n : 0;
  (void)rows;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * B * U + threadIdx.x;
{kconst}{loads}{body}}}
)",
                   fmt::arg("kconst", kconst), fmt::arg("loads", loads), fmt::arg("body", body));
  const std::string launch = R"(  if (total == 0) return 0;
  const int v = vec ? 4 : 1;
  const int64_t blocks = (total / v + static_cast<int64_t>(B) * U - 1) / (static_cast<int64_t>(B) * U);
  if (blocks > 2147483647) return 6;
  if (vec) kfab_flat<4><<<static_cast<unsigned>(blocks), B, 0, stream>>>(a, total, n);
  else kfab_flat<1><<<static_cast<unsigned>(blocks), B, 0, stream>>>(a, total, n);
)";
  // a total that is not a multiple of 4 cannot take the float4 path
  s += host(p, g, "  vec = vec && total % 4 == 0;\n" + launch);
  return s;
}

// The generated text of a kernel family: definitions and kernels, then the statements in kfab_run
// that launch them (after the checks).
struct Parts {
  std::string code;
  std::string launch;
};

// The two ways to reach a row's elements: cached in registers, or streamed from global memory.
std::string row_loop(bool cached, const std::string& inner) {
  if (cached)
    return "#pragma unroll\n  for (int it = 0; it < IT; ++it) {\n    const int64_t c0 = (static_cast<int64_t>(it) * G + lane) * V;\n"
           "    if (c0 < n) {\n#pragma unroll\n      for (int v = 0; v < V; ++v) {\n        const int64_t c = c0 + v;\n" +
           inner + "      }\n    }\n  }\n";
  return "  for (int64_t c0 = static_cast<int64_t>(lane) * V; c0 < n; c0 += static_cast<int64_t>(G) * V) {\n"
         "#pragma unroll\n      for (int v = 0; v < V; ++v) {\n        const int64_t c = c0 + v;\n" +
         inner + "      }\n  }\n";
}
std::function<std::string(int)> row_access(bool cached) {
  if (cached) return [](int i) { return fmt::format("x{}[it * V + v]", i); };
  return [](int i) { return fmt::format("__ldg(a.in{} + r0 + c)", i); };
}

// A pick of a row's element at a per-row column (NAN out of range), as r<k>.
void emit_pick(const Program& p, const Gen& g, size_t k, std::vector<bool>& picked, std::string& b) {
    const PNode& n = p.nodes[k];
    picked[k] = true;
    const PNode& ix = p.nodes[n.args[1]];
    const std::string col = ix.op == "in" && p.inputs[ix.input].integer ? fmt::format("static_cast<int64_t>(qi{})", ix.input)
                                                                        : fmt::format("static_cast<int64_t>({})", g.value(n.args[1]));
    b += fmt::format("  float r{} = NAN;\n  {{\n    const int64_t c = {};\n    if (c >= 0 && c < n) {{\n", k, col);
    b += g.element({n.args[0]}, [](int i) { return fmt::format("__ldg(a.in{} + r0 + c)", i); }, "c", "      ");
    b += fmt::format("      r{} = {};\n    }}\n  }}\n", k, g.value(n.args[0]));
}

// The row kernel's statements for its per-row values: constants, per-row inputs, row reductions over
// the elements, shares of all-reductions, picks and pointwise values, in the program's order.
void row_statements(const Program& p, const Gen& g, bool cached, std::string& b) {
  std::vector<bool> picked(p.nodes.size());
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const PNode& n = p.nodes[k];
    if (!g.live[k] || n.op == "const") continue;
    if (n.cls == VClass::K && !n.after_all) {
      std::vector<std::string> args;
      for (int x : n.args) args.push_back(g.value(x));
      b += fmt::format("  const float k{} = {};\n", k, n.op == "in" ? fmt::format("__ldg(a.in{})", n.input) : pointwise(p, n, args));
      continue;
    }
    if (n.op == "in" && n.cls == VClass::R) {
      const auto& in = p.inputs[n.input];
      if (in.integer) b += fmt::format("  const long long qi{0} = live ? static_cast<long long>(a.in{0}[row]) : 0;\n", n.input);
      b += fmt::format("  const float r{} = {};\n", k,
                       in.integer ? fmt::format("static_cast<float>(qi{})", n.input) : fmt::format("live ? a.in{}[row] : 0.0f", n.input));
      // a pick of an input at this column goes here, before the reductions: its load's latency
      // then overlaps them instead of following them
      for (size_t k2 = k + 1; k2 < p.nodes.size(); ++k2)
        if (g.live[k2] && p.nodes[k2].op == "pick" && p.nodes[k2].args[1] == static_cast<int>(k) &&
            p.nodes[p.nodes[k2].args[0]].op == "in")
          emit_pick(p, g, k2, picked, b);
      continue;
    }
    if (n.cls != VClass::R && !is_all_reduction(n.op)) continue;  // E/C values are computed per element
    if (is_row_reduction(n.op) || g.redslot[k] >= 0) {
      const int arg = n.args[0];
      const int opc = n.op == "rowmax" ? 1 : n.op == "rowmin" ? 2 : 0;
      const char* init = opc == 1 ? "-INFINITY" : opc == 2 ? "INFINITY" : "0.0f";
      const std::string acc = fmt::format("s{}", k);
      b += fmt::format("  float {} = {};\n", acc, init);
      b += row_loop(cached, g.element({arg}, row_access(cached), "c", "        ") +
                            fmt::format("        {0} = kfab_combine<{1}>({0}, {2});\n", acc, opc, g.value(arg)));
      b += fmt::format("  {0} = kfab_group<G, {1}>({0}, red[{2}]);\n", acc, opc, g.redslot[k]);
      if (is_row_reduction(n.op))
        b += fmt::format("  const float r{} = {};\n", k, n.op == "rowmean" ? acc + " / static_cast<float>(n)" : acc);
      else
        b += fmt::format("  if (lane == 0 && live) kfab_part[{}][threadIdx.x / G] += static_cast<double>({});\n", g.allslot[k], acc);
      continue;
    }
    if (is_all_reduction(n.op)) {  // of a per-row value
      b += fmt::format("  if (lane == 0 && live) kfab_part[{}][threadIdx.x / G] += static_cast<double>({});\n", g.allslot[k],
                       g.value(n.args[0]));
      continue;
    }
    if (n.op == "pick") {
      if (!picked[k]) emit_pick(p, g, k, picked, b);
      continue;
    }
    std::vector<std::string> args;  // a per-row pointwise value
    for (int x : n.args) args.push_back(g.value(x));
    b += fmt::format("  const float r{} = {};\n", k, pointwise(p, n, args));
  }
}

// The row kernel's per-element outputs, written a vector at a time, and its per-row ones.
void row_outputs(const Program& p, const Gen& g, bool cached, std::string& b) {
  // outputs
  std::vector<int> eouts;
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const int id = p.outputs[j].second;
    if (p.nodes[id].cls == VClass::E) eouts.push_back(static_cast<int>(j));
    if (p.nodes[id].cls == VClass::R) b += fmt::format("  if (lane == 0 && live) a.out{}[row] = {};\n", j, g.value(id));
  }
  if (!eouts.empty()) {
    std::vector<int> ids;
    for (int j : eouts) ids.push_back(p.outputs[j].second);
    std::string inner = g.element(ids, row_access(cached), "c", "        ");
    for (int j : eouts) inner += fmt::format("        o{}[v] = {};\n", j, g.value(p.outputs[j].second));
    std::string decl, store;
    for (int j : eouts) {
      decl += fmt::format("    float o{}[V];\n", j);
      store += fmt::format(
          "    if constexpr (V == 4) __stcs(reinterpret_cast<float4*>(a.out{0} + r0 + c0), make_float4(o{0}[0], o{0}[1], o{0}[2], o{0}[3]));\n"
          "    else __stcs(a.out{0} + r0 + c0, o{0}[0]);\n",
          j);
    }
    const std::string guard = "    if (!live) continue;\n";
    if (cached)
      b += "#pragma unroll\n  for (int it = 0; it < IT; ++it) {\n    const int64_t c0 = (static_cast<int64_t>(it) * G + lane) * V;\n"
           "    if (c0 >= n) continue;\n" + guard + decl + "#pragma unroll\n    for (int v = 0; v < V; ++v) {\n      const int64_t c = c0 + v;\n" +
           inner + "    }\n" + store + "  }\n";
    else
      b += "  for (int64_t c0 = static_cast<int64_t>(lane) * V; c0 < n; c0 += static_cast<int64_t>(G) * V) {\n" + guard + decl +
           "#pragma unroll\n    for (int v = 0; v < V; ++v) {\n      const int64_t c = c0 + v;\n" + inner + "    }\n" + store + "  }\n";
  }
}

// A row kernel's body: cached (the row in registers) or streamed.
std::string row_kernel_body(const Program& p, const Gen& g, bool cached, bool any_k_out) {
  const auto ein = g.e_inputs();
  std::string b;
  b += "  const int lane = threadIdx.x % G;\n";
  b += "  __shared__ float red_s[NRED][G > 32 ? G / 32 : 1];\n  float* red[NRED];\n#pragma unroll\n"
       "  for (int k = 0; k < NRED; ++k) red[k] = red_s[k];\n  (void)red;\n";
  if (any_k_out)
    b += "  __shared__ double kfab_part[NALL][B / G];  // the block's rows' shares of each all-reduction\n"
         "  if (lane == 0)\n#pragma unroll\n    for (int k = 0; k < NALL; ++k) kfab_part[k][threadIdx.x / G] = 0.0;\n";
  // A block takes B / G rows at a time (a chunk), chunk blockIdx.x, then gridDim.x further on: one
  // chunk a block when the grid has a block a chunk; with a grid of resident blocks (persist) a
  // block goes on to its next rows at once, and pays its all-reductions' atomics and counter once.
  b += "  const int64_t chunks = (rows + B / G - 1) / (B / G);\n"
       "  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {\n"
       "  const int64_t row = chunk * (B / G) + threadIdx.x / G;\n"
       "  const bool live = row < rows;\n  const int64_t r0 = (live ? row : 0) * n;\n";
  if (cached) {
    for (int i : ein) b += fmt::format("  float x{}[IT * V];\n", i);
    std::string ld;
    for (int i : ein)
      ld += fmt::format(
          "      if constexpr (V == 4) {{\n        const float4 q = __ldcs(reinterpret_cast<const float4*>(a.in{0} + r0 + c0));\n"
          "        x{0}[it * 4] = q.x, x{0}[it * 4 + 1] = q.y, x{0}[it * 4 + 2] = q.z, x{0}[it * 4 + 3] = q.w;\n"
          "      }} else {{\n        x{0}[it] = __ldcs(a.in{0} + r0 + c0);\n      }}\n",
          i);
    b += "#pragma unroll\n  for (int it = 0; it < IT; ++it) {\n    const int64_t c0 = (static_cast<int64_t>(it) * G + lane) * V;\n"
         "    if (c0 < n) {\n" + ld + "    }\n  }\n";
  }
  row_statements(p, g, cached, b);
  row_outputs(p, g, cached, b);
  // the next chunk's reductions reuse the shared slots this one's may still be reading
  b += "  if constexpr (G > 32) {\n    if (chunk + gridDim.x < chunks) __syncthreads();\n  }\n  }  // chunks\n";
  if (any_k_out)  // warp 0 adds the block's shares (one atomic a sum); the last block to finish turns the sums into the scalar outputs
    b += "  __syncthreads();\n  if (threadIdx.x < 32) {\n#pragma unroll\n    for (int k = 0; k < NALL; ++k) {\n      double t = 0.0;\n"
         "      for (int r = threadIdx.x; r < B / G; r += 32) t += kfab_part[k][r];\n"
         "#pragma unroll\n      for (int off = 16; off > 0; off /= 2) t += __shfl_xor_sync(0xffffffffu, t, off);\n"
         "      if (threadIdx.x == 0) atomicAdd(&a.ws[(blockIdx.x % NSPREAD) * NALL + k], t);\n    }\n"
         "    __threadfence();  // the sums, before the block is counted\n"
         "    unsigned last = threadIdx.x == 0 && atomicAdd(&kfab_blocks_done, 1u) == gridDim.x - 1;\n"
         "    last = __shfl_sync(0xffffffffu, last, 0);\n"
         "    if (last) {\n      __threadfence();\n      kfab_finish_scalars(a, rows, n);\n"
         "      if (threadIdx.x == 0) atomicExch(&kfab_blocks_done, 0u);\n    }\n  }\n";
  return b;
}

Parts rows_parts(const Program& p, const Gen& g, const TemplateParams& tp) {
  const int B = param(tp, "block", 256), I = param(tp, "items", 4), P = param(tp, "persist", 0);
  // group=auto: a warp per row where the row fits a warp's registers (and there are rows enough),
  // the whole block per row otherwise, decided per call
  const bool autog = tp.count("group") && tp.at("group") == "auto";
  int G = autog ? B : std::min(param(tp, "group", B), B);
  if (G > 32) G = B;  // more than a warp per row: the whole block
  std::string s;
  s += fmt::format(
      "\nconstexpr int B = {}, G = {}, I = {};  // threads per block, threads per row{}, at most I float4 a thread keeps\n"
      "constexpr int NRED = {}, NALL = {};\n"
      "constexpr int P = {};  // 0: a block a chunk of rows; P > 0: at most P blocks an SM can hold at once, each taking chunks in turn\n"
      "constexpr int NSPREAD = 64;  // all-reduction sums are spread over this many slots (less atomic contention)\n\n",
      B, G, I, autog ? " (or a warp per row of 256-thread blocks, for short rows)" : "", std::max(1, g.n_red), std::max(1, g.n_all), P);
  s += args_struct(p);
  s += R"(__device__ double kfab_ws[NALL * NSPREAD];  // all-reduction sums; zero between calls
__device__ unsigned int kfab_blocks_done;          // blocks of the current launch that have added theirs; zero between calls

// op 0: sum, 1: max, 2: min
template <int OP>
__device__ __forceinline__ float kfab_combine(float x, float y) {
  return OP == 0 ? x + y : OP == 1 ? fmaxf(x, y) : fminf(x, y);
}
// The reduction of v over the G threads of a row. With G > 32 (a whole block) the warps meet in
// `slot`, which no other reduction uses, so one barrier suffices.
template <int G, int OP>
__device__ __forceinline__ float kfab_group(float v, float* slot) {
#pragma unroll
  for (int off = (G < 32 ? G : 32) / 2; off > 0; off /= 2) v = kfab_combine<OP>(v, __shfl_xor_sync(0xffffffffu, v, off));
  if constexpr (G > 32) {
    if (threadIdx.x % 32 == 0) slot[threadIdx.x / 32] = v;
    __syncthreads();
    v = slot[0];
#pragma unroll
    for (int w = 1; w < G / 32; ++w) v = kfab_combine<OP>(v, slot[w]);
  }
  return v;
}
)";
  bool any_k_out = false;  // scalar outputs (all-reductions)
  for (const auto& o : p.outputs) any_k_out = any_k_out || p.nodes[o.second].cls == VClass::K;
  // the scalar outputs, from the all-reductions' sums, which are read and zeroed for the next call
  std::string fin;
  if (any_k_out) {
    fin = g.scalars(
        [](int k, int slot) {
          return fmt::format(
              "  double w{0} = 0.0;\n  for (int s = threadIdx.x; s < NSPREAD; s += 32)\n"
              "    w{0} += __longlong_as_double(static_cast<long long>(atomicExch(reinterpret_cast<unsigned long long*>(&a.ws[s * NALL + {1}]), 0ull)));\n"
              "#pragma unroll\n  for (int off = 16; off > 0; off /= 2) w{0} += __shfl_xor_sync(0xffffffffu, w{0}, off);\n",
              k, slot);
        },
        [](int) { return false; });
    // one warp runs it: lane 0 stores
    fin = "\n" + fin;
    for (size_t pos = 0; (pos = fin.find("\n  a.out", pos)) != std::string::npos; pos += 10) fin.replace(pos, 3, "\n  if (threadIdx.x == 0) ");
    s += fmt::format(R"(
// Scalar outputs, from the all-reductions' sums (read and zeroed for the next call), by one whole warp.
__device__ void kfab_finish_scalars(const Args& a, int64_t rows, int64_t n) {{
  (void)rows, (void)n;
{}}}

// The same when there are no rows (no row kernel ran).
__global__ void kfab_finish(Args a, int64_t rows, int64_t n) {{
  if (threadIdx.x < 32 && blockIdx.x == 0) kfab_finish_scalars(a, rows, n);
}}
)",
                     fin);
  }
  s += fmt::format(R"(
// A row kernel whose threads keep IT vectors of V floats of their row in registers (rows of up to
// G * IT * V elements), G threads a row, B a block.
template <int B, int G, int V, int IT>
__global__ void __launch_bounds__(B) kfab_rows_cached(Args a, int64_t rows, int64_t n) {{
{}}}

// The same for longer rows: every pass over the row reads it from global memory (L2 for the later ones).
template <int B, int G, int V>
__global__ void __launch_bounds__(B) kfab_rows_stream(Args a, int64_t rows, int64_t n) {{
{}}}

// How many blocks of `threads` threads of the kernel the device holds at once (found once per kernel
// and device; 0 when CUDA cannot say).
int64_t kfab_resident(const void* kernel, int threads) {{
  static std::mutex mu;
  static std::vector<std::pair<std::pair<const void*, int>, int64_t>> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& k : known)
    if (k.first.first == kernel && k.first.second == dev) return k.second;
  int sms = 0, per = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, 0) != cudaSuccess) {{
    (void)cudaGetLastError();
    return 0;
  }}
  known.push_back({{{{kernel, dev}}, static_cast<int64_t>(sms) * per}});
  return known.back().second;
}}

// Launches a row kernel over `chunks` chunks of rows: a block a chunk, or with P > 0 at most P times
// the blocks the device holds at once, each block taking chunks in turn.
template <class K>
void kfab_go(K kernel, int64_t chunks, int threads, cudaStream_t stream, const Args& a, int64_t rows, int64_t n) {{
  int64_t blocks = chunks;
  if constexpr (P > 0) {{
    const int64_t cap = P * kfab_resident(reinterpret_cast<const void*>(kernel), threads);
    if (cap > 0 && cap < blocks) blocks = cap;
  }}
  kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a, rows, n);
}}
)",
                   row_kernel_body(p, g, true, any_k_out), row_kernel_body(p, g, false, any_k_out));
  // The smallest register footprint that holds the row: IT = 1, 2, 4 .. I float4 per thread, so that
  // one parameter point fits every row length (a task's tuning shapes may differ in it).
  auto pick_it = [&](const std::string& bt, const std::string& gt, const std::string& blocks) {
    std::string c;
    for (int it = 1; it <= I; it *= 2)
      c += fmt::format(
          "{0}if (n <= static_cast<int64_t>({2}) * {3} * 4) {{\n"
          "      if (vec) kfab_go(kfab_rows_cached<{1}, {2}, 4, {3}>, {4}, {1}, stream, a, rows, n);\n"
          "      else kfab_go(kfab_rows_cached<{1}, {2}, 1, {5}>, {4}, {1}, stream, a, rows, n);\n    }}",
          it == 1 ? "    " : " else ", bt, gt, it, blocks, it * 4);
    return c;
  };
  std::string launch = R"(  if (rows > 0) {
    const int64_t blocks = (rows + B / G - 1) / (B / G);
    if (blocks > 2147483647) return 6;
)";
  if (autog)
    launch += "    // short rows, and enough of them: a warp per row, 8 rows a block\n"
              "    if (n <= 32 * 4 * I && rows >= 2048) {\n" +
              pick_it("256", "32", "(rows + 7) / 8") + "\n    } else\n";
  launch += pick_it("B", "G", "blocks") + R"( else if (vec) {
      kfab_go(kfab_rows_stream<B, G, 4>, blocks, B, stream, a, rows, n);
    } else {
      kfab_go(kfab_rows_stream<B, G, 1>, blocks, B, stream, a, rows, n);
    }
  }
)";
  if (any_k_out) launch += "  if (rows == 0) kfab_finish<<<1, 32, 0, stream>>>(a, rows, n);\n";
  return {s, launch};
}

std::string generate_rows(const Program& p, const TemplateParams& tp, const std::string& title) {
  Gen g(p);
  const int B = param(tp, "block", 256);
  const int G = std::min(param(tp, "group", B), B) > 32 ? B : std::min(param(tp, "group", B), B);
  const bool autog = tp.count("group") && tp.at("group") == "auto";
  std::string s = fmt::format("// Generated by kfab's built-in tuner: {} ({}).\n// A row kernel ({} threads per row); the program:\n", title,
                              format_params(tp), autog ? fmt::format("a warp or {}", B) : std::to_string(G));
  for (const auto& line : split_lines(p.describe())) s += "//   " + line + "\n";
  s += kPrelude;
  s += kHostHelpers;
  const Parts parts = rows_parts(p, g, tp);
  s += parts.code;
  s += host(p, g, parts.launch);
  return s;
}

constexpr const char* kCpuPrelude = R"(#include <kfab/candidate.h>

#include <cmath>
#include <cstdint>

namespace {

// The generator writes the CUDA spellings; on the host they are plain loads and a division.
template <class T>
inline T __ldg(const T* p) { return *p; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
)";

// after the polynomial exp (poly_exp_source())
constexpr const char* kCpuActivations = R"(
inline float kfab_gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f)); }
inline float kfab_gelu_tanh(float x) { return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
)";

// The statements of kfab_run that compute the program over [rows, n] on the host.
std::string cpu_launch(const Program& p, const Gen& g, const TemplateParams& tp) {
  const std::string sched = tp.count("schedule") && tp.at("schedule") == "dynamic" ? "dynamic, 4" : "static";
  auto access = [](int i) { return fmt::format("a.in{}[r0 + c]", i); };
  std::string body, kconst;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const PNode& n = p.nodes[k];
    if (!g.live[k] || n.op == "const") continue;
    if (n.cls == VClass::K && !n.after_all) {
      std::vector<std::string> args;
      for (int x : n.args) args.push_back(g.value(x));
      kconst += fmt::format("  const float k{} = {};\n", k, n.op == "in" ? fmt::format("__ldg(a.in{})", n.input) : pointwise(p, n, args));
      continue;
    }
    if (n.op == "in" && n.cls == VClass::R) {
      const auto& in = p.inputs[n.input];
      if (in.integer) body += fmt::format("    const long long qi{0} = static_cast<long long>(a.in{0}[row]);\n", n.input);
      body += fmt::format("    const float r{} = {};\n", k,
                          in.integer ? fmt::format("static_cast<float>(qi{})", n.input) : fmt::format("a.in{}[row]", n.input));
      continue;
    }
    if (n.cls != VClass::R && !is_all_reduction(n.op)) continue;
    if (is_row_reduction(n.op) || g.redslot[k] >= 0) {
      const int arg = n.args[0];
      const bool mx = n.op == "rowmax", mn = n.op == "rowmin";
      body += fmt::format("    float s{} = {};\n", k, mx ? "-INFINITY" : mn ? "INFINITY" : "0.0f");
      body += fmt::format("#pragma omp simd reduction({} : s{})\n", mx ? "max" : mn ? "min" : "+", k);
      body += "    for (int64_t c = 0; c < n; ++c) {\n" + g.element({arg}, access, "c", "      ");
      if (mx) body += fmt::format("      s{0} = {1} > s{0} ? {1} : s{0};\n", k, g.value(arg));
      else if (mn) body += fmt::format("      s{0} = {1} < s{0} ? {1} : s{0};\n", k, g.value(arg));
      else body += fmt::format("      s{} += {};\n", k, g.value(arg));
      body += "    }\n";
      if (is_row_reduction(n.op)) body += fmt::format("    const float r{0} = {1};\n", k, n.op == "rowmean" ? fmt::format("s{} / static_cast<float>(n)", k) : fmt::format("s{}", k));
      else body += fmt::format("    acc{} += static_cast<double>(s{});\n", g.allslot[k], k);
      continue;
    }
    if (is_all_reduction(n.op)) {
      body += fmt::format("    acc{} += static_cast<double>({});\n", g.allslot[k], g.value(n.args[0]));
      continue;
    }
    if (n.op == "pick") {
      const PNode& ix = p.nodes[n.args[1]];
      const std::string col = ix.op == "in" && p.inputs[ix.input].integer ? fmt::format("static_cast<int64_t>(qi{})", ix.input)
                                                                          : fmt::format("static_cast<int64_t>({})", g.value(n.args[1]));
      body += fmt::format("    float r{} = NAN;\n    {{\n      const int64_t c = {};\n      if (c >= 0 && c < n) {{\n", k, col);
      body += g.element({n.args[0]}, access, "c", "        ");
      body += fmt::format("        r{} = {};\n      }}\n    }}\n", k, g.value(n.args[0]));
      continue;
    }
    std::vector<std::string> args;
    for (int x : n.args) args.push_back(g.value(x));
    body += fmt::format("    const float r{} = {};\n", k, pointwise(p, n, args));
  }
  std::vector<int> eouts;
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const int id = p.outputs[j].second;
    if (p.nodes[id].cls == VClass::E) eouts.push_back(id);
    if (p.nodes[id].cls == VClass::R) body += fmt::format("    a.out{}[row] = {};\n", j, g.value(id));
  }
  if (!eouts.empty()) {
    body += "#pragma omp simd\n    for (int64_t c = 0; c < n; ++c) {\n" + g.element(eouts, access, "c", "      ");
    for (size_t j = 0; j < p.outputs.size(); ++j)
      if (p.nodes[p.outputs[j].second].cls == VClass::E) body += fmt::format("      a.out{}[r0 + c] = {};\n", j, g.value(p.outputs[j].second));
    body += "    }\n";
  }
  std::string wdecl, wred;
  for (int k = 0; k < g.n_all; ++k) {
    wdecl += fmt::format("  double acc{} = 0.0;\n", k);
    wred += fmt::format("{}acc{}", wred.empty() ? " reduction(+ : " : ", ", k);
  }
  if (!wred.empty()) wred += ")";
  const std::string fin = g.scalars([](int k, int slot) { return fmt::format("  const double w{} = acc{};\n", k, slot); },
                                     [&](int k) { return !p.nodes[k].after_all && g.live[k]; });  // in kconst
  const std::string launch = fmt::format(R"(  (void)vec;
{kconst}{wdecl}#pragma omp parallel for schedule({sched}){wred} if (total > 32768)
  for (int64_t row = 0; row < rows; ++row) {{
    const int64_t r0 = row * n;
    (void)r0;
{body}  }}
{fin})",
                                         fmt::arg("kconst", kconst), fmt::arg("wdecl", wdecl), fmt::arg("sched", sched), fmt::arg("wred", wred),
                                         fmt::arg("body", body), fmt::arg("fin", fin));
  return launch;
}

// expf -> the vectorisable polynomial (only the program's own calls: the prelude has none)
std::string with_poly_exp(std::string s) {
  for (size_t at = s.find(" expf("); at != std::string::npos; at = s.find(" expf(", at)) s.replace(at, 6, " kfab_exp(");
  for (size_t at = s.find("(expf("); at != std::string::npos; at = s.find("(expf(", at)) s.replace(at, 6, "(kfab_exp(");
  return s;
}

std::string cpu_head(const Program& p, const TemplateParams& tp, const std::string& title, const char* what) {
  std::string s = fmt::format("// Generated by kfab's built-in tuner: {} ({}).\n// {}; the program:\n", title, format_params(tp), what);
  for (const auto& line : split_lines(p.describe())) s += "//   " + line + "\n";
  s += kCpuPrelude;
  s += poly_exp_source();
  s += kCpuActivations;
  s += kHostHelpers;
  s += args_struct(p);
  return s;
}

// The host version: rows split across OpenMP threads, each row's loops vectorised (omp simd);
// all-reductions are OpenMP reductions into doubles.
std::string generate_cpu(const Program& p, const TemplateParams& tp, const std::string& title) {
  Gen g(p);
  std::string s = cpu_head(p, tp, title, "Rows across OpenMP threads, SIMD along each row");
  s += host(p, g, cpu_launch(p, g, tp), false);
  return with_poly_exp(std::move(s));
}

// ---- GEMM with an epilogue ----------------------------------------------------------------------
// C = A @ B over tiles of BM x BN outputs, TM x TN of them per thread, staged through shared memory
// BK deep (two buffers, the next tile loaded into registers while the current one is multiplied).
// A pointwise epilogue is applied as the products leave the registers; one with row reductions
// reads the product back in a row kernel (a second launch).

int product_input(const GemmProgram& gp) {
  for (size_t i = 0; i < gp.bind.size(); ++i)
    if (gp.bind[i] < 0) return static_cast<int>(i);
  return -1;
}

// Whether every live node is per element, per column or a scalar (no rows, no reductions).
bool pointwise_only(const Program& p, const Gen& g) {
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const PNode& n = p.nodes[k];
    if (g.live[k] && (n.cls == VClass::R || n.after_all || is_row_reduction(n.op) || is_all_reduction(n.op) || n.op == "pick"))
      return false;
  }
  for (const auto& o : p.outputs)
    if (p.nodes[o.second].cls != VClass::E) return false;
  return true;
}

// The host statements that check A and B and define the output shape [rows, n] and K.
Binding gemm_binding(const GemmProgram& gp, bool cuda) {
  Binding b;
  b.n_in = gp.tensors;
  b.tensor = gp.bind;
  b.shape = fmt::format(R"(  const kfab_tensor& A = in[{a}];
  const kfab_tensor& W = in[{b}];
  if (A.dtype != KFAB_F32 || W.dtype != KFAB_F32 || A.ndim != 2 || W.ndim != 2 || !kfab_dense(A) || !kfab_dense(W)) return 2;
  const int64_t rows = A.shape[0], K = A.shape[1];
  const int64_t n = W.shape[{ncol}];
  if (W.shape[{kdim}] != K) return 2;
  const int64_t total = rows * n;
)",
                        fmt::arg("a", gp.a), fmt::arg("b", gp.b), fmt::arg("ncol", gp.trans_b ? 0 : 1), fmt::arg("kdim", gp.trans_b ? 1 : 0));
  (void)cuda;
  return b;
}

std::string gemm_head(const GemmProgram& gp, const TemplateParams& tp, const std::string& title, const char* what) {
  std::string s = fmt::format("// Generated by kfab's built-in tuner: {} ({}).\n// {}: C = A @ {}, then the epilogue:\n", title,
                              format_params(tp), what, gp.trans_b ? "W^T (W is [N, K])" : "B");
  for (const auto& line : split_lines(gp.epilogue.describe())) s += "//   " + line + "\n";
  return s;
}

/// The end of the CUDA GEMM kernel, over its accumulators acc[TM][TN]: a pointwise epilogue applied in
/// the registers and written to the outputs (`fused`), else the product written for the row kernel.
std::string gemm_cuda_epilogue(const Program& p, Gen& g, int pin, bool fused) {
  std::string epi;
  if (fused) {
    const std::string kconst = g.kconsts();
    std::vector<int> outs;
    for (const auto& o : p.outputs) outs.push_back(o.second);
    epi = kconst + "#pragma unroll\n  for (int ii = 0; ii < TM; ++ii) {\n    const int64_t row = m0 + ty * TM + ii;\n    if (row >= rows) continue;\n"
                   "#pragma unroll\n    for (int jj = 0; jj < TN; ++jj) {\n      const int64_t c = n0 + tx * TN + jj;\n      if (c >= n) continue;\n";
    epi += g.element(
        outs, [&](int i) { return i == pin ? std::string("acc[ii][jj]") : fmt::format("__ldg(a.in{} + row * n + c)", i); }, "c", "      ");
    for (size_t j = 0; j < p.outputs.size(); ++j) epi += fmt::format("      a.out{}[row * n + c] = {};\n", j, g.value(p.outputs[j].second));
    epi += "    }\n  }\n";
  } else {
    epi = "#pragma unroll\n  for (int ii = 0; ii < TM; ++ii) {\n    const int64_t row = m0 + ty * TM + ii;\n    if (row >= rows) continue;\n"
          "#pragma unroll\n    for (int jj = 0; jj < TN; ++jj) {\n      const int64_t c = n0 + tx * TN + jj;\n"
          "      if (c < n) o.C[row * n + c] = acc[ii][jj];\n    }\n  }\n";
  }
  return epi;
}

/// kfab_run's end for the CUDA GEMM: the grid, the float4 choice and the launch; with a row kernel
/// after it, the product's buffer (b.setup), kept between calls.
std::string gemm_cuda_launch(bool fused, int pin, Binding& b) {
  if (!fused)
    b.setup = fmt::format(R"(  // the product's buffer, kept between calls (grown when a shape needs more)
  static float* product = nullptr;
  static int64_t capacity = 0;
  if (total > capacity) {{
    if (product != nullptr) cudaFree(product);
    product = nullptr, capacity = 0;
    if (cudaMalloc(reinterpret_cast<void**>(&product), sizeof(float) * static_cast<size_t>(total)) != cudaSuccess) return 4;
    capacity = total;
  }}
  a.in{} = product;
)",
                          pin);
  std::string launch = fmt::format(R"(  if (total == 0) return 0;
  const int64_t gx = (n + BN - 1) / BN, gy = (rows + BM - 1) / BM;
  if (gx > 2147483647 || gy > 65535) return 6;
  const Operands o{{static_cast<const float*>(A.data), static_cast<const float*>(W.data), {c}}};
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const bool v4 = K % 4 == 0 && (TRANS_B || n % 4 == 0) && kfab_aligned16(A.data) && kfab_aligned16(W.data);
  if (v4) kfab_gemm<true><<<grid, NT, 0, stream>>>(o, a, rows, n, K);
  else kfab_gemm<false><<<grid, NT, 0, stream>>>(o, a, rows, n, K);
)",
                                   fmt::arg("c", fused ? "nullptr" : "product"));
  return launch;
}

std::string generate_gemm_cuda_impl(const GemmProgram& gp, const TemplateParams& tp, const std::string& title) {
  const Program& p = gp.epilogue;
  Gen g(p);
  const int pin = product_input(gp);
  const bool fused = pointwise_only(p, g);
  const int BM = param(tp, "bm", 128), BN = param(tp, "bn", 128), BK = param(tp, "bk", 8), TM = param(tp, "tm", 8), TN = param(tp, "tn", 8);
  std::string s = gemm_head(gp, tp, title, fused ? "A tiled GEMM, epilogue applied to the registers" : "A tiled GEMM, then a row kernel");
  s += kPrelude;
  s += kHostHelpers;
  Parts rows;
  if (fused) {
    s += args_struct(p);
  } else {
    rows = rows_parts(p, g, {{"block", "256"}, {"group", "256"}, {"items", "8"}});  // declares Args too
    s += rows.code;
  }
  const std::string epi = gemm_cuda_epilogue(p, g, pin, fused);
  s += fmt::format(R"(
constexpr int BM = {bm}, BN = {bn}, BK = {bk}, TM = {tm}, TN = {tn};  // block tile, depth, outputs per thread
constexpr int NT = (BM / TM) * (BN / TN);                             // threads per block
constexpr bool TRANS_B = {trans};                                     // B given as W [N, K]
constexpr int LA = BM * BK / NT, LB = BN * BK / NT;                   // tile elements a thread stages
static_assert(LA % 4 == 0 && LB % 4 == 0 && BK % 4 == 0 && BN % 4 == 0, "tiles are staged 4 floats at a time");

struct Operands {{
  const float* __restrict__ A;
  const float* __restrict__ W;
  float* __restrict__ C;  // the product, when a row kernel applies the epilogue
}};

// VEC: A's rows and B's (or W's) rows are read as float4 (K, and N unless TRANS_B, multiples of 4).
template <bool VEC>
__global__ void __launch_bounds__(NT) kfab_gemm(Operands o, Args a, int64_t rows, int64_t n, int64_t K) {{
  __shared__ __align__(16) float As[2][BK][BM];
  __shared__ __align__(16) float Bs[2][BK][BN];
  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN), ty = tid / (BN / TN);
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  float ra[LA], rb[LB];
  // the tile at depth k0 into registers, 4 consecutive floats of a row of A (and of B or W) at a time
  auto load = [&](int64_t k0) {{
#pragma unroll
    for (int i = 0; i < LA / 4; ++i) {{
      const int e = tid + i * NT;
      const int64_t gm = m0 + e / (BK / 4), gk = k0 + (e % (BK / 4)) * 4;
      const float* src = o.A + gm * K + gk;
      if (VEC && gm < rows && gk < K) {{
        const float4 q = __ldg(reinterpret_cast<const float4*>(src));
        ra[i * 4] = q.x, ra[i * 4 + 1] = q.y, ra[i * 4 + 2] = q.z, ra[i * 4 + 3] = q.w;
      }} else {{
#pragma unroll
        for (int q = 0; q < 4; ++q) ra[i * 4 + q] = gm < rows && gk + q < K ? __ldg(src + q) : 0.0f;
      }}
    }}
#pragma unroll
    for (int i = 0; i < LB / 4; ++i) {{
      const int e = tid + i * NT;
      int64_t gr, gc, lim_r, lim_c, ld;
      if constexpr (TRANS_B) {{
        gr = n0 + e / (BK / 4), gc = k0 + (e % (BK / 4)) * 4, lim_r = n, lim_c = K, ld = K;
      }} else {{
        gr = k0 + e / (BN / 4), gc = n0 + (e % (BN / 4)) * 4, lim_r = K, lim_c = n, ld = n;
      }}
      const float* src = o.W + gr * ld + gc;
      if (VEC && gr < lim_r && gc < lim_c) {{
        const float4 q = __ldg(reinterpret_cast<const float4*>(src));
        rb[i * 4] = q.x, rb[i * 4 + 1] = q.y, rb[i * 4 + 2] = q.z, rb[i * 4 + 3] = q.w;
      }} else {{
#pragma unroll
        for (int q = 0; q < 4; ++q) rb[i * 4 + q] = gr < lim_r && gc + q < lim_c ? __ldg(src + q) : 0.0f;
      }}
    }}
  }};
  auto stage = [&](int buf) {{
#pragma unroll
    for (int i = 0; i < LA / 4; ++i) {{
      const int e = tid + i * NT;
      const int r = e / (BK / 4), c = (e % (BK / 4)) * 4;
#pragma unroll
      for (int q = 0; q < 4; ++q) As[buf][c + q][r] = ra[i * 4 + q];
    }}
#pragma unroll
    for (int i = 0; i < LB / 4; ++i) {{
      const int e = tid + i * NT;
      if constexpr (TRANS_B) {{
        const int r = e / (BK / 4), c = (e % (BK / 4)) * 4;
#pragma unroll
        for (int q = 0; q < 4; ++q) Bs[buf][c + q][r] = rb[i * 4 + q];
      }} else {{
        const int r = e / (BN / 4), c = (e % (BN / 4)) * 4;
        *reinterpret_cast<float4*>(&Bs[buf][r][c]) = make_float4(rb[i * 4], rb[i * 4 + 1], rb[i * 4 + 2], rb[i * 4 + 3]);
      }}
    }}
  }};
  float acc[TM][TN] = {{}};
  load(0);
  stage(0);
  __syncthreads();
  int buf = 0;
  for (int64_t k0 = 0; k0 < K; k0 += BK) {{
    const bool more = k0 + BK < K;
    if (more) load(k0 + BK);
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {{
      float av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; i += 4) *reinterpret_cast<float4*>(&av[i]) = *reinterpret_cast<const float4*>(&As[buf][kk][ty * TM + i]);
#pragma unroll
      for (int j = 0; j < TN; j += 4) *reinterpret_cast<float4*>(&bv[j]) = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * TN + j]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }}
    if (more) {{
      stage(buf ^ 1);
      __syncthreads();
      buf ^= 1;
    }}
  }}
  (void)a, (void)o;
{epi}}}
)",
                   fmt::arg("bm", BM), fmt::arg("bn", BN), fmt::arg("bk", BK), fmt::arg("tm", TM), fmt::arg("tn", TN),
                   fmt::arg("trans", gp.trans_b ? "true" : "false"), fmt::arg("epi", epi));
  Binding b = gemm_binding(gp, true);
  std::string launch = gemm_cuda_launch(fused, pin, b);
  if (!fused) launch += rows.launch;
  s += host(p, g, launch, true, &b);
  return s;
}

std::string generate_gemm_cpp_impl(const GemmProgram& gp, const TemplateParams& tp, const std::string& title) {
  const Program& p = gp.epilogue;
  Gen g(p);
  const int pin = product_input(gp);
  std::string s = gemm_head(gp, tp, title, "A blocked GEMM (i-k-j order, SIMD along B's rows), then the epilogue over rows");
  s += "#include <vector>\n\n";
  s += kCpuPrelude;
  s += poly_exp_source();
  s += kCpuActivations;
  s += kHostHelpers;
  s += blocked_gemm_source();
  s += args_struct(p);
  Binding b = gemm_binding(gp, false);
  b.setup = fmt::format(R"(  // the product (and W transposed to [K, N]), in buffers kept between calls
  static std::vector<float> product, wt;
  product.resize(static_cast<size_t>(total));
  const float* ap = static_cast<const float*>(A.data);
  const float* bp = static_cast<const float*>(W.data);
  if ({trans}) {{
    wt.resize(static_cast<size_t>(K * n));
#pragma omp parallel for schedule(static) if (K * n > 262144)
    for (int64_t j0 = 0; j0 < n; j0 += 32)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = j0; j < j0 + 32 && j < n; ++j) wt[k * n + j] = bp[j * K + k];
    bp = wt.data();
  }}
  float* cp = product.data();
  kfab_blocked_gemm<{rows}, {kblock}>(ap, bp, cp, rows, n, K);
  a.in{pin} = cp;
)",
                        fmt::arg("trans", gp.trans_b ? "true" : "false"), fmt::arg("rows", param(tp, "rows", 8)),
                        fmt::arg("kblock", param(tp, "kblock", 256)), fmt::arg("pin", pin));
  s += host(p, g, cpu_launch(p, g, tp), false, &b);
  return with_poly_exp(std::move(s));
}

}  // namespace

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = s.find('\n', pos);
    if (e == std::string::npos) e = s.size();
    out.push_back(s.substr(pos, e - pos));
    pos = e + 1;
  }
  return out;
}

Expected<void> fused_supported(const Program& p) {
  bool main = false;
  for (const auto& in : p.inputs) {
    if (in.integer && in.cls != VClass::R) return make_error("integer input " + in.name + " is not per-row (only class indices are)");
    if (in.cls == VClass::E && !in.integer) main = true;
  }
  if (!main) return make_error("no per-element f32 input: nothing to set the row shape");
  return {};
}

std::vector<TemplateParams> fused_grid(const Program& p, int64_t n) {
  std::vector<TemplateParams> g;
  if (!p.needs_rows()) {
    for (const auto& [b, u] : std::vector<std::pair<int, int>>{{256, 4}, {512, 2}, {256, 2}, {128, 8}})
      g.push_back({{"kernel", "flat"}, {"block", std::to_string(b)}, {"unroll", std::to_string(u)}});
    return g;
  }
  // A warp per row for short rows; a block per row otherwise, most promising first: 256 threads,
  // then 512 and 128, 1024 for long rows. Each point keeps up to 8 float4 a thread and picks the
  // smallest footprint that holds the row at run time; longer rows are streamed.
  // first, a point that takes a warp per row for short rows and a block per row for long ones
  g.push_back({{"kernel", "rows"}, {"block", n > 8192 ? "512" : "256"}, {"group", "auto"}, {"items", "8"}});
  if (n <= 1024) g.push_back({{"kernel", "rows"}, {"block", "256"}, {"group", "32"}, {"items", "8"}});
  for (int b : {256, 512, 128, 1024}) {
    if (static_cast<int64_t>(b) * 4 * 8 < n && b < 1024) continue;  // the row would not fit: streamed
    if (b > 128 && static_cast<int64_t>(b) * 4 > 2 * n) continue;     // more than half the threads would idle
    if (b == 1024 && n < 8192) continue;
    g.push_back({{"kernel", "rows"}, {"block", std::to_string(b)}, {"group", std::to_string(b)}, {"items", "8"}});
  }
  if (g.empty()) g.push_back({{"kernel", "rows"}, {"block", "1024"}, {"group", "1024"}, {"items", "8"}});  // streamed rows
  // A program with a scalar output pays, per block, a reduction, an atomic, a fence and a counter
  // before the block leaves: each point also with resident blocks that take rows in turn (and pay
  // that once), the first also with two blocks' worth a slot.
  bool all = false;
  for (const auto& o : p.outputs) all = all || p.nodes[o.second].cls == VClass::K;
  if (all) {
    const size_t plain = g.size();
    for (size_t i = 0; i < plain; ++i) {
      g.push_back(g[i]);
      g.back()["persist"] = "1";
    }
    g.push_back(g[0]);
    g.back()["persist"] = "2";
  }
  return g;
}

std::string generate_fused_cpp(const Program& p, const TemplateParams& params, const std::string& title) {
  return generate_cpu(p, params, title);
}

std::vector<TemplateParams> fused_cpu_grid() { return {{{"schedule", "static"}}, {{"schedule", "dynamic"}}}; }

std::string generate_fused_cuda(const Program& p, const TemplateParams& tp, const std::string& title) {
  const auto it = tp.find("kernel");
  if (it != tp.end() && it->second == "flat" && !p.needs_rows()) return generate_flat(p, tp, title);
  return generate_rows(p, tp, title);
}

std::string generate_gemm_cuda(const GemmProgram& gp, const TemplateParams& tp, const std::string& title) {
  return generate_gemm_cuda_impl(gp, tp, title);
}

std::string generate_gemm_cpp(const GemmProgram& gp, const TemplateParams& tp, const std::string& title) {
  return generate_gemm_cpp_impl(gp, tp, title);
}

std::vector<TemplateParams> gemm_cpu_grid() {
  std::vector<TemplateParams> g;
  for (const char* mb : {"8", "4", "16"})
    for (const char* kb : {"256", "128"}) g.push_back({{"rows", mb}, {"kblock", kb}});
  return g;
}

std::vector<TemplateParams> gemm_cuda_grid() {
  std::vector<TemplateParams> g;
  // {bm, bn, bk, tm, tn}: 256 threads each; the large tiles first (large GEMMs), the small ones for
  // shapes that would leave most of the GPU idle with them
  for (const auto& t : std::vector<std::array<int, 5>>{
           {128, 128, 8, 8, 8}, {128, 64, 16, 8, 4}, {64, 128, 16, 4, 8}, {64, 64, 16, 4, 4}, {128, 128, 16, 8, 8}})
    g.push_back({{"bm", std::to_string(t[0])}, {"bn", std::to_string(t[1])}, {"bk", std::to_string(t[2])}, {"tm", std::to_string(t[3])},
                 {"tn", std::to_string(t[4])}});
  return g;
}

}  // namespace kfab
