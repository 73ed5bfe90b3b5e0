#pragma once
/// What the tuner's printers (print_cuda.cpp: CUDA C++; print_cpp.cpp: C++ with OpenMP and SIMD)
/// share over a fused row program: which values are live and where their sums go (`Gen`), how a
/// language spells a pointwise op or a load (`Lang`), the order a row's values are computed in
/// (`walk_rows`), and kfab_run's checks of the tensors. Internal to src/tuner/.

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tuner/emitter.h"
#include "tuner/fused.h"
#include "tuner/program.h"
#include "tuner/templates.h"

namespace kfab::rowgen {

/// A float literal (NAN and the infinities by name).
std::string flit(double v);

/// How a language spells the few things that differ between the printers' expressions.
class Lang {
 public:
  virtual ~Lang() = default;
  /// Input `input`'s element at `index` (a scalar input: index empty), read through the cache
  /// where the language has a read-only path.
  virtual std::string load(int input, std::string_view index) const = 0;
  /// exp and 1/sqrt: the device's intrinsics, or functions of the host's prelude.
  virtual std::string_view exp() const = 0;
  virtual std::string_view rsqrt() const = 0;
  /// The function that computes one-argument op `op` (tanh, log, ...) where the language has its own,
  /// else empty (the C library's): the host's SIMD-lane versions (poly_exp.h), which a loop vectorises.
  virtual std::string_view function(std::string_view /*op*/) const { return {}; }
  /// max and min of two operands: the device's fmaxf and fminf; on the host selects that vectorise and,
  /// as torch does, give NaN where either operand is NaN (fmaxf is a call that drops a NaN).
  virtual std::string max(const std::string& a, const std::string& b) const { return "fmaxf(" + a + ", " + b + ")"; }
  virtual std::string min(const std::string& a, const std::string& b) const { return "fminf(" + a + ", " + b + ")"; }
  /// kfab_run's first statement about the stream, and its last.
  virtual std::string_view stream() const = 0;
  virtual std::string_view run_end() const = 0;
};
const Lang& cuda_lang();
const Lang& cpp_lang();

/// A pointwise op over operand expressions (empty for an op that is not pointwise).
std::string pointwise(const Program& p, const PNode& n, const std::vector<std::string>& a, const Lang& lang);

/// An element's input: input index -> its expression.
using Access = std::function<std::string(int)>;

struct Gen {
  const Program& p;
  const Lang& lang;
  std::vector<bool> live;    // needed by an output
  std::vector<int> allslot;  // all-reduction node -> its sum's slot
  std::vector<int> redslot;  // row reduction node -> its reduction's slot
  std::vector<int> colslot;  // column reduction node -> its sums' row in the column workspace a.cs ([n_col][n])
  std::vector<int> colstage; // column reduction node -> its pass over the columns (1, 2, ..: after those it reads)
  /// A per-column value computed from the column reductions that a per-element value reads (a batch
  /// norm's mean and 1 / sqrt(var + eps)) -> its row in a.cv ([n_cv][n]), where a printer computes it
  /// once a column before the rows; -1 elsewhere.
  std::vector<int> cvslot;
  int n_all = 0, n_red = 0, n_col = 0, n_stage = 0, n_cv = 0;

  Gen(const Program& prog, const Lang& l);

  /// The name of a value: a literal, e<k> (per element or column), r<k> (per row) or k<k> (scalar).
  std::string value(int k) const;
  /// A scalar (K) value that is not an all-reduction: a load or a pointwise op.
  std::string scalar_expr(int k) const;
  /// Statements computing the per-element and per-column values `targets` need for one element,
  /// given the element's input access and its column expression (a column reduction's value is read
  /// from the column workspace a.cs, which the passes before the rows filled).
  /// `hoisted`: the values with a cvslot are read from a.cv, not computed.
  /// `over`: nodes whose value is the expression given (their arguments not computed for them).
  /// `recips`: per divisor node, the name of its reciprocal (the CUDA prelude's KfabRecip, taken before
  /// the loop over the row): a division by it is kfab_div_row, a multiply, not a division an element.
  void element(const std::vector<int>& targets, const Access& access, const std::string& col, Emitter& e, bool hoisted = false,
               const std::map<int, std::string>* over = nullptr, const std::map<int, std::string>* recips = nullptr) const;
  /// The divisors that `targets`' per-element values share along a row (a row reduction or a scalar that
  /// is not a constant: level1/38's x / mean(|x|), a softmax's e / sum), each once.
  std::vector<int> shared_divisors(const std::vector<int>& targets) const;
  /// Statements that compute the scalar outputs once the row work is done and store them: `sum(k,
  /// slot, e)` leaves all-reduction k's total (of slot `slot`) in double w<k>; `in_scope(k)` says
  /// whether scalar k is already declared there; `store` prefixes each output's store.
  void scalars(const std::function<void(int, int, Emitter&)>& sum, const std::function<bool(int)>& in_scope, std::string_view store,
               Emitter& e) const;
  /// Statements computing every live scalar value (all-reductions aside: programs with them have rows).
  void kconsts(Emitter& e) const;
  /// Statements computing the scalar values (not all-reductions) that `targets` read per element.
  void kconsts_for(const std::vector<int>& targets, Emitter& e) const;
  /// A row's value at a per-row column (NAN out of range), as r<k>; `access` reads a row's element c.
  void pick(int k, const Access& access, Emitter& e) const;
  /// The inputs read per element, by index.
  std::vector<int> e_inputs() const;
  /// The indices of the outputs of a class.
  std::vector<int> outputs_of(VClass c) const;
  /// The live column reductions computed in pass `stage`.
  std::vector<int> col_nodes(int stage) const;
};

/// The per-row steps of a row program in the order they are computed; each printer spells them.
class RowSteps {
 public:
  virtual ~RowSteps() = default;
  /// A scalar that needs no all-reduction.
  virtual void scalar(int k) = 0;
  /// A per-row input (a float, or an integer class index read as qi<input>).
  virtual void row_input(int k) = 0;
  /// A row reduction of node k's argument (op 0: sum or mean, 1: max, 2: min), or the row's part of
  /// an all-reduction of a per-element value (Gen::redslot says which).
  virtual void reduce(int k, int op) = 0;
  /// The row's share of an all-reduction of a per-row value.
  virtual void share(int k) = 0;
  virtual void pick(int k) = 0;
  /// A per-row pointwise value.
  virtual void row_value(int k, const std::string& expr) = 0;
};
/// Walks the live per-row values in order; a pick of an input at a per-row column comes right after
/// that column's input (its load then overlaps the reductions instead of following them).
void walk_rows(const Gen& g, RowSteps& steps);

/// `struct Args`: the kernel's inputs, outputs, all-reduction workspace and column sums.
void args_struct(const Program& p, Emitter& e);

/// Where kfab_run finds a program's inputs and the [rows, n] shape: by default input i is in[i] and
/// the first per-element f32 input sets the shape; a GEMM's epilogue reads the product, which no
/// tensor holds (tensor -1), over the shape its operands set.
struct Binding {
  int n_in = 0;             // tensors kfab_run takes
  std::vector<int> tensor;  // program input -> in[] index, or -1: set by `setup`
  std::string shape;        // statements that check the shape-setting tensors and define n, total and rows
  std::string prepare;      // statements after the checks, before `setup` (A transposed)
  std::string setup;        // statements after the checks (the product's buffer)
};
Binding default_binding(const Program& p);
/// The A and B checks of a GEMM, which define the output shape [rows, n], K and `a_data` (A's [M, K]
/// floats); for an A given as [K, M], `prepare` transposes it into a buffer (on the device or the host:
/// `cuda`) and points a_data there. A CUDA file that takes it needs tiled_transpose.cuh's kernel.
Binding gemm_binding(const GemmProgram& gp, bool cuda);
/// After a max-pooled GEMM (GemmProgram::pool_max), what takes each window's maximum of the [gm, gn]
/// product in `product` (plus the epilogue's per-column inputs of the full width) into a buffer of
/// [gm, gn / pool] that the epilogue reads as its input `pin` (on the device with pool_columns.cuh's
/// kernel, or on the host); empty otherwise.
std::string max_pool_pass(const GemmProgram& gp, int pin, bool cuda);

/// kfab_run: checks every tensor against its class, then `launch`.
void host(const Gen& g, const Binding& b, const std::string& launch, Emitter& e);

/// A template parameter as an integer.
int param(const TemplateParams& p, const char* k, int dflt);
/// The file's opening comment: what generated it, at which point, and the program.
void head(const std::string& title, const TemplateParams& tp, const std::string& what, const Program& p, Emitter& e);

/// Whether every live node is per element, per column or a scalar (no rows, no reductions).
bool pointwise_only(const Gen& g);

/// The host-side tensor checks every generated file carries (include/kfab/templates/host_checks.h).
std::string_view host_checks();

}  // namespace kfab::rowgen
