// The C++ printer for fused row programs (tuner/program.h) on the host: rows split across OpenMP
// threads, each row's loops vectorised (omp simd), exp as the prelude's polynomial (it vectorises,
// expf does not), all-reductions as OpenMP reductions into doubles. A GEMM runs the blocked GEMM
// (include/kfab/templates/blocked_gemm.h) into a buffer, then the epilogue as a row program over it.
#include <fmt/format.h>

#include <algorithm>

#include "tuner/rowgen.h"

namespace kfab {

using namespace rowgen;

namespace {

constexpr const char* kPrelude = R"(#include <kfab/candidate.h>

#include <cmath>
#include <cstdint>

namespace {
)";

// after the polynomial exp (poly_exp_source())
constexpr const char* kMath = R"(
inline float kfab_rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline float kfab_gelu_erf(float x) { return 0.5f * x * (1.0f + kfab_erf(x * 0.7071067811865476f)); }
inline float kfab_gelu_tanh(float x) { return 0.5f * x * (1.0f + kfab_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))); }

)";

// A row's element c of input i.
std::string row_element(int i) { return fmt::format("a.in{}[roff + c]", i); }

// One row's work inside the loop over rows; the scalars that need no all-reduction go before the
// loop (`before`). With `lead` (the point's `interleave` R > 1), a row reduction that is a row's first
// step is made for R rows at once in one pass over the columns (`lead`, before the R rows' own loop):
// R streams of loads in flight a thread where one row's left a core's bandwidth unused (issue 25:
// l1_matvec's 256 x 8192, 126 us a call on one thread, 86 us with 4 rows at once, as torch's sgemv).
class RowLoop final : public RowSteps {
 public:
  RowLoop(const Gen& g, Emitter& before, Emitter& body, int interleave = 1, Emitter* lead = nullptr)
      : g_(g), p_(g.p), before_(before), e_(body), R_(lead != nullptr ? interleave : 1), lead_(lead) {}

  void scalar(int k) override { before_.linef("const float k{} = {};", k, g_.scalar_expr(k)); }
  void row_input(int k) override {
    ++steps_;
    const int i = p_.nodes[k].input;
    if (p_.inputs[i].integer) {
      e_.linef("const long long qi{0} = static_cast<long long>(a.in{0}[row]);", i).linef("const float r{} = static_cast<float>(qi{});", k, i);
    } else {
      e_.linef("const float r{} = a.in{}[row];", k, i);
    }
  }
  void reduce(int k, int op) override {
    const int arg = p_.nodes[k].args[0];
    const bool lead = R_ > 1 && steps_ == 0 && is_row_reduction(p_.nodes[k].op);
    ++steps_;
    e_.linef("float s{} = {};", k, init(op));
    if (lead) {
      interleaved_ = true;
      lead_pass(k, op);
      std::string pick = fmt::format("s{}_{}", k, R_ - 1);
      for (int r = R_ - 2; r >= 0; --r) pick = fmt::format("i == {} ? s{}_{} : {}", r, k, r, pick);
      e_.open("if (rn == R)").linef("s{} = {};", k, pick).reopen("} else {");
    }
    e_.linef("#pragma omp simd reduction({} : s{})", op == 1 ? "max" : op == 2 ? "min" : "+", k);
    e_.open("for (int64_t c = 0; c < n; ++c)");
    g_.element({arg}, row_element, "c", e_, true);
    e_.line(combine(op, fmt::format("s{}", k), g_.value(arg)));
    e_.close();
    if (lead) e_.close();
    if (is_row_reduction(p_.nodes[k].op))
      e_.linef("const float r{0} = {1};", k, p_.nodes[k].op == "rowmean" ? fmt::format("s{} / static_cast<float>(n)", k) : fmt::format("s{}", k));
    else
      e_.linef("acc{} += static_cast<double>(s{});", g_.allslot[k], k);
  }
  void share(int k) override {
    ++steps_;
    e_.linef("acc{} += static_cast<double>({});", g_.allslot[k], g_.value(p_.nodes[k].args[0]));
  }
  void pick(int k) override {
    ++steps_;
    g_.pick(k, row_element, e_);
  }
  void row_value(int k, const std::string& expr) override {
    ++steps_;
    e_.linef("const float r{} = {};", k, expr);
  }
  /// Whether the first step went to the R rows' pass (the rows then go R at a time).
  bool interleaved() const { return interleaved_; }

  // The per-row outputs, then the per-element ones in one vectorised pass.
  void outputs() {
    for (int j : g_.outputs_of(VClass::R)) e_.linef("a.out{}[row] = {};", j, g_.value(p_.outputs[j].second));
    const std::vector<int> eouts = g_.outputs_of(VClass::E);
    if (eouts.empty()) return;
    std::vector<int> ids;
    for (int j : eouts) ids.push_back(p_.outputs[j].second);
    e_.line("#pragma omp simd").open("for (int64_t c = 0; c < n; ++c)");
    g_.element(ids, row_element, "c", e_, true);
    for (int j : eouts) e_.linef("a.out{}[roff + c] = {};", j, g_.value(p_.outputs[j].second));
    e_.close();
  }

 private:
  static const char* init(int op) { return op == 1 ? "-INFINITY" : op == 2 ? "INFINITY" : "0.0f"; }
  static std::string combine(int op, const std::string& acc, const std::string& v) {
    if (op == 1) return fmt::format("{0} = {1} > {0} ? {1} : {0};", acc, v);
    if (op == 2) return fmt::format("{0} = {1} < {0} ? {1} : {0};", acc, v);
    return fmt::format("{} += {};", acc, v);
  }
  // Reduction k of rows r0 .. r0 + R - 1 in one pass into s<k>_<r> (when the R rows are there: rn == R),
  // each row's element in a scope of its own (the same names, its own roff).
  void lead_pass(int k, int op) {
    const int arg = p_.nodes[k].args[0];
    std::string list;
    for (int r = 0; r < R_; ++r) {
      lead_->linef("float s{}_{} = {};", k, r, init(op));
      list += fmt::format("{}s{}_{}", r == 0 ? "" : ", ", k, r);
    }
    lead_->open("if (rn == R)").linef("#pragma omp simd reduction({} : {})", op == 1 ? "max" : op == 2 ? "min" : "+", list);
    lead_->open("for (int64_t c = 0; c < n; ++c)");
    for (int r = 0; r < R_; ++r) {
      lead_->open("").linef("const int64_t roff = (r0 + {}) * n;", r);
      g_.element({arg}, row_element, "c", *lead_, true);
      lead_->line(combine(op, fmt::format("s{}_{}", k, r), g_.value(arg))).close();
    }
    lead_->close().close();
  }

  const Gen& g_;
  const Program& p_;
  Emitter& before_;
  Emitter& e_;
  int R_;
  Emitter* lead_;
  int steps_ = 0;             // the row's steps so far (a reduction leads only as the first)
  bool interleaved_ = false;
};

// The passes over the columns that compute the program's column reductions (a training batch norm's
// statistics) before the rows: per pass, 64 columns a thread's chunk, summed over the rows in doubles
// into a.cs (kept between calls, grown when a shape needs more).
void column_passes(const Gen& g, Emitter& e) {
  if (g.n_col == 0) return;
  e.line("// the column passes' sums").line("static double* cs = nullptr;").line("static int64_t cs_have = 0;");
  e.linef("const int64_t cs_need = {} * n;", g.n_col);
  e.open("if (cs_need > cs_have)").line("delete[] cs;").line("cs = new double[cs_need];").line("cs_have = cs_need;").close();
  e.line("a.cs = cs;");
  for (int s = 1; s <= g.n_stage; ++s) {
    const std::vector<int> nodes = g.col_nodes(s);
    std::vector<int> args;
    for (int k : nodes) args.push_back(g.p.nodes[k].args[0]);
    e.linef("// column pass {}", s).line("#pragma omp parallel for schedule(static) if (total > 32768)");
    e.open("for (int64_t c0 = 0; c0 < n; c0 += 64)").line("const int64_t c1 = c0 + 64 < n ? c0 + 64 : n;");
    for (size_t j = 0; j < nodes.size(); ++j) e.linef("double s{}[64] = {{}};", j);
    e.open("for (int64_t row = 0; row < rows; ++row)").line("const int64_t roff = row * n;").line("#pragma omp simd");
    e.open("for (int64_t c = c0; c < c1; ++c)");
    g.element(args, row_element, "c", e);
    for (size_t j = 0; j < nodes.size(); ++j) e.linef("s{}[c - c0] += static_cast<double>({});", j, g.value(args[j]));
    e.close().close().open("for (int64_t c = c0; c < c1; ++c)");
    for (size_t j = 0; j < nodes.size(); ++j) e.linef("a.cs[{} * n + c] = s{}[c - c0];", g.colslot[nodes[j]], j);
    e.close().close();
  }
}

// The per-column values the rows read that rest on the column sums (a batch norm's mean and 1 / sqrt(var +
// eps)), once a column into a.cv (kept between calls): per element they cost a double division and a
// square root each (issue 25: l2_linear_batchnorm_gelu at 0.56x eager, 4x faster with them hoisted).
void column_values(const Gen& g, Emitter& e) {
  if (g.n_cv == 0 || g.n_col == 0) return;
  e.line("// the per-column values, once a column").line("static float* cv = nullptr;").line("static int64_t cv_have = 0;");
  e.linef("const int64_t cv_need = {} * n;", g.n_cv);
  e.open("if (cv_need > cv_have)").line("delete[] cv;").line("cv = new float[cv_need];").line("cv_have = cv_need;").close();
  e.line("a.cv = cv;").line("#pragma omp simd").open("for (int64_t c = 0; c < n; ++c)");
  std::vector<int> ids;
  for (size_t k = 0; k < g.cvslot.size(); ++k)
    if (g.cvslot[k] >= 0) ids.push_back(static_cast<int>(k));
  g.element(ids, row_element, "c", e);
  for (int k : ids) e.linef("a.cv[{} * n + c] = {};", g.cvslot[k], g.value(k));
  e.close();
}

// The statements of kfab_run that compute the program over [rows, n].
std::string launch(const Gen& g, const TemplateParams& tp) {
  const Program& p = g.p;
  const int R = std::clamp(param(tp, "interleave", 1), 1, 8);
  Emitter e(1), body(R > 1 ? 3 : 2), lead(2);
  e.line("(void)vec;");
  RowLoop rows(g, e, body, R, &lead);
  walk_rows(g, rows);
  rows.outputs();
  column_passes(g, e);  // after the scalars walk_rows declared, before the rows
  column_values(g, e);
  std::string reduction;
  for (int k = 0; k < g.n_all; ++k) {
    e.linef("double acc{} = 0.0;", k);
    reduction += fmt::format("{}acc{}", reduction.empty() ? " reduction(+ : " : ", ", k);
  }
  if (!reduction.empty()) reduction += ")";
  const bool dynamic = tp.count("schedule") && tp.at("schedule") == "dynamic";
  if (rows.interleaved()) e.linef("constexpr int64_t R = {};  // rows at a time", R);
  // threads=1: the rows on the calling thread (a call too short to pay for waking another)
  if (param(tp, "threads", 0) != 1)
    e.linef("#pragma omp parallel for schedule({}){} if (total > 32768)", dynamic ? "dynamic, 4" : "static", reduction);
  if (rows.interleaved()) {  // R rows at a time: their first reduction in one pass, then each row's own steps
    e.open("for (int64_t r0 = 0; r0 < rows; r0 += R)");
    e.line("const int64_t rn = rows - r0 < R ? rows - r0 : R;").raw(lead.str());
    e.open("for (int64_t i = 0; i < rn; ++i)").line("const int64_t row = r0 + i;");
  } else {
    e.open("for (int64_t row = 0; row < rows; ++row)");
  }
  e.line("const int64_t roff = row * n;").line("(void)roff;").raw(body.str()).close();
  if (rows.interleaved()) e.close();
  g.scalars([](int k, int slot, Emitter& s) { s.linef("const double w{} = acc{};", k, slot); },
            [&](int k) { return !p.nodes[k].after_all && g.live[k]; },  // declared before the loop
            "", e);
  return e.take();
}

void prelude(Emitter& e) { e.raw(kPrelude).raw(poly_exp_source()).raw(kMath).raw(host_checks()).blank(); }

}  // namespace

bool cpu_rows_interleave(const Program& p) {
  const Gen g(p, cpp_lang());
  Emitter before, body, lead;
  RowLoop rows(g, before, body, 2, &lead);
  walk_rows(g, rows);
  return rows.interleaved();
}

std::string generate_fused_cpp(const Program& p, const TemplateParams& tp, const std::string& title) {
  const Gen g(p, cpp_lang());
  Emitter e;
  head(title, tp, "Rows across OpenMP threads, SIMD along each row; the program", p, e);
  prelude(e);
  args_struct(p, e);
  host(g, default_binding(p), launch(g, tp), e);
  return e.take();
}

namespace {

// The start of a GEMM's C++ file: its head (`what`, B named as given), the includes and helpers (with
// `kernels` after them), the epilogue's Args; the binding it goes on with.
Binding gemm_file_start(const GemmProgram& gp, const Program& p, const TemplateParams& tp, const std::string& title, const char* what,
                        std::string_view kernels, Emitter& e, const char* include = nullptr) {
  head(title, tp, fmt::format(fmt::runtime(what), gp.trans_b ? "W^T (W is [N, K])" : "B"), p, e);
  if (include != nullptr) e.line(include);
  e.line("#include <vector>").blank();
  prelude(e);
  if (!kernels.empty()) e.raw(kernels).blank();
  args_struct(p, e);
  return gemm_binding(gp, false);
}

// A GEMM whose epilogue reads the product only through row sums of linear functions of it
// (fold_row_sums): B summed over the product's columns, A times that vector, then the folded
// epilogue over the rows; the product is never formed.
std::string generate_gemm_folded_cpp(const GemmProgram& gp, const Program& p, const TemplateParams& tp, const std::string& title) {
  const Gen g(p, cpp_lang());
  Emitter e;
  Binding b = gemm_file_start(gp, p, tp, title,
                              "The row sums of A @ {} as A @ (B summed over the product's columns), no product formed; then the folded epilogue",
                              gp.trans_a ? blocked_gemm_source() : std::string_view(), e);  // A's transpose
  // in double: the row sums cancel (KernelBench's level2_14: products of about 52 summed to values near 1), and fp32
  // sums in this order measured 22 times the tolerance off the Model run in float64 where eager was 4.6 off
  b.setup = fmt::format(R"(  // B's sums over the product's columns, then the product's row sums, in double, in buffers kept between calls
  static std::vector<double> bsum;
  static std::vector<float> sums;
  bsum.assign(static_cast<size_t>(K), 0.0);
  sums.resize(static_cast<size_t>(gm));
  const float* ap = a_data;
  const float* bp = w_data;
  if ({trans}) {{  // W [gn, K]: each column summed over the rows, 64 columns a thread's block
#pragma omp parallel for schedule(static) if (K * gn > 262144)
    for (int64_t k0 = 0; k0 < K; k0 += 64) {{
      const int64_t k1 = k0 + 64 < K ? k0 + 64 : K;
      double s[64] = {{}};
      for (int64_t j = 0; j < gn; ++j)
#pragma omp simd
        for (int64_t k = k0; k < k1; ++k) s[k - k0] += bp[j * K + k];
      for (int64_t k = k0; k < k1; ++k) bsum[static_cast<size_t>(k)] = s[k - k0];
    }}
  }} else {{  // B [K, gn]: each row summed
#pragma omp parallel for schedule(static) if (K * gn > 262144)
    for (int64_t k = 0; k < K; ++k) {{
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < gn; ++j) s += bp[k * gn + j];
      bsum[static_cast<size_t>(k)] = s;
    }}
  }}
#pragma omp parallel for schedule(static) if (gm * K > 262144)
  for (int64_t i = 0; i < gm; ++i) {{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t k = 0; k < K; ++k) s += static_cast<double>(ap[i * K + k]) * bsum[static_cast<size_t>(k)];
    sums[static_cast<size_t>(i)] = static_cast<float>(s);
  }}
  a.in{pin} = sums.data();
)",
                        fmt::arg("trans", gp.trans_b ? "true" : "false"), fmt::arg("pin", product_input(gp)));
  host(g, b, launch(g, tp), e);
  return e.take();
}

}  // namespace

std::string generate_gemm_cpp(const GemmProgram& gp, const TemplateParams& tp, const std::string& title) {
  if (auto folded = folded_epilogue(gp, &tp)) return generate_gemm_folded_cpp(gp, *folded, tp, title);
  const Program& p = gp.epilogue;
  const Gen g(p, cpp_lang());
  Emitter e;
  if (tp.count("blas")) {
    Binding b = gemm_file_start(gp, p, tp, title, "The host's BLAS (OpenBLAS's sgemm), then the epilogue over rows: C = A @ {}, then the epilogue",
                                blocked_gemm_source(), e, "#include <cblas.h>");
    b.setup = fmt::format(R"(  // the product, in a buffer kept between calls; OpenBLAS takes int dimensions
  static std::vector<float> product;
  product.resize(static_cast<size_t>(gm * gn));
  if (gmb > 2147483647 || gn > 2147483647 || K > 2147483647) return 6;
  // a batch's GEMM on its slices: several batches share the threads out (OpenBLAS's OpenMP build runs a call
  // made inside an active parallel region on its own thread); one batch is OpenBLAS's to spread, outside any
  // region (inside an inactive one its own region would be a nested team, with threads of its own each call)
  const auto gemm = [&](int64_t z) {{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, {trans}, static_cast<int>(gmb), static_cast<int>(gn), static_cast<int>(K), 1.0f, a_data + z * gmb * K,
                static_cast<int>(K), w_data + z * K * gn, static_cast<int>({ldb}), 0.0f, product.data() + z * gmb * gn, static_cast<int>(gn));
  }};
  if (gmb > 0 && gn > 0 && batch > 1) {{
#pragma omp parallel for schedule(static)
    for (int64_t z = 0; z < batch; ++z) gemm(z);
  }} else if (gmb > 0 && gn > 0 && batch == 1) {{
    gemm(0);
  }}
  a.in{pin} = product.data();
)",
                          fmt::arg("trans", gp.trans_b ? "CblasTrans" : "CblasNoTrans"), fmt::arg("ldb", gp.trans_b ? "K" : "gn"),
                          fmt::arg("pin", product_input(gp)));
    b.setup += max_pool_pass(gp, product_input(gp), false);
    host(g, b, launch(g, tp), e);
    return e.take();
  }
  Binding b = gemm_file_start(gp, p, tp, title,
                              "A blocked GEMM (i-k-j order, SIMD along B's rows), then the epilogue over rows: C = A @ {}, then the epilogue",
                              blocked_gemm_source(), e);
  b.setup = fmt::format(R"(  // the product (and W transposed to [K, N]), in buffers kept between calls
  static std::vector<float> product, wt;
  product.resize(static_cast<size_t>(gm * gn));
  for (int64_t z = 0; z < batch; ++z) {{  // a batch's GEMM on its slices
    const float* ap = a_data + z * gmb * K;
    const float* bp = w_data + z * K * gn;
    if ({trans}) {{
      wt.resize(static_cast<size_t>(K * gn));
      kfab_transpose_blocked(bp, wt.data(), gn, K);
      bp = wt.data();
    }}
    kfab_blocked_gemm<{rows}, {kblock}>(ap, bp, product.data() + z * gmb * gn, gmb, gn, K);
  }}
  a.in{pin} = product.data();
)",
                        fmt::arg("trans", gp.trans_b ? "true" : "false"), fmt::arg("rows", param(tp, "rows", 8)),
                        fmt::arg("kblock", param(tp, "kblock", 256)), fmt::arg("pin", product_input(gp)));
  b.setup += max_pool_pass(gp, product_input(gp), false);
  host(g, b, launch(g, tp), e);
  return e.take();
}

}  // namespace kfab
