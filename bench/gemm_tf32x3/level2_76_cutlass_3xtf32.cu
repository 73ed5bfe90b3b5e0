// A hand-written probe for issue 23 (tensor-core GEMMs at fp32 accuracy): KernelBench level2_76_Gemm_Add_ReLU,
// y = relu(x @ W^T + bias), as CUTLASS's 3xTF32 GEMM (OpMultiplyAddFastF32: each operand split into a big and a
// small TF32 part, three tensor-core products) on the SM80 mma.sync path, which sm_90 runs too. The bias is
// the epilogue's source C with a leading dimension of 0 (every row reads bias[n]). Tile 128x64x16, warp
// 64x32x16, 4 stages (run.sh writes the other tiles it measures from this file). Inputs in the native ABI's order: get_inputs()'s x [M, K], then named_parameters(): the Model's own
// bias [N] before its submodule's gemm.weight [N, K].
#include <cuda_runtime.h>

#include "cutlass/epilogue/thread/linear_combination_relu.h"
#include "cutlass/gemm/device/gemm.h"
#include "kfab/candidate.h"

namespace {

using Gemm = cutlass::gemm::device::Gemm<
    float, cutlass::layout::RowMajor,     // x [M, K]
    float, cutlass::layout::ColumnMajor,  // W [N, K] row-major is B [K, N] column-major
    float, cutlass::layout::RowMajor,     // y [M, N]
    float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, cutlass::gemm::GemmShape<128, 64, 16>,
    cutlass::gemm::GemmShape<64, 32, 16>, cutlass::gemm::GemmShape<16, 8, 8>,
    cutlass::epilogue::thread::LinearCombinationRelu<float, 4, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, 4, 4, 4, false, cutlass::arch::OpMultiplyAddFastF32>;

bool dense2(const kfab_tensor& t) {
  return t.dtype == KFAB_F32 && t.ndim == 2 && t.data != nullptr &&
         (t.strides == nullptr || ((t.shape[1] <= 1 || t.strides[1] == 1) && (t.shape[0] <= 1 || t.strides[0] == t.shape[1])));
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* in, int32_t n_in, kfab_tensor* out, int32_t n_out, void* stream) {
  if (in == nullptr || out == nullptr || n_in != 3 || n_out != 1) return 1;
  const kfab_tensor &x = in[0], &b = in[1], &w = in[2];
  kfab_tensor& y = out[0];
  if (!dense2(x) || !dense2(w) || !dense2(y) || b.dtype != KFAB_F32 || b.ndim != 1) return 2;
  const int m = static_cast<int>(x.shape[0]), k = static_cast<int>(x.shape[1]), n = static_cast<int>(w.shape[0]);
  if (w.shape[1] != k || b.shape[0] != n || y.shape[0] != m || y.shape[1] != n) return 3;
  const Gemm::Arguments args({m, n, k}, {static_cast<const float*>(x.data), k}, {static_cast<const float*>(w.data), k},
                             {static_cast<const float*>(b.data), 0}, {static_cast<float*>(y.data), n}, {1.0f, 1.0f});
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 4;
  return gemm(args, nullptr, static_cast<cudaStream_t>(stream)) == cutlass::Status::kSuccess ? 0 : 5;
}
