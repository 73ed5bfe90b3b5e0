#pragma once
// n / d for a 32-bit unsigned n and a divisor known only at run time, by a multiply-high, an add and a
// shift: Granlund and Montgomery's round-up method, with 2^(l-1) < d <= 2^l and m = floor(2^32 (2^l - d) / d)
// + 1, n / d = (mulhi(n, m) + n) >> l, the sum in 64 bits; exact for every n below 2^32 and d from 1 to
// 2^31. A 32-bit division by a number not known at compile time is about 20 instructions on the GPU (a
// reciprocal refined, then corrected), this 3; kfab_fast_div finds m and l once, on the host.
// For the tuner's generated cuda candidates (tuner/pool.cpp): the text between the kfab:begin and kfab:end
// lines is spliced into them after <cstdint>, inside an unnamed namespace; tests/templates/fast_div.cpp
// compiles it on its own and tests/unit/fast_div_test.cpp checks it against the division.
// kfab:begin
struct KfabFastDiv {
  uint32_t d, m, l;
};

// d from 1 to 2^31
[[maybe_unused]] inline KfabFastDiv kfab_fast_div(uint32_t d) {
  uint32_t l = 0;
  while ((uint64_t{1} << l) < d) ++l;
  return {d, static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << l) - d) / d + 1), l};
}

#if defined(__CUDACC__)
__host__ __device__
#endif
    [[maybe_unused]] inline uint32_t kfab_div(uint32_t n, KfabFastDiv f) {
#if defined(__CUDA_ARCH__)
  const uint32_t t = __umulhi(n, f.m);
#else
  const uint32_t t = static_cast<uint32_t>(static_cast<uint64_t>(n) * f.m >> 32);
#endif
  return static_cast<uint32_t>((static_cast<uint64_t>(t) + n) >> f.l);
}
// kfab:end
