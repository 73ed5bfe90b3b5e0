#pragma once
/// A plan of several programs: a KernelBench Model that no one program states, split by the trace
/// (python/kfab_worker/trace.py, _trace_staged) into stages that each are a GEMM with its epilogue or a
/// row program, with buffers between them. KernelBench's level2_45 is two stages (a Linear and a
/// sigmoid; a Linear and a logsumexp), level2_75 three (a Linear and a GroupNorm; the minimum over each
/// row; that minimum plus a [1, N, 1, 1] bias, broadcast to [1, N, M, 1]). The candidate is one source:
/// each stage's kernels in a namespace of their own, and a kfab_run that sizes the buffers from the
/// shapes it is given and runs the stages in order on the one stream.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "tuner/fused.h"
#include "tuner/templates.h"

namespace kfab {

/// A buffer's or a view's dimension: `constant` times the product of the Model's tensors' dimensions
/// `factors` ({tensor, dim}), which kfab_run reads from the shapes it is given.
struct PlanDim {
  int64_t constant = 1;
  std::vector<std::pair<int, int>> factors;
};

struct PlanStage {
  bool is_gemm = false;
  Program program;  ///< the row program, or the GEMM's epilogue (gemm.epilogue is a copy)
  GemmProgram gemm;
  int64_t n = 1024;  ///< its rows' length at the traced shape (the row grid's choice)
  /// Its kfab_run's inputs: for each, the Model's tensor (index < tensors) or buffer (tensors + b).
  std::vector<int> bind;
  /// Its kfab_run's outputs: a buffer's index (>= 0) or the Model's output j (-1 - j).
  std::vector<int> results;
  /// The shape its per-element tensors are passed as (a stage whose main shape is its output's with the
  /// size-1 dimensions left out); empty: as they are.
  std::vector<PlanDim> view;
};

/// Bumped when what generate_plan prints changes (the tuner's cache keys hold it).
inline constexpr int kPlanVersion = 2;

struct Plan {
  int tensors = 0;  ///< the Model's tensors (inputs, then parameters and buffers): kfab_run's inputs
  int outputs = 1;
  std::vector<std::vector<PlanDim>> buffers;
  std::vector<PlanStage> stages;
};

/// The stages, buffers and views of a traced plan ({"stages", "tmps", "tensors"}), each stage's program
/// made from its own traced JSON as the tuner makes a single program's (plan_traced). An Error names
/// what is malformed or which stage the tuner cannot take.
Expected<Plan> parse_plan(const nlohmann::json& traced, const std::string& target);

/// The parameter points of a plan: point i runs each stage at its own grid's point i (its last where it
/// has fewer), the keys prefixed "s<k>."; "precision" is the lowest any stage computes in (the tuner's
/// precision policy reads it).
std::vector<TemplateParams> plan_grid(const Printer& printer, const Plan& plan);

/// The candidate's source: each stage printed by `printer` at its part of `point`, in its own namespace,
/// the `#include` lines first, then kfab_run over the stages.
std::string generate_plan(const Printer& printer, const Plan& plan, const TemplateParams& point, const std::string& title);

}  // namespace kfab
