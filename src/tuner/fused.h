#pragma once
/// Kernels generated from fused row programs (tuner/program.h): the tuner's templates for
/// elementwise chains, row reductions, softmax-like and norm-like rows and losses, on any task whose
/// computation is known as a program (a native task's `formula`, a traced KernelBench Model).

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/expected.h"
#include "tuner/program.h"
#include "tuner/templates.h"

namespace kfab {

/// A C++ candidate for the cpu target (OpenMP over rows, SIMD along them).
std::string generate_fused_cpp(const Program& p, const TemplateParams& params, const std::string& title);
std::vector<TemplateParams> fused_cpu_grid();
/// The same for `p`: first, where its rows start with a row reduction (cpu_rows_interleave), 4 rows
/// at a time (`interleave`), on all threads and on the calling one (`threads` 1).
std::vector<TemplateParams> fused_cpu_grid(const Program& p);
/// Whether a row of `p` starts with a row reduction, which the C++ printer can make for several rows in
/// one pass over the columns (the point's `interleave`).
bool cpu_rows_interleave(const Program& p);

/// Whether the generators can take `p` (an Error saying why not).
Expected<void> fused_supported(const Program& p);

/// The parameter points to search for a program whose rows have `n` elements at the tuning shape.
std::vector<TemplateParams> fused_grid(const Program& p, int64_t n);

/// A CUDA candidate (kfab_run over the program's inputs and outputs, on the given stream).
std::string generate_fused_cuda(const Program& p, const TemplateParams& params, const std::string& title);

/// The program of a native task: its manifest's `formula` over its inputs' names (classes from
/// their symbolic shapes relative to the first input of the highest rank) with [op_params] as
/// constants; an Error when it has none or it does not parse.
Expected<Program> task_program(const Task& task);

/// The tuner's templates for native tasks with a formula, on cuda and on cpu.
const KernelTemplate& fused_cuda_template();
const KernelTemplate& fused_cpu_template();

/// A GEMM with an epilogue: the product A @ B of kfab_run's tensors `a` ([M, K]) and `b` ([K, N], or
/// [N, K] when trans_b: a Linear layer's weight), then `epilogue`, a program over the [M, N] product
/// whose input `acc` is that product and whose other inputs are tensors of kfab_run (`bind`: epilogue
/// input -> tensor index, -1 for acc). A pointwise epilogue is applied in the GEMM's registers; one
/// with row reductions (a norm, a softmax) runs as a row kernel over the product.
struct GemmProgram {
  int a = 0, b = 1;
  bool trans_b = false;
  /// A given as [K, M] (KernelBench's A.T @ B): transposed into a buffer of [M, K] first, a pass
  /// over A that is small beside the product's K-fold reuse of it.
  bool trans_a = false;
  /// A batched product (torch.bmm): A [batch, M, K] (or [batch, K, M]), B [batch, K, N] (or [batch, N, K]);
  /// the product is [batch * M, N], each batch's GEMM on its own slices.
  bool batched = false;
  /// The product's columns averaged in windows of `pool` (an AvgPool1d over a Linear's outputs, stride
  /// its window, no padding): B's columns are averaged first, so the GEMM makes the pooled product
  /// [M, N / pool] directly, pool times fewer columns; 1: none.
  int pool = 1;
  /// With pool > 1: the windows' maximum instead (a MaxPool1d over a Linear's outputs: KernelBench's
  /// level2_55), which no pass over B can make: the GEMM makes the full [M, N] product, a pass takes each
  /// window's maximum of it plus the per-column inputs of pool > 1 (the Linear's bias, added before the
  /// maximum), and the epilogue reads the [M, N / pool] result.
  bool pool_max = false;
  /// The GEMM's dimensions at the tuning shape (a batched product's per batch, an averaged one's pooled N)
  /// and its batch count, which order the grid's points; 0 where unknown (a native task's sizes are symbolic).
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int tensors = 2;
  std::vector<int> bind;
  Program epilogue;
  /// The operands' and the output's element type: F32, or F16/BF16 for a half-precision task (a plain
  /// product, `out = acc`: 16-bit tensor cores accumulating in fp32, rounded to the output's type once;
  /// cuda only, where CUTLASS's headers are present).
  DType dtype = DType::F32;
};

/// The epilogue's input that is the GEMM's product (bind -1), or -1.
int product_input(const GemmProgram& gp);

/// Whether the epilogue is the product itself (out0 = acc, epilogue input `pin`: KernelBench's plain matrix
/// products), which the tensor-core GEMMs then write straight into the output: no buffer, no row pass
/// (which would read and write the product once more: 8 GiB of traffic for level1_7's 4 GiB output).
bool product_is_output(const GemmProgram& gp, int pin);

/// The epilogue folded to read only the product's row sums (fold_row_sums, its product input now per
/// row) where the point asks for it (`fold=rowsum`, or any point when `point` is null) and the GEMM allows
/// it; nullopt otherwise (a batched product: each batch's sums would be a pass of their own, not written).
std::optional<Program> folded_epilogue(const GemmProgram& gp, const TemplateParams* point = nullptr);

std::string generate_gemm_cuda(const GemmProgram& gp, const TemplateParams& params, const std::string& title);
std::string generate_gemm_cpp(const GemmProgram& gp, const TemplateParams& params, const std::string& title);
/// The parameter points for `gp`, most promising first for its dimensions where they are known.
std::vector<TemplateParams> gemm_cuda_grid(const GemmProgram& gp);
std::vector<TemplateParams> gemm_cpu_grid(const GemmProgram& gp);

/// The GEMM program of a native task of op class matmul or matmul_epilogue: inputs A [M, K] and B
/// ([K, N] or [N, K]) first, then the epilogue's; its `formula` over `acc` and the other inputs'
/// names (a matmul without one: the output is acc).
Expected<GemmProgram> task_gemm(const Task& task);

/// The tuner's templates for native GEMM tasks, on cuda and on cpu.
const KernelTemplate& gemm_cuda_template();
const KernelTemplate& gemm_cpu_template();

/// What the tuner prints for one target's language: its templates for row programs and GEMMs with
/// their parameter grids and printers, and its dedicated templates of single-op Models a program
/// cannot state, by the trace's kind. One per language the tuner generates (CUDA C++, C++).
struct Printer {
  std::string_view target;
  const KernelTemplate& (*rows_template)();
  const KernelTemplate& (*gemm_template)();
  std::vector<TemplateParams> (*rows_grid)(const Program& p, int64_t n);
  std::string (*rows)(const Program& p, const TemplateParams& params, const std::string& title);
  std::vector<TemplateParams> (*gemm_grid)(const GemmProgram& gp);
  std::string (*gemm)(const GemmProgram& gp, const TemplateParams& params, const std::string& title);
  std::map<std::string, std::string> dedicated;  ///< trace kind -> template name
};
/// The printer for a target; nullptr where the tuner generates nothing.
const Printer* printer_for(std::string_view target);
/// The targets the tuner generates for ("cuda or cpu").
std::string printer_targets();

std::vector<std::string> split_lines(const std::string& s);

}  // namespace kfab
