// The parameter grids of the tuner's fused row programs and GEMMs, and what they can take; the
// printers that generate the kernels are tuner/print_cuda.cpp (CUDA C++) and tuner/print_cpp.cpp (C++).
#include "tuner/fused.h"

#include <algorithm>
#include <array>

#include "backends/cpu_cpp/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"

namespace kfab {

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = s.find('\n', pos);
    if (e == std::string::npos) e = s.size();
    out.push_back(s.substr(pos, e - pos));
    pos = e + 1;
  }
  return out;
}

Expected<void> fused_supported(const Program& p) {
  bool main = false;
  for (const auto& in : p.inputs) {
    if (in.integer && in.cls != VClass::R) return make_error("integer input " + in.name + " is not per-row (only class indices are)");
    if (in.cls == VClass::E && !in.integer) main = true;
  }
  for (const auto& o : p.outputs) main = main || p.nodes[o.second].cls == VClass::E;
  if (!main) return make_error("no per-element f32 input or output: nothing to set the row shape");
  return {};
}

// The long-row points (fused_grid's) that read rows in tiles, where every row reduction meets at once (a
// softmax, a layer norm); `per_element`: the program's per-element float inputs.
static void tile_points(const Program& p, int64_t n, int per_element, std::vector<TemplateParams>& g) {
  // Where every row reduction meets at once (a softmax, a layer norm): rows in tiles read twice, the second
  // time from L2 (l2=1: print_cuda.cpp's Hold::kL2), no block waiting for a row's other blocks but where its
  // row's shares are not all in (tiles of 16 and 8 float4 a thread; first passes half the grid's blocks
  // ahead, or all of them: `lag` quarters), a grid of resident blocks taking tickets from a counter. And the
  // same two passes with each tile read once, by the bulk copy, into a ring of shared-memory slots (ring=1:
  // Hold::kRing; rows of whole float4 of one per-element input; tiles of 8 float4 a thread, then of 16 where a
  // row has at most 64 of them, so that a tile's outputs come one of the block's tiles after its shares).
  // On an H200 (session 28, trees a25fee6 and 052c42b) the l2 point with lag 4 won on level1/23 (3.894 ms,
  // 78% of the copy bandwidth, against the reuse point's 4.3) and 24 (3.903 against the prefetching
  // point's 4.3), ncu reading 7.6 GB from DRAM for 6.4 (lag 2: 6.5 GB, slower, 4.5 ms: its second passes
  // wait); the ring point with 16 float4 took 4.158 and 3.956 ms, reading 6.44 GB, with 8 float4 (six
  // slots, one block an SM then) 5.85 and 5.43. Rows of at most 1M floats: the l2 point with lag 4 first,
  // then the ring points (8 float4 a thread now with three slots, two blocks an SM, as the probe's 101% of
  // a float4 copy had it: not yet measured in this form). Longer rows (level1/40's 4M, 16 MB a row, which
  // L2 cannot hold between a tile's passes): these points last among the long-row points; there l2 took
  // 0.327 ms and ring 0.569 against colsm's 0.239.
  if (softmax_pairs(p).empty() && moment_pairs(p).empty()) return;
  std::vector<TemplateParams> l2, ring;
  for (const auto& [items, lag] : std::vector<std::pair<const char*, const char*>>{{"16", "4"}, {"16", "2"}, {"8", "2"}})
    l2.push_back({{"kernel", "rows"}, {"block", "256"}, {"group", "256"}, {"items", items}, {"split", "1"}, {"l2", "1"}, {"lag", lag}});
  if (n % 4 == 0 && per_element == 1) {
    for (const char* items : {"8", "16"})
      if (std::string(items) == "8" || (n + 16383) / 16384 <= 64)
        ring.push_back({{"kernel", "rows"}, {"block", "256"}, {"group", "256"}, {"items", items}, {"split", "1"}, {"l2", "1"}, {"ring", "1"}});
  }
  if (n <= (int64_t{1} << 20)) {
    ring.insert(ring.begin(), l2.front());
    g.insert(g.begin(), ring.begin(), ring.end());
    g.insert(g.end(), l2.begin() + 1, l2.end());
  } else {
    g.insert(g.end(), l2.begin(), l2.end());
    g.insert(g.end(), ring.begin(), ring.end());
  }
}

std::vector<TemplateParams> fused_grid(const Program& p, int64_t n) {
  std::vector<TemplateParams> g;
  if (!p.needs_rows()) {
    for (const auto& [b, u] : std::vector<std::pair<int, int>>{{256, 4}, {512, 2}, {256, 2}, {128, 8}})
      g.push_back({{"kernel", "flat"}, {"block", std::to_string(b)}, {"unroll", std::to_string(u)}});
    return g;
  }
  // A warp per row for short rows; a block per row otherwise, most promising first: 256 threads,
  // then 512 and 128, 1024 for long rows. Each point keeps up to 8 float4 a thread and picks the
  // smallest footprint that holds the row at run time; longer rows are split over a cluster's blocks
  // (points with a cluster) or streamed.
  bool all = false;  // scalar outputs
  for (const auto& o : p.outputs) all = all || p.nodes[o.second].cls == VClass::K;
  // Rows longer than a block of 1024 threads holds in 8 float4 a thread (32768 floats): each row
  // over a cluster of blocks (2 to 16; the smallest that holds it), read once, where streaming reads it
  // twice (issue 25: level1/23's softmax over rows of 393216 ran at half the copy bandwidth streamed)
  // (512 threads keeping 16 float4 first: 1024 threads keeping 8 spill registers under their 64 a thread);
  // a row whose length is not a multiple of 4 is read a float at a time, and its blocks keep half as much
  // (their 64 floats a thread spill under their index arithmetic)
  //
  // Rows longer than a cluster of 16 holds (level1/40's layer norm over rows of 4M floats, 16 MB: a
  // cluster holds 2 MB, so 16 blocks streamed each row three times, at 12% of the copy bandwidth): each
  // row split over a group of as many of the grid's blocks as it takes (every block resident at once),
  // their reductions combined through global memory, the row still read once. These lead for every row
  // longer than a block holds: on an H100 (tree 332fdd5) level1/23's softmax over rows of 393216 measured
  // 1.30x eager split over 12 blocks of 512 threads, against 1.18x over a cluster of 16; level1/24's
  // log-softmax 1.42x against 1.28x. Blocks of 256 threads first: two an SM, of different rows' groups,
  // overlap one group's barriers with another's loads (tree 0ac8571: 23 1.34x against 1.31x at 512
  // threads, level1/40 18.54x against 18.24x).
  if (n > 1024 * 4 * 8 && !all) {
    for (const char* b : {"256", "512"})
      g.push_back({{"kernel", "rows"}, {"block", b}, {"group", b}, {"items", "16"}, {"split", "1"}});
    // Then blocks of 256 and 128 threads keeping as much a thread (clusters twice and four times as large):
    // four and eight blocks an SM, each at its own step of load, meeting and store. Before 1024 threads keeping
    // 8 float4, which lost on level1/38 and 39 (H200, session 24: 7.81 and 7.06 ms against 5.96 and 5.16 at 512).
    for (const auto& [b, items] : std::vector<std::pair<int, int>>{{512, 16}, {256, 16}, {128, 16}, {1024, 8}}) {
      const int64_t holds = static_cast<int64_t>(b) * items * (n % 4 == 0 ? 4 : 2);
      int cl = 2;
      while (cl < 16 && cl * holds < n) cl *= 2;
      TemplateParams point = {{"kernel", "rows"}, {"block", std::to_string(b)}, {"group", std::to_string(b)}, {"items", std::to_string(items)}};
      if (cl * holds >= n) {
        point["cluster"] = std::to_string(cl);
        // rows whose length is not a multiple of 4 read a float4 at a time from the 16-byte boundary before
        // each row (print_cuda.cpp's kfab_rows_cluster; a float at a time where a tensor is not 16-byte
        // aligned, as without it): on an H200 (session 26) level1/38 and 39, rows of 65535, took 4.649 and
        // 4.647 ms over clusters of 8 blocks of 256 threads (87% of the copy bandwidth) against 5.123 and
        // 5.127 a float at a time; 4.716 against 5.346 over 4 of 512, 4.676 against 4.974 over 16 of 128
        if (n % 4 != 0) point["shift"] = "1";
      } else if (b == 1024) {
        point["split"] = "1";
      } else {
        continue;  // split at 512 already
      }
      g.push_back(point);
    }
    // A softmax's row maximum and sum (a layer norm's mean and squared deviations) met once a row, not
    // twice (kfab_split_softmax, kfab_split_moments): first. On an H200 (session 17, tree 371348c, a
    // search of 4 points) it won on level1/23, 24 and 40: 1.25x, 1.36x and 25.6x eager.
    if (!softmax_pairs(p).empty() || !moment_pairs(p).empty())
      g.insert(g.begin(), TemplateParams{{"kernel", "rows"}, {"block", "256"}, {"group", "256"}, {"items", "16"}, {"split", "1"}, {"defer", "1"}});
    // Rows of whole float4 of one per-element input: the first point again, each block copying its part of
    // its next row into shared memory (64 KB a block) while this row's blocks meet and write, second (each
    // turn of the other points loads its part only after the last turn's meeting). On an H200 (session 17,
    // tree d58099d) it won on level1/24 (1.45x eager against 1.36x) and lost on 23 (1.09x against 1.27x)
    // and 40 (19.9x against 25.1x), whose kernels spill more registers with it (96 and 624 bytes a thread).
    int per_element = 0;
    for (const auto& in : p.inputs) per_element += in.cls == VClass::E && !in.integer ? 1 : 0;
    if (n % 4 == 0 && per_element == 1) {
      TemplateParams first = g.front();
      first["prefetch"] = "1";
      g.insert(g.begin() + 1, first);
    }
    // A per-column float input (a layer norm's weight): the first point again, each block keeping its part
    // of it in shared memory for the whole run (colsm=1: its columns are the same on every row), second. On
    // an H200 (session 18, ncu) level1/40's first point read 492 MB from DRAM where 300 MB is the least:
    // L2 kept its 32 MB of weight and bias (evict_last) only in part. Session 19 (tree 2464c39): 0.285 ms
    // against the first point's 0.322 (47% of the copy bandwidth against 42%).
    if (first_column_input(p) >= 0) {
      TemplateParams kept = g.front();
      kept["colsm"] = "1";
      g.insert(g.begin() + 1, kept);
    }
    // A softmax whose outputs read x only through exp(x - m): the defer point with exp(x - the block's
    // maximum) kept in x's registers for the outputs (reuse=1), which compute exp once an element, not
    // twice: first. On an H200 (session 18, tree b661336, a search of 4 points) level1/23 measured 4.301 ms
    // with it (70.5% of the copy bandwidth, 1.43x eager), 4.864 ms deferred without it, 5.675 ms prefetching,
    // 5.517 ms split plainly.
    if (softmax_exp_reuse(p)) {  // a softmax pair: the first point defers
      TemplateParams reuse = g.front();
      reuse["reuse"] = "1";
      g.insert(g.begin(), reuse);
    }
    // Where no two row reductions meet at once (the points above), the clusters lead: on an H200 (session 25,
    // tree a3309c5) level1/38 and 39 measured 5.07 and 5.06 ms over clusters of 8 blocks of 256 threads,
    // against 8.22 and 6.25 ms split over the grid's blocks of 256.
    if (softmax_pairs(p).empty() && moment_pairs(p).empty())
      std::stable_partition(g.begin(), g.end(), [](const TemplateParams& q) { return q.count("cluster") > 0; });
    // (The first point again with blocks of 128 threads, four an SM, measured no better on an H200 (session 25,
    // tree be9fcb1): level1/23 4.335 ms against 4.401 and 4.336 at 256, level1/24 4.493 against 4.543, level1/40
    // 0.310 against 0.313. Not offered.)
    // (The measured winner with 8 float4 a thread, three blocks an SM at most 80 registers, lost on an H200
    // (session 19, tree 2464c39): level1/23 4.599 ms against reuse's 4.285, level1/24 4.450 against the
    // prefetching point's 4.297. Not offered.)
    tile_points(p, n, per_element, g);
  }
  // then a point that takes a warp per row for short rows and a block per row for long ones
  g.push_back({{"kernel", "rows"}, {"block", n > 8192 ? "512" : "256"}, {"group", "auto"}, {"items", "8"}});
  if (n <= 1024) g.push_back({{"kernel", "rows"}, {"block", "256"}, {"group", "32"}, {"items", "8"}});
  for (int b : {256, 512, 128, 1024}) {
    if (static_cast<int64_t>(b) * 4 * 8 < n && b < 1024) continue;  // the row would not fit: streamed
    if (b > 128 && static_cast<int64_t>(b) * 4 > 2 * n) continue;     // more than half the threads would idle
    if (b == 1024 && n < 8192) continue;
    g.push_back({{"kernel", "rows"}, {"block", std::to_string(b)}, {"group", std::to_string(b)}, {"items", "8"}});
  }
  if (g.empty()) g.push_back({{"kernel", "rows"}, {"block", "1024"}, {"group", "1024"}, {"items", "8"}});  // streamed rows
  // A program with a scalar output pays, per block, a reduction, an atomic, a fence and a counter
  // before the block leaves: each point also with resident blocks that take rows in turn (and pay
  // that once), the first also with two blocks' worth a slot.
  if (all) {
    const size_t plain = g.size();
    for (size_t i = 0; i < plain; ++i) {
      g.push_back(g[i]);
      g.back()["persist"] = "1";
    }
    g.push_back(g[0]);
    g.back()["persist"] = "2";
  }
  return g;
}

std::vector<TemplateParams> fused_cpu_grid() { return {{{"schedule", "static"}}, {{"schedule", "dynamic"}}}; }

// A row whose first step is a reduction (a matrix times a vector, a norm's sum of squares): 4 rows in one pass
// first, whose 4 streams of loads a core keeps in flight (issue 25: l1_matvec's 256 x 8192 on one thread
// of this 2-core VM, 126 us a call one row at a time, 86 us four at a time, torch's sgemv 87 us); on the
// calling thread too, where waking the other threads for a call this short costs more than they save
// (two threads measured 109-116 us a call with passive waits between calls, the harness's setting).
std::vector<TemplateParams> fused_cpu_grid(const Program& p) {
  std::vector<TemplateParams> g;
  if (p.needs_rows() && cpu_rows_interleave(p))
    g = {{{"schedule", "static"}, {"interleave", "4"}}, {{"schedule", "static"}, {"interleave", "4"}, {"threads", "1"}}};
  for (auto& point : fused_cpu_grid()) g.push_back(point);
  return g;
}

std::optional<Program> folded_epilogue(const GemmProgram& gp, const TemplateParams* point) {
  if (point != nullptr && !(point->count("fold") && point->at("fold") == "rowsum")) return std::nullopt;
  if (gp.batched || gp.pool_max) return std::nullopt;  // a max-pooled product's row sums are not the pooled values
  for (size_t i = 0; i < gp.bind.size(); ++i)
    if (gp.bind[i] < 0) return fold_row_sums(gp.epilogue, static_cast<int>(i));
  return std::nullopt;
}

namespace {

/// The point that never forms the product, where the epilogue reads only its row sums (fold_row_sums):
/// first in both grids, measured against the GEMMs after it.
void fold_point(const GemmProgram& gp, std::vector<TemplateParams>& g) {
  if (folded_epilogue(gp)) g.push_back({{"fold", "rowsum"}});
}

}  // namespace

int product_input(const GemmProgram& gp) {
  for (size_t i = 0; i < gp.bind.size(); ++i)
    if (gp.bind[i] < 0) return static_cast<int>(i);
  return -1;
}

// Few output tiles of 128 x 128 (every batch in one launch) over a long K: fewer than half an H100's SMs busy
// without a split of K (KernelBench's level1_6, 256 x 256 x 524288: 4 tiles).
static bool few_tiles(const GemmProgram& gp) {
  const int64_t tiles = ((gp.m + 127) / 128) * ((gp.n + 127) / 128) * std::max<int64_t>(gp.batch, 1);
  return gp.m > 0 && gp.n > 0 && tiles < 66 && gp.k >= 8192;
}

bool product_is_output(const GemmProgram& gp, int pin) {
  const Program& p = gp.epilogue;
  if (p.outputs.size() != 1 || p.groups > 1 || gp.pool > 1 || pin < 0) return false;
  const PNode& n = p.nodes[static_cast<size_t>(p.outputs[0].second)];
  return n.op == "in" && n.input == pin;
}

std::vector<TemplateParams> gemm_cpu_grid(const GemmProgram& gp) {
  std::vector<TemplateParams> g;
  if (gp.dtype != DType::F32) return g;  // the blocked GEMM reads and writes f32 only
  fold_point(gp, g);
  // the host's BLAS first where it is here (issue 25: the blocked GEMM runs at 0.5-0.7x of torch's, OpenBLAS's
  // sgemm at 1.1x on a 2-core AVX-512 VM), then the blocked GEMM's tiles
  if (CpuBackend::blas_available()) g.push_back({{"blas", "openblas"}});
  for (const char* mb : {"8", "4", "16"})
    for (const char* kb : {"256", "128"}) g.push_back({{"rows", mb}, {"kblock", kb}});
  return g;
}

// A half-precision task's plain product (GemmProgram::dtype F16 or BF16): CUTLASS's 16-bit tensor-core
// GEMMs, accumulating in fp32. On Hopper the sm90 ones first (TMA, wgmma, persistent warp-specialised
// blocks; stream-K first where the tiles are few and K long, as for fp32), then CUTLASS's SM80 mma.sync
// ones, which are also every other GPU's. Without CUTLASS's headers there is none: no point.
static std::vector<TemplateParams> gemm_half_cuda_grid(const GemmProgram& gp) {
  std::vector<TemplateParams> g;
  if (cutlass_include_dir().empty()) return g;
  const std::string type = gp.dtype == DType::BF16 ? "bf16" : "fp16";
  auto sm90 = [&](const char* tile, const char* cluster, const char* schedule, const char* scheduler = "persistent") {
    g.push_back({{"mma", "sm90_half"}, {"precision", type}, {"io", type}, {"tile", tile}, {"cluster", cluster}, {"schedule", schedule},
                 {"scheduler", scheduler}});
  };
  auto sm80 = [&](const char* tile, const char* warp, const char* stages) {
    g.push_back({{"mma", "sm80_half"}, {"precision", type}, {"io", type}, {"tile", tile}, {"warp", warp}, {"stages", stages}});
  };
  const bool few = few_tiles(gp);
  if (cuda_candidate_arch() == "sm_90a") {
    if (few) sm90("128x128x64", "1", "coop", "streamk");
    sm90("128x256x64", "1", "coop");
    sm90("128x128x64", "1", "coop");
    if (!few) sm90("128x128x64", "1", "coop", "streamk");
    sm90("128x128x64", "2", "coop");
    sm90("64x128x64", "1", "pingpong");
    sm90("256x128x64", "1", "coop");
  }
  sm80("128x128x32", "64x64x32", "3");
  sm80("128x256x32", "64x64x32", "3");
  sm80("64x64x32", "32x32x32", "5");
  return g;
}

std::vector<TemplateParams> gemm_cuda_grid(const GemmProgram& gp) {
  if (gp.dtype != DType::F32) return gemm_half_cuda_grid(gp);
  std::vector<TemplateParams> g;
  fold_point(gp, g);
  auto tc = [&](const char* tile, const char* warp, const char* stages, const char* swizzle = "1") {
    g.push_back({{"mma", "tf32x3"}, {"precision", "3xtf32"}, {"tile", tile}, {"warp", warp}, {"stages", stages}});
    if (std::string(swizzle) != "1") g.back()["swizzle"] = swizzle;
  };
  auto sm90 = [&](const char* mma, const char* tile, const char* cluster, const char* schedule, const char* scheduler = "persistent",
                  const char* swizzle = "1") {
    const std::string m = mma;
    g.push_back({{"mma", m}, {"precision", m == "sm90_tf32" ? "tf32" : m == "sm90_mixed" ? "tf32+bf16" : "3xtf32"}, {"tile", tile}, {"cluster", cluster},
                 {"schedule", schedule}, {"scheduler", scheduler}});
    if (std::string(swizzle) != "1") g.back()["swizzle"] = swizzle;
  };
  const bool cutlass = !cutlass_include_dir().empty();
  // On Hopper, CUTLASS 3's sm90 GEMM first: one TF32 product (kept only where its errors stay well
  // within the task's tolerance, tuner/precision.h), then for a long K one TF32 and one bf16 product
  // (tf32+bf16, kept on the same terms), then three TF32 products at fp32 accuracy; then CUTLASS's SM80
  // 3xTF32 at the tile that measured best (issue 23's probe: 128x64 with 64x32 warps, 4 stages, 1.38x
  // eager on a 1024 x 8192 x 8192 Linear, where the larger tiles ran at half that speed); then the other
  // sm90 tiles, clusters and schedules. The search decides among them.
  const bool hopper = cutlass && cuda_candidate_arch() == "sm_90a";
  // Few output tiles over a long K (KernelBench's 256 x 256 x 524288: 4 tiles of 128 x 128 where an
  // H100 has 132 SMs): stream-K, which splits K across every SM, right after the TF32 point. Measured
  // on an H200 (issue 23): the persistent scheduler ran that product at 0.08x eager.
  const bool few = few_tiles(gp);
  if (hopper) sm90("sm90_tf32", "128x256x32", "1", "coop");
  // one TF32 product and one bf16 product of the cross terms (tf32+bf16: two TF32 products' time for three's
  // accuracy, less 3 bits; kept only well within the tolerance), where K is longer than a short one's and the
  // tiles are not few (there the split's traffic is the cost: level1_6's 1 GB of operands)
  const bool short_k = gp.k > 0 && 3 * gp.k <= 2048, large_out = gp.m * gp.n * std::max<int64_t>(gp.batch, 1) >= (int64_t{1} << 24);
  if (hopper && !short_k && !few) sm90("sm90_mixed", "128x256x32", "1", "coop");
  // few tiles over a long K: CUTLASS's SM80 3xTF32, which splits each operand in registers (the sm90 points
  // write the splits out: 3 GB of traffic for level1_6's 1 GB of operands, 0.498x eager on an H100), with K
  // in slices over every SM
  if (cutlass && few)
    g.push_back({{"mma", "tf32x3"}, {"precision", "3xtf32"}, {"tile", "128x64x16"}, {"warp", "64x32x16"}, {"stages", "4"}, {"splitk", "auto"}});
  // a short K (3K within a slice: one product over [As | Ab | Ab] @ [Wb | Ws | Wb]^T) and a large output (level1_7
  // and 9: 4 GiB written over a K of 64 and 32, 1.51x and 1.23x eager on an H100 with the cooperative point):
  // the ping-pong schedule, whose consumers take tiles in turn, one's epilogue over the other's mainloop
  if (hopper && short_k && large_out) sm90("sm90_3xtf32", "64x256x32", "1", "pingpong");
  if (hopper) {
    if (few) sm90("sm90_3xtf32", "128x128x32", "1", "coop", "streamk");
    sm90("sm90_3xtf32", "128x128x32", "1", "coop");
  }
  if (cutlass) tc("128x64x16", "64x32x16", "4");
  if (hopper) {
    // stream-K: a product of few tiles and a long K (KernelBench's 256 x 256 x 524288) on every SM
    if (!few) sm90("sm90_3xtf32", "128x128x32", "1", "coop", "streamk");
    sm90("sm90_3xtf32", "128x256x32", "1", "coop");
    sm90("sm90_3xtf32", "128x128x32", "2", "coop");
    if (!short_k && !few) sm90("sm90_mixed", "128x128x32", "1", "coop");
    if (!(short_k && large_out) && (gp.k == 0 || short_k)) sm90("sm90_3xtf32", "64x256x32", "1", "pingpong");  // K within a slice
  }
  if (cutlass) tc("64x64x16", "32x32x16", "4");
  // the tiles in swizzled groups (neighbouring blocks share rows of A and columns of B in L2)
  if (hopper) sm90("sm90_3xtf32", "128x128x32", "1", "coop", "persistent", "4");
  if (cutlass) tc("128x64x16", "64x32x16", "4", "4");
  // {bm, bn, bk, tm, tn}: 256 threads each; the large tiles first (large GEMMs), the small ones for
  // shapes that would leave most of the GPU idle with them
  for (const auto& t : std::vector<std::array<int, 5>>{
           {128, 128, 8, 8, 8}, {128, 64, 16, 8, 4}, {64, 128, 16, 4, 8}, {64, 64, 16, 4, 4}, {128, 128, 16, 8, 8}})
    g.push_back({{"bm", std::to_string(t[0])}, {"bn", std::to_string(t[1])}, {"bk", std::to_string(t[2])}, {"tm", std::to_string(t[3])},
                 {"tn", std::to_string(t[4])}});
  if (cutlass) {
    tc("64x128x16", "32x64x16", "4");
    tc("128x128x16", "64x64x16", "3");
  }
  return g;
}

}  // namespace kfab
