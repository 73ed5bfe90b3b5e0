#pragma once
/// The CUDA driver API, loaded with dlopen so that kfab and its runner start on machines with no
/// driver. Only the runner uses it, and only for the cuda target: one primary context per runner.

#include <cstddef>
#include <cstdint>
#include <string>

#include "runner/accelerator.h"

namespace kfab::cuda {

using DevPtr = unsigned long long;
using Stream = void*;
using Event = void*;

/// Device 0's primary context (the one the CUDA runtime inside a candidate uses, so pointers are
/// shared) and a stream of the runner's. flush_cache reads a buffer twice the size of L2 on the stream
/// (kfab_l2_flush): what a timed call reads comes from HBM, and no dirty line of the flush's own is
/// written back during the call. copy_bandwidth is the best of several 1 GiB device-to-device copies.
class CudaDevice final : public Accelerator {
 public:
  KFAB_ACCELERATOR_OVERRIDES
  std::string name() const override { return name_; }
  void* stream() const override { return stream_; }
  /// Every error after a launch is sticky in CUDA: the context is lost.
  bool fatal(int rc) const override { return rc != 0 && rc != kNoReplay; }
  int capture_begin() override;
  int capture_end(void** replay) override;
  int launch_replay(void* replay) override;
  void release_replay(void* replay) override;
  bool replays() const override { return true; }
  bool reads_clocks() const override { return true; }
  ClockReading read_clocks() override;
  std::string clock_reasons(unsigned long long mask) const override;
  std::string no_clocks_why() const override { return "NVML (libnvidia-ml.so.1) is not available"; }

 private:
  Stream stream_ = nullptr;
  DevPtr scratch_ = 0;
  size_t l2_bytes_ = 0;
  int cc_ = 0;
  std::string name_;
  uint8_t flush_value_ = 0;
  void* flush_fn_ = nullptr;  ///< kfab_l2_flush from l2_flush_ptx.h
  int sms_ = 0;
  bool graphs_ = false;
  Event start_ = nullptr;
  Event end_ = nullptr;
};



}  // namespace kfab::cuda
