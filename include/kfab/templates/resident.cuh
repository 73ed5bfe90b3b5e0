#pragma once
// How the tuner's generated row kernels (tuner/print_cuda.cpp) are launched: a block a chunk of
// rows, or with P > 0 at most P times the blocks the device holds at once, each block taking chunks
// in turn. The text between the kfab:begin and kfab:end lines is spliced into the candidates the
// tuner writes, inside an unnamed namespace after <cuda_runtime.h>, <mutex>, <utility> and
// <vector>; tests/templates/resident.cu compiles it on its own.
// kfab:begin
// How many blocks of `threads` threads of the kernel the device holds at once (found once per kernel
// and device; 0 when CUDA cannot say).
int64_t kfab_resident(const void* kernel, int threads) {
  static std::mutex mu;
  static std::vector<std::pair<std::pair<const void*, int>, int64_t>> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& k : known)
    if (k.first.first == kernel && k.first.second == dev) return k.second;
  int sms = 0, per = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  known.push_back({{kernel, dev}, static_cast<int64_t>(sms) * per});
  return known.back().second;
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
// kfab:end
