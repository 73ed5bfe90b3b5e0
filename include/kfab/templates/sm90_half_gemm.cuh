#pragma once
// Hopper's tensor-core GEMM on 16-bit operands for the tuner's half-precision tasks (tuner/print_cuda.cpp,
// generate_gemm_half): C = A @ B with A, B and C all fp16 (cutlass::half_t) or all bf16
// (cutlass::bfloat16_t), accumulated in fp32 and rounded to C's type once, from CUTLASS 3's sm90
// collectives (TMA loads, wgmma, warp-specialised persistent blocks). 16-bit wgmma reads either major
// order from shared memory, so every operand is read as given: A as [M, K] or as [K, M] (A.T @ B), B as
// [K, N] or as W [N, K] (a Linear's weight); no pass rewrites an operand first, as the TF32 path must.
// Needs -arch=sm_90a, each operand's contiguous dimension (and C's N) a multiple of 8 and 16-byte aligned
// pointers (TMA's strides and addresses); the generated file takes other shapes elsewhere.
//
// The generated file includes cute/tensor.hpp and CUTLASS's GEMM headers before it (with NDEBUG) and
// splices sm90_tf32_gemm.cuh before it (its kfab_sm90_launch). The text between the kfab:begin and
// kfab:end lines is spliced into those candidates, inside an unnamed namespace;
// tests/templates/sm90_half_gemm.cu compiles it on its own.
// kfab:begin
// One CUTLASS 3 GEMM type on elements T: tile TM x TN x TK, a cluster of CM blocks along M, the
// cooperative schedule (two consumer warpgroups on one tile) or the ping-pong one (two tiles in turn),
// tiles handed out whole to persistent blocks or, STREAMK, split along K across them (a product of few
// tiles and a long K); A_KM: A given as [K, M] (M-major), B_NK: B given as W [N, K] (K-major).
template <class T, int TM, int TN, int TK, int CM, bool COOP, bool STREAMK, bool A_KM, bool B_NK>
struct KfabSm90HalfGemm {
  using Element = T;
  static constexpr bool kStreamK = STREAMK, kAKM = A_KM, kBNK = B_NK;
  using LayoutA = std::conditional_t<A_KM, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using LayoutB = std::conditional_t<B_NK, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using Tile = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
  using Cluster = cute::Shape<cute::Int<CM>, cute::_1, cute::_1>;
  using MainSchedule =
      std::conditional_t<COOP, cutlass::gemm::KernelTmaWarpSpecializedCooperative, cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using EpiSchedule = std::conditional_t<COOP, cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::epilogue::TmaWarpSpecialized>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto, float, float, T,
      cutlass::layout::RowMajor, 8, T, cutlass::layout::RowMajor, 8, EpiSchedule,
      cutlass::epilogue::fusion::LinearCombination<T, float, T, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, LayoutA, 8, T, LayoutB, 8, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      std::conditional_t<STREAMK, cutlass::gemm::StreamKScheduler, void>>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// Whether kfab_sm90_half takes this shape and these pointers: every operand's contiguous dimension a
// multiple of 8 (16 bytes, TMA's stride unit) and 16-byte aligned addresses.
template <class G>
bool kfab_sm90_half_fits(const void* a, const void* b, const void* c, int64_t m, int64_t n, int64_t k) {
  const bool dims = (G::kAKM ? m : k) % 8 == 0 && (G::kBNK ? k : n) % 8 == 0 && n % 8 == 0;
  auto al = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return dims && al(a) && al(b) && al(c);
}

// C = A @ B for each of l batches one after another in memory (A [l, m, k] or [l, k, m], B [l, k, n] or
// [l, n, k], C [l, m, n]: one launch whose tiles cover every batch). 0, 7 when CUTLASS cannot take the
// shape, 4 or 5 (kfab_sm90_launch).
template <class G>
int kfab_sm90_half(const void* a, const void* b, void* c, int m, int n, int k, int l, cudaStream_t stream) {
  using T = typename G::Element;
  using K = typename G::Kernel;
  const int64_t bl = l > 1 ? 1 : 0;  // batch strides: none for one batch
  typename K::StrideA sa;
  if constexpr (G::kAKM) sa = cute::make_stride(cute::Int<1>{}, int64_t(m), bl * m * k);  // A [K, M]
  else sa = cute::make_stride(int64_t(k), cute::Int<1>{}, bl * m * k);
  typename K::StrideB sb;
  if constexpr (G::kBNK) sb = cute::make_stride(int64_t(k), cute::Int<1>{}, bl * n * k);  // W [N, K]
  else sb = cute::make_stride(cute::Int<1>{}, int64_t(n), bl * n * k);                   // B [K, N]
  const typename K::StrideC sc = cute::make_stride(int64_t(n), cute::Int<1>{}, bl * m * n);
  const typename K::StrideD sd = cute::make_stride(int64_t(n), cute::Int<1>{}, bl * m * n);
  T* const cp = static_cast<T*>(c);
  typename G::Device::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                     {m, n, k, l},
                                     {static_cast<const T*>(a), sa, static_cast<const T*>(b), sb},
                                     {{}, cp, sc, cp, sd}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  return kfab_sm90_launch<typename G::Device>(args, stream);
}
// kfab:end
