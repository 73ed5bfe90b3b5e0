#pragma once
/// A fused row program: what a memory-bound task computes, written as a few assignments over its
/// inputs, from which the tuner generates one kernel. Native tasks state it in their manifest
/// (`formula`); KernelBench-format tasks get it from the Python worker, which traces the Model.
///
///   m = rowmean(x)
///   d = x - m
///   y = d * rsqrt(rowmean(d * d) + eps) * w + b
///
/// Every value has a class relative to the main [rows, n] shape (n the last dimension, rows the
/// product of the others): per element (E), per column (C, e.g. a [n] weight), per row (R, e.g. a
/// [rows] target index or a row sum) or a scalar (K). Row reductions (rowsum, rowmean, rowmax,
/// rowmin) turn an E value into an R value; column reductions (colsum, colmean: over the rows, as a
/// training batch norm's statistics) turn an E value that depends on no per-row value into a C value,
/// computed in passes over the columns before the row kernel; pick(e, i) reads e at column i of its row; allsum and
/// allmean reduce E or R values over everything to a K value, which only outputs may use. The names
/// ncols and nrows are the row length and the row count at run time (a batch mean's divisor); colidx
/// (per column) and rowidx (per row) are an element's column and row index, as floats (a triu mask:
/// where(colidx >= rowidx, x, 0)).

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/expected.h"

namespace kfab {

enum class VClass { K = 0, C = 1, R = 2, E = 3 };
char vclass_letter(VClass c);

struct PInput {
  std::string name;
  VClass cls = VClass::E;
  bool integer = false;  ///< an i64/i32 tensor (a class index); read as an integer, used as a float elsewhere
  bool i32 = false;
  /// In a grouped program (Program::groups > 1): a per-channel tensor of the whole product row (N =
  /// groups * n values), read at (row % groups) * n + c; its class is C.
  bool per_channel = false;
  /// After a GEMM whose product's columns are averaged in windows (GemmProgram::pool): a per-column
  /// tensor of the product's full width (a Linear's bias, before the pooling), averaged like them
  /// before the epilogue reads it; 1 otherwise.
  int pool = 1;
};

struct PNode {
  std::string op;  ///< "in", "const", a pointwise op, or a reduction
  std::vector<int> args;
  double value = 0.0;  ///< const
  int input = -1;      ///< in
  VClass cls = VClass::K;
  bool after_all = false;  ///< depends on an all-reduction (computed after the main kernel)
};

struct Program {
  std::vector<PInput> inputs;
  std::vector<PNode> nodes;  ///< topological order
  std::vector<std::pair<std::string, int>> outputs;
  /// How many trailing dimensions of the main tensor a row spans (a layer norm over (C, H, W): 3); the
  /// kernel's n is their product, rows the product of the others.
  int row_dims = 1;
  /// A GEMM's epilogue over groups of the product's columns (a GroupNorm's): each [M, N] product row
  /// splits into `groups` rows of n = N / groups, so that rows = M * groups and a row reduction reduces
  /// one group; per-channel inputs are marked PInput::per_channel.
  int groups = 1;

  bool has(const char* op) const;
  /// Row reductions or picks: the program needs a row (not a flat elementwise) kernel.
  bool needs_rows() const;
  std::string describe() const;  ///< one line per node, for logs and tests
};

bool is_row_reduction(const std::string& op);
bool is_all_reduction(const std::string& op);
bool is_col_reduction(const std::string& op);

/// A GEMM's epilogue `p` over the product (input `acc`, per element) that reads the product only
/// through row sums or means of a linear function of it (rowsum(acc / 2 + bias) * 1.5) needs only the
/// product's row sums: rowsum(c * acc + rest) = c * rowsum(acc) + rowsum(rest), and the row sums of
/// A @ B are A @ (B's sums over the product's columns), a matrix-vector product. The program with that
/// rewrite, its input `acc` now per row (the product's row sums, named acc_rowsum); nullopt where the
/// product is read otherwise (an output, a nonlinear op, a row max, a column reduction, a grouped
/// program).
std::optional<Program> fold_row_sums(const Program& p, int acc);

/// A softmax's row maximum m and the row sum (or mean) s = rowsum(exp(a - m)) of the same a after it, with
/// nothing per row between them and m no output: (m, s) node pairs. A row split over several blocks can
/// combine the two at one meeting (each block's maximum and its part's sum of exp(a - its maximum), then
/// the row's maximum M and sum of s_b exp(m_b - M)), where m and then s took two.
std::vector<std::pair<int, int>> softmax_pairs(const Program& p);

/// A softmax pair (m, s) of softmax_pairs whose a is a per-element input x that nothing after the sum reads
/// but through e = exp(x - m) (the outputs, later reductions): e can take x's place in a row kernel's
/// registers when the sum is made, and the outputs read it from there (scaled by exp(m_b - M) where the
/// maximum was a block's part's), not compute exp a second time. {m, s, the exp node, x's input index}.
struct SoftmaxReuse {
  int max = -1, sum = -1, exp = -1, input = -1;
};
std::optional<SoftmaxReuse> softmax_exp_reuse(const Program& p);

/// The node of the program's first per-column float input (not per channel, not integer; a layer norm's
/// weight), or -1: what a split row kernel keeps in shared memory for the whole run (`colsm`).
int first_column_input(const Program& p);

/// A layer norm's row mean m and the row mean (or sum) v = rowmean((a - m) * (a - m)) of the same a after
/// it, with nothing per row between them and m no output: (m, v) node pairs. Split over blocks, each
/// block brings its part's mean and its sum of squares about it, met once (Chan et al.'s combination:
/// M2 = sum of M2_b + n_b (mean_b - mean)^2) where m and then v took two meetings.
std::vector<std::pair<int, int>> moment_pairs(const Program& p);

/// Parses `text` (statements `name = expr`, separated by newlines or ';', '#' comments) over the
/// given inputs; `outputs` are the names whose final values are the task's outputs; `constants`
/// bind further names to numbers (op_params such as eps). Errors name the statement at fault.
Expected<Program> parse_program(const std::string& text, const std::vector<PInput>& inputs, const std::vector<std::string>& outputs,
                                const std::map<std::string, double>& constants = {});

}  // namespace kfab
