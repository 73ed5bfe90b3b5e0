#pragma once
/// Kernels generated from fused row programs (tuner/program.h): the tuner's templates for
/// elementwise chains, row reductions, softmax-like and norm-like rows and losses, on any task whose
/// computation is known as a program (a native task's `formula`, a traced KernelBench Model).

#include <string>
#include <vector>

#include "core/expected.h"
#include "tuner/program.h"
#include "tuner/templates.h"

namespace kfab {

/// A C++ candidate for the cpu target (OpenMP over rows, SIMD along them).
std::string generate_fused_cpp(const Program& p, const TemplateParams& params, const std::string& title);
std::vector<TemplateParams> fused_cpu_grid();

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

std::vector<std::string> split_lines(const std::string& s);

}  // namespace kfab
