// The CUDA C++ printer for fused row programs (tuner/program.h): one kernel per program, either a
// flat elementwise kernel (no row structure) or a row kernel in which a group of G threads owns a
// row, keeps its per-element inputs in registers (float4 where the row length and the pointers
// allow), computes the row reductions in dependency order with shuffles (and one barrier each when
// the group is a whole block), and writes per-element and per-row outputs; all-reductions go
// through double atomics and a one-thread finishing step. A GEMM runs its tile (include/kfab/
// templates/gemm_tile.cuh), then a pointwise epilogue in its registers or a row kernel over the product.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "tuner/rowgen.h"

namespace kfab {

using namespace rowgen;

namespace {

constexpr const char* kPrelude = R"(#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kfab/candidate.h"

namespace {

// An input read through the read-only cache (Lang::load: per-column and scalar inputs, and a column
// pass's per-element ones). With KFAB_KEEP_IN_L2 (rows split over the grid's blocks, each block reading
// the same columns of every row) a float is marked to stay in L2 (evict_last) while the rows, read and
// written streaming (evict_first), pass through it: level1/40's layer norm reads its 32 MB of weight
// and bias once a row.
template <class T>
__device__ __forceinline__ T kfab_ld(const T* p) {
  return __ldg(p);
}
#if defined(KFAB_KEEP_IN_L2)
__device__ __forceinline__ float kfab_ld(const float* p) {
  float v;
  asm("{\n\t.reg .b64 pol;\n\tcreatepolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\tld.global.nc.L2::cache_hint.f32 %0, [%1], pol;\n\t}"
      : "=f"(v)
      : "l"(p));
  return v;
}
#endif

__device__ __forceinline__ float kfab_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
__device__ __forceinline__ float kfab_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

)";

// The length of a block's part of its row, whose elements a thread's `it`-th vector starts at
// (it * G + lane) * V: an int (a part is held in registers), so that each vector's test against it is one
// 32-bit compare, where `c0 < hi` took a 64-bit add and compare an element (level1/38's rows of 65535, read
// a float at a time).
constexpr const char* kPartLength = "int kfab_len = static_cast<int>(hi - lo);";

// The loads of a thread's vectors of each per-element input `ins` into registers x<i>[slot * V ..]:
// float4 when V is 4, streaming past L1 (the row is read once more at most, from registers).
// `at` empty: at kfab_x<i> + slot * G * V (a row kernel's thread's part, RowKernel::part_loads); with
// `edge`, a vector that may reach past the part (a cluster kernel's row read from the 16-byte boundary
// before it, U: row_reduce.cuh's kfab_ld4 reads only the part's floats). `ld`: the load, __ldcs (evict
// first: the last read) or __ldcg (evict normal: the first of two reads, the second from L2).
void load_vectors(const std::vector<int>& ins, const std::string& slot, const std::string& at, Emitter& e, bool edge = false,
                  const char* ld = "__ldcs") {
  for (int i : ins) {
    const std::string from = at.empty() ? fmt::format("kfab_x{} + {} * G * V", i, slot) : fmt::format("a.in{} + {}", i, at);
    e.open("if constexpr (V == 4)");
    if (edge) e.linef("const float4 q = kfab_ld4<U>({}, kfab_len - ({} * G + lane) * V);", from, slot);
    else e.linef("const float4 q = {}(reinterpret_cast<const float4*>({}));", ld, from);
    e.linef("x{0}[{1} * 4] = q.x, x{0}[{1} * 4 + 1] = q.y, x{0}[{1} * 4 + 2] = q.z, x{0}[{1} * 4 + 3] = q.w;", i, slot);
    e.reopen("} else {").linef("x{}[{}] = {}({});", i, slot, ld, from).close();
  }
}

// Stores of the per-element outputs o<j>[V] at `at`, a vector at a time, streaming.
// `at` empty: at kfab_o<j> + it * G * V (a row kernel's thread's part, RowKernel::outputs); with `edge`, of
// a cluster kernel, whose rows may be read from the 16-byte boundary before them (U: row_reduce.cuh's
// kfab_st4 writes only the row's columns).
void store_vectors(const std::vector<int>& outs, const std::string& at, Emitter& e, bool edge = false) {
  for (int j : outs) {
    const std::string to = at.empty() ? fmt::format("kfab_o{} + it * G * V", j) : fmt::format("a.out{} + {}", j, at);
    if (edge)
      e.linef("if constexpr (V == 4) kfab_st4<U>({}, make_float4(o{}[0], o{}[1], o{}[2], o{}[3]), kfab_c + (it * G + lane) * V, static_cast<int>(n));", to, j, j, j, j);
    else
      e.linef("if constexpr (V == 4) __stcs(reinterpret_cast<float4*>({}), make_float4(o{}[0], o{}[1], o{}[2], o{}[3]));", to, j, j, j, j);
    e.linef("else __stcs({}, o{}[0]);", to, j);
  }
}

std::vector<int> output_ids(const Program& p, const std::vector<int>& outs) {
  std::vector<int> ids;
  for (int j : outs) ids.push_back(p.outputs[j].second);
  return ids;
}

std::string generate_flat(const Program& p, const TemplateParams& tp, const std::string& title) {
  const Gen g(p, cuda_lang());
  const int B = param(tp, "block", 256), U = param(tp, "unroll", 4);
  bool cols = false;
  for (size_t k = 0; k < p.nodes.size(); ++k)
    if (g.live[k] && ((p.nodes[k].op == "in" && p.nodes[k].cls == VClass::C) || p.nodes[k].op == "colidx")) cols = true;
  Emitter e;
  head(title, tp, "A flat elementwise kernel; the program", p, e);
  e.raw(kPrelude).raw(host_checks()).blank();
  e.linef("constexpr int B = {}, U = {};  // threads per block, vectors per thread", B, U).blank();
  args_struct(p, e);
  e.blank().line("template <int V>").open("__global__ void __launch_bounds__(B) kfab_flat(Args a, int64_t total, int64_t n)");
  e.line("const int64_t rows = n > 0 ? total / n : 0;").line("(void)rows;");
  e.line("const int64_t base = static_cast<int64_t>(blockIdx.x) * B * U + threadIdx.x;");
  g.kconsts(e);
  const auto ein = g.e_inputs();
  for (int i : ein) e.linef("float x{}[U * V];", i);
  auto each_vector = [&](const std::function<void()>& body) {
    e.line("#pragma unroll").open("for (int u = 0; u < U; ++u)").line("const int64_t i = (base + static_cast<int64_t>(u) * B) * V;");
    e.open("if (i < total)");
    body();
    e.close().close();
  };
  each_vector([&] { load_vectors(ein, "u", "i", e); });
  std::vector<int> outs(p.outputs.size());
  for (size_t j = 0; j < outs.size(); ++j) outs[j] = static_cast<int>(j);
  each_vector([&] {
    if (cols) e.line("const int64_t c0 = i % n;");
    for (int j : outs) e.linef("float o{}[V];", j);
    e.line("#pragma unroll").open("for (int v = 0; v < V; ++v)");
    if (cols) e.line("const int64_t c = c0 + v;");
    g.element(output_ids(p, outs), [](int i) { return fmt::format("x{}[u * V + v]", i); }, "c", e);
    for (int j : outs) e.linef("o{}[v] = {};", j, g.value(p.outputs[j].second));
    e.close();
    store_vectors(outs, "i", e);
  });
  e.close();
  // a total that is not a multiple of 4 cannot take the float4 path
  const std::string launch = R"(  vec = vec && total % 4 == 0;
  if (total == 0) return 0;
  const int v = vec ? 4 : 1;
  const int64_t blocks = (total / v + static_cast<int64_t>(B) * U - 1) / (static_cast<int64_t>(B) * U);
  if (blocks > 2147483647) return 6;
  if (vec) kfab_flat<4><<<static_cast<unsigned>(blocks), B, 0, stream>>>(a, total, n);
  else kfab_flat<1><<<static_cast<unsigned>(blocks), B, 0, stream>>>(a, total, n);
)";
  host(g, default_binding(p), launch, e);
  return e.take();
}

// The generated text of a row kernel family: definitions and kernels, then the statements in
// kfab_run that launch them (after the checks).
struct Parts {
  std::string code;
  std::string launch;
};

// How a row kernel holds its row: in registers (IT vectors a thread; with CL > 1 a row split over the
// CL blocks of a cluster, each keeping its part [lo, hi), their reductions combined through distributed
// shared memory), in registers split over S blocks of the grid (kSplit: their reductions combined
// through global memory, the blocks of a row meeting at a counter), in tiles of a row read twice (kL2: a
// tile's first pass makes its shares of the row reductions, its second, from L2, the outputs once all the
// row's tiles' shares are in; resident.cuh's kfab_go_l2), in tiles of a row read once into a ring of
// shared-memory slots by the bulk copy (kRing: the same two passes, both from the tile's slot; resident.cuh's
// kfab_go_ring), or streamed (every pass over the row reads it from global memory, L2 for the later ones).
enum class Hold { kCached, kSplit, kL2, kRing, kStream };

// Whether a split row kernel asked to prefetch (`prefetch`) does: rows of one per-element input that have a
// row reduction (whose first meeting comes after every value of the row was read: RowKernel's issue_prefetch).
bool split_prefetches(const Gen& g, bool asked) { return asked && g.e_inputs().size() == 1 && g.n_red > 0; }

// The node of the per-column input a split row kernel asked to keep in shared memory (`colsm`) keeps
// there (program.h's first_column_input); -1 where none or not asked.
int split_kept_column(const Gen& g, bool asked) { return asked ? first_column_input(g.p) : -1; }

// A softmax's row maximum (a layer norm's row mean) <-> the reduction after it (program.h's softmax_pairs
// and moment_pairs, both live): what a split row kernel combines over its blocks at one meeting.
std::map<int, int> deferred_pairs(const Gen& g) {
  std::map<int, int> d;
  for (const auto& [m, sum] : softmax_pairs(g.p))
    if (g.live[m] && g.live[sum]) d[m] = sum, d[sum] = m;
  for (const auto& [m, sq] : moment_pairs(g.p))
    if (g.live[m] && g.live[sq] && !d.count(m) && !d.count(sq)) d[m] = sq, d[sq] = m;
  return d;
}

// Whether every row reduction of the program can be made from its parts' shares at once (Hold::kL2): none
// reads another's row value but the second of a deferred pair its first's, and no pick (what it picks by
// a row's value is read once).
bool meets_once(const Gen& g) {
  const Program& p = g.p;
  const std::map<int, int> pairs = deferred_pairs(g);
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (!g.live[k]) continue;
    if (p.nodes[k].op == "pick" || is_all_reduction(p.nodes[k].op)) return false;
    if (!is_row_reduction(p.nodes[k].op)) continue;
    std::vector<bool> seen(p.nodes.size());
    std::vector<int> todo(p.nodes[k].args.begin(), p.nodes[k].args.end());
    while (!todo.empty()) {
      const int j = todo.back();
      todo.pop_back();
      if (seen[j]) continue;
      seen[j] = true;
      if (is_row_reduction(p.nodes[j].op)) {
        const auto pair = pairs.find(static_cast<int>(k));
        if (pair == pairs.end() || pair->second != j) return false;
        continue;
      }
      for (int a : p.nodes[j].args) todo.push_back(a);
    }
  }
  return true;
}

// A row kernel's body.
class RowKernel final : public RowSteps {
 public:
  /// `defer` (split rows only): a softmax's row maximum, or a layer norm's row mean, is combined over the
  /// blocks together with the row reduction after it (program.h's softmax_pairs and moment_pairs), at one
  /// meeting. `prefetch` (split rows of one per-element input with a row reduction): the block's part of
  /// its next row is copied into shared memory (kfab_cp16) while the blocks of this row meet and write
  /// their outputs, where each turn otherwise loads its part only after the last one's meeting.
  /// `reuse` (with `defer`): a softmax's exp(x - the block's maximum) takes x's place in the registers when
  /// the sum is made (program.h's softmax_exp_reuse), and the outputs read it, scaled by exp(the block's
  /// maximum - the row's), where they would compute exp again. `colsm` (split rows read a float4 at a time,
  /// not with `prefetch`): the block's part of a per-column input (split_kept_column) is copied into shared
  /// memory once, before the first row, and read from there by every row: a block's columns are the same on
  /// every row, where L2 kept level1/40's 32 MB of weight and bias only in part (ncu: 192 MB read again).
  /// Hold::kL2 and kRing (programs that meets_once; kRing one per-element input) defer every pair, and take
  /// none of prefetch, reuse and colsm.
  RowKernel(const Gen& g, Hold hold, bool any_k_out, Emitter& e, bool defer = false, bool prefetch = false, bool reuse = false,
            bool colsm = false)
      : g_(g),
        p_(g.p),
        cached_(hold != Hold::kStream),
        split_(hold == Hold::kSplit || hold == Hold::kL2 || hold == Hold::kRing),
        any_k_out_(any_k_out),
        cluster_(hold == Hold::kCached),
        l2_(hold == Hold::kL2 || hold == Hold::kRing),
        ring_(hold == Hold::kRing),
        e_(e) {
    prefetch_ = split_ && !l2_ && split_prefetches(g, prefetch);
    kept_ = split_ && !l2_ && !prefetch_ ? split_kept_column(g, colsm) : -1;
    if (kept_ >= 0)
      over_[kept_] = fmt::format("(V == 4 ? reinterpret_cast<const float*>(kfab_col + it * B + threadIdx.x)[v] : kfab_ld(a.in{} + c))",
                                 p_.nodes[kept_].input);
    if (!split_ || !(defer || l2_)) return;
    deferred_ = deferred_pairs(g);
    if (const auto r = softmax_exp_reuse(p_); reuse && !l2_ && r && deferred_.count(r->max) && deferred_.at(r->max) == r->sum) reuse_ = r;
  }

  void emit() {
    e_.line("const int lane = threadIdx.x % G;");
    if (cluster_) e_.line("constexpr int NV = U ? IT + 1 : IT;  // the vectors a thread keeps (U: its part may reach into one more)");
    e_.line("__shared__ float red_s[NRED][G > 32 ? G / 32 : 1];").line("float* red[NRED];").line("#pragma unroll");
    e_.line("for (int k = 0; k < NRED; ++k) red[k] = red_s[k];").line("(void)red;");
    if (cluster_) {  // row_reduce.cuh's kfab_cluster_combine: two sets, used row by row in turn
      e_.line("__shared__ float kfab_cl[2][NRED][CL];  // the cluster's blocks' shares of each row reduction").line("(void)kfab_cl;");
      e_.line("__shared__ unsigned long long kfab_clbar[2][NRED];  // their arrivals").line("(void)kfab_clbar;");
      // (a cluster barrier arrived at here is waited at by the first combine: none without row reductions)
      bool combines = false;
      for (size_t k = 0; k < p_.nodes.size(); ++k) combines = combines || (g_.live[k] && is_row_reduction(p_.nodes[k].op));
      if (combines) e_.line("if constexpr (CL > 1) kfab_cluster_begin<2 * NRED>(&kfab_clbar[0][0]);");
    }
    if (prefetch_) e_.line("extern __shared__ float4 kfab_pre[];  // [per-element inputs][IT][B]: the block's part of its next row, a thread's own slots");
    if (kept_ >= 0) e_.line("extern __shared__ float4 kfab_col[];  // [IT][B]: the block's part of a per-column input, a thread's own slots");
    if (any_k_out_) {
      e_.line("__shared__ double kfab_part[NALL][B / G];  // the block's rows' shares of each all-reduction");
      e_.line("if (lane == 0)").line("#pragma unroll").indent().line("for (int k = 0; k < NALL; ++k) kfab_part[k][threadIdx.x / G] = 0.0;").dedent();
    }
    // A block takes B / G rows at a time (a chunk), chunk blockIdx.x, then gridDim.x further on: one
    // chunk a block when the grid has a block a chunk; with a grid of resident blocks (persist) a
    // block goes on to its next rows at once, and pays its all-reductions' atomics and counter once.
    e_.line("const int64_t chunks = (rows + B / G - 1) / (B / G);");
    if (ring_) {
      ring_schedule();
    } else if (l2_) {  // tickets in turn: a tile's first pass or its second (row_reduce.cuh's kfab_l2_ticket)
      e_.line("(void)chunks;").line("const int64_t T = rows * s.S;  // the tiles, s.S parts a row");
      e_.line("__shared__ long long kfab_t;  // the block's ticket, taken from the grid's counter");
      e_.line("if (threadIdx.x == 0) kfab_t = static_cast<long long>(atomicAdd(s.ticket, 1ull));").line("__syncthreads();");
      e_.open("for (int64_t t = kfab_t; t < 2 * T; t = kfab_t)");
      e_.line("// the block's next ticket, taken now and read after the tile (each pass has a barrier before its end)");
      e_.line("const unsigned long long kfab_next = threadIdx.x == 0 ? atomicAdd(s.ticket, 1ull) : 0ull;");
      e_.line("int64_t tile = 0;").line("bool second = false;  // the tile's pass: its shares of the row reductions, or its outputs");
      e_.line("kfab_l2_ticket(t, T, s.D, &tile, &second);");
      tile_part();
      e_.line("float* shares = s.shares + chunk * NRED * s.S;  // the row's parts' shares, s.S a reduction");
      e_.line("float* kfab_fin = s.shares + (rows * s.S + chunk) * NRED;  // the row's reductions");
      e_.line("unsigned* kfab_bar = s.bar + chunk;  // the row's first passes counted, then one more when kfab_fin is written");
      e_.line("(void)shares, (void)kfab_fin;");
    } else if (split_) {  // a group of s.S blocks a row (G is B: a chunk is a row), the group's rows in turn
      e_.line("int64_t lo = 0, hi = n;  // the block's part of its row").line("kfab_split_part<V>(n, s.S, static_cast<int>(blockIdx.x % s.S), &lo, &hi);");
      e_.line("const int64_t group = blockIdx.x / s.S;").line("unsigned arrivals = 0;  // the group's arrivals expected at its counter so far");
      if (kept_ >= 0) keep_column();
      e_.open("for (int64_t chunk = group, turn = 0; chunk < chunks; chunk += gridDim.x / s.S, ++turn)");
      e_.line("float* shares = s.shares + (group * 2 + turn % 2) * NRED * s.S;  // this row's, by the parity of the group's turn");
    } else if (cached_) {  // a cluster of CL blocks a chunk
      e_.line("int64_t lo = 0, hi = n;  // the block's part of its row").line("kfab_cluster_part<CL, V>(n, static_cast<int>(blockIdx.x % CL), &lo, &hi);");
      e_.line(kPartLength);
      e_.open("for (int64_t chunk = blockIdx.x / CL, turn = 0; chunk < chunks; chunk += gridDim.x / CL, ++turn)").line("(void)turn;");
    } else {
      e_.open("for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x)");
    }
    e_.line("const int64_t row = chunk * (B / G) + threadIdx.x / G;");
    combines_ = 0;
    e_.line("const bool live = row < rows;").line("const int64_t roff = (live ? row : 0) * n;");
    if (cluster_) {  // U: the row read from the 16-byte boundary at or before its start, its parts cut from there
      e_.line("const int kfab_m = U ? static_cast<int>(roff % 4) : 0;  // the floats before the row's start from that boundary");
      e_.open("if constexpr (U)").line("kfab_cluster_part<CL, V>(n + kfab_m, static_cast<int>(blockIdx.x % CL), &lo, &hi);");
      e_.line("kfab_len = static_cast<int>(hi - lo);").close();
      e_.line("const int kfab_c = static_cast<int>(lo) - kfab_m;  // (U) the column of the part's first float (an int: U's rows fit a cluster)");
      e_.line("(void)kfab_c;");
    }
    if (cached_) {
      const auto ein = g_.e_inputs();
      for (int i : ein) e_.linef("float x{}[{} * V];", i, its());
      if (prefetch_) staged_loads(ein);
      if (l2_) {
        // (each pass loads the tile: two_passes)
      } else if (split_) {
        split_loads("__ldcs");
      } else {
        part_loads(ein);
      }
      if (prefetch_) e_.close();
    }
    if (l2_) {
      two_passes();
    } else {
      walk_rows(g_, *this);
      outputs();
    }
    issue_prefetch();  // where no meeting came before (every value has been used)
    // the next chunk's reductions reuse the shared slots this one's may still be reading
    if (l2_ && !ring_) e_.line("if (threadIdx.x == 0) kfab_t = static_cast<long long>(kfab_next);");
    if (split_) e_.line("__syncthreads();");
    else e_.open("if constexpr (G > 32)").linef("if (chunk + gridDim.x{} < chunks) __syncthreads();", cached_ ? " / CL" : "").close();
    e_.close("}  // chunks");
    if (any_k_out_) finish_block();
  }

  void scalar(int k) override { e_.linef("const float k{} = {};", k, g_.scalar_expr(k)); }
  void row_input(int k) override {
    const int i = p_.nodes[k].input;
    if (p_.inputs[i].integer) {
      e_.linef("const long long qi{0} = live ? static_cast<long long>(a.in{0}[row]) : 0;", i);
      e_.linef("const float r{} = static_cast<float>(qi{});", k, i);
    } else {
      e_.linef("const float r{} = live ? a.in{}[row] : 0.0f;", k, i);
    }
  }
  void reduce(int k, int op) override {
    const int arg = p_.nodes[k].args[0];
    const std::string acc = fmt::format("s{}", k);
    const auto paired = deferred_.find(k);
    if (l2_ && second_) {  // the row's reductions, made by its last first pass (kRing: by this block, in shared memory)
      const std::string fin = ring_ ? fmt::format("kfab_fin[{}]", g_.redslot[k]) : fmt::format("__ldcg(kfab_fin + {})", g_.redslot[k]);
      if (paired != deferred_.end() && paired->second > k) {
        e_.linef("float r{} = {};  // the row's maximum or mean", k, fin);
        return;
      }
      e_.linef("const float {} = {};", acc, fin);
      e_.linef("const float r{} = {};", k, p_.nodes[k].op == "rowmean" ? acc + " / static_cast<float>(n)" : acc);
      return;
    }
    e_.linef("float {} = {};", acc, op == 1 ? "-INFINITY" : op == 2 ? "INFINITY" : "0.0f");
    over_row([&] {
      g_.element({arg}, access(), "c", e_, false, &over_);
      e_.linef("{0} = kfab_combine<{1}>({0}, {2});", acc, op, g_.value(arg));
      if (reuse_ && k == reuse_->sum) e_.linef("x{}[it * V + v] = e{};  // exp(x - the block's maximum), for the outputs", reuse_->input, reuse_->exp);
    });
    e_.linef("{0} = kfab_group<G, {1}>({0}, red[{2}]);", acc, op, g_.redslot[k]);
    if (paired != deferred_.end() && paired->second > k) {  // the block's maximum or mean, made the row's with the reduction after it
      if (op == 1) e_.linef("float r{} = {};  // the block's part's maximum until the sum's meeting", k, acc);
      else e_.linef("float r{0} = hi > lo ? {1} / static_cast<float>(hi - lo) : 0.0f;  // the block's part's mean until the meeting", k, acc);
      return;
    }
    if (ring_) {  // the tile's shares (a pair's both), each a word stamped with the launch's epoch
      if (paired != deferred_.end())
        e_.linef("if (threadIdx.x == 0) kfab_ring_put(kfab_tags + {} * s.S + part, r{}, s.epoch);", g_.redslot[paired->second], paired->second);
      e_.linef("if (threadIdx.x == 0) kfab_ring_put(kfab_tags + {} * s.S + part, {}, s.epoch);", g_.redslot[k], acc);
    } else if (l2_) {  // the tile's shares (a pair's both), made the row's by its last first pass (gather)
      if (paired != deferred_.end()) e_.linef("if (threadIdx.x == 0) __stcg(shares + {} * s.S + part, r{});", g_.redslot[paired->second], paired->second);
      e_.linef("if (threadIdx.x == 0) __stcg(shares + {} * s.S + part, {});", g_.redslot[k], acc);
    } else if (paired != deferred_.end()) {  // the reduction after it: both made the row's at one meeting
      const int m = paired->second;
      issue_prefetch();
      if (reuse_ && k == reuse_->sum) e_.linef("const float kfab_mb = r{};  // the block's part's maximum", m);
      if (p_.nodes[m].op == "rowmax") {
        e_.linef("kfab_split_softmax<B>(&r{0}, &{1}, shares + {2} * s.S, shares + {3} * s.S, s.bar + group, arrivals += s.S, s.S, red[{2}], red[{3}]);",
                 m, acc, g_.redslot[m], g_.redslot[k]);
      } else {
        e_.linef("kfab_split_moments<B, V>(&r{0}, &{1}, n, shares + {2} * s.S, shares + {3} * s.S, s.bar + group, arrivals += s.S, s.S, red[{2}], "
                 "red[{3}]);",
                 m, acc, g_.redslot[m], g_.redslot[k]);
      }
      if (reuse_ && k == reuse_->sum) {  // from here on exp(x - the row's maximum) is the kept value rescaled
        e_.linef("const float kfab_rescale = expf(kfab_mb - r{});", m);
        over_[reuse_->exp] = fmt::format("x{}[it * V + v] * kfab_rescale", reuse_->input);
      }
    } else if (split_ && is_row_reduction(p_.nodes[k].op)) {
      issue_prefetch();
      e_.linef("{0} = kfab_split_combine<B, {1}>({0}, shares + {2} * s.S, s.bar + group, arrivals += s.S, s.S, red[{2}]);", acc, op, g_.redslot[k]);
    } else if (cached_ && is_row_reduction(p_.nodes[k].op))
      e_.linef("if constexpr (CL > 1) {0} = kfab_cluster_combine<CL, {1}>({0}, kfab_cl[turn % 2][{2}], &kfab_clbar[turn % 2][{2}], "
               "static_cast<unsigned>(turn / 2 % 2), {3});",
               acc, op, g_.redslot[k], combines_++ == 0 ? "turn == 0" : "false");
    if (is_row_reduction(p_.nodes[k].op))
      e_.linef("const float r{} = {};", k, p_.nodes[k].op == "rowmean" ? acc + " / static_cast<float>(n)" : acc);
    else
      e_.linef("if (lane == 0 && live) kfab_part[{}][threadIdx.x / G] += static_cast<double>({});", g_.allslot[k], acc);
  }
  void share(int k) override {
    e_.linef("if (lane == 0 && live) kfab_part[{}][threadIdx.x / G] += static_cast<double>({});", g_.allslot[k], g_.value(p_.nodes[k].args[0]));
  }
  void pick(int k) override {
    g_.pick(k, [](int i) { return fmt::format("__ldg(a.in{} + roff + c)", i); }, e_);
  }
  void row_value(int k, const std::string& expr) override { e_.linef("const float r{} = {};", k, expr); }

 private:
  // Hold::kL2: a tile's first pass makes its shares of the row reductions, and the row's last makes the row's
  // reductions from them; a tile's second pass waits for those, then writes its outputs.
  // The first pass reads the tile for L2 to keep (__ldcg, evict_normal: not first to go among the rows'
  // streaming loads and stores), the second for the last time (__ldcs, evict_first), before it waits for the
  // row's reductions. (With tickets dealt round the grid both measured the same on level1/23: 12.7 GB read
  // from DRAM either way, row_reduce.cuh's kfab_l2_ticket says why.)
  void two_passes() {
    if (ring_) return ring_passes();
    e_.open("if (!second)");
    split_loads("__ldcg");
    second_ = false;
    walk_rows(g_, *this);
    e_.open("if (kfab_l2_arrive(kfab_bar, static_cast<unsigned>(s.S)))").line("// the row's last first pass: its reductions from every part's shares");
    gather();
    e_.line("kfab_l2_publish(kfab_bar);").close();
    e_.reopen("} else {");
    split_loads("__ldcs");
    e_.line("kfab_l2_wait(kfab_bar, static_cast<unsigned>(s.S) + 1u);");
    outputs_pass();
  }

  // A tile's second pass once its row's reductions are in: the row values from them, then the outputs.
  void outputs_pass() {
    second_ = true;
    walk_rows(g_, *this);
    outputs();
    e_.close();
  }

  // A tile's row (a chunk: G is B) and its part [lo, hi) of it (Hold::kL2, kRing).
  void tile_part() {
    e_.line("const int64_t chunk = tile / s.S;  // its row (G is B: a chunk is a row)").line("const int part = static_cast<int>(tile % s.S);");
    e_.line("int64_t lo = 0, hi = n;  // the tile: the block's part of its row").line("kfab_split_part<V>(n, s.S, part, &lo, &hi);");
  }

  // Hold::kRing: block b of the grid takes tiles b, b + gridDim.x, ..; pass u of the loop is its tile u / 2's
  // first pass (u even) or tile u / 2 - s.L's second (resident.cuh's kfab_go_ring says why no block waits forever).
  void ring_schedule() {
    const int in = g_.e_inputs().at(0);
    e_.line("static_assert(V == 4, \"tiles in shared memory are float4 rows\");").line("(void)chunks;");
    e_.line("const int64_t T = rows * s.S;  // the tiles, s.S parts a row");
    e_.line("const int64_t mine = (T - blockIdx.x + gridDim.x - 1) / gridDim.x;  // the block's tiles");
    e_.line("constexpr int64_t kfab_holds = static_cast<int64_t>(B) * IT * V;  // a slot's floats");
    e_.line("extern __shared__ float4 kfab_ring4[];  // s.R slots, each a tile of the block's").line("float* kfab_ring = reinterpret_cast<float*>(kfab_ring4);");
    e_.line("__shared__ unsigned long long kfab_mbar[8];  // a slot's copy completes at its own");
    e_.line("__shared__ float kfab_sh[4 * B];  // the row's shares, for the gathers").line("__shared__ float kfab_fin[NRED];  // the row's reductions");
    e_.line("kfab_ring_init(kfab_mbar, s.R);");
    e_.linef("for (int64_t k = 0; k < s.R && k < mine; ++k) kfab_ring_fetch(kfab_ring, kfab_mbar, static_cast<int>(k), kfab_holds, a.in{}, n, s.S, blockIdx.x + k * gridDim.x);", in);
    e_.line("unsigned long long kfab_q[4];  // the share words of the next second pass's row, loaded before the first pass before it");
    e_.open("for (int64_t u = 0; u < 2 * (mine + s.L); ++u)");
    e_.line("const bool second = u % 2 != 0;  // the pass: the tile's shares of its row's reductions, or its outputs");
    e_.line("const int64_t j = u / 2 - (second ? s.L : 0);  // the block's tile it takes");
    e_.line("if (!second && j >= s.L) kfab_ring_peek<B>(kfab_q, s.tags + (blockIdx.x + (j - s.L) * gridDim.x) / s.S * NRED * s.S, NRED * s.S);");
    e_.line("if (j < 0 || j >= mine) continue;");
    e_.line("const int64_t tile = blockIdx.x + j * gridDim.x;");
    tile_part();
    e_.line("unsigned long long* kfab_tags = s.tags + chunk * NRED * s.S;  // the row's share words, s.S a reduction");
    e_.line("const int kfab_slot = static_cast<int>(j % s.R);");
  }

  // Hold::kRing's passes: the first waits for its tile's copy and makes its shares; the second waits for its
  // row's shares, takes its values from the slot, refills the slot with the block's tile s.R further on, and
  // writes its outputs.
  void ring_passes() {
    e_.open("if (!second)").line("kfab_ring_wait(kfab_mbar + kfab_slot, j / s.R);");
    ring_loads();
    second_ = false;
    walk_rows(g_, *this);
    e_.reopen("} else {").line("kfab_ring_take<B>(kfab_q, kfab_tags, NRED * s.S, s.epoch, kfab_sh);");
    gather();
    ring_loads();
    e_.line("__syncthreads();  // the row's reductions in kfab_fin; the slot's values read by every thread");
    e_.linef("if (j + s.R < mine) kfab_ring_fetch(kfab_ring, kfab_mbar, kfab_slot, kfab_holds, a.in{}, n, s.S, tile + s.R * gridDim.x);",
             g_.e_inputs().at(0));
    outputs_pass();
  }

  // Hold::kRing: the thread's values of the tile, from its slot.
  void ring_loads() {
    const int in = g_.e_inputs().at(0);
    e_.open("").line("const float4* kfab_s4 = kfab_ring4 + kfab_slot * (kfab_holds / 4);");
    e_.line("#pragma unroll").open("for (int it = 0; it < IT; ++it)").line("const int64_t c0 = lo + (static_cast<int64_t>(it) * G + lane) * V;");
    e_.open("if (c0 < hi)").line("const float4 q = kfab_s4[it * G + lane];");
    e_.linef("x{0}[it * 4] = q.x, x{0}[it * 4 + 1] = q.y, x{0}[it * 4 + 2] = q.z, x{0}[it * 4 + 3] = q.w;", in);
    e_.close().close().close();
  }

  // A split kernel's loads of its part of the row, each vector guarded, by `ld`.
  void split_loads(const char* ld) {
    e_.line("#pragma unroll").open("for (int it = 0; it < IT; ++it)").line("const int64_t c0 = lo + (static_cast<int64_t>(it) * G + lane) * V;");
    e_.open(fmt::format("if ({})", in_part()));
    load_vectors(g_.e_inputs(), "it", "roff + c0", e_, false, ld);
    e_.close().close();
  }

  // The row's reductions from its parts' shares into kfab_fin (a pair's at once), by thread 0. (kRing: from
  // the shares kfab_ring_take left in shared memory, into the block's own kfab_fin there, by warp 0.)
  void gather() {
    const char* sh = ring_ ? "kfab_sh" : "shares";
    const char* from = ring_ ? ", true" : "";
    // (kRing: warp 0 alone, its 32 threads taking the shares r, r + 32, ..: the other warps go on to their
    // values, and the barrier before the outputs orders kfab_fin. The whole block took them until session 29,
    // at two barriers and some 340 instructions a thread a tile, a quarter of a second pass's.)
    const char* b = ring_ ? "32" : "B";
    for (size_t k = 0; k < p_.nodes.size(); ++k) {
      if (!g_.live[k] || !is_row_reduction(p_.nodes[k].op)) continue;
      const int slot = g_.redslot[k];
      const auto paired = deferred_.find(static_cast<int>(k));
      if (paired != deferred_.end() && paired->second > static_cast<int>(k)) continue;  // with the reduction after it
      e_.open(ring_ ? "if (threadIdx.x < 32)" : "");
      if (paired != deferred_.end()) {
        const int ms = g_.redslot[paired->second];
        e_.line("float gm = 0.0f, gt = 0.0f;");
        if (p_.nodes[paired->second].op == "rowmax")
          e_.linef("kfab_softmax_gather<{4}{3}>(&gm, &gt, {2} + {0} * s.S, {2} + {1} * s.S, s.S, red[{0}], red[{1}]);", ms, slot, sh, from, b);
        else
          e_.linef("kfab_moments_gather<{4}, V{3}>(&gm, &gt, n, {2} + {0} * s.S, {2} + {1} * s.S, s.S, red[{0}], red[{1}]);", ms, slot, sh, from, b);
        if (ring_) e_.linef("if (threadIdx.x == 0) kfab_fin[{}] = gm, kfab_fin[{}] = gt;", ms, slot);
        else e_.linef("if (threadIdx.x == 0) __stcg(kfab_fin + {}, gm), __stcg(kfab_fin + {}, gt);", ms, slot);
      } else {
        const int op = p_.nodes[k].op == "rowmax" ? 1 : p_.nodes[k].op == "rowmin" ? 2 : 0;
        e_.linef("const float gt = kfab_split_gather<{}, {}{}>({} + {} * s.S, s.S, red[{}]);", b, op, from, sh, slot, slot);
        if (ring_) e_.linef("if (threadIdx.x == 0) kfab_fin[{}] = gt;", slot);
        else e_.linef("if (threadIdx.x == 0) __stcg(kfab_fin + {}, gt);", slot);
      }
      e_.close();
    }
  }

  // With `prefetch`, a turn after the first takes its row's part from the copies the turn before issued;
  // the loads from global memory after it (the first turn's, and every turn's of rows read a float at a
  // time) are left in an open `if (!staged)` for the caller to close.
  void staged_loads(const std::vector<int>& ein) {
    e_.line("bool staged = false;  // this row's part came with the previous turn's copies");
    e_.open("if constexpr (V == 4)").open("if (turn > 0)").line("staged = true;").line("kfab_cp_wait();");
    e_.line("#pragma unroll").open("for (int it = 0; it < IT; ++it)").line("const int64_t c0 = lo + (static_cast<int64_t>(it) * G + lane) * V;");
    e_.open("if (c0 < hi)");
    for (size_t k = 0; k < ein.size(); ++k) {
      e_.linef("const float4 q = kfab_pre[({} * IT + it) * B + threadIdx.x];", k);
      e_.linef("x{0}[it * 4] = q.x, x{0}[it * 4 + 1] = q.y, x{0}[it * 4 + 2] = q.z, x{0}[it * 4 + 3] = q.w;", ein[k]);
    }
    e_.close().close().close().close();
    e_.open("if (!staged)");
  }

  // The block's part of the kept per-column input into shared memory, a thread its own slots (no barrier:
  // each thread reads only what it wrote), once for the whole run; rows read a float4 at a time only (vec:
  // every per-element and per-column input 16-byte aligned, kfab_run's checks).
  void keep_column() {
    e_.open("if constexpr (V == 4)").line("#pragma unroll").open("for (int it = 0; it < IT; ++it)");
    e_.line("const int64_t c0 = lo + (static_cast<int64_t>(it) * G + lane) * V;");
    e_.linef("if (c0 < hi) kfab_col[it * B + threadIdx.x] = __ldg(reinterpret_cast<const float4*>(a.in{} + c0));", p_.nodes[kept_].input);
    e_.close().close();
  }

  // The copies of the block's part of its next row (the group's next turn), once, before the row's first
  // meeting: every value of this row has been used by then (the first row reduction reads them all).
  void issue_prefetch() {
    if (!prefetch_ || issued_) return;
    issued_ = true;
    const auto ein = g_.e_inputs();
    e_.open("if constexpr (V == 4)").line("// the next row's part, in flight while this row's blocks meet and write their outputs");
    e_.line("const int64_t next = chunk + gridDim.x / s.S;  // the group's next row (G is B: a chunk a row)");
    e_.open("if (next < chunks)").line("#pragma unroll").open("for (int it = 0; it < IT; ++it)");
    e_.line("const int64_t c0 = lo + (static_cast<int64_t>(it) * G + lane) * V;");
    for (size_t k = 0; k < ein.size(); ++k)
      e_.linef("if (c0 < hi) kfab_cp16(kfab_pre + ({} * IT + it) * B + threadIdx.x, a.in{} + next * n + c0);", k, ein[k]);
    e_.close().close().line("kfab_cp_commit();").close();
  }

  // A cluster's or a lone block's loads of its part. Where every vector of the thread but its last lies in
  // the part (a block-uniform test), those loads are at fixed offsets from one pointer an input and behind
  // no test, and only the last vector's is guarded; elsewhere each is. With a guarded load a vector, nvcc
  // had interleaved level1/38's 32 loads a thread with the sums of the loads before (the guards' predicates
  // outnumber the 7 predicate registers): a few loads in flight at a time, where level1/39's kernel, the
  // same but for |x| against x * x, issued all 32 first (ncu on an H200: 38 waited on its loads twice as
  // long, 5.9 ms against 5.1). A clamped index a vector instead took a 64-bit address each and 99
  // registers, against 62.
  void part_loads(const std::vector<int>& ein) {
    for (int i : ein) {
      e_.linef("const float* kfab_x{0} = a.in{0} + roff - kfab_m + lo + lane * V;  // the thread's first value of the part", i);
      e_.linef("asm volatile(\"\" : \"+l\"(kfab_x{}));", i);
    }
    e_.open("if (kfab_len >= (IT - 1) * G * V)").line("#pragma unroll").open("for (int it = 0; it < IT - 1; ++it)");
    load_vectors(ein, "it", "", e_);
    e_.close().line("// the last vector (and U's one more), guarded").line("#pragma unroll").open("for (int it = IT - 1; it < NV; ++it)");
    e_.open("if ((it * G + lane) * V < kfab_len)");
    load_vectors(ein, "it", "", e_, true);
    e_.close().close().reopen("} else {");
    e_.line("#pragma unroll").open("for (int it = 0; it < NV; ++it)");
    e_.open(fmt::format("if ({})", in_part()));
    load_vectors(ein, "it", "", e_, true);
    e_.close().close().close();
  }

  // Whether the thread's `it`-th vector lies in the block's part of its row. A cluster's or a lone block's
  // part: against its length, an int (kPartLength). Split rows keep `c0 < hi`: their kernels sit at the
  // register cap, and level1/40's layer norm spilled 60 bytes a thread with the int's test (0.242 ->
  // 0.309 ms on an H200, session 24).
  std::string in_part() const { return split_ ? "c0 < hi" : "(it * G + lane) * V < kfab_len"; }

  Access access() const {
    if (cached_) return [](int i) { return fmt::format("x{}[it * V + v]", i); };
    return [](int i) { return fmt::format("__ldg(a.in{} + roff + c)", i); };
  }

  // The vectors a thread keeps: IT, or in a cluster's or lone block's kernel NV (one more with U: a part cut
  // from kfab_m floats before the row may be up to 3 floats longer than IT vectors a thread hold).
  std::string its() const { return cluster_ ? "NV" : "IT"; }

  // The column of the element at c0 + v: in a cluster's or lone block's kernel, kfab_m before it (U).
  std::string column() const { return cluster_ ? "const int64_t c = c0 + v - kfab_m;" : "const int64_t c = c0 + v;"; }

  // `inner` for each element c of the thread's part of the row.
  void over_row(const std::function<void()>& inner, bool outputs = false) {
    if (cached_) {
      e_.line("#pragma unroll").openf("for (int it = 0; it < {}; ++it)", its()).line("const int64_t c0 = lo + (static_cast<int64_t>(it) * G + lane) * V;");
    } else {
      e_.open("for (int64_t c0 = static_cast<int64_t>(lane) * V; c0 < n; c0 += static_cast<int64_t>(G) * V)");
    }
    if (outputs) {
      if (cached_) e_.linef("if (!({})) continue;", in_part());
      inner();
    } else {
      if (cached_) e_.open(fmt::format("if ({})", in_part()));
      e_.line("#pragma unroll").open("for (int v = 0; v < V; ++v)").line(column());
      if (cluster_) e_.line("if (U && static_cast<unsigned>(kfab_c + (it * G + lane) * V + v) >= static_cast<unsigned>(n)) continue;  // before the row or past it");
      inner();
      e_.close();
      if (cached_) e_.close();
    }
    e_.close();
  }

  // The per-element outputs, written a vector at a time, and the per-row ones.
  void outputs() {
    for (int j : g_.outputs_of(VClass::R)) e_.linef("if (lane == 0 && live) a.out{}[row] = {};", j, g_.value(p_.outputs[j].second));
    const std::vector<int> eouts = g_.outputs_of(VClass::E);
    if (eouts.empty()) return;
    // Split rows: the per-column inputs' loads kept after the row's last meeting. Their addresses do not
    // depend on it, and nvcc moved them above it, where they held registers beside the block's part of the
    // row (ptxas on level1/40's layer norm at 16 float4 a thread: 512 bytes of spills a thread, 24 without).
    if (split_) {
      for (int k = 0; k < static_cast<int>(p_.nodes.size()); ++k)
        if (g_.live[k] && p_.nodes[k].op == "in" && p_.nodes[k].cls == VClass::C)
          e_.linef("asm volatile(\"\" : \"+l\"(a.in{}));  // loaded after the meeting", p_.nodes[k].input);
    }
    // A thread's outputs at fixed offsets from one pointer an output: nvcc had sunk the 64-bit address
    // arithmetic of `roff + c0` into each vector's guarded store (level1/38: 12 instructions a store where
    // the loads took one); the empty asm keeps the pointer computed once.
    if (cached_) {
      for (int j : eouts) {
        e_.linef("float* kfab_o{0} = a.out{0} + roff{1} + lo + lane * V;  // the thread's first output of the part", j, cluster_ ? " - kfab_m" : "");
        e_.linef("asm volatile(\"\" : \"+l\"(kfab_o{}));", j);
      }
    }
    std::map<int, std::string> recips;
    for (int d : g_.shared_divisors(output_ids(p_, eouts))) {
      recips[d] = fmt::format("kfab_q{}", d);
      e_.linef("const KfabRecip kfab_q{} = kfab_recip({});  // the row's divisor, once", d, g_.value(d));
    }
    over_row(
        [&] {
          e_.line("if (!live) continue;");
          for (int j : eouts) e_.linef("float o{}[V];", j);
          e_.line("#pragma unroll").open("for (int v = 0; v < V; ++v)").line(column());
          g_.element(output_ids(p_, eouts), access(), "c", e_, false, &over_, &recips);
          for (int j : eouts) e_.linef("o{}[v] = {};", j, g_.value(p_.outputs[j].second));
          e_.close();
          store_vectors(eouts, cached_ ? "" : "roff + c0", e_, cluster_);
        },
        true);
  }

  // Warp 0 adds the block's shares (one atomic a sum); the last block to finish turns the sums into
  // the scalar outputs.
  void finish_block() {
    e_.line("__syncthreads();").open("if (threadIdx.x < 32)").line("#pragma unroll").open("for (int k = 0; k < NALL; ++k)");
    e_.line("double t = 0.0;").line("for (int r = threadIdx.x; r < B / G; r += 32) t += kfab_part[k][r];").line("#pragma unroll");
    e_.line("for (int off = 16; off > 0; off /= 2) t += __shfl_xor_sync(0xffffffffu, t, off);");
    e_.line("if (threadIdx.x == 0) atomicAdd(&a.ws[(blockIdx.x % NSPREAD) * NALL + k], t);").close();
    e_.line("__threadfence();  // the sums, before the block is counted");
    e_.line("unsigned last = threadIdx.x == 0 && atomicAdd(&kfab_blocks_done, 1u) == gridDim.x - 1;");
    e_.line("last = __shfl_sync(0xffffffffu, last, 0);");
    e_.open("if (last)").line("__threadfence();").line("kfab_finish_scalars(a, rows, n);");
    e_.line("if (threadIdx.x == 0) atomicExch(&kfab_blocks_done, 0u);").close().close();
  }

  const Gen& g_;
  const Program& p_;
  bool cached_, split_, any_k_out_;
  bool cluster_;  // kfab_rows_cached, a cluster's (CL > 1) or a lone block's kernel: its template's U and kfab_m
  bool l2_;       // Hold::kL2 or kRing: a tile's two passes
  bool ring_;     // Hold::kRing: the tiles in shared memory, read once
  bool second_ = false;  // (l2_) the pass being emitted is the tiles' second
  bool prefetch_ = false, issued_ = false;  // the next row's part copied into shared memory; its copies emitted
  int kept_ = -1;                            // the node of the per-column input kept in shared memory (colsm)
  std::map<int, int> deferred_;  // a softmax's row maximum (a layer norm's mean) <-> the reduction after it, combined together
  std::optional<SoftmaxReuse> reuse_;  // the softmax whose exp takes x's place in the registers
  std::map<int, std::string> over_;     // values read from the registers rather than computed (Gen::element)
  int combines_ = 0;  // the row's cluster combines so far (the block's first waits for the cluster's start)
  Emitter& e_;
};

// The scalar outputs, from the all-reductions' sums, which are read and zeroed for the next call.
void finish_scalars(const Gen& g, Emitter& e) {
  e.blank().line("// Scalar outputs, from the all-reductions' sums (read and zeroed for the next call), by one whole warp.");
  e.open("__device__ void kfab_finish_scalars(const Args& a, int64_t rows, int64_t n)").line("(void)rows, (void)n;");
  g.scalars(
      [](int k, int slot, Emitter& s) {
        s.linef("double w{} = 0.0;", k);
        s.nested("for (int s = threadIdx.x; s < NSPREAD; s += 32)",
                 fmt::format("w{} += __longlong_as_double(static_cast<long long>(atomicExch(reinterpret_cast<unsigned long long*>(&a.ws[s * NALL + {}]), "
                             "0ull)));",
                             k, slot));
        s.line("#pragma unroll").linef("for (int off = 16; off > 0; off /= 2) w{0} += __shfl_xor_sync(0xffffffffu, w{0}, off);", k);
      },
      [](int) { return false; }, "if (threadIdx.x == 0) ", e);  // one warp runs it: lane 0 stores
  e.close().blank().line("// The same when there are no rows (no row kernel ran).");
  e.open("__global__ void kfab_finish(Args a, int64_t rows, int64_t n)");
  e.line("if (threadIdx.x < 32 && blockIdx.x == 0) kfab_finish_scalars(a, rows, n);").close();
}

// The row kernels' launch: the smallest register footprint that holds the row, IT = 1, 2, 4 .. I
// float4 a thread, so that one parameter point fits every row length (a task's tuning shapes may
// differ in it); longer rows split over a cluster's blocks where the point has clusters and they
// hold it (kfab_rows_cluster), or over a group of the grid's blocks where the point splits rows
// (`split`: kfab_rows_split_go), else streamed.
std::string rows_launch(int I, bool autog, bool any_k_out, bool split) {
  Emitter e(1);
  // an if-chain over IT, left open for the caller to go on with or close
  auto pick_it = [&](const std::string& bt, const std::string& gt, const std::string& blocks) {
    for (int it = 1; it <= I; it *= 2) {
      const std::string cond = fmt::format("if (n <= static_cast<int64_t>({}) * {} * 4)", gt, it);
      if (it == 1) e.open(cond);
      else e.reopen("} else " + cond + " {");
      e.linef("if (vec) kfab_go<P>(kfab_rows_cached<{0}, {1}, 4, {2}, 1>, {3}, {0}, stream, a, rows, n);", bt, gt, it, blocks);
      e.linef("else kfab_go<P>(kfab_rows_cached<{0}, {1}, 1, {2}, 1>, {3}, {0}, stream, a, rows, n);", bt, gt, it * 4, blocks);
    }
  };
  e.open("if (rows > 0)").line("const int64_t blocks = (rows + B / G - 1) / (B / G);").line("if (blocks > 2147483647) return 6;");
  if (autog) {
    e.line("// short rows, and enough of them: a warp per row, 8 rows a block").open("if (n <= 32 * 4 * I && rows >= 2048)");
    pick_it("256", "32", "(rows + 7) / 8");
    e.close().reopen("} else {");
  }
  pick_it("B", "G", "blocks");
  e.reopen("} else if (CL > 1 && kfab_rows_cluster(a, rows, n, vec, stream)) {").line("// launched: each row over a cluster");
  if (split) e.reopen("} else if (kfab_rows_split_go(a, rows, n, vec, stream)) {").line("// launched: each row over a group of the grid's blocks");
  e.reopen("} else if (vec) {").line("kfab_go<P>(kfab_rows_stream<B, G, 4>, blocks, B, stream, a, rows, n);");
  e.reopen("} else {").line("kfab_go<P>(kfab_rows_stream<B, G, 1>, blocks, B, stream, a, rows, n);").close();
  if (autog) e.close();
  e.close();
  if (any_k_out) e.line("if (rows == 0) kfab_finish<<<1, 32, 0, stream>>>(a, rows, n);");
  return e.take();
}

// The passes over the columns that compute a program's column reductions (a training batch norm's
// statistics), before its row kernel: pass s sums, for each of its column reductions, the argument
// over the rows into a.cs (doubles, zeroed before the first pass), a block taking 32 columns and 8 row
// lanes, a warp reading 32 consecutive floats of a row. Empty for a program without them.
Parts column_passes(const Gen& g) {
  if (g.n_col == 0) return {};
  Emitter e;
  for (int s = 1; s <= g.n_stage; ++s) {
    const std::vector<int> nodes = g.col_nodes(s);
    std::vector<int> args;
    for (int k : nodes) args.push_back(g.p.nodes[k].args[0]);
    e.blank().linef("// Column pass {}: sums over the rows (32 columns and 8 row lanes a block).", s);
    e.open(fmt::format("__global__ void __launch_bounds__(256) kfab_cols{}(Args a, int64_t rows, int64_t n)", s));
    e.linef("__shared__ double part[{}][8][32];", nodes.size());
    e.line("const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;");
    for (size_t j = 0; j < nodes.size(); ++j) e.linef("double s{} = 0.0;", j);
    e.open("if (c < n)");
    g.kconsts_for(args, e);
    e.open("for (int64_t row = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; row < rows; row += 8 * static_cast<int64_t>(gridDim.y))");
    g.element(args, [&](int i) { return g.lang.load(i, "row * n + c"); }, "c", e);
    for (size_t j = 0; j < nodes.size(); ++j) e.linef("s{} += static_cast<double>({});", j, g.value(args[j]));
    e.close().close();
    for (size_t j = 0; j < nodes.size(); ++j) e.linef("part[{0}][threadIdx.y][threadIdx.x] = s{0};", j);
    e.line("__syncthreads();").open("if (threadIdx.y == 0 && c < n)");
    for (size_t j = 0; j < nodes.size(); ++j) {
      e.linef("double t{} = 0.0;", j).linef("for (int y = 0; y < 8; ++y) t{0} += part[{0}][y][threadIdx.x];", j);
      e.linef("atomicAdd(&a.cs[{} * n + c], t{});", g.colslot[nodes[j]], j);
    }
    e.close().close();
  }
  Emitter l(1);
  l.line("// the column passes' sums, kept between calls (grown when a shape needs more), zeroed each call");
  l.line("static double* cs = nullptr;").line("static int64_t cs_have = 0;").linef("const int64_t cs_need = {} * n;", g.n_col);
  l.open("if (cs_need > cs_have)").line("if (cs != nullptr) cudaFree(cs);").line("cs = nullptr, cs_have = 0;");
  l.line("if (cudaMalloc(reinterpret_cast<void**>(&cs), sizeof(double) * static_cast<size_t>(cs_need)) != cudaSuccess) return 4;");
  l.line("cs_have = cs_need;").close().line("a.cs = cs;").open("if (rows > 0 && n > 0)");
  l.line("if (cudaMemsetAsync(cs, 0, sizeof(double) * static_cast<size_t>(cs_need), stream) != cudaSuccess) return 5;");
  l.line("if ((n + 31) / 32 > 2147483647) return 6;").line("const int64_t chunks = (rows + 255) / 256;");
  l.line("const dim3 cgrid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(chunks < 64 ? chunks : 64));");
  for (int s = 1; s <= g.n_stage; ++s) l.linef("kfab_cols{}<<<cgrid, dim3(32, 8), 0, stream>>>(a, rows, n);", s);
  l.close();
  return {e.take(), l.take()};
}

// Rows longer than a block's registers hold, each split over the CL blocks of a cluster that keep its
// parts in registers (the smallest footprint that holds a part): false, nothing launched, where the
// parts are too long for them or the device cannot run such clusters (the caller streams the rows).
void cluster_launch(const Gen& g, int I, Emitter& e) {
  e.blank().line("// Rows longer than a block holds, each split over a cluster of CL blocks keeping its parts in registers;");
  e.line("// false (nothing launched) where the parts are too long or the device cannot run such clusters.");
  e.open("bool kfab_rows_cluster(const Args& a, int64_t rows, int64_t n, bool vec, cudaStream_t stream)");
  e.open("if constexpr (CL > 1)");
  // SH: rows whose length is not a multiple of 4 read a float4 at a time from the 16-byte boundary at or
  // before each row's start (every per-element tensor 16-byte aligned: a row's floats start at the same
  // place in their float4 in each), parts cut from there: up to 3 floats more a row
  std::string aligned = "!vec";
  for (int i : g.e_inputs()) aligned += fmt::format(" && kfab_aligned16(a.in{})", i);
  for (int j : g.outputs_of(VClass::E)) aligned += fmt::format(" && kfab_aligned16(a.out{})", j);
  e.line("const int64_t part = (n + CL * 4 - 1) / (CL * 4) * 4;  // a block's part, float4-aligned");
  e.open("if constexpr (SH)").open(fmt::format("if ({})", aligned));
  e.line("// (a part cut from the boundary holds up to 3 floats more: a thread's one more vector, NV)");
  for (int it = 1; it <= I; it *= 2)
    e.linef("if (part <= static_cast<int64_t>(G) * {0} * 4) return kfab_go_cluster<CL>(kfab_rows_cached<B, G, 4, {0}, CL, true>, B, stream, a, rows, n);",
            it);
  e.close().close();
  for (int it = 1; it <= I; it *= 2) {
    e.linef("if (part <= static_cast<int64_t>(G) * {} * 4)", it).indent();
    e.linef("return vec ? kfab_go_cluster<CL>(kfab_rows_cached<B, G, 4, {0}, CL>, B, stream, a, rows, n)", it);
    e.linef("           : kfab_go_cluster<CL>(kfab_rows_cached<B, G, 1, {0}, CL>, B, stream, a, rows, n);", it * 4).dedent();
  }
  e.close().line("(void)a, (void)rows, (void)n, (void)vec, (void)stream;").line("return false;").close();
}

// Rows longer than a cluster holds, each split over the fewest blocks of the grid that keep its parts
// in registers (I float4 a thread), all resident at once: false, nothing launched, where the device
// cannot hold them (the caller streams the rows). `l2` > 0: tiles read twice (kfab_go_l2, its lag);
// < 0: tiles kept in shared memory (kfab_go_ring, its lag -l2).
void split_launch(const Gen& g, bool prefetch, bool colsm, int l2, Emitter& e) {
  e.blank().line("// Rows longer than a cluster holds, each split over a group of the grid's blocks keeping its parts in registers;");
  e.line("// false (nothing launched) where the device cannot hold a row's group at once.");
  e.open("bool kfab_rows_split_go(const Args& a, int64_t rows, int64_t n, bool vec, cudaStream_t stream)");
  e.line("// a block's values: I float4 a thread, or 2 * I floats read one at a time (4 * I of them spill under their index arithmetic)");
  e.line("constexpr int64_t holds = static_cast<int64_t>(B) * I * 4;");
  if (l2 < 0) {  // tiles of `holds` in shared memory, a tile's second pass -l2 (or more) of the block's tiles after its first
    e.linef("constexpr int LAG = {};  // a tile's outputs at least LAG of the block's tiles after its shares", -l2);
    e.line("return vec && kfab_go_ring(kfab_rows_split<B, G, 4, I>, B, holds, NRED, LAG, stream, a, rows, n);").close();
    return;
  }
  if (l2 > 0) {  // tiles of `holds` read twice, by a grid of resident blocks taking tickets, first passes `l2` quarters of it ahead
    e.linef("constexpr int LAG = {};  // first passes run a row and LAG / 4 of the grid's blocks tiles ahead", l2);
    e.line("return vec ? kfab_go_l2(kfab_rows_split<B, G, 4, I>, B, holds, NRED, LAG, stream, a, rows, n)");
    e.line("           : kfab_go_l2(kfab_rows_split<B, G, 1, I * 2>, B, holds / 2, NRED, LAG, stream, a, rows, n);").close();
    return;
  }
  // the next row's part of each per-element input, I float4 a thread, with `prefetch` (float4 rows only)
  e.linef("constexpr int pre = {} * B * I * 16;  // bytes of shared memory a block, the next row's part (prefetch)",
          split_prefetches(g, prefetch) ? g.e_inputs().size() : 0);
  // the block's part of a kept per-column input, I float4 a thread, with `colsm` (not with a prefetch)
  e.linef("constexpr int keep = {} * B * I * 16;  // bytes of shared memory a block, a per-column input's part (colsm)",
          !split_prefetches(g, prefetch) && split_kept_column(g, colsm) >= 0 ? 1 : 0);
  e.line("return vec ? kfab_go_split(kfab_rows_split<B, G, 4, I>, B, holds, NRED, stream, a, rows, n, pre + keep)");
  e.line("           : kfab_go_split(kfab_rows_split<B, G, 1, I * 2>, B, holds / 2, NRED, stream, a, rows, n);").close();
}

// Whether a program's cluster kernel may read its rows from the 16-byte boundary before them (`shift`): it
// reads nothing by column but its per-element inputs (no per-column input or value, no column index, no
// pick), whose floats before and past the row it leaves out of its reductions and outputs.
bool can_shift(const Gen& g) {
  for (size_t k = 0; k < g.p.nodes.size(); ++k) {
    const PNode& n = g.p.nodes[k];
    if (g.live[k] && (n.cls == VClass::C || n.op == "colidx" || n.op == "pick")) return false;
  }
  return g.p.groups <= 1;
}

Parts rows_parts(const Gen& g, const TemplateParams& tp) {
  const Program& p = g.p;
  const int B = param(tp, "block", 256), I = param(tp, "items", 4), P = param(tp, "persist", 0);
  // group=auto: a warp per row where the row fits a warp's registers (and there are rows enough),
  // the whole block per row otherwise, decided per call
  const bool autog = tp.count("group") && tp.at("group") == "auto";
  int G = autog ? B : std::min(param(tp, "group", B), B);
  if (G > 32) G = B;  // more than a warp per row: the whole block
  bool any_k_out = false;  // scalar outputs (all-reductions)
  for (const auto& o : p.outputs) any_k_out = any_k_out || p.nodes[o.second].cls == VClass::K;
  // a cluster a row: whole blocks per row, a grid of one cluster a row, no all-reductions (whose
  // per-row shares every block of the cluster would add)
  const int CL = G == B && P == 0 && !any_k_out ? std::clamp(param(tp, "cluster", 1), 1, 16) : 1;
  // rows split over groups of the grid's blocks: likewise, and not with a warp per row
  const bool split = G == B && !autog && P == 0 && !any_k_out && param(tp, "split", 0) != 0;
  Emitter e;
  e.linef("constexpr int B = {}, G = {}, I = {}, CL = {};  // threads per block, threads per row{}, at most I float4 a thread keeps, "
          "blocks a row (a cluster) where a block cannot hold it",
          B, G, I, CL, autog ? " (or a warp per row of 256-thread blocks, for short rows)" : "");
  e.linef("constexpr bool SH = {};  // rows not a multiple of 4 over a cluster read a float4 at a time (kfab_rows_cluster)",
          CL > 1 && param(tp, "shift", 0) != 0 && can_shift(g) ? "true" : "false");
  e.linef("constexpr int NRED = {}, NALL = {};", std::max(1, g.n_red), std::max(1, g.n_all));
  e.linef("constexpr int P = {};  // 0: a block a chunk of rows; P > 0: at most P blocks an SM can hold at once, each taking chunks in turn", P);
  e.line("constexpr int NSPREAD = 64;  // all-reduction sums are spread over this many slots (less atomic contention)").blank();
  args_struct(p, e);
  e.line("__device__ double kfab_ws[NALL * NSPREAD];  // all-reduction sums; zero between calls");
  e.line("__device__ unsigned int kfab_blocks_done;          // blocks of the current launch that have added theirs; zero between calls");
  e.blank().raw(template_text("row_reduce.cuh")).raw(template_text("resident.cuh")).raw(template_text("row_div.h"));
  if (any_k_out) finish_scalars(g, e);
  e.blank().line("// A row kernel whose threads keep IT vectors of V floats of their row in registers (rows of up to");
  e.line("// G * IT * V elements, or CL times that over a cluster), G threads a row, B a block. U (V 4, CL > 1): the row");
  e.line("// is read from the 16-byte boundary at or before its start, kfab_m floats of the row before it, and cut into");
  e.line("// parts from there (rows whose length is not a multiple of 4: a float4 at a time, not a float).");
  e.line("template <int B, int G, int V, int IT, int CL, bool U = false>");
  // A cluster's thread keeping at most 32 floats is held to 64 registers, two blocks of 512 threads an SM:
  // with its loads made unguarded (RowKernel::part_loads) ptxas took level1/39's cluster kernel to 84
  // registers, one block an SM, where 64 had sufficed. (Not a lone block's: level2/22's and 45's row
  // epilogues, a float at a time, spilled 68 and 40 bytes a thread under that bound.)
  e.openf("__global__ void __launch_bounds__(B, CL > 1 && IT * V * {} <= 32 ? 1024 / B : 1) kfab_rows_cached(Args a, int64_t rows, int64_t n)",
          std::max<size_t>(1, g.e_inputs().size()));
  RowKernel(g, Hold::kCached, any_k_out, e).emit();
  e.close().blank().line("// The same for longer rows: every pass over the row reads it from global memory (L2 for the later ones).");
  e.line("template <int B, int G, int V>").open("__global__ void __launch_bounds__(B) kfab_rows_stream(Args a, int64_t rows, int64_t n)");
  RowKernel(g, Hold::kStream, any_k_out, e).emit();
  e.close();
  cluster_launch(g, I, e);
  // (l2: tiles of each row read twice, the second time from L2, where every row reduction meets at once)
  const bool l2 = split && param(tp, "l2", 0) != 0 && meets_once(g);
  // (ring: the tiles read once, into a ring of shared-memory slots; rows of one per-element input)
  const bool ring = l2 && param(tp, "ring", 0) != 0 && g.e_inputs().size() == 1;
  if (ring) {
    e.blank().line("// The cached kernel for rows longer than a cluster holds, in tiles of s.S parts a row, each read once by the bulk");
    e.line("// copy into a ring of s.R slots of shared memory: a first pass makes a tile's shares of its row's reductions, a");
    e.line("// second, s.L of the block's tiles later, gathers its row's and writes the tile's outputs, both from the slot. A");
    e.line("// grid of resident blocks (a cooperative launch): two an SM with tiles of 8 float4 a thread (three slots of 32 KB");
    e.line("// each), one with 16 (64 KB); resident.cuh's kfab_go_ring.").line("template <int B, int G, int V, int IT>");
    e.open("__global__ void __launch_bounds__(B, IT * V <= 32 ? 2 : 1) kfab_rows_split(Args a, int64_t rows, int64_t n, KfabSplit s)");
    RowKernel(g, Hold::kRing, false, e).emit();
    e.close();
    split_launch(g, false, false, -std::clamp(param(tp, "lag", 1), 1, 6), e);
  } else if (l2) {
    e.blank().line("// The cached kernel for rows longer than a cluster holds, in tiles of s.S parts a row, each read twice: a first pass");
    e.line("// makes a tile's shares of its row's reductions, the row's last makes the row's from them; a second pass, from L2,");
    e.line("// waits for those and writes the tile's outputs. A grid of resident blocks (a cooperative launch) taking tickets from");
    e.line("// a counter, first passes s.D tiles ahead of second ones (row_reduce.cuh's kfab_l2_ticket).");
    e.line("// (blocks of 256 threads keeping at most 8 float4 a thread four an SM, at most 64 registers: at different steps of");
    e.line("// their tiles, where two keeping 16 float4 wait for their loads and meetings at the same time)");
    e.line("template <int B, int G, int V, int IT>");
    e.open("__global__ void __launch_bounds__(B, B <= 256 ? (V == 4 && IT * V <= 32 ? 4 : 2) : 1) kfab_rows_split(Args a, int64_t rows, int64_t n, KfabSplit s)");
    RowKernel(g, Hold::kL2, false, e).emit();
    e.close();
    split_launch(g, false, false, std::clamp(param(tp, "lag", 4), 2, 16), e);
  } else if (split) {
    e.blank().line("// The cached kernel for rows longer than a cluster holds: each row split over a group of s.S blocks of the grid,");
    e.line("// every block resident at once (a cooperative launch), their row reductions combined through global memory.");
    e.line("// (blocks of 256 threads two an SM, at most 128 registers a thread: left to itself the compiler takes 221 for");
    e.line("// 16 float4 a thread, and a row of 4M floats then finds half the 256 blocks it needs resident)");
    e.line("template <int B, int G, int V, int IT>");
    e.open("__global__ void __launch_bounds__(B, B <= 256 ? 2 : 1) kfab_rows_split(Args a, int64_t rows, int64_t n, KfabSplit s)");
    RowKernel(g, Hold::kSplit, false, e, param(tp, "defer", 0) != 0, param(tp, "prefetch", 0) != 0, param(tp, "reuse", 0) != 0,
              param(tp, "colsm", 0) != 0)
        .emit();
    e.close();
    split_launch(g, param(tp, "prefetch", 0) != 0, param(tp, "colsm", 0) != 0, 0, e);
  }
  const Parts cols = column_passes(g);
  e.raw(cols.code);
  std::string launch = cols.launch;
  if (g.n_all > 0)  // kfab_ws is zero between calls: zero at module load, and zeroed again by the block that reads it
    launch = "  static double* ws = nullptr;\n"
             "  if (ws == nullptr && cudaGetSymbolAddress(reinterpret_cast<void**>(&ws), kfab_ws) != cudaSuccess) return 4;\n"
             "  a.ws = ws;\n";
  return {e.take(), launch + rows_launch(I, autog, any_k_out, split)};
}

std::string generate_rows(const Program& p, const TemplateParams& tp, const std::string& title) {
  const Gen g(p, cuda_lang());
  const int B = param(tp, "block", 256);
  const int G = std::min(param(tp, "group", B), B) > 32 ? B : std::min(param(tp, "group", B), B);
  const bool autog = tp.count("group") && tp.at("group") == "auto";
  Emitter e;
  head(title, tp, fmt::format("A row kernel ({} threads per row); the program", autog ? fmt::format("a warp or {}", B) : std::to_string(G)), p, e);
  if (param(tp, "split", 0) != 0) e.line("#define KFAB_KEEP_IN_L2  // rows split over the grid's blocks: per-column inputs kept in L2 (kfab_ld)");
  e.raw(kPrelude).raw(host_checks()).blank();
  const Parts parts = rows_parts(g, tp);
  e.raw(parts.code);
  host(g, default_binding(p), parts.launch, e);
  return e.take();
}

// ---- GEMM with an epilogue ----------------------------------------------------------------------

/// The end of the GEMM kernel, over its accumulators acc[TM][TN]: a pointwise epilogue applied in
/// the registers and written to the outputs (`fused`), else the product written for the row kernel.
void gemm_epilogue(const Gen& g, int pin, bool fused, Emitter& e) {
  const Program& p = g.p;
  if (fused) g.kconsts(e);
  e.line("#pragma unroll").open("for (int ii = 0; ii < TM; ++ii)").line("const int64_t row = m0 + ty * TM + ii;").line("if (row >= rows) continue;");
  if (fused) e.line("const int64_t prow = row0 + row;  // the row of the whole product (a batch's rows start at row0)");
  e.line("#pragma unroll").open("for (int jj = 0; jj < TN; ++jj)").line("const int64_t c = n0 + tx * TN + jj;");
  if (fused) {
    e.line("if (c >= n) continue;");
    std::vector<int> outs;
    for (const auto& o : p.outputs) outs.push_back(o.second);
    g.element(outs, [&](int i) { return i == pin ? std::string("acc[ii][jj]") : fmt::format("__ldg(a.in{} + prow * n + c)", i); }, "c", e);
    for (size_t j = 0; j < p.outputs.size(); ++j) e.linef("a.out{}[prow * n + c] = {};", j, g.value(p.outputs[j].second));
  } else {
    e.line("if (c < n) o.C[row * n + c] = acc[ii][jj];");
  }
  e.close().close();
}

// What the binding's `prepare` launches first: for an A given as [K, M] the transpose kernels
// (tiled_transpose.cuh), for a pooled product the averaging one (pool_columns.cuh).
void prepare_kernels(const GemmProgram& gp, Emitter& e) {
  if (gp.pool > 1) e.raw(template_text("pool_columns.cuh")).blank();  // a pooled product: B's columns averaged first
  if (!gp.trans_a) return;
  e.line("constexpr int KT = 2;          // A's transpose: 32 x 32 tiles a block moves with float4 accesses");
  e.line("constexpr bool MFAST = false;  // blockIdx.x runs along A's columns");
  e.raw(template_text("tiled_transpose.cuh")).blank();
}

// The product's buffer for a row kernel after the GEMM, kept between calls (grown when a shape needs
// more), as the epilogue's input `pin`; where the product is the output (`direct`), the output itself.
// `extra`: an expression of further floats kept after the product (the operands' TF32 parts, or B
// written K-major), from `scratch` on (declared only where there is an extra or a direct product).
std::string product_buffer(int pin, const std::string& extra = "0", bool direct = false) {
  if (direct) {
    std::string s = "  // the product is the output: written there, no row pass after the GEMM\n  float* const product = a.out0;\n";
    if (extra == "0") return s + "  float* const scratch = nullptr;\n";
    return s + fmt::format(R"(  // the operands' scratch, kept between calls (grown when a shape needs more)
  static float* scratch = nullptr;
  static int64_t capacity = 0;
  const int64_t need = {0};
  if (need > capacity) {{
    if (scratch != nullptr) cudaFree(scratch);
    scratch = nullptr, capacity = 0;
    if (cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(float) * static_cast<size_t>(need)) != cudaSuccess) return 4;
    capacity = need;
  }}
)",
                           extra);
  }
  return fmt::format(R"(  // the product's buffer{1}, kept between calls (grown when a shape needs more)
  static float* product = nullptr;
  static int64_t capacity = 0;
  const int64_t need = (gm * gn + 3) / 4 * 4 + {2};  // the GEMM's product (a max-pooled one's at its full width)
  if (need > capacity) {{
    if (product != nullptr) cudaFree(product);
    product = nullptr, capacity = 0;
    if (cudaMalloc(reinterpret_cast<void**>(&product), sizeof(float) * static_cast<size_t>(need)) != cudaSuccess) return 4;
    capacity = need;
  }}
  a.in{0} = product;
{3})",
                     pin, extra == "0" ? "" : " and the operands' scratch after it", extra,
                     extra == "0" ? "" : "  float* const scratch = product + (gm * gn + 3) / 4 * 4;  // 16-byte aligned\n");
}

/// kfab_run's end for the GEMM: the grid, the float4 choice and the launch; with a row kernel after
/// it, the product's buffer (b.setup).
std::string gemm_launch(bool fused, int pin, Binding& b) {
  if (!fused) b.setup = product_buffer(pin);
  return fmt::format(R"(  if (total == 0) return 0;
  const int64_t gx = (gn + BN - 1) / BN, gy = (gmb + BM - 1) / BM;
  if (gx > 2147483647 || gy > 65535) return 6;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const bool v4 = K % 4 == 0 && (TRANS_B || gn % 4 == 0) && kfab_aligned16(a_data) && kfab_aligned16(w_data);
  for (int64_t z = 0; z < batch; ++z) {{  // a batch's GEMM on its slices
    const Operands o{{a_data + z * gmb * K, w_data + z * K * gn, {}}};
    if (v4) kfab_gemm<true><<<grid, NT, 0, stream>>>(o, a, gmb, gn, K, z * gmb);
    else kfab_gemm<false><<<grid, NT, 0, stream>>>(o, a, gmb, gn, K, z * gmb);
  }}
)",
                     fused ? "nullptr" : "product + z * gmb * gn");
}

// The row kernel that applies an epilogue which is not pointwise to a GEMM's product: a block a row,
// or a warp a row where rows are short (a GroupNorm's groups of 16 columns) and many.
const TemplateParams kProductRows = {{"block", "256"}, {"group", "auto"}, {"items", "8"}};

// CUTLASS's 3xTF32 GEMM (each operand split into a big and a small TF32 part, three tensor-core
// products: fp32 accuracy) on the SM80 mma.sync path, into the product's buffer; a second instance with
// alignment 1 takes the shapes and pointers the first cannot (K or N not a multiple of 4).
void cutlass_gemm_types(const GemmProgram& gp, const TemplateParams& tp, Emitter& e) {
  auto dims = [&](const char* key, const char* dflt) {
    std::string v = tp.count(key) ? tp.at(key) : dflt;
    for (char& c : v)
      if (c == 'x') c = ',';
    return v;
  };
  e.line("// fp32 in and out, the 3xTF32 product on tensor cores (arch::OpMultiplyAddFastF32), B given as");
  e.linef("// {}; SPLIT: K split into slices whose partial sums meet in C in turn (CUTLASS's serial split-K)",
          gp.trans_b ? "W [N, K] (a column-major [K, N])" : "B [K, N] (row-major)");
  e.line("template <int ALIGN, bool SPLIT = false>");
  e.line("using KfabGemm = cutlass::gemm::device::Gemm<");
  e.indent().indent();
  e.linef("float, cutlass::layout::RowMajor, float, cutlass::layout::{}, float, cutlass::layout::RowMajor, float,",
          gp.trans_b ? "ColumnMajor" : "RowMajor");
  e.linef("cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, cutlass::gemm::GemmShape<{}>, cutlass::gemm::GemmShape<{}>,",
          dims("tile", "128x64x16"), dims("warp", "64x32x16"));
  e.line("cutlass::gemm::GemmShape<16, 8, 8>, cutlass::epilogue::thread::LinearCombination<float, ALIGN, float, float>,");
  const int swizzle = param(tp, "swizzle", 1);  // blocks launched in groups along N (L2 reuse of A's rows)
  e.linef("cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<{}>, {}, ALIGN, ALIGN, SPLIT, cutlass::arch::OpMultiplyAddFastF32>;",
          swizzle != 1 ? std::to_string(swizzle) : std::string(), param(tp, "stages", 4));
  e.dedent().dedent();
  e.blank().line("// C = A @ B into `c` (rows x n, row-major) with the instance for `ALIGN`. SPLIT: a product of few output tiles");
  e.line("// over a long K (KernelBench's level1_6, 256 x 256 x 524288: 8 tiles where an H100 has 132 SMs) in slices of K,");
  e.line("// enough for two blocks an SM and at least 1024 deep, each slice's fp32 sum added to C in slice order.");
  e.line("template <int ALIGN, bool SPLIT = false>");
  e.open("int kfab_tc_gemm(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream)");
  e.line("using G = KfabGemm<ALIGN, SPLIT>;").line("int slices = 1;");
  e.open("if constexpr (SPLIT)");
  e.open("static const int sms = []");
  e.line("int device = 0, count = 0;").line("(void)cudaGetDevice(&device);");
  e.line("return cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && count > 0 ? count : 1;");
  e.close("}();");
  e.line("const int64_t tiles = (static_cast<int64_t>(m) + G::ThreadblockShape::kM - 1) / G::ThreadblockShape::kM *");
  e.line("                      ((static_cast<int64_t>(n) + G::ThreadblockShape::kN - 1) / G::ThreadblockShape::kN);");
  e.line("const int64_t want = (2 * static_cast<int64_t>(sms) + tiles - 1) / tiles, most = k / 1024;");
  e.line("slices = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(want, most)));");
  e.close();
  e.linef("const typename G::Arguments args({{m, n, k}}, {{a, k}}, {{b, {}}}, {{c, n}}, {{c, n}}, {{1.0f, 0.0f}}, slices);", gp.trans_b ? "k" : "n");
  e.line("G gemm;").line("if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 7;");
  e.open("if constexpr (SPLIT)");
  e.line("// the slices' semaphores (a flag a tile), kept between calls; initialize zeroes them on the stream");
  e.line("static void* workspace = nullptr;").line("static size_t have = 0;").line("const size_t need = G::get_workspace_size(args);");
  e.open("if (need > have)");
  e.line("if (workspace != nullptr) {  // an earlier launch on this stream may still read it").line("  (void)cudaStreamSynchronize(stream);");
  e.line("  cudaFree(workspace);").line("}").line("workspace = nullptr, have = 0;");
  e.line("if (cudaMalloc(&workspace, need) != cudaSuccess) return 4;").line("have = need;").close();
  e.line("if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return 5;");
  e.line("return gemm.run(stream) == cutlass::Status::kSuccess ? 0 : 5;").close();
  e.line("return gemm(args, nullptr, stream) == cutlass::Status::kSuccess ? 0 : 5;").close();
}

// Hopper's own tensor-core path (include/kfab/templates/sm90_tf32_gemm.cuh, CUTLASS 3's sm90 GEMM:
// TMA, wgmma, warp-specialised): three TF32 products at fp32 accuracy (mma sm90_3xtf32), one TF32 product
// and one bf16 product of the two cross terms (sm90_mixed, precision tf32+bf16), or one TF32 product
// (sm90_tf32); the last two are reduced precisions the tuner keeps only well within the task's tolerance. Shapes and
// pointers TMA cannot take (K or N not a multiple of 4, unaligned) go to CUTLASS's SM80 3xTF32 at
// alignment 1. B given as W [N, K] (K-major, as TF32 wgmma reads it) or as [K, N], written as [N, K]
// into the scratch first (with three products, by the pass that splits it).
std::string generate_gemm_sm90(const GemmProgram& gp, const TemplateParams& tp, const std::string& title) {
  const Program& p = gp.epilogue;
  const Gen g(p, cuda_lang());
  const int pin = product_input(gp);
  const bool three = tp.at("mma") == "sm90_3xtf32", mixed = tp.at("mma") == "sm90_mixed";
  std::string tile;  // "128x128x32" as "128, 128, 32"
  for (char c : tp.count("tile") ? tp.at("tile") : std::string("128x128x32")) tile += c == 'x' ? std::string(", ") : std::string(1, c);
  const bool coop = !tp.count("schedule") || tp.at("schedule") == "coop";
  Emitter e;
  head(title, tp,
       fmt::format("{} on Hopper's tensor cores (CUTLASS 3's sm90 GEMM), then a row kernel: C = A @ {}, then the epilogue",
                   three   ? "Three TF32 products (fp32 accuracy)"
                   : mixed ? "One TF32 product and one bf16 product of the cross terms (reduced precision)"
                           : "One TF32 product (reduced precision)",
                   gp.trans_b ? "W^T (W is [N, K])" : "B"),
       p, e);
  e.line("// CUTLASS's device-side asserts are calls, and a call inside the wgmma pipeline serialises it").line("#ifndef NDEBUG");
  e.line("#define NDEBUG").line("#endif");
  e.line("#include <algorithm>").line("#include <type_traits>").blank();
  for (const char* h : {"cute/tensor.hpp", "cutlass/cutlass.h", "cutlass/epilogue/collective/collective_builder.hpp",
                        "cutlass/epilogue/thread/linear_combination.h", "cutlass/gemm/collective/collective_builder.hpp",
                        "cutlass/gemm/device/gemm.h", "cutlass/gemm/device/gemm_universal_adapter.h", "cutlass/gemm/kernel/gemm_universal.hpp",
                        "cutlass/gemm/kernel/tile_scheduler.hpp"})
    e.linef("#include \"{}\"", h);
  e.raw(kPrelude).raw(host_checks()).blank();
  prepare_kernels(gp, e);
  const Parts rows = rows_parts(g, kProductRows);  // declares Args too
  e.raw(rows.code).blank();
  e.raw(template_text("sm90_tf32_gemm.cuh")).blank();
  const bool streamk = tp.count("scheduler") && tp.at("scheduler") == "streamk";
  // three products: CUTLASS's stream-K scheduler, which splits the big x big product along K (kfab_tf32_k_slice)
  // and hands out the others' tiles whole (scheduler=persistent) or as its heuristic picks (scheduler=streamk)
  // (CUTLASS's ping-pong schedule has no stream-K scheduler: its three products take a K short of a slice)
  const int swizzle = param(tp, "swizzle", 1);
  e.linef("using KfabTile = KfabSm90Gemm<{}, {}, {}, {}{}>;", tile, param(tp, "cluster", 1), coop ? "true" : "false",
          coop && (streamk || three || mixed) ? "true" : "false", swizzle != 1 ? fmt::format(", {}", swizzle) : std::string())
      .blank();
  cutlass_gemm_types(gp, {}, e);  // the alignment-1 instance for what TMA cannot take
  Binding b = gemm_binding(gp, true);
  const bool direct = product_is_output(gp, pin);
  // three products: the parts' rows padded where TMA cannot take the operands or the product as they are
  const std::string extra = three || mixed ? fmt::format("kfab_3xtf32_scratch_for(a_data, w_data, {}, gmb, gn, K, batch)", direct ? "a.out0" : "nullptr")
                                  : gp.trans_b ? "0"
                                               : "batch * gn * K";
  b.setup = product_buffer(pin, extra, direct);
  if (!direct && extra == "0") b.setup += "  float* const scratch = nullptr;  // W is read as it is\n";
  // every batch in one launch (CUTLASS's batch mode): a batch alone may have fewer tiles than the GPU has SMs
  std::string launch = R"(  if (total == 0) return 0;
  if (gmb > 2147483647 || gn > 2147483647 || K > 2147483647 || batch > 2147483647) return 6;
  const int m32 = static_cast<int>(gmb), n32 = static_cast<int>(gn), k32 = static_cast<int>(K), l32 = static_cast<int>(batch);
  if (K > 0)" + std::string(three || mixed ? "" : " && K % 4 == 0 && gn % 4 == 0 && kfab_aligned16(a_data) && kfab_aligned16(w_data) && kfab_aligned16(product)") +
                       R"() {
)";
  if (mixed)
    launch += fmt::format("    const int rc = kfab_sm90_mixed<KfabTile, {}>(a_data, w_data, product, scratch, m32, n32, k32, l32, {}, stream);\n",
                          gp.trans_b ? "false" : "true", streamk ? "false" : "true");
  else
    launch += fmt::format("    const int rc = kfab_sm90_{}xtf32<KfabTile>(a_data, w_data, product, scratch, m32, n32, k32, l32, {}{}, stream);\n",
                          three ? 3 : 1, gp.trans_b ? "false" : "true", three ? (streamk ? ", false" : ", true") : "");
  launch += R"(    if (rc != 0) return rc;
  } else {  // what TMA cannot take (with one product): CUTLASS's SM80 3xTF32 at alignment 1, a batch at a time
    for (int64_t z = 0; z < batch; ++z) {
      const int rc = kfab_tc_gemm<1>(a_data + z * gmb * K, w_data + z * K * gn, product + z * gmb * gn, m32, n32, k32, stream);
      if (rc != 0) return rc;
    }
  }
)" + (direct ? std::string() : max_pool_pass(gp, pin, true) + rows.launch);
  host(g, b, launch, e);
  return e.take();
}

// The tensor-core GEMM, then the epilogue as a row kernel over the product (a pointwise one too: the
// product's extra pass costs a read and a write of it, small beside the GEMM).
std::string generate_gemm_tensor_cores(const GemmProgram& gp, const TemplateParams& tp, const std::string& title) {
  const Program& p = gp.epilogue;
  const Gen g(p, cuda_lang());
  const int pin = product_input(gp);
  Emitter e;
  head(title, tp,
       fmt::format("CUTLASS's 3xTF32 tensor-core GEMM, then a row kernel: C = A @ {}, then the epilogue", gp.trans_b ? "W^T (W is [N, K])" : "B"),
       p, e);
  e.line("#include <algorithm>").blank();
  e.line("#include \"cutlass/epilogue/thread/linear_combination.h\"").line("#include \"cutlass/gemm/device/gemm.h\"");
  e.raw(kPrelude).raw(host_checks()).blank();
  prepare_kernels(gp, e);
  const Parts rows = rows_parts(g, kProductRows);  // declares Args too
  e.raw(rows.code).blank();
  cutlass_gemm_types(gp, tp, e);
  e.linef("constexpr bool SPLIT_K = {};  // K in slices (few output tiles over a long K)", tp.count("splitk") ? "true" : "false").blank();
  Binding b = gemm_binding(gp, true);
  const bool direct = product_is_output(gp, pin);
  b.setup = product_buffer(pin, "0", direct);
  const std::string launch = R"(  if (total == 0) return 0;
  if (gmb > 2147483647 || gn > 2147483647 || K > 2147483647) return 6;
  for (int64_t z = 0; z < batch; ++z) {  // a batch's GEMM on its slices
    const float* ap = a_data + z * gmb * K;
    const float* bp = w_data + z * K * gn;
    float* cp = product + z * gmb * gn;
    const bool v4 = K % 4 == 0 && gn % 4 == 0 && kfab_aligned16(ap) && kfab_aligned16(bp) && kfab_aligned16(cp);
    const int m32 = static_cast<int>(gmb), n32 = static_cast<int>(gn), k32 = static_cast<int>(K);
    const int rc = v4 ? kfab_tc_gemm<4, SPLIT_K>(ap, bp, cp, m32, n32, k32, stream) : kfab_tc_gemm<1, SPLIT_K>(ap, bp, cp, m32, n32, k32, stream);
    if (rc != 0) return rc;
  }
)" + (direct ? std::string() : max_pool_pass(gp, pin, true) + rows.launch);
  host(g, b, launch, e);
  return e.take();
}

// A GEMM whose epilogue reads the product only through row sums of linear functions of it
// (fold_row_sums): the product is never formed. B's sums over the product's columns (a pass over B),
// A times them (a pass over A), then the folded epilogue as a row kernel over the product's row sums
// (include/kfab/templates/row_sums_gemv.cuh). Summed in double, the result rounded to fp32 once.
std::string generate_gemm_folded(const GemmProgram& gp, const Program& p, const TemplateParams& tp, const std::string& title) {
  const Gen g(p, cuda_lang());
  const int pin = product_input(gp);
  Emitter e;
  head(title, tp,
       fmt::format("The row sums of A @ {} as A @ (B summed over the product's columns), no product formed; then the folded epilogue",
                   gp.trans_b ? "W^T (W is [N, K])" : "B"),
       p, e);
  e.raw(kPrelude).raw(host_checks()).blank();
  prepare_kernels(gp, e);
  const Parts rows = rows_parts(g, kProductRows);  // declares Args too
  e.raw(rows.code).blank();
  e.raw(template_text("row_sums_gemv.cuh")).blank();
  Binding b = gemm_binding(gp, true);
  b.setup = fmt::format(R"(  // the product's row sums and the pass over B's scratch, kept between calls (grown when a shape needs more)
  static float* sums = nullptr;
  static int64_t capacity = 0;
  const int64_t need = gm + 2 * (kfab_fold_chunks + 1) * K + 4;  // the sums, then the scratch's doubles
  if (need > capacity) {{
    if (sums != nullptr) cudaFree(sums);
    sums = nullptr, capacity = 0;
    if (cudaMalloc(reinterpret_cast<void**>(&sums), sizeof(float) * static_cast<size_t>(need)) != cudaSuccess) return 4;
    capacity = need;
  }}
  a.in{} = sums;
)",
                        pin);
  const std::string launch = fmt::format(R"(  if (total == 0) return 0;
  {{
    const float* ap = a_data;
    const float* bp = w_data;
    float* scratch = sums + ((gm + 3) / 4) * 4;  // 16-byte aligned after the sums
    const bool v4 = K % 4 == 0 && gn % 4 == 0 && kfab_aligned16(ap) && kfab_aligned16(bp);
    const int rc = kfab_product_row_sums(ap, bp, sums, scratch, gm, gn, K, {}, v4, stream);
    if (rc != 0) return rc;
  }}
)",
                                         gp.trans_b ? "true" : "false") +
                             rows.launch;
  host(g, b, launch, e);
  return e.take();
}

// A half-precision task's plain product (GemmProgram::dtype F16 or BF16): C = A @ B on 16-bit tensor
// cores, accumulated in fp32 and rounded to C's type once; every operand read in its own layout (A as
// [M, K] or [K, M], B as [K, N] or W [N, K]), batches in one launch on Hopper. At an sm90 point,
// CUTLASS 3's sm90 GEMM (include/kfab/templates/sm90_half_gemm.cuh) where TMA takes the shape and the
// pointers, else CUTLASS's SM80 mma.sync GEMM a batch at a time (at an sm80 point, always), and where
// a contiguous dimension is not a multiple of 8 or a pointer not 16-byte aligned, CUTLASS's SIMT GEMM.
std::string generate_gemm_half(const GemmProgram& gp, const TemplateParams& tp, const std::string& title) {
  const bool bf16 = gp.dtype == DType::BF16;
  const std::string type = bf16 ? "cutlass::bfloat16_t" : "cutlass::half_t", code = bf16 ? "KFAB_BF16" : "KFAB_F16";
  const bool sm90 = tp.at("mma") == "sm90_half";
  auto dims = [&](const char* key, const char* dflt) {
    std::string v = tp.count(key) ? tp.at(key) : dflt;
    for (char& c : v)
      if (c == 'x') c = ',';
    return v;
  };
  Emitter e;
  head(title, tp,
       fmt::format("{} tensor cores, fp32 accumulation, {}: C = {} @ {}", bf16 ? "bf16" : "fp16",
                   sm90 ? "CUTLASS 3's sm90 GEMM (TMA, wgmma)" : "CUTLASS's SM80 GEMM (mma.sync)", gp.trans_a ? "A^T (A is [K, M])" : "A",
                   gp.trans_b ? "W^T (W is [N, K])" : "B"),
       gp.epilogue, e);
  e.line("// CUTLASS's device-side asserts are calls, and a call inside the wgmma pipeline serialises it").line("#ifndef NDEBUG");
  e.line("#define NDEBUG").line("#endif");
  e.line("#include <cuda_runtime.h>").blank().line("#include <cstdint>").line("#include <type_traits>").blank();
  std::vector<const char*> headers = {"cutlass/bfloat16.h", "cutlass/cutlass.h", "cutlass/epilogue/thread/linear_combination.h",
                                      "cutlass/gemm/device/gemm.h", "cutlass/half.h"};
  if (sm90)
    headers.insert(headers.begin(), {"cute/tensor.hpp", "cutlass/epilogue/collective/collective_builder.hpp",
                                     "cutlass/gemm/collective/collective_builder.hpp", "cutlass/gemm/device/gemm_universal_adapter.h",
                                     "cutlass/gemm/kernel/gemm_universal.hpp", "cutlass/gemm/kernel/tile_scheduler.hpp"});
  for (const char* h : headers) e.linef("#include \"{}\"", h);
  e.line("#include \"kfab/candidate.h\"").blank().line("namespace {").blank();
  e.raw(host_checks()).blank();
  e.linef("using T = {};", type);
  e.linef("using LayoutA = cutlass::layout::{};  // A {}", gp.trans_a ? "ColumnMajor" : "RowMajor", gp.trans_a ? "[K, M]" : "[M, K]");
  e.linef("using LayoutB = cutlass::layout::{};  // {}", gp.trans_b ? "ColumnMajor" : "RowMajor", gp.trans_b ? "W [N, K]" : "B [K, N]").blank();
  if (sm90) {
    e.raw(template_text("sm90_tf32_gemm.cuh")).raw(template_text("sm90_half_gemm.cuh")).blank();  // the first: its kfab_sm90_launch
    std::string tile;
    for (char c : tp.count("tile") ? tp.at("tile") : std::string("128x128x64")) tile += c == 'x' ? std::string(", ") : std::string(1, c);
    e.linef("using KfabTile = KfabSm90HalfGemm<T, {}, {}, {}, {}, {}, {}>;", tile, param(tp, "cluster", 1),
            !tp.count("schedule") || tp.at("schedule") == "coop" ? "true" : "false",
            tp.count("scheduler") && tp.at("scheduler") == "streamk" ? "true" : "false", gp.trans_a ? "true" : "false",
            gp.trans_b ? "true" : "false");
  }
  e.line("// CUTLASS's SM80 tensor-core GEMM (operands' contiguous dimensions multiples of 8, 16-byte aligned), and");
  e.line("// its SIMT GEMM for any other shape and pointers; both accumulate in fp32");
  e.line("using KfabTc = cutlass::gemm::device::Gemm<");
  e.indent().indent();
  e.line("T, LayoutA, T, LayoutB, T, cutlass::layout::RowMajor, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,");
  e.linef("cutlass::gemm::GemmShape<{}>, cutlass::gemm::GemmShape<{}>, cutlass::gemm::GemmShape<16, 8, 16>,", dims("tile", "128x128x32"),
          dims("warp", "64x64x32"));
  e.linef("cutlass::epilogue::thread::LinearCombination<T, 8, float, float>, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, {}, 8, 8>;",
          sm90 ? 3 : param(tp, "stages", 3));
  e.dedent().dedent();
  e.line("using KfabSimt = cutlass::gemm::device::Gemm<T, LayoutA, T, LayoutB, T, cutlass::layout::RowMajor, float,");
  e.line("                                             cutlass::arch::OpClassSimt, cutlass::arch::Sm80>;").blank();
  e.line("// C = A @ B (C [m, n] row-major; lda, ldb: A's and B's leading dimensions) with Gemm; 0, 7 where it cannot take it, 5");
  e.line("template <class Gemm>");
  e.open("int kfab_sm80_half(const T* a, const T* b, T* c, int m, int n, int k, int lda, int ldb, cudaStream_t stream)");
  e.line("const typename Gemm::Arguments args({m, n, k}, {a, lda}, {b, ldb}, {c, n}, {c, n}, {1.0f, 0.0f});");
  e.line("Gemm gemm;").line("if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 7;");
  e.line("return gemm(args, nullptr, stream) == cutlass::Status::kSuccess ? 0 : 5;").close().blank();
  e.line("}  // namespace").blank();
  e.open("KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void* stream_)");
  e.linef("if (in == nullptr || out == nullptr || n_in != {} || n_out != 1) return 1;", gp.tensors);
  e.linef("const kfab_tensor& A = in[{}];", gp.a).linef("const kfab_tensor& W = in[{}];", gp.b).line("kfab_tensor& C = out[0];");
  e.linef("if (A.dtype != {0} || W.dtype != {0} || C.dtype != {0} || !kfab_dense(A) || !kfab_dense(W) || !kfab_dense(C)) return 2;", code);
  const int wn = gp.trans_b ? 0 : 1, wk = gp.trans_b ? 1 : 0;  // W's dimensions of N and K (after the batch)
  if (gp.batched) {
    e.line("if (A.ndim != 3 || W.ndim != 3 || W.shape[0] != A.shape[0]) return 2;");
    e.linef("const int64_t batch = A.shape[0], K = A.shape[{}], gmb = A.shape[{}];", gp.trans_a ? 1 : 2, gp.trans_a ? 2 : 1);
    e.linef("const int64_t gn = W.shape[{}];", wn + 1).linef("if (W.shape[{}] != K) return 2;", wk + 1);
  } else {
    e.line("if (W.ndim != 2) return 2;");
    if (gp.trans_a) {
      e.line("if (A.ndim != 2) return 2;").line("const int64_t batch = 1, K = A.shape[0], gmb = A.shape[1];  // A given as [K, M]");
    } else {
      e.line("if (A.ndim < 2) return 2;").line("// A's leading dimensions are the product's rows (a 3-D tensor times a matrix)");
      e.line("const int64_t batch = 1, K = A.shape[A.ndim - 1];").line("int64_t gmb = 1;");
      e.nested("for (int32_t d = 0; d + 1 < A.ndim; ++d)", "gmb *= A.shape[d];");
    }
    e.linef("const int64_t gn = W.shape[{}];", wn).linef("if (W.shape[{}] != K) return 2;", wk);
  }
  e.line("if (kfab_numel(C) != batch * gmb * gn) return 3;");
  e.line("cudaStream_t stream = static_cast<cudaStream_t>(stream_);");
  e.line("T* const c = static_cast<T*>(C.data);").line("if (batch * gmb * gn == 0) return 0;");
  e.line("if (K == 0) return cudaMemsetAsync(c, 0, sizeof(T) * static_cast<size_t>(batch * gmb * gn), stream) == cudaSuccess ? 0 : 5;");
  e.line("if (gmb > 2147483647 || gn > 2147483647 || K > 2147483647 || batch > 2147483647) return 6;");
  e.line("const T* const a = static_cast<const T*>(A.data);").line("const T* const b = static_cast<const T*>(W.data);");
  e.line("const int m32 = static_cast<int>(gmb), n32 = static_cast<int>(gn), k32 = static_cast<int>(K);");
  if (sm90) {
    e.line("// every batch in one launch where TMA takes the shape and the pointers");
    e.line("if (kfab_sm90_half_fits<KfabTile>(a, b, c, gmb, gn, K))");
    e.line("  return kfab_sm90_half<KfabTile>(a, b, c, m32, n32, k32, static_cast<int>(batch), stream);");
  }
  e.linef("const int lda = {}, ldb = {};", gp.trans_a ? "m32" : "k32", gp.trans_b ? "k32" : "n32");
  e.open("for (int64_t z = 0; z < batch; ++z)");
  e.line("const T* const az = a + z * gmb * K;").line("const T* const bz = b + z * K * gn;").line("T* const cz = c + z * gmb * gn;");
  e.line("const bool v8 = lda % 8 == 0 && ldb % 8 == 0 && gn % 8 == 0 && kfab_aligned16(az) && kfab_aligned16(bz) && kfab_aligned16(cz);");
  e.line("const int rc = v8 ? kfab_sm80_half<KfabTc>(az, bz, cz, m32, n32, k32, lda, ldb, stream)");
  e.line("                  : kfab_sm80_half<KfabSimt>(az, bz, cz, m32, n32, k32, lda, ldb, stream);");
  e.line("if (rc != 0) return rc;").close();
  e.line("return cudaGetLastError() == cudaSuccess ? 0 : 5;").close();
  return e.take();
}

}  // namespace

std::string generate_fused_cuda(const Program& p, const TemplateParams& tp, const std::string& title) {
  const auto it = tp.find("kernel");
  if (it != tp.end() && it->second == "flat" && !p.needs_rows()) return generate_flat(p, tp, title);
  return generate_rows(p, tp, title);
}

std::string generate_gemm_cuda(const GemmProgram& gp, const TemplateParams& tp, const std::string& title) {
  if (gp.dtype != DType::F32) return generate_gemm_half(gp, tp, title);
  if (auto folded = folded_epilogue(gp, &tp)) return generate_gemm_folded(gp, *folded, tp, title);
  if (tp.count("mma") && tp.at("mma") == "tf32x3") return generate_gemm_tensor_cores(gp, tp, title);
  if (tp.count("mma") && tp.at("mma").rfind("sm90_", 0) == 0) return generate_gemm_sm90(gp, tp, title);
  const Program& p = gp.epilogue;
  const Gen g(p, cuda_lang());
  const int pin = product_input(gp);
  const bool fused = pointwise_only(g) && !gp.pool_max;  // a max-pooled product is pooled in a pass of its own
  Emitter e;
  head(title, tp,
       fmt::format("{}: C = A @ {}, then the epilogue", fused ? "A tiled GEMM, epilogue applied to the registers" : "A tiled GEMM, then a row kernel",
                   gp.trans_b ? "W^T (W is [N, K])" : "B"),
       p, e);
  e.raw(kPrelude).raw(host_checks()).blank();
  prepare_kernels(gp, e);
  Parts rows;
  if (fused) {
    args_struct(p, e);
  } else {
    rows = rows_parts(g, kProductRows);  // declares Args too
    e.raw(rows.code);
  }
  e.blank();
  e.linef("constexpr int BM = {}, BN = {}, BK = {}, TM = {}, TN = {};  // block tile, depth, outputs per thread", param(tp, "bm", 128),
          param(tp, "bn", 128), param(tp, "bk", 8), param(tp, "tm", 8), param(tp, "tn", 8));
  e.line("constexpr int NT = (BM / TM) * (BN / TN);                             // threads per block");
  e.linef("constexpr bool TRANS_B = {};                                     // B given as W [N, K]", gp.trans_b ? "true" : "false");
  e.line("constexpr int LA = BM * BK / NT, LB = BN * BK / NT;                   // tile elements a thread stages");
  e.line("static_assert(LA % 4 == 0 && LB % 4 == 0 && BK % 4 == 0 && BN % 4 == 0, \"tiles are staged 4 floats at a time\");").blank();
  e.raw(template_text("gemm_tile.cuh")).blank();
  e.line("template <bool VEC>").open("__global__ void __launch_bounds__(NT) kfab_gemm(Operands o, Args a, int64_t rows, int64_t n, int64_t K, int64_t row0)");
  e.line("const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);");
  e.line("const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;");
  e.line("float acc[TM][TN] = {};").line("kfab_gemm_tile<VEC>(o, rows, n, K, m0, n0, acc);").line("(void)a, (void)o, (void)row0;");
  gemm_epilogue(g, pin, fused, e);
  e.close();
  Binding b = gemm_binding(gp, true);
  std::string launch = gemm_launch(fused, pin, b);
  if (!fused) launch += max_pool_pass(gp, pin, true) + rows.launch;
  host(g, b, launch, e);
  return e.take();
}

}  // namespace kfab
