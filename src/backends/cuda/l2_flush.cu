// The L2 flush kernel of the cuda target, kept as PTX in l2_flush_ptx.h so the runner needs no nvcc.
// Regenerate with: scripts/gen_l2_flush_ptx.sh
//
// It reads a buffer twice the size of L2 and writes nothing back (unless an impossible value turns
// up): the lines it leaves in L2 are clean, so evicting them costs the next kernel nothing. A flush
// that writes (a memset) leaves dirty lines whose write-back lands inside the next timed call.
extern "C" __global__ void kfab_l2_flush(const uint4* __restrict__ p, unsigned long long n, unsigned* sink) {
  unsigned acc = 0;
  for (unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<unsigned long long>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}
