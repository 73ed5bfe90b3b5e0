// Group normalisation templates of the built-in tuner (cuda and cpu): x [N, C, spatial...] in groups
// of C / groups consecutive channels, statistics per (sample, group) over the group's contiguous
// (C / groups) * spatial values, then a per-channel weight and bias. The group count and eps are
// [op_params] of a native task; a KernelBench Model whose num_groups changes with the shape hands it
// over through kfab_init (op_params groups_init / eps_init: the index of the constructor argument).
#include <fmt/format.h>

#include <cmath>

#include "tuner/templates.h"

namespace kfab {

namespace {

bool gn_applies(const Task& t) {
  if (t.op_class != "group_norm" || t.inputs.size() != 3 || t.outputs.size() != 1) return false;
  if (!t.op_params.count("groups") || !t.op_params.count("eps")) return false;
  const auto& x = t.inputs[0];
  if (x.shape.size() < 3 || t.outputs[0].shape != x.shape) return false;
  for (const auto* s : {&t.inputs[0], &t.inputs[1], &t.inputs[2], &t.outputs[0]})
    if (s->dtype != DType::F32) return false;
  return t.inputs[1].shape == std::vector<std::string>{x.shape[1]} && t.inputs[2].shape == std::vector<std::string>{x.shape[1]};
}

int op_int(const Task& t, const char* k, int dflt) {
  auto it = t.op_params.find(k);
  return it == t.op_params.end() ? dflt : static_cast<int>(it->second);
}

// The group count and eps as globals, set by kfab_init where the Model's constructor carries them.
std::string gn_globals(const Task& t) {
  const int gi = op_int(t, "groups_init", -1), ei = op_int(t, "eps_init", -1);
  std::string s = fmt::format("\nint kfab_groups = {};\nfloat kfab_eps = {:.9g}f;\n", op_int(t, "groups", 1), t.op_params.at("eps"));
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

// kfab_run's checks: x [N, C, ...], weight and bias [C], y like x; defines N, C, HW, G, CG, L.
constexpr const char* kChecks = R"(  if (in == nullptr || out == nullptr || n_in != 3 || n_out != 1) return 1;
  const kfab_tensor& x = in[0];
  const kfab_tensor& w = in[1];
  const kfab_tensor& b = in[2];
  kfab_tensor& y = out[0];
  if (!kfab_dense_f32(x) || !kfab_dense_f32(w) || !kfab_dense_f32(b) || !kfab_dense_f32(y) || x.ndim < 3 || y.ndim != x.ndim ||
      w.ndim != 1 || b.ndim != 1)
    return 2;
  int64_t HW = 1;
  for (int32_t d = 0; d < x.ndim; ++d) {
    if (x.shape[d] != y.shape[d]) return 3;
    if (d >= 2) HW *= x.shape[d];
  }
  const int64_t N = x.shape[0], C = x.shape[1];
  const int G = kfab_groups;
  if (w.shape[0] != C || b.shape[0] != C || G < 1 || C % G != 0) return 3;
  const int64_t CG = C / G, L = CG * HW, rows = N * G;  // a row: one (sample, group)
  const float* xp = static_cast<const float*>(x.data);
  const float* wp = static_cast<const float*>(w.data);
  const float* bp = static_cast<const float*>(b.data);
  float* yp = static_cast<float*>(y.data);
  if (rows == 0 || L == 0) return 0;
)";

constexpr const char* kDense = R"(bool kfab_dense_f32(const kfab_tensor& t) {
  if (t.dtype != KFAB_F32 || t.ndim < 1 || t.data == nullptr || t.shape == nullptr) return false;
  int64_t expect = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0) return false;
    if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}
)";

// ---- cuda: a block (or a cluster of blocks) per (sample, group); the group's values stay in
// registers (IT float4 a thread), in shared memory when too many for a cluster's registers, else are
// read again for the output ------------------------------------------------------------------------

// `items`: the most float4 a thread keeps; a group too long for one block's registers is split across
// a cluster of 2 to 16 blocks (Hopper's thread block clusters; 16 where the device allows it) that
// exchange their sums through distributed shared memory, so the group is still read once. The
// statistics take one pass: the sum and the sum of squares of x - x[first of the group] (the shift
// keeps E[d^2] - E[d]^2 free of cancellation for data whose mean is large against its spread).
std::vector<TemplateParams> gn_cuda_grid(const Task&) {
  return {{{"block", "256"}, {"items", "4"}},  {{"block", "256"}, {"items", "8"}},  {{"block", "512"}, {"items", "4"}},
          {{"block", "256"}, {"items", "2"}},  {{"block", "512"}, {"items", "2"}},  {{"block", "1024"}, {"items", "2"}},
          {{"block", "1024"}, {"items", "4"}}, {{"block", "512"}, {"items", "8"}}};
}

std::string gn_cuda_generate(const Task& t, const TemplateParams& p) {
  std::string s = fmt::format("// Generated by kfab's built-in tuner: group norm, a block per (sample, group) ({}).\n", format_params(p));
  s += "#include <cooperative_groups.h>\n#include <cuda_runtime.h>\n\n#include <cmath>\n#include <cstdint>\n\n#include \"kfab/candidate.h\"\n\n"
       "namespace {\n\n";
  s += kDense;
  s += gn_globals(t);
  s += fmt::format("\nconstexpr int B = {}, IMAX = {};  // threads per block; the most float4 a thread keeps\n", p.at("block"),
                   p.count("items") ? p.at("items") : "8");
  s += R"(
struct Gn {
  const float* __restrict__ x;
  const float* __restrict__ w;
  const float* __restrict__ b;
  float* __restrict__ y;
  int64_t L, HW, CG;
  int G;
  float eps;
};

// Writes V normalised values at element c of a group: (v - mean) * rstd * weight + bias. A vector
// within one channel (the usual case) reads its weight and bias once; one 32-bit division a vector
// finds the channel (a 64-bit one per element would make the kernel compute-bound).
template <int V>
__device__ __forceinline__ void kfab_write(const Gn& a, float* yr, int64_t c, int64_t c0base, const float* vals, float mean, float rstd) {
  const uint32_t hw = static_cast<uint32_t>(a.HW);
  uint32_t q = static_cast<uint32_t>(c) / hw;
  uint32_t r = static_cast<uint32_t>(c) - q * hw;
  float o[V];
  if (r + V <= hw) {
    const float sc = rstd * __ldg(a.w + c0base + q), sh = __ldg(a.b + c0base + q);
#pragma unroll
    for (int k = 0; k < V; ++k) o[k] = (vals[k] - mean) * sc + sh;
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      o[k] = (vals[k] - mean) * rstd * __ldg(a.w + c0base + q) + __ldg(a.b + c0base + q);
      if (++r == hw) r = 0, ++q;
    }
  }
  if constexpr (V == 4) __stcs(reinterpret_cast<float4*>(yr + c), make_float4(o[0], o[1], o[2], o[3]));
  else __stcs(yr + c, o[0]);
}

// The block's totals of (sum, sum of squares): warp shuffles, then one barrier.
__device__ __forceinline__ float2 kfab_block_sum2(float2 v, float2* red) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, off);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, off);
  }
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float2 s = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int k = 0; k < B / 32; ++k) s.x += red[k].x, s.y += red[k].y;
  return s;
}

// mean and 1 / sqrt(var + eps) from the totals of d = x - shift over L values
__device__ __forceinline__ float2 kfab_stats(float2 t, float shift, int64_t L, float eps) {
  const float md = t.x / static_cast<float>(L);
  const float var = fmaxf(t.y / static_cast<float>(L) - md * md, 0.0f);
  return make_float2(shift + md, rsqrtf(var + eps));
}

// IT vectors of V values of a group, from element lo + (it * B + thread) * V below hi, into v;
// returns the thread's (sum, sum of squares) of v - shift.
template <int V, int IT>
__device__ __forceinline__ float2 kfab_load(const float* xr, int64_t lo, int64_t hi, float shift, float* v) {
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int64_t c = lo + (static_cast<int64_t>(it) * B + threadIdx.x) * V;
    if (c < hi) {
      if constexpr (V == 4) {
        const float4 q = __ldcs(reinterpret_cast<const float4*>(xr + c));
        v[it * 4] = q.x, v[it * 4 + 1] = q.y, v[it * 4 + 2] = q.z, v[it * 4 + 3] = q.w;
      } else {
        v[it] = __ldcs(xr + c);
      }
    }
  }
  float2 sq = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int64_t c = lo + (static_cast<int64_t>(it) * B + threadIdx.x) * V;
    if (c < hi)
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = v[it * V + k] - shift;
        sq.x += d;
        sq.y += d * d;
      }
  }
  return sq;
}

// MODE 0: the group in registers (IT vectors of V a thread); 1: in dynamic shared memory; 2: read
// from global memory (L2) again for the output.
template <int MODE, int V, int IT>
__global__ void __launch_bounds__(B) kfab_group_norm(Gn a) {
  __shared__ float2 red[B / 32];
  extern __shared__ float4 cache4[];
  float* cache = reinterpret_cast<float*>(cache4);
  const int64_t row = blockIdx.x;
  const int64_t c0base = static_cast<int64_t>(row % a.G) * a.CG;  // the group's first channel
  const float* xr = a.x + row * a.L;
  float* yr = a.y + row * a.L;
  const int64_t L = a.L;
  const float shift = __ldg(xr);
  float v[MODE == 0 ? IT * V : 1];
  (void)v, (void)cache;
  float2 sq = make_float2(0.0f, 0.0f);
  if constexpr (MODE == 0) {
    sq = kfab_load<V, IT>(xr, 0, L, shift, v);
  } else {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < L; c += static_cast<int64_t>(B) * V) {
      float q[V];
      if constexpr (V == 4) {
        const float4 f = MODE == 1 ? __ldcs(reinterpret_cast<const float4*>(xr + c)) : __ldg(reinterpret_cast<const float4*>(xr + c));
        if constexpr (MODE == 1) cache4[c / 4] = f;
        q[0] = f.x, q[1] = f.y, q[2] = f.z, q[3] = f.w;
      } else {
        q[0] = MODE == 1 ? __ldcs(xr + c) : __ldg(xr + c);
        if constexpr (MODE == 1) cache[c] = q[0];
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = q[k] - shift;
        sq.x += d;
        sq.y += d * d;
      }
    }
  }
  const float2 st = kfab_stats(kfab_block_sum2(sq, red), shift, L, a.eps);
  if constexpr (MODE == 0) {
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int64_t c = (static_cast<int64_t>(it) * B + threadIdx.x) * V;
      if (c < L) kfab_write<V>(a, yr, c, c0base, v + it * V, st.x, st.y);
    }
  } else {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < L; c += static_cast<int64_t>(B) * V) {
      float vals[V];
#pragma unroll
      for (int k = 0; k < V; ++k) vals[k] = MODE == 1 ? cache[c + k] : __ldg(xr + c + k);
      kfab_write<V>(a, yr, c, c0base, vals, st.x, st.y);
    }
  }
}

// A group split across the CL blocks of a cluster, each keeping its part in registers. Each block
// writes its totals into every block's shared memory (after a barrier that says all have started,
// whose arrival is made before the loads); one cluster barrier later every block reads them locally,
// so no block waits for the others to finish reading before it leaves.
template <int CL, int V, int IT>
__global__ void __launch_bounds__(B) kfab_group_norm_cluster(Gn a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");  // this block has started
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float2 red[B / 32];
  __shared__ float2 part[CL];
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / CL;
  const int64_t L = a.L;
  const int64_t chunk = (L + static_cast<int64_t>(CL) * V - 1) / (static_cast<int64_t>(CL) * V) * V;
  const int64_t lo = rank * chunk, hi = lo + chunk < L ? lo + chunk : L;
  const int64_t c0base = static_cast<int64_t>(row % a.G) * a.CG;
  const float* xr = a.x + row * L;
  float* yr = a.y + row * L;
  const float shift = __ldg(xr);
  float v[IT * V];
  const float2 sq = kfab_block_sum2(kfab_load<V, IT>(xr, lo, hi, shift, v), red);
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");  // every block of the cluster has started
  if (threadIdx.x < CL) *cluster.map_shared_rank(&part[rank], static_cast<int>(threadIdx.x)) = sq;
  cluster.sync();
  float2 tot = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int r = 0; r < CL; ++r) tot.x += part[r].x, tot.y += part[r].y;  // in rank order: the same in every block
  const float2 st = kfab_stats(tot, shift, L, a.eps);
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int64_t c = lo + (static_cast<int64_t>(it) * B + threadIdx.x) * V;
    if (c < hi) kfab_write<V>(a, yr, c, c0base, v + it * V, st.x, st.y);
  }
#endif
}

template <int CL, int V, int IT>
int kfab_launch_cluster(const Gn& a, int64_t rows, cudaStream_t stream) {
  if (rows * CL > 2147483647) return 6;
  if constexpr (CL > 8) {  // a non-portable cluster size: allowed once per kernel
    static const bool allowed = [] {
      const bool ok = cudaFuncSetAttribute(kfab_group_norm_cluster<CL, V, IT>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
      if (!ok) (void)cudaGetLastError();  // not this call's error: the caller falls back
      return ok;
    }();
    if (!allowed) return 7;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(rows * CL));
  cfg.blockDim = dim3(B);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CL;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if constexpr (CL > 8) {  // whether a cluster of CL such blocks fits the device at all
    static int fits = -1;
    if (fits < 0) {
      int n = 0;
      fits = cudaOccupancyMaxActiveClusters(&n, kfab_group_norm_cluster<CL, V, IT>, &cfg) == cudaSuccess && n > 0 ? 1 : 0;
      (void)cudaGetLastError();
    }
    if (!fits) return 7;
  }
  return cudaLaunchKernelEx(&cfg, kfab_group_norm_cluster<CL, V, IT>, a) == cudaSuccess ? 0 : 5;
}

// The smallest cluster (then the fewest registers) whose blocks hold the group: CL blocks of B
// threads, IT vectors of V a thread. 7: this cluster size cannot be launched here.
template <int CL, int V>
int kfab_try_cluster(const Gn& a, int64_t rows, cudaStream_t stream, bool* done) {
  const int64_t per = static_cast<int64_t>(CL) * B * V;
  *done = true;
  if (a.L <= per * 1) return kfab_launch_cluster<CL, V, 1>(a, rows, stream);
  if (a.L <= per * 2 && IMAX >= 2) return kfab_launch_cluster<CL, V, 2>(a, rows, stream);
  if (a.L <= per * 4 && IMAX >= 4) return kfab_launch_cluster<CL, V, 4>(a, rows, stream);
  if (a.L <= per * 8 && IMAX >= 8) return kfab_launch_cluster<CL, V, 8>(a, rows, stream);
  *done = false;
  return 0;
}

template <int MODE, int V, int IT>
int kfab_launch(const Gn& a, int64_t rows, size_t smem, cudaStream_t stream) {
  static size_t allowed = 48 * 1024;  // raised once per larger request, not on every call
  if (smem > allowed) {
    if (cudaFuncSetAttribute(kfab_group_norm<MODE, V, IT>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess)
      return 4;
    allowed = smem;
  }
  kfab_group_norm<MODE, V, IT><<<static_cast<unsigned>(rows), B, smem, stream>>>(a);
  return 0;
}

template <int V>
int kfab_dispatch(const Gn& a, int64_t rows, cudaStream_t stream) {
  const int64_t per = static_cast<int64_t>(B) * V;  // elements a block covers per register vector
  if (a.L <= per * 1) return kfab_launch<0, V, 1>(a, rows, 0, stream);
  if (a.L <= per * 2 && IMAX >= 2) return kfab_launch<0, V, 2>(a, rows, 0, stream);
  if (a.L <= per * 4 && IMAX >= 4) return kfab_launch<0, V, 4>(a, rows, 0, stream);
  if (V == 4 && a.L <= per * 8 && IMAX >= 8) return kfab_launch<0, V, 8>(a, rows, 0, stream);
  static int clusters = -1;  // whether the device launches clusters (Hopper and later)
  if (clusters < 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, dev) != cudaSuccess)
      clusters = 0;
  }
  if (clusters > 0) {
    bool done = false;
    int rc = kfab_try_cluster<2, V>(a, rows, stream, &done);
    if (!done) rc = kfab_try_cluster<4, V>(a, rows, stream, &done);
    if (!done) rc = kfab_try_cluster<8, V>(a, rows, stream, &done);
    if (!done) rc = kfab_try_cluster<16, V>(a, rows, stream, &done);
    if (done && rc != 7) return rc;
  }
  static int smem_max = -1;
  if (smem_max < 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      smem_max = 48 * 1024;
  }
  const int64_t bytes = a.L * static_cast<int64_t>(sizeof(float));
  if (bytes + static_cast<int64_t>(sizeof(float2)) * (B / 32) <= smem_max) return kfab_launch<1, V, 1>(a, rows, static_cast<size_t>(bytes), stream);
  return kfab_launch<2, V, 1>(a, rows, 0, stream);
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void* stream_) {
)";
  s += kChecks;
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
  std::string s = fmt::format("// Generated by kfab's built-in tuner: group norm, (sample, group) rows across threads ({}).\n", format_params(p));
  s += "#include <kfab/candidate.h>\n\n#include <cmath>\n#include <cstdint>\n\nnamespace {\n\n";
  s += kDense;
  s += gn_globals(t);
  s += "\n}  // namespace\n\nKFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void*) {\n";
  s += kChecks;
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
      const float sc = rstd * wp[ch0 + k], sh = bp[ch0 + k];
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
    {"cuda_group_norm", "cuda", 5, gn_applies, gn_cuda_grid, gn_cuda_generate},
    {"cpu_group_norm", "cpu", 1, gn_applies, gn_cpu_grid, gn_cpu_generate},
};

}  // namespace

std::vector<const KernelTemplate*> group_norm_templates() {
  std::vector<const KernelTemplate*> v;
  for (const auto& t : kGroupNorm) v.push_back(&t);
  return v;
}

}  // namespace kfab
