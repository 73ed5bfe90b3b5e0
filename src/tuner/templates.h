#pragma once
/// The built-in tuner's parameterized kernel templates: for an op class and a target, a grid of
/// parameter points, each of which generates one ordinary candidate source file.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/task.h"

namespace kfab {

using TemplateParams = std::map<std::string, std::string>;

struct KernelTemplate {
  std::string name;      ///< e.g. cpu_rowwise_softmax
  std::string target;    ///< cpu, cuda
  int version = 1;       ///< bumped when the generated code changes (part of the tuner's cache key)
  /// Whether the template computes this task (op class and tensor signature).
  bool (*applies)(const Task& task) = nullptr;
  /// Every parameter point, most promising first.
  std::vector<TemplateParams> (*grid)(const Task& task) = nullptr;
  /// The candidate's source for a point.
  std::string (*generate)(const Task& task, const TemplateParams& p) = nullptr;
};

/// The templates that apply to a task on a target.
std::vector<const KernelTemplate*> templates_for(const Task& task, const std::string& target);

/// The shape checks of the cpu templates that the cuda templates share (same tasks, same ABI).
bool cpu_applies_transpose(const Task& task);

/// The cuda templates that are not fused row programs and have no file of their own (transpose).
std::vector<const KernelTemplate*> cuda_templates();

/// The group norm templates (cuda and cpu; op class group_norm with [op_params] groups and eps).
std::vector<const KernelTemplate*> group_norm_templates();

/// The pooling templates (cuda and cpu; op class pool with [op_params] nd, max, the window kd, kh, kw,
/// strides sd, sh, sw, padding pd, ph, pw, dilation dd, dh, dw, ceil_mode, count_include_pad, divisor).
std::vector<const KernelTemplate*> pool_templates();

/// A reduction over one dimension other than the last (cuda and cpu; op class dim_reduce with [op_params]
/// op (0 sum, 1 mean, 2 max, 3 min, 4 argmax, 5 argmin), dim and keepdim; or op class reduction, a
/// native task named for a sum over dim 1 of [B, R, C]).
std::vector<const KernelTemplate*> dim_reduce_templates();

/// Scans along the last dimension (cuda and cpu; op class scan with [op_params] op (0 sum, 1 product),
/// reverse, exclusive and masked (a bool mask as a second input); or op class cumsum, the inclusive sum).
std::vector<const KernelTemplate*> scan_templates();

/// C++ source of `static inline float kfab_exp(float)`: exp as a polynomial that vectorises under
/// `omp simd` (about 2e-7 relative error), for generated cpu candidates (include/kfab/templates/poly_exp.h).
std::string_view poly_exp_source();

/// C++ source of `kfab_blocked_gemm<MB, KB>(a, b, c, m, n, k)`: C = A B (row-major f32), blocked,
/// i-k-j order, rows of C across OpenMP threads, for generated cpu candidates (include/kfab/templates/blocked_gemm.h).
std::string_view blocked_gemm_source();

/// A template by its name (cpu or cuda, fused ones excepted), or null.
const KernelTemplate* template_named(const std::string& name);

/// "a=1, b=x"
std::string format_params(const TemplateParams& p);

/// The task's [op_params] entry `key` as an integer, or `dflt` where it has none.
int op_param(const Task& t, const char* key, int dflt);

/// A family's table of templates as pointers, in its order.
template <size_t N>
std::vector<const KernelTemplate*> template_pointers(const KernelTemplate (&table)[N]) {
  std::vector<const KernelTemplate*> v;
  for (const auto& t : table) v.push_back(&t);
  return v;
}

/// The text of a fixed kernel of include/kfab/templates/ (between its kfab:begin and kfab:end
/// lines), embedded at build time; empty for a name there is none of.
std::string_view template_text(std::string_view name);

}  // namespace kfab
