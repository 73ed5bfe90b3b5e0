#pragma once
// Hopper's own tensor-core GEMM for the tuner's generated CUDA candidates (tuner/print_cuda.cpp):
// C = A @ W^T with A [M, K] and W [N, K] (a Linear layer's weight, K-major), C [M, N] row-major,
// accumulated in fp32, from CUTLASS 3's sm90 collectives (TMA loads, wgmma, a producer warp and one or
// two consumer warpgroups, persistent blocks). TF32 wgmma reads K-major operands from shared memory: a
// B given as [K, N] (N-major; C = A @ B) is written as [N, K] first, in the pass that splits it.
// Needs -arch=sm_90a, K and N multiples of 4 and 16-byte aligned pointers (TMA's strides and addresses).
//
// CUTLASS has no 3xTF32 wgmma kernel, so fp32 accuracy is built here from three TF32 products, as
// CUTLASS's SM80 OpMultiplyAddFastF32 builds it in registers: each operand v split into big(v), v
// rounded to the nearest TF32 (its 13 low mantissa bits zero, so the tensor core reads it exactly), and
// small(v) = v - big(v), exact in fp32 and at most half a TF32 unit of v. Then
//   C  = As @ Wb^T      (the small x big term)
//   C += Ab @ Ws^T      (big x small)
//   C += Ab @ Wb^T      (big x big, last, so that the larger terms are added to the smaller ones)
// The small x small term, below 2^-21 of the product, is left out, as CUTLASS's own 3xTF32 does. The
// split is written out (2 (M + N) K floats): the first form, which took v itself as its big part
// and relied on wgmma dropping its low bits, measured 2.9e-3 off on an H200, worse than one product.
//
// The generated file includes cute/tensor.hpp and CUTLASS's GEMM headers before it (with NDEBUG: a
// device-side assert is a call, and a call inside the wgmma pipeline serialises it). The text between
// the kfab:begin and kfab:end lines is spliced into those candidates, inside an unnamed namespace;
// tests/templates/sm90_tf32_gemm.cu compiles it on its own.
// kfab:begin
// Runs one CUTLASS 3 GEMM (a GemmUniversalAdapter) with `args`: the SM count asked once, the workspace
// (stream-K's partial sums; none for the persistent scheduler) kept between calls and grown when a shape
// needs more; sm90_half_gemm.cuh launches through it too. 0, 7 when CUTLASS cannot take the arguments, 4
// when the workspace cannot be had, 5 when CUTLASS fails.
template <class Dev>
int kfab_sm90_launch(typename Dev::Arguments& args, cudaStream_t stream) {
  static const int sms = [] {  // the persistent grid is one block per SM
    int device = 0;
    (void)cudaGetDevice(&device);
    return cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  }();
  args.hw_info.sm_count = sms;
  Dev gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 7;
  static void* workspace = nullptr;
  static size_t have = 0;
  const size_t need = Dev::get_workspace_size(args);
  if (need > have) {
    if (workspace != nullptr) {  // an earlier launch on this stream may still read it (grown once per shape)
      (void)cudaStreamSynchronize(stream);
      cudaFree(workspace);
    }
    workspace = nullptr, have = 0;
    if (cudaMalloc(&workspace, need) != cudaSuccess) return 4;
    have = need;
  }
  if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return 5;
  return gemm.run(stream) == cutlass::Status::kSuccess ? 0 : 5;
}

// One CUTLASS 3 GEMM type: tile TM x TN x TK, a cluster of CM blocks along M, the cooperative schedule
// (two consumer warpgroups on one tile) or the ping-pong one (two tiles in turn), B K-major ([N, K]),
// tiles handed out whole to persistent blocks (in swizzled groups of at most SWIZZLE, for L2 reuse) or,
// STREAMK, split along K across them
// (stream-K: a product of few tiles and a long K, 256 x 256 x 524288, keeps every SM busy; the partial
// sums meet in a workspace).
template <int TM, int TN, int TK, int CM, bool COOP, bool STREAMK = false, int SWIZZLE = 1>
struct KfabSm90Gemm {
  static constexpr int kTM = TM, kTN = TN, kTK = TK, kCM = CM;
  static constexpr bool kCoop = COOP;
  static constexpr bool kStreamK = STREAMK;
  static constexpr int kSwizzle = SWIZZLE;  // the tile scheduler's largest swizzle (tiles in groups of 1, 2, 4 or 8)
  using LayoutB = cutlass::layout::ColumnMajor;  // B (K x N) column-major: W [N, K]
  using Tile = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
  using Cluster = cute::Shape<cute::Int<CM>, cute::_1, cute::_1>;
  using MainSchedule =
      std::conditional_t<COOP, cutlass::gemm::KernelTmaWarpSpecializedCooperative, cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using EpiSchedule = std::conditional_t<COOP, cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::epilogue::TmaWarpSpecialized>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      float, cutlass::layout::RowMajor, 4, float, cutlass::layout::RowMajor, 4, EpiSchedule,
      cutlass::epilogue::fusion::LinearCombination<float, float, float, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, float, cutlass::layout::RowMajor, 4, float, LayoutB, 4,
      float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      std::conditional_t<STREAMK, cutlass::gemm::StreamKScheduler, void>>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// C = A @ W^T + beta * C with G's kernel, for each of `l` batches one after another in memory (A [l, m, k],
// W [l, n, k], C [l, m, n]: one launch whose tiles cover every batch). With G's stream-K scheduler,
// `splits` > 1 splits K into that many slices (CUTLASS's split-K, the slices' fp32 partial sums reduced
// in a fixed order in the workspace), else `data_parallel` hands out whole tiles and its absence lets
// CUTLASS's heuristic choose (stream-K for few tiles). 0, or 7 when CUTLASS cannot take the shape, 5
// when it fails.
template <class G>
int kfab_sm90_product(const float* a, const float* w, float* c, int m, int n, int k, int l, float beta, cudaStream_t stream, int splits = 1,
                      bool data_parallel = false) {
  using Dev = typename G::Device;
  const int64_t bl = l > 1 ? 1 : 0;  // batch strides: none for one batch
  const typename G::Kernel::StrideA sa = cute::make_stride(int64_t(k), cute::Int<1>{}, bl * m * k);
  const typename G::Kernel::StrideB sb = cute::make_stride(int64_t(k), cute::Int<1>{}, bl * n * k);  // W [N, K]
  const typename G::Kernel::StrideC sc = cute::make_stride(int64_t(n), cute::Int<1>{}, bl * m * n);
  const typename G::Kernel::StrideD sd = cute::make_stride(int64_t(n), cute::Int<1>{}, bl * m * n);
  typename Dev::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm, {m, n, k, l}, {a, sa, w, sb}, {{}, c, sc, c, sd}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = beta;
  args.scheduler.max_swizzle_size = G::kSwizzle;
  if constexpr (G::kStreamK) {
    using Mode = cutlass::gemm::kernel::detail::DecompositionMode;
    args.scheduler.splits = splits > 1 ? splits : 1;
    args.scheduler.decomposition_mode = splits > 1 ? Mode::SplitK : data_parallel ? Mode::DataParallel : Mode::Heuristic;
  }
  return kfab_sm90_launch<Dev>(args, stream);
}

// kfab_sm90_mixed's bf16 product (the two cross terms, C fp32), at G's tile and schedule with twice its K
// depth (the same bytes a stage): A [l, m, 2k] K-major, B as [l, n, 2k] (B_NK) or as [l, 2k, n].
template <class G, bool B_NK>
struct KfabSm90Cross {
  using T = cutlass::bfloat16_t;
  static constexpr bool kStreamK = G::kStreamK, kBNK = B_NK;
  static constexpr int kSwizzle = G::kSwizzle;
  using LayoutB = std::conditional_t<B_NK, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using Tile = cute::Shape<cute::Int<G::kTM>, cute::Int<G::kTN>, cute::Int<2 * G::kTK>>;
  using Cluster = cute::Shape<cute::Int<G::kCM>, cute::_1, cute::_1>;
  using MainSchedule = std::conditional_t<G::kCoop, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                          cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using EpiSchedule = std::conditional_t<G::kCoop, cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::epilogue::TmaWarpSpecialized>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      float, cutlass::layout::RowMajor, 4, float, cutlass::layout::RowMajor, 4, EpiSchedule,
      cutlass::epilogue::fusion::LinearCombination<float, float, float, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, cutlass::layout::RowMajor, 8, T, LayoutB, 8, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      std::conditional_t<G::kStreamK, cutlass::gemm::StreamKScheduler, void>>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// C = A16 @ B16 (H a KfabSm90Cross; k2 the bf16 operands' K) for each of l batches, written over C (beta 0),
// tiles handed out as kfab_sm90_product hands them out. 0, or as kfab_sm90_launch.
template <class H>
int kfab_sm90_cross(const void* a, const void* b, float* c, int m, int n, int k2, int l, bool data_parallel, cudaStream_t stream) {
  using T = typename H::T;
  using K = typename H::Kernel;
  const int64_t bl = l > 1 ? 1 : 0;
  const typename K::StrideA sa = cute::make_stride(int64_t(k2), cute::Int<1>{}, bl * m * k2);
  typename K::StrideB sb;
  if constexpr (H::kBNK) sb = cute::make_stride(int64_t(k2), cute::Int<1>{}, bl * n * k2);  // [n, 2k]
  else sb = cute::make_stride(cute::Int<1>{}, int64_t(n), bl * n * k2);                   // [2k, n]
  const typename K::StrideC sc = cute::make_stride(int64_t(n), cute::Int<1>{}, bl * m * n);
  const typename K::StrideD sd = cute::make_stride(int64_t(n), cute::Int<1>{}, bl * m * n);
  typename H::Device::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                     {m, n, k2, l},
                                     {static_cast<const T*>(a), sa, static_cast<const T*>(b), sb},
                                     {{}, c, sc, c, sd}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.scheduler.max_swizzle_size = H::kSwizzle;
  if constexpr (H::kStreamK) {
    using Mode = cutlass::gemm::kernel::detail::DecompositionMode;
    args.scheduler.decomposition_mode = data_parallel ? Mode::DataParallel : Mode::Heuristic;
  }
  return kfab_sm90_launch<typename H::Device>(args, stream);
}

// v's value rounded to the nearest TF32 (10 mantissa bits; halves away from zero): its low 13 bits
// zero, so a tensor core reads it exactly whether it truncates or rounds its inputs.
__device__ __forceinline__ float kfab_tf32_big(float v) { return __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u); }

// big[i] = v[i] rounded to the nearest TF32 and small[i] = v[i] - big[i] (exact in fp32, at most half a
// TF32 unit of v), four floats at a time. Measured on an H200 (issue 23): taking v itself as its big
// part and v - trunc(v) as the small one was wrong by up to 2.9e-3 on a 1024 x 8192 x 8192 Linear,
// worse than one TF32 product (9.4e-4): wgmma does not just drop an fp32 operand's low bits.
__global__ void kfab_tf32_split(const float4* __restrict__ v, float4* __restrict__ big, float4* __restrict__ small, int64_t n4) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += step) {
    const float4 a = __ldcs(v + i);
    const float4 b = make_float4(kfab_tf32_big(a.x), kfab_tf32_big(a.y), kfab_tf32_big(a.z), kfab_tf32_big(a.w));
    __stcs(big + i, b);
    __stcs(small + i, make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w));
  }
}

// v [rows, k] (any k, any alignment) split into big and small parts whose rows are `ld` floats apart (ld >= k,
// a multiple of 4: rows TMA can read where k is not one), the columns from k to ld zero; the rows come in
// batches of `rin` and are written in batches of `rout` rows (rout >= rin: the rows between, left as they are).
__global__ void kfab_tf32_split_ld(const float* __restrict__ v, float* __restrict__ big, float* __restrict__ small, int64_t rows, int64_t k,
                                   int64_t ld, int64_t rin, int64_t rout) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x, n = rows * ld;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t r = i / ld, c = i % ld, o = ((r / rin) * rout + r % rin) * ld + c;
    const float x = c < k ? __ldcs(v + r * k + c) : 0.0f, b = kfab_tf32_big(x);
    __stcs(big + o, b);
    __stcs(small + o, x - b);
  }
}

// v's bf16 bits, rounded to the nearest (ties to even); a NaN stays a NaN.
__device__ __forceinline__ uint32_t kfab_bf16_bits(float v) {
  const uint32_t u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// For kfab_sm90_mixed: v [rows, k] (K-contiguous, k a multiple of 4) split into its big part (as
// kfab_tf32_split, fp32 [rows, k]) and a bf16 copy [rows, 2k] whose rows hold [bf16(big) | bf16(small)] for A
// (`a_side`), [bf16(small) | bf16(big)] for W, so that one bf16 product over K' = 2k makes the two cross
// terms big x small + small x big. Four floats at a time.
__global__ void kfab_mixed_split(const float4* __restrict__ v, float4* __restrict__ big, uint2* __restrict__ cat, int64_t rows, int64_t k4,
                                 bool a_side) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x, n4 = rows * k4;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += step) {
    const int64_t r = i / k4, c = i % k4;
    const float4 a = __ldcs(v + i);
    const float4 b = make_float4(kfab_tf32_big(a.x), kfab_tf32_big(a.y), kfab_tf32_big(a.z), kfab_tf32_big(a.w));
    const uint2 hb = make_uint2(kfab_bf16_bits(b.x) | (kfab_bf16_bits(b.y) << 16), kfab_bf16_bits(b.z) | (kfab_bf16_bits(b.w) << 16));
    const uint2 hs = make_uint2(kfab_bf16_bits(a.x - b.x) | (kfab_bf16_bits(a.y - b.y) << 16),
                                kfab_bf16_bits(a.z - b.z) | (kfab_bf16_bits(a.w - b.w) << 16));
    __stcs(big + i, b);
    uint2* row = cat + r * 2 * k4;
    __stcs(row + c, a_side ? hb : hs);
    __stcs(row + k4 + c, a_side ? hs : hb);
  }
}

// B given as [K, N] (N-major), written as [N, K] (K-major, the layout TF32 wgmma reads): 32 x 32 tiles
// through shared memory, each output row `ld` floats apart (k, or 3k for kfab_sm90_3xtf32's short K, whose
// rows hold [big | small | big]); `small` non-null: its big and small parts (as kfab_tf32_split), and
// `big2` non-null: the big part once more, else B itself; `cat` non-null (kfab_sm90_mixed, `small` null): B's
// big part rounded to TF32, and a bf16 copy [2k, n] in B's own layout, its first k rows bf16(small), the
// others bf16(big) (16-bit wgmma reads an N-major B as it is).
// Measured on an H200 (issue 23): CUTLASS's sm90 GEMM with an N-major TF32 B was wrong by 0.7% on
// KernelBench's level1_1 (4096 x 4096 x 4096), with one product and with three.
__global__ void __launch_bounds__(256) kfab_tf32_split_t(const float* __restrict__ x, float* __restrict__ big, float* __restrict__ small,
                                                         float* __restrict__ big2, int64_t k, int64_t n, int64_t ld, int64_t nout,
                                                         uint16_t* __restrict__ cat = nullptr) {
  __shared__ float tile[32][33];  // +1: the column reads hit 32 different banks
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 32, z = static_cast<int64_t>(blockIdx.z);  // blockIdx.z: a batch
  x += z * k * n, big += z * nout * ld;  // a batch's output: nout rows (n of them written)
  if (small != nullptr) small += z * nout * ld;
  if (big2 != nullptr) big2 += z * nout * ld;
  if (cat != nullptr) cat += z * 2 * k * n;
  for (int64_t k0 = static_cast<int64_t>(blockIdx.y) * 32; k0 < k; k0 += static_cast<int64_t>(gridDim.y) * 32) {
#pragma unroll
    for (int r = threadIdx.y; r < 32; r += 8) {
      const int64_t kk = k0 + r, nn = n0 + threadIdx.x;
      if (kk < k && nn < n) {
        const float v = __ldcs(x + kk * n + nn);
        tile[r][threadIdx.x] = v;
        if (cat != nullptr) {
          const float b = kfab_tf32_big(v);
          cat[kk * n + nn] = static_cast<uint16_t>(kfab_bf16_bits(v - b));
          cat[(k + kk) * n + nn] = static_cast<uint16_t>(kfab_bf16_bits(b));
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int r = threadIdx.y; r < 32; r += 8) {
      const int64_t nn = n0 + r, kk = k0 + threadIdx.x;
      if (nn < n && kk < k) {
        const float v = tile[threadIdx.x][r];
        if (small == nullptr) {
          __stcs(big + nn * ld + kk, cat != nullptr ? kfab_tf32_big(v) : v);
        } else {
          const float b = kfab_tf32_big(v);
          __stcs(big + nn * ld + kk, b);
          __stcs(small + nn * ld + kk, v - b);
          if (big2 != nullptr) __stcs(big2 + nn * ld + kk, b);
        }
      }
    }
    __syncthreads();
  }
}

// For a short K (kfab_sm90_3xtf32): v [rows, k] (K-contiguous) written as [rows, 3k], each row its three
// parts side by side: [small | big | big] for A (`a_side`), [big | small | big] for W, so that one product
// over K' = 3k makes small x big + big x small + big x big in one accumulation. Four floats at a time (k a
// multiple of 4).
__global__ void kfab_tf32_split_cat(const float4* __restrict__ v, float4* __restrict__ out, int64_t rows, int64_t k4, bool a_side) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x, n4 = rows * k4;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += step) {
    const int64_t r = i / k4, c = i % k4;
    const float4 a = __ldcs(v + i);
    const float4 b = make_float4(kfab_tf32_big(a.x), kfab_tf32_big(a.y), kfab_tf32_big(a.z), kfab_tf32_big(a.w));
    const float4 sm = make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w);
    float4* row = out + r * 3 * k4;
    __stcs(row + c, a_side ? sm : b);
    __stcs(row + k4 + c, a_side ? b : sm);
    __stcs(row + 2 * k4 + c, b);
  }
}

// Launches kfab_tf32_split_t over the l batches of B [l, K, N] (each batch's output `nout` rows of `ld`
// floats; 0: n rows of k); 0, 6 for more batches than a grid takes, or 5 when the launch fails.
inline int kfab_split_kn(const float* b, float* big, float* small, int n, int k, int l, cudaStream_t stream, float* big2 = nullptr,
                         int64_t ld = 0, int64_t nout = 0, uint16_t* cat = nullptr) {
  if (n == 0 || k == 0 || l == 0) return 0;
  if (l > 65535) return 6;
  const dim3 grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(std::min(((k + 31) / 32), 65535)), static_cast<unsigned>(l));
  kfab_tf32_split_t<<<grid, dim3(32, 8), 0, stream>>>(b, big, small, big2, k, n, ld > 0 ? ld : k, nout > 0 ? nout : n, cat);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}

// The longest K one wgmma accumulation runs over in the big x big product. wgmma's TF32 accumulation
// loses accuracy with K, about linearly (truncation): measured on an H200 (issue 23), level2_76 (K = 8192)
// used 0.51 of KernelBench's tolerance in one accumulation and 0.18 in four slices of 2048 (CUTLASS's SM80
// 3xTF32: 0.12), at 5% of the time; level1_6 (K = 524288) was 0.36% off in one.
constexpr int kfab_tf32_k_slice = 2048;

// The floats kfab_sm90_3xtf32's scratch needs: each operand's three parts side by side for a short K (3K at
// most a slice: one product), else its big and small parts.
inline int64_t kfab_3xtf32_scratch(int64_t m, int64_t n, int64_t k, int64_t l) {
  return (3 * k <= kfab_tf32_k_slice ? 3 : 2) * l * (m + n) * k;
}

// Whether TMA takes the operands and C as they are: k and n multiples of 4 (CUTLASS's sm90 GEMM asks that of
// the problem's contiguous dimensions), 16-byte aligned pointers (c null: a buffer of kfab's own, aligned).
// Otherwise kfab_sm90_3xtf32 pads: see kfab_sm90_3xtf32_padded.
inline bool kfab_3xtf32_tma(const void* a, const void* w, const void* c, int64_t n, int64_t k) {
  auto al = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return k % 4 == 0 && n % 4 == 0 && al(a) && al(w) && (c == nullptr || al(c));
}

// The floats kfab_sm90_3xtf32's scratch needs for these operands and this C (c null: kfab's own buffer).
inline int64_t kfab_3xtf32_scratch_for(const void* a, const void* w, const void* c, int64_t m, int64_t n, int64_t k, int64_t l) {
  if (kfab_3xtf32_tma(a, w, c, n, k)) return kfab_3xtf32_scratch(m, n, k, l);
  const int64_t kp = (k + 3) / 4 * 4, np = (n + 3) / 4 * 4;
  const bool c_ok = n % 4 == 0 && (c == nullptr || (reinterpret_cast<uintptr_t>(c) & 15u) == 0);
  return 2 * l * (m + np) * kp + (c_ok ? 0 : l * m * np);
}

// Shapes and pointers TMA cannot take as they are (kfab_3xtf32_tma: KernelBench's level1_8, 8205 x 2949 x 5921):
// the product over K' = k rounded up to a multiple of 4, the split parts' rows padded with zeros to K'
// (`scratch`: kfab_3xtf32_scratch_for floats); where n is not a multiple of 4 or c not aligned, over N' = n
// rounded up the same way (W's parts given zero rows to N') into a buffer [l * m, N'], whose first n
// columns are then copied to c.
template <class G>
int kfab_sm90_3xtf32_padded(const float* a, const float* w, float* c, float* scratch, int m, int n, int k, int l, bool b_kn,
                            bool data_parallel, cudaStream_t stream) {
  const int64_t kp = (static_cast<int64_t>(k) + 3) / 4 * 4, np = (static_cast<int64_t>(n) + 3) / 4 * 4;
  const int64_t am = static_cast<int64_t>(l) * m * kp, wn = static_cast<int64_t>(l) * np * kp;
  float* ab = scratch;
  float* as = ab + am;
  float* wb = as + am;
  float* ws = wb + wn;
  const bool c_ok = n % 4 == 0 && (reinterpret_cast<uintptr_t>(c) & 15u) == 0;  // then np is n
  float* cp = c_ok ? c : ws + wn;  // the product [l * m, np] where c cannot take it
  if (np > 2147483647 || kp > 2147483647) return 6;
  const int n32 = static_cast<int>(np), k32 = static_cast<int>(kp);
  auto blocks = [](int64_t n1) { return static_cast<unsigned>(std::min<int64_t>((n1 + 255) / 256, 4096)); };
  const int64_t arows = static_cast<int64_t>(l) * m, wrows = static_cast<int64_t>(l) * n;
  // W's parts zero first where some of their rows or columns are not written below (the padding)
  if ((np != n || (b_kn && kp != k)) && cudaMemsetAsync(wb, 0, sizeof(float) * static_cast<size_t>(2 * wn), stream) != cudaSuccess) return 5;
  if (arows > 0) kfab_tf32_split_ld<<<blocks(arows * kp), 256, 0, stream>>>(a, ab, as, arows, k, kp, arows, arows);
  if (b_kn) {
    if (const int rc = kfab_split_kn(w, wb, ws, n, k, l, stream, nullptr, kp, np); rc != 0) return rc;
  } else if (wrows > 0) {
    kfab_tf32_split_ld<<<blocks(wrows * kp), 256, 0, stream>>>(w, wb, ws, wrows, k, kp, n, np);
  }
  if (cudaGetLastError() != cudaSuccess) return 5;
  const int splits = (k32 + kfab_tf32_k_slice - 1) / kfab_tf32_k_slice;
  if (splits > 1 && !G::kStreamK) return 7;  // the big x big product's slices need CUTLASS's stream-K scheduler
  int rc = kfab_sm90_product<G>(as, wb, cp, m, n32, k32, l, 0.0f, stream, 1, data_parallel);
  if (rc == 0) rc = kfab_sm90_product<G>(ab, ws, cp, m, n32, k32, l, 1.0f, stream, 1, data_parallel);
  if (rc == 0) rc = kfab_sm90_product<G>(ab, wb, cp, m, n32, k32, l, 1.0f, stream, splits, data_parallel);
  if (rc != 0 || c_ok) return rc;
  return cudaMemcpy2DAsync(c, sizeof(float) * static_cast<size_t>(n), cp, sizeof(float) * static_cast<size_t>(np),
                           sizeof(float) * static_cast<size_t>(n), static_cast<size_t>(arows), cudaMemcpyDeviceToDevice, stream) == cudaSuccess
             ? 0
             : 5;
}

// C = A @ W^T (W [N, K]), or A @ B where B_KN (B [K, N], transposed here), for each of l batches, at fp32
// accuracy from three TF32 products (small x big, big x small, big x big; the small x small term, below
// 2^-21 of the product, dropped as in CUTLASS's 3xTF32), the big x big one split along K into slices of
// kfab_tf32_k_slice whose partial sums add in fp32 (CUTLASS makes no more slices than the GPU has SMs:
// level1_6's K of 524288 gets 132 of about 4000 on an H100); the two small ones (2^-11 of the product and
// less) in one accumulation, their tiles handed out whole where DATA_PARALLEL, else as CUTLASS's
// heuristic picks. `scratch` holds kfab_3xtf32_scratch floats: each operand's big and small parts, W's
// as [N, K]. A short K (3K at most a slice: KernelBench's level1_7, K = 64, with an output of 4 GiB) is
// one product over K' = 3K instead, [As | Ab | Ab] @ [Wb | Ws | Wb]^T, which writes C once where the three
// would read and write it five times. G without the stream-K scheduler (the ping-pong schedule, which
// CUTLASS gives none: its epilogue of one tile overlaps the other consumer's mainloop, for a short K's
// large output) takes only a K that needs no slices: 7 otherwise.
template <class G>
int kfab_sm90_3xtf32(const float* a, const float* w, float* c, float* scratch, int m, int n, int k, int l, bool b_kn, bool data_parallel,
                     cudaStream_t stream) {
  if (!kfab_3xtf32_tma(a, w, c, n, k)) return kfab_sm90_3xtf32_padded<G>(a, w, c, scratch, m, n, k, l, b_kn, data_parallel, stream);
  const size_t am = static_cast<size_t>(l) * m * k, wn = static_cast<size_t>(l) * n * k;
  auto blocks = [](int64_t n4) { return static_cast<unsigned>(std::min<int64_t>((n4 + 255) / 256, 4096)); };
  if (3 * static_cast<int64_t>(k) <= kfab_tf32_k_slice) {  // a short K: the three parts side by side, one product
    float* a3 = scratch;
    float* w3 = a3 + 3 * am;
    if (am > 0)
      kfab_tf32_split_cat<<<blocks(static_cast<int64_t>(am / 4)), 256, 0, stream>>>(reinterpret_cast<const float4*>(a), reinterpret_cast<float4*>(a3),
                                                                                    static_cast<int64_t>(l) * m, k / 4, true);
    if (b_kn) {  // rows of [big | small | big]
      if (const int rc = kfab_split_kn(w, w3, w3 + k, n, k, l, stream, w3 + 2 * static_cast<int64_t>(k), 3 * static_cast<int64_t>(k)); rc != 0)
        return rc;
    } else if (wn > 0) {
      kfab_tf32_split_cat<<<blocks(static_cast<int64_t>(wn / 4)), 256, 0, stream>>>(reinterpret_cast<const float4*>(w), reinterpret_cast<float4*>(w3),
                                                                                    static_cast<int64_t>(l) * n, k / 4, false);
    }
    if (cudaGetLastError() != cudaSuccess) return 5;
    return kfab_sm90_product<G>(a3, w3, c, m, n, 3 * k, l, 0.0f, stream, 1, data_parallel);
  }
  float* ab = scratch;
  float* as = ab + am;
  float* wb = as + am;
  float* ws = wb + wn;
  const int64_t a4 = static_cast<int64_t>(am / 4), w4 = static_cast<int64_t>(wn / 4);
  if (a4 > 0)
    kfab_tf32_split<<<blocks(a4), 256, 0, stream>>>(reinterpret_cast<const float4*>(a), reinterpret_cast<float4*>(ab),
                                                    reinterpret_cast<float4*>(as), a4);
  if (b_kn) {
    if (const int rc = kfab_split_kn(w, wb, ws, n, k, l, stream); rc != 0) return rc;
  } else if (w4 > 0) {
    kfab_tf32_split<<<blocks(w4), 256, 0, stream>>>(reinterpret_cast<const float4*>(w), reinterpret_cast<float4*>(wb),
                                                    reinterpret_cast<float4*>(ws), w4);
  }
  if (cudaGetLastError() != cudaSuccess) return 5;
  const int splits = (k + kfab_tf32_k_slice - 1) / kfab_tf32_k_slice;
  if (splits > 1 && !G::kStreamK) return 7;  // the big x big product's slices need CUTLASS's stream-K scheduler
  int rc = kfab_sm90_product<G>(as, wb, c, m, n, k, l, 0.0f, stream, 1, data_parallel);
  if (rc == 0) rc = kfab_sm90_product<G>(ab, ws, c, m, n, k, l, 1.0f, stream, 1, data_parallel);
  if (rc == 0) rc = kfab_sm90_product<G>(ab, wb, c, m, n, k, l, 1.0f, stream, splits, data_parallel);
  return rc;
}

// C = A @ W^T, or A @ B where B_KN, for each of l batches, from one TF32 product and one bf16 product (the
// tuner's precision "tf32+bf16"): with A = Ab + As and W = Wb + Ws split as for three TF32 products,
//   C  = [Ab | As] @ [Ws | Wb]^T   in bf16 over K' = 2k (the two cross terms, their operands rounded to bf16)
//   C += Ab @ Wb^T                 in TF32, in slices of kfab_tf32_k_slice (as kfab_sm90_3xtf32's)
// Rounding a cross term's operands to bf16 (8 bits) costs 2^-9 of a term that is itself 2^-11 of the
// product: about 2^-19 of |a| |w| each, 8 times 3xTF32's 2^-22, where a bf16 product runs at twice a TF32
// one's rate on half the bytes: the time of two TF32 products for three. A reduced precision: the tuner keeps
// it only well within the task's tolerance (tuner/precision.h). What the form cannot take (TMA's shapes and
// alignments, an N-major B's N not a multiple of 8, a short K) goes to kfab_sm90_3xtf32. `scratch` holds
// kfab_3xtf32_scratch_for floats: Ab, A's bf16 copy, Wb (as [N, K]) and W's bf16 copy.
template <class G, bool B_KN>
int kfab_sm90_mixed(const float* a, const float* w, float* c, float* scratch, int m, int n, int k, int l, bool data_parallel,
                    cudaStream_t stream) {
  if (!kfab_3xtf32_tma(a, w, c, n, k) || (B_KN && n % 8 != 0) || 3 * static_cast<int64_t>(k) <= kfab_tf32_k_slice ||
      2 * static_cast<int64_t>(k) > 2147483647)
    return kfab_sm90_3xtf32<G>(a, w, c, scratch, m, n, k, l, B_KN, data_parallel, stream);
  const size_t am = static_cast<size_t>(l) * m * k, wn = static_cast<size_t>(l) * n * k;
  float* ab = scratch;
  float* a16 = ab + am;  // am floats: [l * m, 2k] bf16
  float* wb = a16 + am;
  float* w16 = wb + wn;  // wn floats: [l * n, 2k] or [l, 2k, n] bf16
  auto blocks = [](int64_t n4) { return static_cast<unsigned>(std::min<int64_t>((n4 + 255) / 256, 4096)); };
  const int64_t a4 = static_cast<int64_t>(am / 4), w4 = static_cast<int64_t>(wn / 4);
  if (a4 > 0)
    kfab_mixed_split<<<blocks(a4), 256, 0, stream>>>(reinterpret_cast<const float4*>(a), reinterpret_cast<float4*>(ab),
                                                     reinterpret_cast<uint2*>(a16), static_cast<int64_t>(l) * m, k / 4, true);
  if constexpr (B_KN) {
    if (const int rc = kfab_split_kn(w, wb, nullptr, n, k, l, stream, nullptr, 0, 0, reinterpret_cast<uint16_t*>(w16)); rc != 0) return rc;
  } else if (w4 > 0) {
    kfab_mixed_split<<<blocks(w4), 256, 0, stream>>>(reinterpret_cast<const float4*>(w), reinterpret_cast<float4*>(wb),
                                                     reinterpret_cast<uint2*>(w16), static_cast<int64_t>(l) * n, k / 4, false);
  }
  if (cudaGetLastError() != cudaSuccess) return 5;
  const int splits = (k + kfab_tf32_k_slice - 1) / kfab_tf32_k_slice;
  if (splits > 1 && !G::kStreamK) return 7;  // the big x big product's slices need CUTLASS's stream-K scheduler
  int rc = kfab_sm90_cross<KfabSm90Cross<G, !B_KN>>(a16, w16, c, m, n, 2 * k, l, data_parallel, stream);
  if (rc == 0) rc = kfab_sm90_product<G>(ab, wb, c, m, n, k, l, 1.0f, stream, splits, data_parallel);
  return rc;
}

// C = A @ W^T, or A @ B where B_KN, for each of l batches, in one TF32 product (a reduced precision);
// B [K, N] is first written as [N, K] into `scratch` (l * n * k floats; unused otherwise).
template <class G>
int kfab_sm90_1xtf32(const float* a, const float* w, float* c, float* scratch, int m, int n, int k, int l, bool b_kn, cudaStream_t stream) {
  if (b_kn) {
    if (const int rc = kfab_split_kn(w, scratch, nullptr, n, k, l, stream); rc != 0) return rc;
    w = scratch;
  }
  return kfab_sm90_product<G>(a, w, c, m, n, k, l, 0.0f, stream);
}
// kfab:end
