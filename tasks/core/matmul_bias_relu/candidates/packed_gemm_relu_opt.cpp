// matmul_bias_relu candidate: Y[M, N] = relu(A[M, K] @ W[K, N] + bias[N]), f32, row-major.
//
// Classic packed GEMM:
//   - K is cut into KC-deep blocks and N into NC-wide blocks. For each (jc, pc) block, B is packed into
//     NR-wide column panels and A into MR-tall row panels (zero padded at the M and N edges), so the
//     micro-kernel streams both operands contiguously.
//   - The micro-kernel keeps an MR x NR tile of C in vector registers and does a rank-1 update per k:
//     AVX-512 8 x 32 (16 zmm accumulators), AVX2+FMA 6 x 16 (12 ymm accumulators), otherwise a plain
//     4 x 8 loop that the compiler vectorises as it can.
//   - Each thread owns a rectangle of C (a range of MR-row panels, or of NR-column panels when M is
//     too short to split) and packs its own operands, so the only synchronisation is the final join
//     (a barrier per block costs a scheduler time slice whenever the two cores are contended).
// Edge tiles are computed into a stack tile and only the valid part is merged into C.
// Epilogue: partial sums of earlier K blocks live in Y; the block that finishes K adds bias and
// applies relu while the tile is still in registers, so the epilogue needs no extra pass over Y.
#include <kfab/candidate.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <omp.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace {

#if defined(__AVX512F__)
constexpr int64_t MR = 8, NR = 32;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int64_t MR = 6, NR = 16;
#else
constexpr int64_t MR = 4, NR = 8;
#endif
constexpr int64_t KC = 256;  // an MR x KC A panel (<= 8 KiB) stays in L1 across the B panels
constexpr int64_t NC = 512;  // a KC x NC packed B block is 512 KiB: meant to sit in L2

bool is_dense_f32(const kfab_tensor& t, int32_t ndim) {
  if (t.dtype != KFAB_F32 || t.ndim != ndim || t.data == nullptr) return false;
  if (ndim > 0 && t.shape == nullptr) return false;
  int64_t expect = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0) return false;
    if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

float* alloc_floats(int64_t n) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  return static_cast<float*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes));
}

// dst[k * MR + r] = A[r, k] for r < rows, zero for rows <= r < MR.
void pack_a(const float* a, int64_t lda, int64_t rows, int64_t kc, float* __restrict dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = a + r * lda;
    for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = src[k];
  }
  for (int64_t r = rows; r < MR; ++r)
    for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = 0.0f;
}

// dst[k * NR + c] = B[k, c] for c < cols, zero for cols <= c < NR.
void pack_b(const float* b, int64_t ldb, int64_t cols, int64_t kc, float* __restrict dst) {
  for (int64_t k = 0; k < kc; ++k) {
    const float* src = b + k * ldb;
    float* d = dst + k * NR;
    std::memcpy(d, src, static_cast<size_t>(cols) * sizeof(float));
    for (int64_t c = cols; c < NR; ++c) d[c] = 0.0f;
  }
}

// tile (ldc) = [tile +] sum_k ap[k, :]^T bp[k, :] over a full MR x NR tile; when bias is given
// (the last K block), tile = relu(tile + bias[0:NR]) as well.
inline void micro_kernel(int64_t kc, const float* __restrict ap, const float* __restrict bp,
                         float* __restrict c, int64_t ldc, bool accumulate,
                         const float* __restrict bias) {
#if defined(__AVX512F__)
  __m512 acc[MR][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(bp);
    const __m512 b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
    ap += MR;
    bp += NR;
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* row = c + r * ldc;
    __m512 v0 = acc[r][0], v1 = acc[r][1];
    if (accumulate) {
      v0 = _mm512_add_ps(v0, _mm512_loadu_ps(row));
      v1 = _mm512_add_ps(v1, _mm512_loadu_ps(row + 16));
    }
    if (bias != nullptr) {
      // relu as "keep the lanes > 0" (a masked move; NaN lanes become 0 like max(v, 0)).
      const __m512 zero = _mm512_setzero_ps();
      v0 = _mm512_add_ps(v0, _mm512_loadu_ps(bias));
      v1 = _mm512_add_ps(v1, _mm512_loadu_ps(bias + 16));
      v0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v0, zero, _CMP_GT_OQ), v0);
      v1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v1, zero, _CMP_GT_OQ), v1);
    }
    _mm512_storeu_ps(row, v0);
    _mm512_storeu_ps(row + 16, v1);
  }
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(bp);
    const __m256 b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(ap + r);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
    ap += MR;
    bp += NR;
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    float* row = c + r * ldc;
    __m256 v0 = acc[r][0], v1 = acc[r][1];
    if (accumulate) {
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(row));
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(row + 8));
    }
    if (bias != nullptr) {
      const __m256 zero = _mm256_setzero_ps();
      v0 = _mm256_max_ps(_mm256_add_ps(v0, _mm256_loadu_ps(bias)), zero);
      v1 = _mm256_max_ps(_mm256_add_ps(v1, _mm256_loadu_ps(bias + 8)), zero);
    }
    _mm256_storeu_ps(row, v0);
    _mm256_storeu_ps(row + 8, v1);
  }
#else
  float acc[MR][NR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int64_t r = 0; r < MR; ++r) {
      const float av = ap[r];
      for (int64_t j = 0; j < NR; ++j) acc[r][j] += av * bp[j];
    }
    ap += MR;
    bp += NR;
  }
  for (int64_t r = 0; r < MR; ++r) {
    for (int64_t j = 0; j < NR; ++j) {
      float v = accumulate ? c[r * ldc + j] + acc[r][j] : acc[r][j];
      if (bias != nullptr) v = std::max(v + bias[j], 0.0f);
      c[r * ldc + j] = v;
    }
  }
#endif
}

// C[i0:i1, j0:j1] = relu(A[i0:i1, :] @ B[:, j0:j1] + bias[j0:j1]), serial. i0 is a multiple of MR and j0 of NR (or the
// ranges end at M / N). bpack holds KC x min(NC, round_up(j1 - j0, NR)) floats.
void gemm_block(const float* A, const float* B, const float* bias, float* C, int64_t N, int64_t K,
                int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* bpack) {
  alignas(64) float apack[MR * KC];
  for (int64_t jc = j0; jc < j1; jc += NC) {
    const int64_t nc = std::min(NC, j1 - jc);
    const int64_t npanels = (nc + NR - 1) / NR;
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const bool accumulate = pc > 0;
      const bool last = pc + kc >= K;
      for (int64_t jp = 0; jp < npanels; ++jp)
        pack_b(B + pc * N + jc + jp * NR, N, std::min(NR, nc - jp * NR), kc, bpack + jp * kc * NR);
      for (int64_t i = i0; i < i1; i += MR) {
        const int64_t rows = std::min(MR, i1 - i);
        pack_a(A + i * K + pc, K, rows, kc, apack);
        for (int64_t jp = 0; jp < npanels; ++jp) {
          const int64_t j = jc + jp * NR;
          const int64_t cols = std::min(NR, j1 - j);
          const float* bp = bpack + jp * kc * NR;
          float* cp = C + i * N + j;
          if (rows == MR && cols == NR) {
            micro_kernel(kc, apack, bp, cp, N, accumulate, last ? bias + j : nullptr);
          } else {
            alignas(64) float tile[MR * NR];
            micro_kernel(kc, apack, bp, tile, NR, false, nullptr);
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t c = 0; c < cols; ++c) {
                float v = accumulate ? cp[r * N + c] + tile[r * NR + c] : tile[r * NR + c];
                if (last) v = std::max(v + bias[j + c], 0.0f);
                cp[r * N + c] = v;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace

KFAB_EXPORT int kfab_run(const kfab_tensor* inputs, int32_t n_inputs, kfab_tensor* outputs,
                         int32_t n_outputs, void* /*stream*/) {
  if (inputs == nullptr || outputs == nullptr || n_inputs != 3 || n_outputs != 1) return 1;
  const kfab_tensor& ta = inputs[0];
  const kfab_tensor& tb = inputs[1];
  const kfab_tensor& tbias = inputs[2];
  kfab_tensor& tc = outputs[0];
  if (!is_dense_f32(ta, 2) || !is_dense_f32(tb, 2) || !is_dense_f32(tbias, 1) || !is_dense_f32(tc, 2))
    return 2;
  const int64_t M = ta.shape[0];
  const int64_t K = ta.shape[1];
  const int64_t N = tb.shape[1];
  if (tb.shape[0] != K || tbias.shape[0] != N || tc.shape[0] != M || tc.shape[1] != N) return 3;
  if (M == 0 || N == 0) return 0;

  const float* A = static_cast<const float*>(ta.data);
  const float* B = static_cast<const float*>(tb.data);
  const float* bias = static_cast<const float*>(tbias.data);
  float* C = static_cast<float*>(tc.data);
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * N + j] = std::max(bias[j], 0.0f);
    return 0;
  }

  const int64_t mpanels = (M + MR - 1) / MR;
  const int64_t npanels = (N + NR - 1) / NR;
  const bool parallel = M * N * K >= (int64_t{1} << 17);
  int status = 0;
#pragma omp parallel if (parallel)
  {
    const int64_t nt = omp_get_num_threads();
    const int64_t t = omp_get_thread_num();
    // Split whichever dimension has enough panels to go round; balanced contiguous ranges.
    int64_t i0 = 0, i1 = M, j0 = 0, j1 = N;
    if (mpanels >= nt || mpanels >= npanels) {
      i0 = std::min(M, t * mpanels / nt * MR);
      i1 = std::min(M, (t + 1) * mpanels / nt * MR);
    } else {
      j0 = std::min(N, t * npanels / nt * NR);
      j1 = std::min(N, (t + 1) * npanels / nt * NR);
    }
    if (i0 < i1 && j0 < j1) {
      float* bpack = alloc_floats(std::min(KC, K) * std::min(NC, (j1 - j0 + NR - 1) / NR * NR));
      if (bpack == nullptr) {
#pragma omp atomic write
        status = 4;
      } else {
        gemm_block(A, B, bias, C, N, K, i0, i1, j0, j1, bpack);
        std::free(bpack);
      }
    }
  }
  return status;
}
