#pragma once
/// A native task (DESIGN.md section 2.2): what to compute, on which shapes, and how to check it.

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/expected.h"
#include "core/expr.h"

namespace kfab {

enum class InitKind { Normal, Uniform, RandInt, Zeros, Ones, Bernoulli };

/// How an input is filled for a seed. Parameters: normal (a = mean, b = std), uniform and randint
/// (a = low, b = high; randint draws integers in [low, high)), bernoulli (a = p).
struct InitSpec {
  InitKind kind = InitKind::Normal;
  double a = 0.0;
  double b = 1.0;
};

std::string_view init_name(InitKind k);

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::string> shape;  ///< one expression per dimension; empty for a scalar
  InitSpec init;                   ///< inputs only
  std::optional<double> atol;      ///< outputs only: overrides the task's tolerance
  std::optional<double> rtol;
};

struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};

struct Task {
  std::string name;
  std::string summary;
  std::string op_class;
  std::filesystem::path dir;       ///< the task's folder
  std::filesystem::path manifest;  ///< its task.toml
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<ShapeBinding> tune;
  std::vector<ShapeBinding> heldout;
  /// Optional [shapes.gpu] tune = [...]: the tuning shapes on a GPU (cuda, OpenCL on a GPU), where
  /// the CPU's shapes would measure launch latency rather than the kernel. Empty: `tune` everywhere.
  std::vector<ShapeBinding> tune_gpu;
  /// Optional [op_params]: numbers the op class's semantics need (eps of a norm), for the tuner.
  std::map<std::string, double> op_params;
  /// Optional `formula`: what the task computes as a fused row program over its inputs' names
  /// (tuner/program.h), from which the tuner generates kernels, e.g. "y = gelu_tanh(x * a + b)".
  std::string formula;
  std::filesystem::path reference;  ///< absolute path of the reference source: the CPU oracle
  /// Optional ([reference] cuda = "reference.cu"): the GPU baseline candidates are timed against on
  /// the cuda target. Correctness is always judged by `reference`.
  std::filesystem::path reference_cuda;
  std::optional<double> atol;
  std::optional<double> rtol;
  std::string cost_flops;  ///< expression, empty when absent
  std::string cost_bytes;

  /// The tuning shapes on a device of this kind.
  const std::vector<ShapeBinding>& tune_for(bool gpu) const { return gpu && !tune_gpu.empty() ? tune_gpu : tune; }

  /// Tolerance for an output: its own, else the task's, else the dtype's default.
  Tolerance tolerance_for(const TensorSpec& out) const;
  /// The concrete dimensions of a tensor for one shape binding (validated at load time).
  std::vector<int64_t> dims(const TensorSpec& t, const ShapeBinding& b) const;
  std::optional<double> flops(const ShapeBinding& b) const;
  std::optional<double> bytes(const ShapeBinding& b) const;
};

/// Default tolerance of a dtype (fp32 1e-5 abs / 1e-4 rel; fp16 and bf16 1e-2; exact for integers).
Tolerance default_tolerance(DType t);

/// Loads and validates a task from its folder or its task.toml. Every problem is an Error whose
/// message names the file, the line, the field and what would be accepted.
Expected<Task> load_task(const std::filesystem::path& path);

/// Bytes of memory one evaluation of a shape holds at once: the inputs and their snapshot (checked
/// unchanged after each call), the candidate's outputs and the reference's. Overflow is ruled out at
/// load time (load_task refuses a shape past 1 TiB).
uint64_t evaluation_bytes(const Task& task, const ShapeBinding& b);

/// Which shapes check_fits looks at, and how its message names the limit.
struct FitScope {
  bool gpu = false;      ///< the tuning shapes of a GPU (Task::tune_for)
  bool heldout = true;   ///< the held-out shapes too (named by their entry only, never their sizes)
  std::string limit = "the runner may use";  ///< "more than 8.0 GiB <limit>"
  std::string remedy;    ///< appended to the hint, e.g. ", or raise --memory-limit"
};

/// Refuses a task one of whose shapes cannot fit `bytes_available` (evaluation_bytes), before anything
/// runs: the message names the manifest, the largest tensor, the shape entry and the limit.
Expected<void> check_fits(const Task& task, uint64_t bytes_available, const FitScope& scope = {});

/// "M=4096, N=8192"
std::string format_binding(const ShapeBinding& b);

/// The two kinds of task kfab takes: a native task (task.toml, a C++ reference) and a KernelBench-format
/// file (a Python module with Model, get_inputs and get_init_inputs, torch eager as the reference).
enum class TaskFormat { Native, KernelBench };

/// A task as kfab opened it, once: its format decides how every evaluation of it runs (eval/harness.h),
/// what a proposer is shown of it and how the store keys it. For a KernelBench file, `task` carries
/// only its identity: name (the file's stem), dir, manifest and reference (all the file's absolute path).
struct LoadedTask {
  TaskFormat format = TaskFormat::Native;
  std::filesystem::path path;  ///< as given
  Task task;

  bool kernelbench() const { return format == TaskFormat::KernelBench; }
  std::string_view format_name() const { return kernelbench() ? "kernelbench" : "native"; }
};

/// Opens a task: a KernelBench-format file (a regular file ending in .py) or a native task (its folder
/// or task.toml, through load_task). The one place kfab tells the two apart by a path.
Expected<LoadedTask> open_task(const std::filesystem::path& path);
/// A native task already loaded (a folder walk's), as open_task would give it.
LoadedTask loaded_native(Task task, std::filesystem::path path);

}  // namespace kfab
