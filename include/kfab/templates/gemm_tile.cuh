#pragma once
// The main loop of the tuner's generated CUDA GEMMs (tuner/print_cuda.cpp): one block's BM x BN
// tile of C = A @ B (or A @ W^T with TRANS_B), TM x TN outputs a thread, staged through shared
// memory BK deep in two buffers, the next tile loaded into registers while the current one is
// multiplied. The generated file defines BM, BN, BK, TM, TN, NT, TRANS_B, LA and LB before it and
// applies its epilogue to `acc` after it. The text between the kfab:begin and kfab:end lines is
// spliced into the candidates the tuner writes, inside an unnamed namespace; tests/templates/
// gemm_tile.cu compiles it on its own.
// kfab:begin
struct Operands {
  const float* __restrict__ A;
  const float* __restrict__ W;
  float* __restrict__ C;  // the product, when a row kernel applies the epilogue
};

// VEC: A's rows and B's (or W's) rows are read as float4 (K, and N unless TRANS_B, multiples of 4).
template <bool VEC>
__device__ __forceinline__ void kfab_gemm_tile(const Operands& o, int64_t rows, int64_t n, int64_t K, int64_t m0, int64_t n0,
                                               float (&acc)[TM][TN]) {
  __shared__ __align__(16) float As[2][BK][BM];
  __shared__ __align__(16) float Bs[2][BK][BN];
  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN), ty = tid / (BN / TN);
  float ra[LA], rb[LB];
  // the tile at depth k0 into registers, 4 consecutive floats of a row of A (and of B or W) at a time
  auto load = [&](int64_t k0) {
#pragma unroll
    for (int i = 0; i < LA / 4; ++i) {
      const int e = tid + i * NT;
      const int64_t gm = m0 + e / (BK / 4), gk = k0 + (e % (BK / 4)) * 4;
      const float* src = o.A + gm * K + gk;
      if (VEC && gm < rows && gk < K) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(src));
        ra[i * 4] = q.x, ra[i * 4 + 1] = q.y, ra[i * 4 + 2] = q.z, ra[i * 4 + 3] = q.w;
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) ra[i * 4 + q] = gm < rows && gk + q < K ? __ldg(src + q) : 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < LB / 4; ++i) {
      const int e = tid + i * NT;
      int64_t gr, gc, lim_r, lim_c, ld;
      if constexpr (TRANS_B) {
        gr = n0 + e / (BK / 4), gc = k0 + (e % (BK / 4)) * 4, lim_r = n, lim_c = K, ld = K;
      } else {
        gr = k0 + e / (BN / 4), gc = n0 + (e % (BN / 4)) * 4, lim_r = K, lim_c = n, ld = n;
      }
      const float* src = o.W + gr * ld + gc;
      if (VEC && gr < lim_r && gc < lim_c) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(src));
        rb[i * 4] = q.x, rb[i * 4 + 1] = q.y, rb[i * 4 + 2] = q.z, rb[i * 4 + 3] = q.w;
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) rb[i * 4 + q] = gr < lim_r && gc + q < lim_c ? __ldg(src + q) : 0.0f;
      }
    }
  };
  auto stage = [&](int buf) {
#pragma unroll
    for (int i = 0; i < LA / 4; ++i) {
      const int e = tid + i * NT;
      const int r = e / (BK / 4), c = (e % (BK / 4)) * 4;
#pragma unroll
      for (int q = 0; q < 4; ++q) As[buf][c + q][r] = ra[i * 4 + q];
    }
#pragma unroll
    for (int i = 0; i < LB / 4; ++i) {
      const int e = tid + i * NT;
      if constexpr (TRANS_B) {
        const int r = e / (BK / 4), c = (e % (BK / 4)) * 4;
#pragma unroll
        for (int q = 0; q < 4; ++q) Bs[buf][c + q][r] = rb[i * 4 + q];
      } else {
        const int r = e / (BN / 4), c = (e % (BN / 4)) * 4;
        *reinterpret_cast<float4*>(&Bs[buf][r][c]) = make_float4(rb[i * 4], rb[i * 4 + 1], rb[i * 4 + 2], rb[i * 4 + 3]);
      }
    }
  };
  load(0);
  stage(0);
  __syncthreads();
  int buf = 0;
  for (int64_t k0 = 0; k0 < K; k0 += BK) {
    const bool more = k0 + BK < K;
    if (more) load(k0 + BK);
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; i += 4) *reinterpret_cast<float4*>(&av[i]) = *reinterpret_cast<const float4*>(&As[buf][kk][ty * TM + i]);
#pragma unroll
      for (int j = 0; j < TN; j += 4) *reinterpret_cast<float4*>(&bv[j]) = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * TN + j]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    if (more) {
      stage(buf ^ 1);
      __syncthreads();
      buf ^= 1;
    }
  }
}
// kfab:end
