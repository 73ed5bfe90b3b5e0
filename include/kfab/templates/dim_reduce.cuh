#pragma once
// The kernel of a reduction over one dimension that is not the last: x seen as [outer, r, c], y as
// [outer, c]; a sum, mean, max, min, argmax or argmin over r (torch.sum / mean / max / min / argmax /
// argmin with `dim`; keepdim only changes y's shape), or an RMS normalisation over r (y of x's shape:
// x / sqrt(mean(x^2 over r) + EPS)). Column vectors a thread, row groups a block, partial results
// combined in shared memory in row order (tuner/dim_reduce.cpp). The generated file defines B, RY, CX,
// OP (kfab_reduce_op), EPS, UNROLL and STREAM before it and launches it from its kfab_run. The text
// between the kfab:begin and kfab:end lines is spliced into the candidates the tuner writes, inside an
// unnamed namespace; tests/templates/dim_reduce.cu compiles it on its own.
// kfab:begin
enum kfab_reduce_op { KFAB_R_SUM = 0, KFAB_R_MEAN = 1, KFAB_R_MAX = 2, KFAB_R_MIN = 3, KFAB_R_ARGMAX = 4, KFAB_R_ARGMIN = 5, KFAB_R_RMS = 6 };

// Whether v replaces best (found at a smaller row) in a max (MAXLIKE) or a min: a NaN wins and stays,
// as torch's max, min, argmax and argmin have it; a tie keeps the first.
template <bool MAXLIKE>
__device__ __forceinline__ bool kfab_reduce_better(float v, float best) {
  if (best != best) return false;
  return v != v || (MAXLIKE ? v > best : v < best);
}

// One row's V values at p (a float4 where V is 4) into q; STREAM: marked evict-first. Where the columns
// are not a multiple of 4, a warp's row straddles a sector its neighbour strip reads too, which an
// evict-first load may push out of L2 before the neighbour comes: the tuner measures both.
template <int V>
__device__ __forceinline__ void kfab_dim_load(const float* p, float* q) {
  if constexpr (V == 4) {
    const float4 t = STREAM ? __ldcs(reinterpret_cast<const float4*>(p)) : __ldg(reinterpret_cast<const float4*>(p));
    q[0] = t.x, q[1] = t.y, q[2] = t.z, q[3] = t.w;
  } else {
    q[0] = STREAM ? __ldcs(p) : __ldg(p);
  }
}

// Thread (tx, ty) of block (cx, split, b) reduces rows r0 + ty, r0 + ty + RY, ... < r1 of the V columns
// at (cx * CX + tx) * V, U rows' loads issued before any is used; the RY partials meet in shared memory;
// with more than one split (a sum or a mean alone), the blocks' partials meet in y through atomics (y is
// zeroed first). Y is float, or int64_t for an argmax or argmin. An RMS normalisation (one split) keeps
// its rows in registers where KR rows a thread hold them (r <= KR * RY), else reads them again.
template <int V, typename Y, int KR = 0>
__global__ void __launch_bounds__(B) kfab_dim_reduce(const float* __restrict__ x, Y* __restrict__ y, int64_t r, int64_t c) {
  constexpr bool RMS = OP == KFAB_R_RMS;
  constexpr bool ADD = OP == KFAB_R_SUM || OP == KFAB_R_MEAN || RMS;
  constexpr bool MAXLIKE = OP == KFAB_R_MAX || OP == KFAB_R_ARGMAX;
  constexpr bool ARG = OP == KFAB_R_ARGMAX || OP == KFAB_R_ARGMIN;
  constexpr int U = UNROLL;  // rows in flight a thread
  __shared__ float part[RY][CX * V];
  __shared__ int64_t where[ARG ? RY : 1][ARG ? CX * V : 1];
  const int tx = threadIdx.x % CX, ty = threadIdx.x / CX;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * CX + tx) * V;
  const bool live = col < c;
  const int64_t b = blockIdx.z;
  const int64_t split = gridDim.y;
  const int64_t per = (r + split - 1) / split;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * per, r1 = r0 + per < r ? r0 + per : r;
  float acc[V];
  int64_t at[V];
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = ADD ? 0.0f : (MAXLIKE ? -INFINITY : INFINITY), at[v] = -1;
  // a max or min without its index needs no row: -inf (inf) stays for a column of -inf (inf)
  const auto take = [&](const float* q, int64_t i) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if constexpr (RMS) {
        acc[v] += q[v] * q[v];
      } else if constexpr (ADD) {
        acc[v] += q[v];
      } else if ((ARG && at[v] < 0) || kfab_reduce_better<MAXLIKE>(q[v], acc[v])) {
        acc[v] = q[v], at[v] = i;
      }
    }
  };
  const float* xb = x + b * r * c + (live ? col : 0);
  [[maybe_unused]] float keep[KR > 0 ? KR : 1][V];
  if constexpr (KR > 0) {  // an RMS normalisation whose rows fit: all of them in flight, kept
#pragma unroll
    for (int k = 0; k < KR; ++k)
      if (live && ty + k * RY < r) kfab_dim_load<V>(xb + (ty + k * RY) * c, keep[k]);
#pragma unroll
    for (int k = 0; k < KR; ++k)
      if (live && ty + k * RY < r) take(keep[k], ty + k * RY);
  } else if (live) {
    int64_t i = r0 + ty;
    for (; i + (U - 1) * RY < r1; i += U * RY) {
      float q[U][V];
#pragma unroll
      for (int u = 0; u < U; ++u) kfab_dim_load<V>(xb + (i + u * RY) * c, q[u]);
#pragma unroll
      for (int u = 0; u < U; ++u) take(q[u], i + u * RY);
    }
    for (; i < r1; i += RY) {
      float q[V];
      kfab_dim_load<V>(xb + i * c, q);
      take(q, i);
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) {
    part[ty][tx * V + v] = acc[v];
    if constexpr (ARG) where[ty][tx * V + v] = at[v];
  }
  __syncthreads();
  // the first CX * V threads each finish one column: the RY partials in order (a tie: the smaller row)
  for (int k = threadIdx.x; k < CX * V; k += B) {
    const int64_t cc = static_cast<int64_t>(blockIdx.x) * CX * V + k;
    if (cc >= c) continue;
    float t = part[0][k];
    int64_t ti = ARG ? where[0][k] : 0;
#pragma unroll
    for (int j = 1; j < RY; ++j) {
      const float u = part[j][k];
      if constexpr (ADD) {
        t += u;
      } else if constexpr (ARG) {
        const int64_t ui = where[j][k];
        if (ui >= 0 && (ti < 0 || kfab_reduce_better<MAXLIKE>(u, t) || ((u == t || (u != u && t != t)) && ui < ti))) t = u, ti = ui;
      } else if (kfab_reduce_better<MAXLIKE>(u, t)) {
        t = u;
      }
    }
    if constexpr (OP == KFAB_R_MEAN) t /= static_cast<float>(r);
    if constexpr (RMS) {
      part[0][k] = sqrtf(t / static_cast<float>(r) + EPS);  // the divisor of this column, for the second pass
    } else if constexpr (ARG) {
      y[b * c + cc] = static_cast<Y>(ti < 0 ? 0 : ti);
    } else if (split == 1) {
      y[b * c + cc] = static_cast<Y>(t);
    } else if (r0 < r1) {
      atomicAdd(reinterpret_cast<float*>(y) + b * c + cc, t);
    }
  }
  if constexpr (RMS) {  // y = x / the column's divisor: from the registers, else the rows read again (mostly from L2)
    __syncthreads();
    if (!live) return;
    float* yb = reinterpret_cast<float*>(y) + b * r * c + col;
    float d[V];
#pragma unroll
    for (int v = 0; v < V; ++v) d[v] = part[0][tx * V + v];
    if constexpr (KR > 0) {
#pragma unroll
      for (int k = 0; k < KR; ++k) {
        if (ty + k * RY >= r) continue;
        float* o = yb + (ty + k * RY) * c;
        if constexpr (V == 4) __stcs(reinterpret_cast<float4*>(o), make_float4(keep[k][0] / d[0], keep[k][1] / d[1], keep[k][2] / d[2], keep[k][3] / d[3]));
        else __stcs(o, keep[k][0] / d[0]);
      }
    } else {
#pragma unroll 4
      for (int64_t i = ty; i < r; i += RY)
#pragma unroll
        for (int v = 0; v < V; ++v) __stcs(yb + i * c + v, __ldg(xb + i * c + v) / d[v]);
    }
  }
}
// kfab:end
