#pragma once
/// The CUDA driver API, loaded with dlopen so that kfab and its runner start on machines with no
/// driver. Only the runner uses it, and only for the cuda target: one primary context per runner.

#include <cstddef>
#include <cstdint>
#include <string>

namespace kfab::cuda {

using DevPtr = unsigned long long;
using Stream = void*;
using Event = void*;

/// The device and stream a runner evaluates on. Every call returns 0 or a CUDA error code; error()
/// turns a code into its name ("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access ...").
class Device {
 public:
  /// Loads libcuda.so.1, initialises device 0's primary context and a stream. Empty on success.
  std::string open();
  bool is_open() const { return stream_ != nullptr; }
  Stream stream() const { return stream_; }
  size_t l2_bytes() const { return l2_bytes_; }
  int compute_capability() const { return cc_; }
  std::string name() const { return name_; }

  int alloc(DevPtr* p, size_t bytes);
  int free(DevPtr p);
  int upload(DevPtr dst, const void* src, size_t bytes);
  int download(void* dst, DevPtr src, size_t bytes);
  /// Overwrites a buffer twice the size of L2 on the stream: what a timed call reads comes from HBM.
  int flush_l2();
  /// Waits for all work of the context, on any stream.
  int synchronize();
  int event_create(Event* e);
  int event_record(Event e, Stream s);
  int event_elapsed_ms(float* ms, Event a, Event b);
  /// Device-to-device copy bandwidth (bytes read + written per second), best of several 1 GiB copies.
  double copy_bandwidth();
  std::string error(int rc) const;

 private:
  Stream stream_ = nullptr;
  DevPtr scratch_ = 0;
  size_t l2_bytes_ = 0;
  int cc_ = 0;
  std::string name_;
  uint8_t flush_value_ = 0;
};

/// SM and memory clocks and the reasons they are held down (NVML through dlopen). `ok` is false
/// where NVML is absent: the verdict then says the clocks were not recorded.
struct Clocks {
  bool ok = false;
  unsigned sm_mhz = 0;
  unsigned mem_mhz = 0;
  unsigned long long reasons = 0;  ///< nvmlClocksEventReasons bitmask
};
Clocks read_clocks();
/// The names of the bits set in an NVML clocks-event-reasons mask ("sw_thermal", "hw_slowdown", ...).
std::string clock_reasons(unsigned long long mask);

/// The runner's device, opened on first use.
Device& device();

}  // namespace kfab::cuda
