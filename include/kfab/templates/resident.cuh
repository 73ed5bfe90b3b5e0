#pragma once
// How the tuner's generated row kernels (tuner/print_cuda.cpp) are launched: a block a chunk of
// rows, or with P > 0 at most P times the blocks the device holds at once, each block taking chunks
// in turn, or in clusters of blocks that split a row (or the group norm's group) between them. The
// text between the kfab:begin and kfab:end lines is spliced into the candidates the
// tuner writes, inside an unnamed namespace after <cuda_runtime.h>, <mutex>, <utility> and
// <vector>; tests/templates/resident.cu compiles it on its own.
// kfab:begin
// How many blocks of `threads` threads of the kernel, each with `smem` bytes of dynamic shared memory, the
// device holds at once (found once per kernel, device and smem; 0 when CUDA cannot say).
int64_t kfab_resident(const void* kernel, int threads, int smem = 0) {
  struct Known {
    const void* kernel;
    int dev, smem;
    int64_t blocks;
  };
  static std::mutex mu;
  static std::vector<Known> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& k : known)
    if (k.kernel == kernel && k.dev == dev && k.smem == smem) return k.blocks;
  int sms = 0, per = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, static_cast<size_t>(smem)) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  known.push_back({kernel, dev, smem, static_cast<int64_t>(sms) * per});
  return known.back().blocks;
}

// Launches a row kernel over `chunks` chunks of rows: a block a chunk, or with P > 0 at most P times
// the blocks the device holds at once, each block taking chunks in turn.
template <int P, class K, class Args>
void kfab_go(K kernel, int64_t chunks, int threads, cudaStream_t stream, const Args& a, int64_t rows, int64_t n) {
  int64_t blocks = chunks;
  if constexpr (P > 0) {
    const int64_t cap = P * kfab_resident(reinterpret_cast<const void*>(kernel), threads);
    if (cap > 0 && cap < blocks) blocks = cap;
  }
  kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a, rows, n);
}

// Block `rank`'s part [lo, hi) of L values (a row, a group) split over `parts` blocks (V-aligned; the
// whole of them with one part).
template <int V>
__device__ __forceinline__ void kfab_split_part(int64_t L, int parts, int rank, int64_t* lo, int64_t* hi) {
  const int64_t chunk = (L + static_cast<int64_t>(parts) * V - 1) / (static_cast<int64_t>(parts) * V) * V;
  *lo = rank * chunk;
  *hi = *lo + chunk < L ? *lo + chunk : L;
}

// The same over a cluster of CL blocks.
template <int CL, int V>
__device__ __forceinline__ void kfab_cluster_part(int64_t L, int rank, int64_t* lo, int64_t* hi) {
  kfab_split_part<V>(L, CL, rank, lo, hi);
}

// A launch of `blocks` blocks of `threads` threads in clusters of `cl`, with `smem` bytes of dynamic
// shared memory; `attr` holds the cluster's dimension.
inline cudaLaunchConfig_t kfab_cluster_launch(int64_t blocks, int cl, int threads, size_t smem, cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cl);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Whether the device launches clusters of `cl` blocks of `threads` threads of the kernel (Hopper and
// later; sizes over 8 allowed once, where the device has them), found once per kernel and device.
inline bool kfab_cluster_ok(const void* kernel, int cl, int threads) {
  static std::mutex mu;
  static std::vector<std::pair<std::pair<const void*, int>, bool>> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& k : known)
    if (k.first.first == kernel && k.first.second == dev) return k.second;
  int can = 0, clusters = 0;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = kfab_cluster_launch(cl, cl, threads, 0, nullptr, attr);
  bool ok = cudaDeviceGetAttribute(&can, cudaDevAttrClusterLaunch, dev) == cudaSuccess && can != 0;
  if (ok && cl > 8) ok = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
  ok = ok && cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess && clusters > 0;
  (void)cudaGetLastError();  // not the caller's error: it falls back
  known.push_back({{kernel, dev}, ok});
  return ok;
}

// Launches a row kernel over `rows` rows, each split over a cluster of CL blocks; false (nothing
// launched) where the device cannot run such clusters.
template <int CL, class K, class Args>
bool kfab_go_cluster(K kernel, int threads, cudaStream_t stream, const Args& a, int64_t rows, int64_t n) {
  if (rows * CL > 2147483647 || !kfab_cluster_ok(reinterpret_cast<const void*>(kernel), CL, threads)) return false;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = kfab_cluster_launch(rows * CL, CL, threads, 0, stream, attr);
  (void)cudaLaunchKernelEx(&cfg, kernel, a, rows, n);  // an error shows in the launch check after it
  return true;
}
// Rows longer than a cluster holds (level1/40's layer norm over rows of 4M floats), each split over S
// blocks of the grid: the grid's blocks form groups of S, a group taking rows in turn; `shares` holds
// each block's share of each row reduction ([groups][2][nred][S]: two rows' worth, by the parity of the
// group's row count, so a block a row ahead never overwrites shares another still reads), `bar` a
// counter of arrivals a group, zero at launch (row_reduce.cuh's kfab_split_combine). Read twice (kfab_go_l2):
// S parts a row, `shares` [rows][nred][S] then the rows' reductions [rows][nred], `bar` a counter a row,
// D the tiles first passes run ahead of second ones, `ticket` the grid's count of tickets taken; zero at launch.
// Tiles kept in shared memory (kfab_go_ring): `tags` a word a share ([rows][nred][S]: `epoch` in its high half
// once written, zero before, the share's bits in its low), R slots of a tile, a tile's second pass L of the
// block's tiles after its first.
struct KfabSplit {
  int S, nred;
  float* shares;
  unsigned* bar;
  int64_t D;
  unsigned long long* ticket;
  unsigned long long* tags = nullptr;
  unsigned epoch = 0;
  int R = 0, L = 0;
};

// Device memory of at least `need` T's at *p, kept between calls (*have: how many), grown when a shape needs
// more; false (*p as it was) where CUDA cannot give it. A buffer outgrown is not freed: a CUDA graph that
// recorded an earlier call still points at it, and replays it after later calls. Each growth at least doubles
// it, so all of them together stay under twice the last.
template <class T>
bool kfab_scratch(T** p, int64_t* have, int64_t need) {
  if (need <= *have) return true;
  const int64_t want = need > 2 * *have ? need : 2 * *have;
  T* q = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&q), sizeof(T) * static_cast<size_t>(want)) != cudaSuccess) return (void)cudaGetLastError(), false;
  *p = q, *have = want;
  return true;
}

// Whether the device has cooperative launches (every block of a grid resident at once), and a kernel with
// `smem` bytes of dynamic shared memory may have them.
template <class K>
bool kfab_coop_ok(K kernel, int smem) {
  int dev = 0, coop = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess || coop == 0)
    return (void)cudaGetLastError(), false;
  if (smem > 48 * 1024 && cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
    return (void)cudaGetLastError(), false;
  return true;
}

// The cooperative launch of `kernel` (a row kernel taking a KfabSplit after rows and n) over `blocks` blocks.
template <class K, class Args>
bool kfab_go_coop(K kernel, int64_t blocks, int threads, int smem, cudaStream_t stream, const Args& a, int64_t rows, int64_t n, KfabSplit s) {
  Args args = a;
  void* argv[] = {&args, &rows, &n, &s};
  if (cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(static_cast<unsigned>(blocks)), dim3(static_cast<unsigned>(threads)), argv,
                                  static_cast<size_t>(smem), stream) != cudaSuccess) {
    (void)cudaGetLastError();  // not the caller's error: it streams the rows instead
    return false;
  }
  return true;
}

// Launches `kernel` (a row kernel taking a KfabSplit after rows and n) over `rows` rows of n, each
// split over the fewest blocks of `threads` threads that hold `holds` values each, as a cooperative
// launch: every block is resident at once, as blocks that wait for each other must be, each with `smem`
// bytes of dynamic shared memory. False (nothing launched) where the device cannot hold a row's blocks at
// once or has no cooperative launches.
template <class K, class Args>
bool kfab_go_split(K kernel, int threads, int64_t holds, int nred, cudaStream_t stream, const Args& a, int64_t rows, int64_t n, int smem = 0) {
  static float* shares = nullptr;  // kept between calls, grown when a shape needs more
  static unsigned* bar = nullptr;
  static int64_t have_shares = 0, have_bar = 0;
  if (!kfab_coop_ok(kernel, smem)) return false;
  int64_t S = (n + holds - 1) / holds;
  const int64_t resident = kfab_resident(reinterpret_cast<const void*>(kernel), threads, smem);
  if (rows <= 0 || S < 2 || resident < S) return false;
  const int64_t groups = resident / S < rows ? resident / S : rows;
  if (!kfab_scratch(&shares, &have_shares, groups * 2 * nred * S) || !kfab_scratch(&bar, &have_bar, groups)) return false;
  if (cudaMemsetAsync(bar, 0, sizeof(unsigned) * static_cast<size_t>(groups), stream) != cudaSuccess) return (void)cudaGetLastError(), false;
  return kfab_go_coop(kernel, groups * S, threads, smem, stream, a, rows, n, KfabSplit{static_cast<int>(S), nred, shares, bar, 0, nullptr});
}

// Launches `kernel` (a row kernel taking a KfabSplit after rows and n, that reads its rows twice) over `rows`
// rows of n, each cut into S parts of at most `holds` values, a block's tile: a grid of as many blocks as the
// device holds at once (a cooperative launch), each taking tickets (row_reduce.cuh's kfab_l2_ticket) from a counter,
// a tile's first pass (its share of each row reduction) or its second (the outputs, from L2, after its row's
// first passes). First passes run D = S + lag / 4 of the grid's blocks tiles ahead of second ones (lag 2 or
// more: a row's last first passes were taken a round of the grid's tickets before its first second pass),
// which L2 must hold (level1/23's softmax: 1.5 MB a row, 8 MB of tiles at lag 2, 64 KB a tile). False
// (nothing launched) where the device cannot.
template <class K, class Args>
bool kfab_go_l2(K kernel, int threads, int64_t holds, int nred, int lag, cudaStream_t stream, const Args& a, int64_t rows, int64_t n) {
  static float* shares = nullptr;  // kept between calls, grown when a shape needs more
  static unsigned* bar = nullptr;
  static int64_t have_shares = 0, have_bar = 0;
  if (!kfab_coop_ok(kernel, 0)) return false;
  const int64_t S = (n + holds - 1) / holds, T = rows * S;
  const int64_t resident = kfab_resident(reinterpret_cast<const void*>(kernel), threads);
  if (rows <= 0 || n <= 0 || S > 2147483647 || resident <= 0) return false;
  const int64_t blocks = resident < 2 * T ? resident : 2 * T;
  const int64_t ahead = S + blocks * lag / 4, D = ahead < T ? ahead : T;
  // a counter a row, then (8-byte aligned) the tickets' counter
  const int64_t counters = (rows + 1) / 2 * 2 + 2;
  if (!kfab_scratch(&shares, &have_shares, rows * nred * (S + 1)) || !kfab_scratch(&bar, &have_bar, counters)) return false;
  if (cudaMemsetAsync(bar, 0, sizeof(unsigned) * static_cast<size_t>(counters), stream) != cudaSuccess) return (void)cudaGetLastError(), false;
  auto* ticket = reinterpret_cast<unsigned long long*>(bar + (rows + 1) / 2 * 2);
  return kfab_go_coop(kernel, blocks, threads, 0, stream, a, rows, n, KfabSplit{static_cast<int>(S), nred, shares, bar, D, ticket});
}

// Rows in tiles each read once, into a ring of shared-memory slots by the bulk copy (cp.async.bulk, Hopper):
// block b of G takes tiles b, b + G, ..; at its step j it makes tile j's shares of its row's reductions from
// slot j % R, and writes tile j - L's outputs from its slot once that row's shares are all in, then refills
// the slot with tile j - L + R. A share is one 8-byte word stamped as written (kfab_ring_put): no fence,
// no counter; a second pass loads its row's words before the first pass before it and checks them after
// (kfab_ring_peek, kfab_ring_take), so the wait costs no round trip to L2 when the row is done.
// (bench/probes/softmax_ring.cu: on an H200 level1/23's softmax took 3.19 ms this way, 94% of cudaMemcpy's
// bandwidth, against 4.02 ms with a counter a row and a fence an arrival.) Hopper and later (the bulk copy,
// mbarrier waits); elsewhere never launched (kfab_go_ring).
__device__ __forceinline__ void kfab_ring_init(unsigned long long* mbar, int R) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x == 0) {
    for (int k = 0; k < R; ++k)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(mbar + k))));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
#endif
  __syncthreads();
}

// Thread 0: the bulk copy of tile t of a rows x n input `in` (its row's part t % S, kfab_split_part<4>) into
// slot `slot` of `ring` (`holds` floats a slot), completing on mbar[slot]. The source is 16-byte aligned and
// its length a multiple of 16 where n is a multiple of 4 and `in` 16-byte aligned (vec: kfab_run's checks).
__device__ __forceinline__ void kfab_ring_fetch(float* ring, unsigned long long* mbar, int slot, int64_t holds, const float* in, int64_t n, int S,
                                                int64_t t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x != 0) return;
  int64_t lo = 0, hi = 0;
  kfab_split_part<4>(n, S, static_cast<int>(t % S), &lo, &hi);
  const unsigned bytes = static_cast<unsigned>(hi > lo ? (hi - lo) * 4 : 0);
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(mbar + slot));
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the block's reads of the slot, before the copy writes it
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
  if (bytes > 0)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     static_cast<unsigned>(__cvta_generic_to_shared(ring + slot * holds))),
                 "l"(in + t / S * n + lo), "r"(bytes), "r"(b)
                 : "memory");
#endif
}

// Every thread waits for the copy into a slot, the `use`-th use of its mbarrier (its phase's parity).
__device__ __forceinline__ void kfab_ring_wait(unsigned long long* mbar, int64_t use) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(mbar)), parity = static_cast<unsigned>(use & 1);
  asm volatile("{\n .reg .pred p;\n kfab_w: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra kfab_w;\n}\n" ::"r"(b), "r"(parity)
               : "memory");
#endif
}

// A share: its bits and the stamp `epoch` (nonzero) in one 8-byte word (a single store, seen whole or not at all;
// kfab_go_ring zeroes the words before each call).
__device__ __forceinline__ void kfab_ring_put(unsigned long long* w, float v, unsigned epoch) {
  const unsigned long long q = static_cast<unsigned long long>(epoch) << 32 | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(w), "l"(q) : "memory");
}
__device__ __forceinline__ unsigned long long kfab_ring_ld(const unsigned long long* w) {
  unsigned long long q;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(q) : "l"(w) : "memory");
  return q;
}

// A row's `count` share words (at most 4 a thread of B), loaded into q: thread r takes r, r + B, ..
template <int B>
__device__ __forceinline__ void kfab_ring_peek(unsigned long long (&q)[4], const unsigned long long* w, int count) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * B;
    q[k] = i < count ? kfab_ring_ld(w + i) : 0ull;
  }
}

// The block waits until every word kfab_ring_peek loaded carries `epoch` (loading again those that did not),
// then leaves their shares in sh[0, count) for the gathers (row_reduce.cuh's, SH: from shared memory).
template <int B>
__device__ __forceinline__ void kfab_ring_take(unsigned long long (&q)[4], const unsigned long long* w, int count, unsigned epoch, float* sh) {
  for (;;) {
    bool missing = false;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = static_cast<int>(threadIdx.x) + k * B;
      missing = missing || (i < count && static_cast<unsigned>(q[k] >> 32) != epoch);
    }
    if (!__syncthreads_or(missing)) break;
    __nanosleep(64);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = static_cast<int>(threadIdx.x) + k * B;
      if (i < count && static_cast<unsigned>(q[k] >> 32) != epoch) q[k] = kfab_ring_ld(w + i);
    }
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * B;
    if (i < count) sh[i] = __uint_as_float(static_cast<unsigned>(q[k]));
  }
  __syncthreads();
}

// The least lag (of a block's tiles, between a tile's first pass and its second) at which a grid of G blocks
// taking tiles b, b + G, .. of rows of S tiles never waits on a later step: the last tile of tile t's row is
// at most S - 1 tiles on, (b + S - 1) / G <= (S - 2) / G + 1 of the block's steps later; the block at the
// least step has then made every share its second pass needs. (constexpr: tests/templates/resident.cu checks
// it at compile time against the schedule itself.)
__host__ __device__ constexpr int64_t kfab_ring_lag(int64_t S, int64_t G) { return S >= 2 ? (S - 2) / G + 1 : 1; }

// Launches `kernel` (a row kernel taking a KfabSplit after rows and n; one per-element input `in`, float4
// rows) over rows of n in tiles of `holds` floats kept in shared memory, a cooperative launch of as many
// blocks as the device holds at once, a tile's second pass at least `lag` and kfab_ring_lag of the block's
// tiles after its first. False (nothing launched) where a row's shares do not fit 4 words a thread, shared
// memory holds fewer than L + 2 slots, the device is older than Hopper or cannot launch it.
template <class K, class Args>
bool kfab_go_ring(K kernel, int threads, int64_t holds, int nred, int lag, cudaStream_t stream, const Args& a, int64_t rows, int64_t n) {
  static unsigned long long* tags = nullptr;  // kept between calls, grown when a shape needs more
  static int64_t have = 0;
  const int64_t S = (n + holds - 1) / holds, T = rows * S;
  int dev = 0, optin = 0, major = 0;
  cudaFuncAttributes fa = {};
  if (rows <= 0 || n <= 0 || n % 4 != 0 || S * nred > 4 * threads || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 9 ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
      cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(kernel)) != cudaSuccess)
    return (void)cudaGetLastError(), false;
  // The fewest slots that keep a tile loading beside the one a first pass reads and the L waiting for their
  // second: two blocks an SM where tiles are 32 KB (the probe: 101% of a float4 copy with three slots two
  // blocks an SM, 83% with six one an SM). The lag needs the grid, the grid the slots: the slots for a
  // lag of 1 decide the grid, and more are taken (fewer blocks then) only where the row's tiles need them.
  const int64_t tile = holds * 4, room = static_cast<int64_t>(optin) - static_cast<int64_t>(fa.sharedSizeBytes);
  int R = 0;
  int64_t G = 0;
  for (int want = (lag < 1 ? 1 : lag) + 2; want <= 8 && want * tile <= room && R == 0; ++want) {
    if (!kfab_coop_ok(kernel, static_cast<int>(want * tile))) return false;
    const int64_t resident = kfab_resident(reinterpret_cast<const void*>(kernel), threads, static_cast<int>(want * tile));
    G = resident < T ? resident : T;
    const int64_t least = kfab_ring_lag(S, G > 0 ? G : 1);
    if (G > 0 && want >= (least > lag ? least : lag) + 2) R = want;
  }
  if (R == 0) return false;
  const int64_t least = kfab_ring_lag(S, G);
  const int L = static_cast<int>(least > lag ? least : lag);
  const int smem = static_cast<int>(R * tile);
  // The words zeroed on the stream every call, each then stamped 1 when written: a CUDA graph that recorded
  // the call zeroes them at every replay too. (A count of calls kept here stamped them until session 29; a
  // replay does not run this code, so it kept the recorded count, and a second pass could take the share a
  // replay before had left in a word for this one's: layer norm's 64 x 393216, replayed by kfab's timing as
  // calls under 100 us are, was off by up to 8e-5 in 12 of 12 evaluations, and passed 3 of 3 zeroed.)
  if (!kfab_scratch(&tags, &have, T * nred)) return false;
  if (cudaMemsetAsync(tags, 0, sizeof(unsigned long long) * static_cast<size_t>(T * nred), stream) != cudaSuccess) return (void)cudaGetLastError(), false;
  KfabSplit s{static_cast<int>(S), nred, nullptr, nullptr, 0, nullptr};
  s.tags = tags, s.epoch = 1, s.R = R, s.L = L;
  return kfab_go_coop(kernel, G, threads, smem, stream, a, rows, n, s);
}
// kfab:end
