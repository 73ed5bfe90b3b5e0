// A hand-written probe for issue 23, on Hopper's own tensor-core path: KernelBench level2_76_Gemm_Add_ReLU,
// y = relu(x @ W^T + bias), at fp32 accuracy from three TF32 products made by CUTLASS 3's sm90 GEMM (TMA
// loads, wgmma, warp-specialised, persistent). CUTLASS has no wgmma 3xTF32 kernel, so the split is done
// here: xb = x rounded to the nearest TF32 (read exactly by the tensor core), xs = x - xb (exact in fp32);
// the same for W. Then
//   P  = xs @ Wb^T           (small x big)
//   P += xb @ Ws^T           (big x small)
//   y  = relu(xb @ Wb^T + P + bias)   (big x big last, the bias and ReLU in its epilogue)
// (The first version took x itself as its big part, trusting wgmma to drop the low bits: 2.9e-3 off on
// an H200, worse than one TF32 product.)
// The small x small term (below 2^-20 of the product) is dropped, as in CUTLASS's 3xTF32.
// Tile KFAB_TM x KFAB_TN x KFAB_TK, cluster KFAB_CM x 1, schedule KFAB_SCHED (run.sh writes the variants);
// KFAB_ONE_PRODUCT keeps only the big x big product (one TF32 GEMM: the cheap precision's cost and error).
// KFAB_KSPLIT S computes the big x big product as S products over K / S each, added in fp32 through the
// epilogue: whether wgmma's own accumulation over a long K is what costs the sm90 3xTF32 its accuracy
// (it used 0.5-1.0 of KernelBench's tolerance on H200 where CUTLASS's SM80 3xTF32 used 0.2).
// Inputs in the native ABI's order: get_inputs()'s x [M, K], then named_parameters(): bias [N], gemm.weight [N, K].
// CUTLASS's device-side asserts are calls, and a call inside the wgmma pipeline serialises it (ptxas C7510)
#ifndef NDEBUG
#define NDEBUG
#endif
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "kfab/candidate.h"

#ifndef KFAB_TM
#define KFAB_TM 128
#define KFAB_TN 128
#define KFAB_TK 32
#define KFAB_CM 1
#define KFAB_SCHED cutlass::gemm::KernelTmaWarpSpecializedCooperative
#define KFAB_ESCHED cutlass::epilogue::TmaWarpSpecializedCooperative
#endif

namespace kfab_probe {

using namespace cute;
using Tile = Shape<Int<KFAB_TM>, Int<KFAB_TN>, Int<KFAB_TK>>;
using Cluster = Shape<Int<KFAB_CM>, _1, _1>;

template <class Fusion>
struct Sm90Gemm {
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
      float, float, float, cutlass::layout::RowMajor, 4, float, cutlass::layout::RowMajor, 4, KFAB_ESCHED, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, float, cutlass::layout::RowMajor, 4, float,
      cutlass::layout::ColumnMajor, 4, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KFAB_SCHED>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

using Plain = Sm90Gemm<cutlass::epilogue::fusion::LinearCombination<float, float, float, float>>;
using BiasRelu =
    Sm90Gemm<cutlass::epilogue::fusion::LinCombPerColBiasEltAct<cutlass::epilogue::thread::ReLu, float, float, float, float, float>>;

// big = v rounded to the nearest TF32 (its 13 low mantissa bits zero: a tensor core reads it exactly),
// small = v - big (exact in fp32)
__global__ void split(const float4* __restrict__ v, float4* __restrict__ big, float4* __restrict__ small, int64_t n4) {
  auto rn = [](float x) { return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u); };
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 a = v[i];
    const float4 b = make_float4(rn(a.x), rn(a.y), rn(a.z), rn(a.w));
    big[i] = b;
    small[i] = make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w);
  }
}

bool dense2(const kfab_tensor& t) {
  return t.dtype == KFAB_F32 && t.ndim == 2 && t.data != nullptr &&
         (t.strides == nullptr || ((t.shape[1] <= 1 || t.strides[1] == 1) && (t.shape[0] <= 1 || t.strides[0] == t.shape[1])));
}

float* scratch(size_t floats) {
  static float* p = nullptr;
  static size_t have = 0;
  if (floats > have) {
    if (p != nullptr) cudaFree(p);
    p = nullptr, have = 0;
    if (cudaMalloc(reinterpret_cast<void**>(&p), floats * sizeof(float)) != cudaSuccess) return nullptr;
    have = floats;
  }
  return p;
}

template <class G>
int run_gemm(const float* a, const float* b, const float* c, float* d, int m, int n, int k, float beta, const float* bias,
             cudaStream_t stream, int ld = 0) {  // ld: A's and B's row stride (default k)
  using Dev = typename G::Device;
  using SA = typename G::Kernel::StrideA;
  using SB = typename G::Kernel::StrideB;
  using SC = typename G::Kernel::StrideC;
  using SD = typename G::Kernel::StrideD;
  const SA sa = make_stride(int64_t(ld > 0 ? ld : k), Int<1>{}, int64_t(0));
  const SB sb = make_stride(int64_t(ld > 0 ? ld : k), Int<1>{}, int64_t(0));
  const SC sc = make_stride(int64_t(n), Int<1>{}, int64_t(0));
  const SD sd = make_stride(int64_t(n), Int<1>{}, int64_t(0));
  typename Dev::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm, {m, n, k, 1}, {a, sa, b, sb}, {{}, c, sc, d, sd}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = beta;
  if constexpr (!std::is_same_v<G, Plain>) args.epilogue.thread.bias_ptr = bias;
  static int sms = 0;
  if (sms == 0) sms = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
  args.hw_info.sm_count = sms;
  Dev gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 4;
  if (Dev::get_workspace_size(args) != 0) return 7;
  if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return 5;
  return gemm.run(stream) == cutlass::Status::kSuccess ? 0 : 5;
}

}  // namespace kfab_probe

using namespace kfab_probe;

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void* stream_) {
  if (in == nullptr || out == nullptr || n_in != 3 || n_out != 1) return 1;
  const kfab_tensor &x = in[0], &b = in[1], &w = in[2];
  kfab_tensor& y = out[0];
  if (!dense2(x) || !dense2(w) || !dense2(y) || b.dtype != KFAB_F32 || b.ndim != 1) return 2;
  const int m = static_cast<int>(x.shape[0]), k = static_cast<int>(x.shape[1]), n = static_cast<int>(w.shape[0]);
  if (w.shape[1] != k || b.shape[0] != n || y.shape[0] != m || y.shape[1] != n) return 3;
  if (k % 4 != 0 || n % 4 != 0) return 3;
  auto stream = static_cast<cudaStream_t>(stream_);
  const size_t xs_n = size_t(m) * k, ws_n = size_t(n) * k, p_n = size_t(m) * n;
  float* base = scratch(2 * xs_n + 2 * ws_n + p_n);
  if (base == nullptr) return 4;
  float *xb = base, *xs = xb + xs_n, *wb = xs + xs_n, *ws = wb + ws_n, *p = ws + ws_n;
  const auto* xp = static_cast<const float*>(x.data);
  const auto* wp = static_cast<const float*>(w.data);
#ifdef KFAB_ONE_PRODUCT  // one TF32 product, for the cost and error of the cheap precision
  (void)xb, (void)xs, (void)wb, (void)ws, (void)p;
  return run_gemm<BiasRelu>(xp, wp, nullptr, static_cast<float*>(y.data), m, n, k, 0.0f, static_cast<const float*>(b.data), stream);
#endif
  split<<<1024, 256, 0, stream>>>(reinterpret_cast<const float4*>(xp), reinterpret_cast<float4*>(xb), reinterpret_cast<float4*>(xs),
                                  int64_t(xs_n / 4));
  split<<<2048, 256, 0, stream>>>(reinterpret_cast<const float4*>(wp), reinterpret_cast<float4*>(wb), reinterpret_cast<float4*>(ws),
                                  int64_t(ws_n / 4));
  int rc = run_gemm<Plain>(xs, wb, p, p, m, n, k, 0.0f, nullptr, stream);
  if (rc == 0) rc = run_gemm<Plain>(xb, ws, p, p, m, n, k, 1.0f, nullptr, stream);
#ifdef KFAB_KSPLIT
  const int kc = k / KFAB_KSPLIT;  // the big x big product in KFAB_KSPLIT slices of K, the last one with the epilogue
  if (kc * KFAB_KSPLIT != k || kc % 4 != 0) return 3;
  for (int s = 0; s + 1 < KFAB_KSPLIT && rc == 0; ++s) rc = run_gemm<Plain>(xb + s * kc, wb + s * kc, p, p, m, n, kc, 1.0f, nullptr, stream, k);
  const int last = (KFAB_KSPLIT - 1) * kc;
  if (rc == 0)
    rc = run_gemm<BiasRelu>(xb + last, wb + last, p, static_cast<float*>(y.data), m, n, kc, 1.0f, static_cast<const float*>(b.data), stream, k);
#else
  if (rc == 0) rc = run_gemm<BiasRelu>(xb, wb, p, static_cast<float*>(y.data), m, n, k, 1.0f, static_cast<const float*>(b.data), stream);
#endif
  return rc;
}
