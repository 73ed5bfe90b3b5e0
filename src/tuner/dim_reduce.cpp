// Reductions over one dimension that is not the last (cuda and cpu): y = sum, mean, max, min, argmax or
// argmin of an f32 tensor over `dim`, or its RMS normalisation over `dim` (y = x / sqrt(mean(x^2, dim) +
// eps), of x's shape) (op_params op, dim, keepdim, eps; a native task of op class "reduction" named for a
// sum: the sum over dim 1 of [B, R, C]). The tensor is read in its own layout as
// [outer, r, c] (c > 1, the dimensions after `dim`): neighbouring threads take neighbouring columns and
// walk down the rows, so every load is coalesced, however far apart the reduced elements lie.
#include <fmt/format.h>

#include <array>

#include "tuner/templates.h"

namespace kfab {

namespace {

// What the kernel computes: kfab_reduce_op's number (dim_reduce.cuh), the dimension, keepdim.
struct Reduce {
  int op = 0, dim = 1;
  bool keep = false;
  double eps = 0.0;
  bool arg() const { return op == 4 || op == 5; }
  bool rms() const { return op == 6; }
};

Reduce reduce_of(const Task& t) {
  if (t.op_class == "reduction") return {};  // a native middle-dimension sum
  auto eps = t.op_params.find("eps");
  return {op_param(t, "op", -1), op_param(t, "dim", -1), op_param(t, "keepdim", 0) != 0, eps == t.op_params.end() ? 0.0 : eps->second};
}

bool dim_reduce_applies(const Task& t) {
  if (t.inputs.size() != 1 || t.outputs.size() != 1 || t.inputs[0].dtype != DType::F32) return false;
  const auto& x = t.inputs[0].shape;
  const auto& y = t.outputs[0].shape;
  if (t.op_class == "reduction")  // native: the name says which reduction
    return t.outputs[0].dtype == DType::F32 && x.size() == 3 && y.size() == 2 && y[0] == x[0] && y[1] == x[2] &&
           t.name.find("sum") != std::string::npos;
  if (t.op_class != "dim_reduce") return false;
  const Reduce r = reduce_of(t);
  const int nd = static_cast<int>(x.size());
  if (r.op < 0 || r.op > 6 || r.dim < 0 || r.dim + 1 >= nd) return false;
  if (t.outputs[0].dtype != (r.arg() ? DType::I64 : DType::F32)) return false;
  return r.rms() ? y == x : static_cast<int>(y.size()) == (r.keep ? nd : nd - 1);
}

std::string constants(const Task& t) {
  const Reduce r = reduce_of(t);
  static const char* const kNames[] = {"sum", "mean", "max", "min", "argmax", "argmin", "RMS normalisation"};
  return fmt::format(R"(
constexpr int OP = {};          // {} (kfab_reduce_op)
constexpr int32_t DIM = {};     // the dimension reduced
constexpr bool KEEPDIM = {};    // (an RMS normalisation: y has x's shape)
constexpr float EPS = static_cast<float>({:.17g});  // (an RMS normalisation)
using Out = {};
)",
                     r.op, kNames[r.op], r.dim, r.keep || r.rms() ? "true" : "false", r.eps, r.arg() ? "int64_t" : "float");
}

// kfab_run's checks, both targets: x dense f32, y dense of Out's type and x's shape with DIM removed (or
// of extent 1); defines outer, r, c, xp, yp.
constexpr const char* kChecks = R"(  if (in == nullptr || out == nullptr || n_in != 1 || n_out != 1) return 1;
  const kfab_tensor& x = in[0];
  kfab_tensor& y = out[0];
  constexpr kfab_dtype YT = sizeof(Out) == 8 ? KFAB_I64 : KFAB_F32;
  if (!kfab_dense_f32(x) || x.ndim <= DIM + 1 || y.dtype != YT || !kfab_dense(y)) return 2;
  if (y.ndim != (KEEPDIM ? x.ndim : x.ndim - 1)) return 3;
  int64_t outer = 1, c = 1;
  for (int32_t d = 0, e = 0; d < x.ndim; ++d) {
    if (d == DIM) {
      if (KEEPDIM && y.shape[e++] != (OP == 6 ? x.shape[d] : 1)) return 3;
      continue;
    }
    if (y.shape[e++] != x.shape[d]) return 3;
    (d < DIM ? outer : c) *= x.shape[d];
  }
  const int64_t r = x.shape[DIM];
  if (outer == 0 || c == 0) return 0;
  if (r == 0) return 6;  // over an empty dimension (torch refuses a max or an index of nothing): not taken
  const float* xp = static_cast<const float*>(x.data);
  Out* yp = static_cast<Out*>(y.data);
)";

// ---- cuda: a block owns CX column vectors and splits its rows among RY row groups that meet in shared
// memory; a sum or mean splits r across blocks too where the blocks are few ----------------------------

// `ry`: row groups in a block; `blocks`: how many blocks the launch aims for (a sum or a mean: where a
// block a column strip gives fewer, the rows are split across blocks, each split keeping at least 4 rows
// per row group, and the partials meet in y through atomics, y zeroed first).
// The first points differ in the column strip a block reads (CX = block / ry: 32, 64, 128 columns) and
// in how the rows are loaded (`load`: ldg, or ldcs, evict-first; `unroll`: rows in flight a thread), what
// a short search should compare; `blocks` only matters where the columns are few. On an H100, over
// [128, 4096, 4095] (KernelBench's level1/47-53, columns not a multiple of 4), 512 threads, ry 4, ldg: a
// sum 92% of the copy bandwidth and a mean 88% with 8 rows in flight (78% with 4), a max, min or argmax
// 93-94% with either; 256 threads, ry 8, ldcs (the grid's first point before): 74-83%.
std::vector<TemplateParams> cuda_grid(const Task&) {
  std::vector<TemplateParams> g;
  for (const auto& [block, ry, load, unroll] : std::vector<std::array<const char*, 4>>{{"512", "4", "ldg", "8"},
                                                                                       {"512", "4", "ldg", "4"},
                                                                                       {"256", "8", "ldcs", "4"},
                                                                                       {"256", "4", "ldg", "8"},
                                                                                       {"256", "4", "ldg", "4"},
                                                                                       {"256", "4", "ldcs", "4"},
                                                                                       {"512", "16", "ldcs", "4"},
                                                                                       {"256", "16", "ldg", "4"}})
    g.push_back({{"block", block}, {"ry", ry}, {"blocks", "1024"}, {"load", load}, {"unroll", unroll}});
  g.push_back({{"block", "256"}, {"ry", "8"}, {"blocks", "2048"}, {"load", "ldcs"}, {"unroll", "4"}});
  return g;
}

constexpr const char* kCudaLaunch = R"(  if (outer > 65535) return 4;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const bool vec = c % 4 == 0 && kfab_aligned16(xp) && kfab_aligned16(yp);
  const int64_t v = vec ? 4 : 1;
  const int64_t gx = (c / v + CX - 1) / CX;
  int64_t split = (TARGET + gx * outer - 1) / (gx * outer);
  const int64_t most = (r + 4 * RY - 1) / (4 * RY);
  split = split < most ? split : most;
  split = OP >= KFAB_R_MAX || split < 1 ? 1 : (split > 65535 ? 65535 : split);
  if (split > 1)
    if (cudaMemsetAsync(yp, 0, sizeof(Out) * static_cast<size_t>(outer * c), stream) != cudaSuccess) return 5;
  if (gx > 2147483647) return 4;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(split), static_cast<unsigned>(outer));
  bool launched = false;
  if constexpr (OP == KFAB_R_RMS) {  // an RMS normalisation whose rows a thread can keep: x read once
    if (r <= 16 * RY) {
      const int kr = r <= 4 * RY ? 4 : (r <= 8 * RY ? 8 : 16);
      if (vec) {
        if (kr == 4) kfab_dim_reduce<4, Out, 4><<<grid, B, 0, stream>>>(xp, yp, r, c);
        else if (kr == 8) kfab_dim_reduce<4, Out, 8><<<grid, B, 0, stream>>>(xp, yp, r, c);
        else kfab_dim_reduce<4, Out, 16><<<grid, B, 0, stream>>>(xp, yp, r, c);
      } else {
        if (kr == 4) kfab_dim_reduce<1, Out, 4><<<grid, B, 0, stream>>>(xp, yp, r, c);
        else if (kr == 8) kfab_dim_reduce<1, Out, 8><<<grid, B, 0, stream>>>(xp, yp, r, c);
        else kfab_dim_reduce<1, Out, 16><<<grid, B, 0, stream>>>(xp, yp, r, c);
      }
      launched = true;
    }
  }
  if (!launched) {
    if (vec) kfab_dim_reduce<4, Out><<<grid, B, 0, stream>>>(xp, yp, r, c);
    else kfab_dim_reduce<1, Out><<<grid, B, 0, stream>>>(xp, yp, r, c);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
)";

std::string cuda_generate(const Task& t, const TemplateParams& p) {
  std::string s = fmt::format(R"(// Generated by kfab's built-in tuner: a reduction over one dimension, column vectors per thread, rows split within and
// across blocks ({}).
#include <cuda_runtime.h>

#include <cstdint>

#include "kfab/candidate.h"

namespace {{

)",
                              format_params(p));
  s += template_text("host_checks.h");
  s += fmt::format(R"(
constexpr int B = {block}, RY = {ry}, TARGET = {blocks};  // threads per block; row groups per block; blocks the launch aims for
constexpr int CX = B / RY;                                // column vectors per block
constexpr int UNROLL = {unroll};                          // rows whose loads a thread issues before using them
constexpr bool STREAM = {stream};                         // the loads marked evict-first (ldcs)
)",
                   fmt::arg("block", p.at("block")), fmt::arg("ry", p.at("ry")), fmt::arg("blocks", p.at("blocks")),
                   fmt::arg("unroll", p.count("unroll") ? p.at("unroll") : "4"),
                   fmt::arg("stream", p.count("load") && p.at("load") == "ldg" ? "false" : "true"));
  s += constants(t);
  s += template_text("dim_reduce.cuh");
  s += "\n}  // namespace\n\nKFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void* stream_) {\n";
  return s + kChecks + kCudaLaunch;
}

// ---- cpu: blocks of columns across OpenMP threads, each block's running results in a small array ------

// `accumulate`: a sum's or a mean's running type (a max, min or index needs none); `cblock`: columns a block.
std::vector<TemplateParams> cpu_grid(const Task& t) {
  std::vector<TemplateParams> g;
  for (const char* acc : {"float", "double"})
    for (const char* cb : {"256", "1024"})
      if (reduce_of(t).op <= 1 || reduce_of(t).rms()) g.push_back({{"accumulate", acc}, {"cblock", cb}});
      else if (acc[0] == 'f') g.push_back({{"cblock", cb}});
  return g;
}

std::string cpu_generate(const Task& t, const TemplateParams& p) {
  const bool add = reduce_of(t).op <= 1 || reduce_of(t).rms();
  std::string s = fmt::format(R"(// Generated by kfab's built-in tuner: a reduction over one dimension, column blocks ({}).
#include <cmath>
#include <cstdint>

#include "kfab/candidate.h"

namespace {{

)",
                              format_params(p));
  s += template_text("host_checks.h");
  s += constants(t);
  s += "\n}  // namespace\n\nKFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void*) {\n";
  s += kChecks;
  // a sum or mean accumulates in `accumulate`; a max, min or their indices keep the best value so far and
  // its row (a NaN wins and stays; a tie keeps the first row), as torch's do
  s += fmt::format(R"(  constexpr int64_t CB = {cblock};
  [[maybe_unused]] constexpr bool MAXLIKE = OP == 2 || OP == 4;
  const int64_t cblocks = (c + CB - 1) / CB;
#pragma omp parallel for schedule(static) if (outer * r * c > 65536)
  for (int64_t t = 0; t < outer * cblocks; ++t) {{
    const int64_t bb = t / cblocks, c0 = t % cblocks * CB, n = (c0 + CB < c ? c0 + CB : c) - c0;
    const float* xb = xp + bb * r * c + c0;
    Out* yb = yp + bb * c + c0;
{body}
  }}
  return 0;
}}
)",
                   fmt::arg("cblock", p.at("cblock")),
                   fmt::arg("body", add ? fmt::format(R"(    {acc} acc[CB];
    for (int64_t j = 0; j < n; ++j) acc[j] = 0;
    for (int64_t i = 0; i < r; ++i) {{
      const float* row = xb + i * c;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) acc[j] += OP == 6 ? row[j] * row[j] : row[j];
    }}
    if (OP == 6) {{  // x / sqrt(mean(x^2) + EPS), the rows read again
      float d[CB];
      for (int64_t j = 0; j < n; ++j) d[j] = std::sqrt(static_cast<float>(acc[j]) / static_cast<float>(r) + EPS);
      for (int64_t i = 0; i < r; ++i)
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) yp[(bb * r + i) * c + c0 + j] = xb[i * c + j] / d[j];
      continue;
    }}
    for (int64_t j = 0; j < n; ++j) yb[j] = static_cast<float>(OP == 1 ? acc[j] / r : acc[j]);)",
                                                      fmt::arg("acc", p.at("accumulate")))
                                        : std::string(R"(    float best[CB];
    int64_t at[CB];
    for (int64_t j = 0; j < n; ++j) best[j] = xb[j], at[j] = 0;
    for (int64_t i = 1; i < r; ++i) {
      const float* row = xb + i * c;
      for (int64_t j = 0; j < n; ++j) {
        const float v = row[j], b = best[j];
        if (b == b && (v != v || (MAXLIKE ? v > b : v < b))) best[j] = v, at[j] = i;
      }
    }
    for (int64_t j = 0; j < n; ++j) yb[j] = OP >= 4 ? static_cast<Out>(at[j]) : static_cast<Out>(best[j]);)")));
  return s;
}

const KernelTemplate kDimReduce[] = {
    {"cuda_dim_reduce", "cuda", 1, dim_reduce_applies, cuda_grid, cuda_generate},
    {"cpu_dim_reduce", "cpu", 1, dim_reduce_applies, cpu_grid, cpu_generate},
};

}  // namespace

std::vector<const KernelTemplate*> dim_reduce_templates() { return template_pointers(kDimReduce); }

}  // namespace kfab
