// Group normalisation templates of the built-in tuner (cuda and cpu): x [N, C, spatial...] in groups
// of C / groups consecutive channels, statistics per (sample, group) over the group's contiguous
// (C / groups) * spatial values, then a per-channel weight and bias. The group count and eps are
// [op_params] of a native task; a KernelBench Model whose num_groups changes with the shape hands it
// over through kfab_init (op_params groups_init / eps_init: the index of the constructor argument).
// An instance norm without affine weights is one too (op_params groups 0: a group a channel, affine 0:
// x alone, no weight or bias).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "tuner/templates.h"

namespace kfab {

namespace {

bool affine(const Task& t) { return op_param(t, "affine", 1) != 0; }

// What a generated file's first line calls the op.
const char* what(const Task& t) { return affine(t) ? "group norm" : "group norm without weights (an instance norm: a group a channel)"; }

bool gn_applies(const Task& t) {
  if (t.op_class != "group_norm" || t.inputs.size() != (affine(t) ? 3u : 1u) || t.outputs.size() != 1) return false;
  if (!t.op_params.count("groups") || !t.op_params.count("eps") || op_param(t, "groups", -1) < 0) return false;
  const auto& x = t.inputs[0];
  if (x.shape.size() < 3 || t.outputs[0].shape != x.shape || x.dtype != DType::F32 || t.outputs[0].dtype != DType::F32) return false;
  for (size_t i = 1; i < t.inputs.size(); ++i)
    if (t.inputs[i].dtype != DType::F32 || t.inputs[i].shape != std::vector<std::string>{x.shape[1]}) return false;
  return true;
}

// The group count and eps as globals, set by kfab_init where the Model's constructor carries them.
std::string gn_globals(const Task& t) {
  const int gi = op_param(t, "groups_init", -1), ei = op_param(t, "eps_init", -1);
  std::string s = fmt::format("\nint kfab_groups = {};\nfloat kfab_eps = {:.9g}f;\n", op_param(t, "groups", 1), t.op_params.at("eps"));
  if (gi < 0 && ei < 0) return s;
  s += "\n}  // namespace\n\n// The Model's constructor arguments at this shape: its group count and eps.\n"
       "KFAB_EXPORT int kfab_init(const double* init, int32_t n) {\n";
  if (gi >= 0)
    s += fmt::format("  if (n <= {0} || !(init[{0}] >= 1.0) || init[{0}] != std::floor(init[{0}])) return 1;\n"
                     "  kfab_groups = static_cast<int>(init[{0}]);\n",
                     gi);
  if (ei >= 0) s += fmt::format("  if (n <= {0} || !(init[{0}] >= 0.0)) return 1;\n  kfab_eps = static_cast<float>(init[{0}]);\n", ei);
  s += "  return 0;\n}\n\nnamespace {\n";
  return s;
}

// kfab_run's checks: x [N, C, ...], weight and bias [C] (affine), y like x; defines N, C, HW, G, CG, L,
// and wp, bp (null without affine weights). kfab_groups 0: a group a channel (an instance norm).
std::string checks(const Task& t) {
  const bool aff = affine(t);
  return fmt::format(R"(  if (in == nullptr || out == nullptr || n_in != {n_in} || n_out != 1) return 1;
  const kfab_tensor& x = in[0];
  kfab_tensor& y = out[0];
  if (!kfab_dense_f32(x) || !kfab_dense_f32(y) || x.ndim < 3 || y.ndim != x.ndim) return 2;
  int64_t HW = 1;
  for (int32_t d = 0; d < x.ndim; ++d) {{
    if (x.shape[d] != y.shape[d]) return 3;
    if (d >= 2) HW *= x.shape[d];
  }}
  const int64_t N = x.shape[0], C = x.shape[1];
  if (C > 2147483647) return 6;
  const int G = kfab_groups > 0 ? kfab_groups : static_cast<int>(C);
  if (G < 1 || C % G != 0) return 3;
{weights}  const int64_t CG = C / G, L = CG * HW, rows = N * G;  // a row: one (sample, group)
  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  if (rows == 0 || L == 0) return 0;
)",
                     fmt::arg("n_in", aff ? 3 : 1),
                     fmt::arg("weights", aff ? R"(  const kfab_tensor& w = in[1];
  const kfab_tensor& b = in[2];
  if (!kfab_dense_f32(w) || !kfab_dense_f32(b) || w.ndim != 1 || b.ndim != 1) return 2;
  if (w.shape[0] != C || b.shape[0] != C) return 3;
  const float* wp = static_cast<const float*>(w.data);
  const float* bp = static_cast<const float*>(b.data);
)"
                                             : "  const float* wp = nullptr;  // no affine weights: y = (x - mean) * rstd\n"
                                               "  const float* bp = nullptr;\n"));
}

// ---- cuda: a block (or a cluster of blocks) per (sample, group); the group's values stay in
// registers (IT float4 a thread), in shared memory when too many for a cluster's registers, else are
// read again for the output ------------------------------------------------------------------------

// `items`: the most float4 a thread keeps (16 only in a cluster); a group too long for one block's
// registers is split across a cluster of 2 to 16 blocks (Hopper's thread block clusters; 16 where the
// device allows it) that exchange their sums through distributed shared memory, so the group is still read once. The
// statistics take one pass: the sum and the sum of squares of x - x[first of the group] (the shift
// keeps E[d^2] - E[d]^2 free of cancellation for data whose mean is large against its spread).
// A group longer than a cluster of 16 blocks of 256 threads holds (16 x 256 x 8 float4, 131072 values;
// an instance norm of 512 x 512) is read twice by those points: the points whose clusters hold it come
// first, so a search of a few points finds them.
std::vector<TemplateParams> gn_cuda_grid(const Task& t) {
  std::vector<TemplateParams> g = {{{"block", "256"}, {"items", "4"}},  {{"block", "256"}, {"items", "8"}},
                                   {{"block", "512"}, {"items", "4"}},  {{"block", "256"}, {"items", "2"}},
                                   {{"block", "512"}, {"items", "2"}},  {{"block", "1024"}, {"items", "2"}},
                                   {{"block", "1024"}, {"items", "4"}}, {{"block", "512"}, {"items", "8"}},
                                   {{"block", "256"}, {"items", "16"}}};
  // the group's length at the tuning shape: the trace's hint (group_len) for a KernelBench Model, else
  // from a native task's first GPU tuning shape
  int64_t group = op_param(t, "group_len", 0);
  const auto& shapes = t.tune_for(true);
  if (group <= 0 && !shapes.empty() && !t.inputs.empty()) {
    const std::vector<int64_t> x = t.dims(t.inputs[0], shapes.front());
    if (x.size() < 3 || x[1] <= 0) return g;
    group = 1;
    for (size_t d = 1; d < x.size(); ++d) group *= x[d];
    const int groups = op_param(t, "groups", 1);
    group /= groups > 0 ? groups : x[1];
  }
  if (group <= 16 * 256 * 4 * 8) return g;
  // of those, the smaller blocks first: two or more of a cluster's blocks on an SM overlap one's loads
  // with another's stores (a block of 1024 threads alone on its SM idles at each cluster barrier)
  const auto holds = [&](const TemplateParams& p) { return 16 * std::stoll(p.at("block")) * 4 * std::stoll(p.at("items")) >= group; };
  const auto split = std::stable_partition(g.begin(), g.end(), holds);
  std::stable_sort(g.begin(), split, [](const TemplateParams& a, const TemplateParams& b) {
    return std::stoll(a.at("block")) < std::stoll(b.at("block"));
  });
  // then, where 8 blocks' shared memory holds the group (227 KB a block on an H100), the points that keep
  // it there: a portable cluster, one block an SM. On an H100 (level1/34, groups of 512 x 512) the
  // registers of 16 blocks of 256 threads measured 97% of the copy bandwidth, 8 blocks' shared memory
  // 77% (one block an SM idles at the cluster barrier); beyond what 16 blocks' registers hold they are
  // the only points that read the group once.
  if (group * 4 <= 8 * 220 * 1024)
    g.insert(split, {{{"block", "1024"}, {"items", "4"}, {"hold", "smem"}}, {{"block", "512"}, {"items", "4"}, {"hold", "smem"}}});
  return g;
}

std::string gn_cuda_generate(const Task& t, const TemplateParams& p) {
  std::string s = fmt::format("// Generated by kfab's built-in tuner: {}, a block per (sample, group) ({}).\n",
                              what(t), format_params(p));
  s += "#include <cooperative_groups.h>\n#include <cuda_runtime.h>\n\n#include <cmath>\n#include <cstdint>\n#include <mutex>\n#include <utility>\n#include <vector>\n\n#include \"kfab/candidate.h\"\n\n"
       "namespace {\n\n";
  s += template_text("host_checks.h");
  s += gn_globals(t);
  s += fmt::format("\nconstexpr int B = {}, IMAX = {};  // threads per block; the most float4 a thread keeps\n"
                   "constexpr bool HOLD_SMEM = {};  // a long group in a cluster's shared memory first\n",
                   p.at("block"), p.count("items") ? p.at("items") : "8", p.count("hold") && p.at("hold") == "smem" ? "true" : "false");
  s += "\n";
  s += template_text("resident.cuh");     // the cluster launches' configuration
  s += template_text("group_norm.cuh");  // it ends with a blank line
  s += R"(}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void* stream_) {
)";
  s += checks(t);
  s += R"(  if (rows > 2147483647 || L > 2147483647) return 6;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const Gn a{xp, wp, bp, yp, L, HW, CG, G, kfab_eps};
  const bool vec = L % 4 == 0 && (reinterpret_cast<uintptr_t>(xp) & 15u) == 0 && (reinterpret_cast<uintptr_t>(yp) & 15u) == 0;
  const int rc = vec ? kfab_dispatch<4>(a, rows, stream) : kfab_dispatch<1>(a, rows, stream);
  if (rc != 0) return rc;
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
)";
  return s;
}

// ---- cpu: (sample, group) rows across OpenMP threads, SIMD along them ------------------------------

std::vector<TemplateParams> gn_cpu_grid(const Task&) { return {{{"schedule", "static"}}, {{"schedule", "dynamic"}}}; }

std::string gn_cpu_generate(const Task& t, const TemplateParams& p) {
  std::string s = fmt::format("// Generated by kfab's built-in tuner: {}, (sample, group) rows across threads ({}).\n",
                              what(t), format_params(p));
  s += "#include <kfab/candidate.h>\n\n#include <cmath>\n#include <cstdint>\n\nnamespace {\n\n";
  s += template_text("host_checks.h");
  s += gn_globals(t);
  s += "\n}  // namespace\n\nKFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void*) {\n";
  s += checks(t);
  s += fmt::format(R"(  const float eps = kfab_eps;
#pragma omp parallel for schedule({}) if (rows * L > 32768)
  for (int64_t row = 0; row < rows; ++row) {{
    const float* xr = xp + row * L;
    float* yr = yp + row * L;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < L; ++c) s += xr[c];
    const float mean = static_cast<float>(s / static_cast<double>(L));
    double q = 0.0;
#pragma omp simd reduction(+ : q)
    for (int64_t c = 0; c < L; ++c) {{
      const float d = xr[c] - mean;
      q += d * d;
    }}
    const float rstd = 1.0f / std::sqrt(static_cast<float>(q / static_cast<double>(L)) + eps);
    const int64_t ch0 = (row % G) * CG;
    for (int64_t k = 0; k < CG; ++k) {{  // a channel at a time: its weight and bias are constants
      const float sc = wp != nullptr ? rstd * wp[ch0 + k] : rstd, sh = bp != nullptr ? bp[ch0 + k] : 0.0f;
      const float* xc = xr + k * HW;
      float* yc = yr + k * HW;
#pragma omp simd
      for (int64_t c = 0; c < HW; ++c) yc[c] = (xc[c] - mean) * sc + sh;
    }}
  }}
  return 0;
}}
)",
                   p.at("schedule") == "dynamic" ? "dynamic, 4" : "static");
  return s;
}

const KernelTemplate kGroupNorm[] = {
    {"cuda_group_norm", "cuda", 6, gn_applies, gn_cuda_grid, gn_cuda_generate},
    {"cpu_group_norm", "cpu", 2, gn_applies, gn_cpu_grid, gn_cpu_generate},
};

}  // namespace

std::vector<const KernelTemplate*> group_norm_templates() { return template_pointers(kGroupNorm); }

}  // namespace kfab
