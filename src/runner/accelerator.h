#pragma once
/// What a runner needs of a device to evaluate a candidate on it (cuda, opencl): memory, copies, the
/// stream or queue passed to kfab_run, a cache flush, and timestamps taken on that stream.
/// Every call returns 0 or the API's error code; error() names it.

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kfab {

/// A device's clocks at one moment and every reason its driver gives for holding them down.
struct ClockReading {
  bool ok = false;  ///< false where the device cannot say (no NVML)
  unsigned sm_mhz = 0;
  unsigned mem_mhz = 0;
  unsigned long long reasons = 0;  ///< the driver's bitmask, named by clock_reasons()
};

/// The declarations of Accelerator's pure virtual functions that every device defines in its .cpp,
/// listed once here for the devices (backends/*/device.h); what a device defines inline (name, stream,
/// fatal) it declares itself.
#define KFAB_ACCELERATOR_OVERRIDES                                              \
  std::string open() override;                                                 \
  int alloc(void** handle, size_t bytes) override;                             \
  int release(void* handle) override;                                          \
  int upload(void* handle, const void* src, size_t bytes, size_t offset = 0) override; \
  int download(void* dst, void* handle, size_t bytes) override;                \
  int fill(void* handle, unsigned char byte, size_t bytes) override;           \
  int synchronize() override;                                                  \
  int flush_cache() override;                                                  \
  int mark_start() override;                                                   \
  int mark_end() override;                                                     \
  int elapsed_ms(double* ms) override;                                         \
  std::string error(int rc) const override;                                    \
  double copy_bandwidth() override;                                            \
  nlohmann::json describe() const override;

class Accelerator {
 public:
  virtual ~Accelerator() = default;
  /// Loads the driver (dlopen) and sets up a context and a stream. Empty on success.
  virtual std::string open() = 0;
  virtual std::string name() const = 0;
  /// What kfab_run receives as `stream`: cudaStream_t, cl_command_queue.
  virtual void* stream() const = 0;
  /// A buffer; its handle is what kfab_tensor.data holds (a device pointer, a cl_mem).
  virtual int alloc(void** handle, size_t bytes) = 0;
  virtual int release(void* handle) = 0;
  /// Copies `bytes` from the host into the buffer, starting `offset` bytes into it.
  virtual int upload(void* handle, const void* src, size_t bytes, size_t offset = 0) = 0;
  virtual int download(void* dst, void* handle, size_t bytes) = 0;
  /// Sets every byte of a buffer to `byte`, on the stream (poisoning outputs without a host copy).
  virtual int fill(void* handle, unsigned char byte, size_t bytes) = 0;
  /// Waits for all work on the device, on any stream of the context.
  virtual int synchronize() = 0;
  /// Evicts what the next call reads from the device's caches (enqueued on the stream).
  virtual int flush_cache() = 0;
  /// Timestamps on the stream around a call; elapsed_ms is valid after synchronize().
  virtual int mark_start() = 0;
  virtual int mark_end() = 0;
  virtual int elapsed_ms(double* ms) = 0;
  virtual std::string error(int rc) const = 0;
  /// Whether an error leaves the context unusable (a CUDA kernel fault does).
  virtual bool fatal(int rc) const = 0;
  /// Device-to-device copy bandwidth (bytes read + written per second); 0 when unknown.
  virtual double copy_bandwidth() = 0;
  /// Facts for the machine record ({"device", "compute_capability", ...}).
  virtual nlohmann::json describe() const = 0;

  // Replay (CUDA graphs): what one call enqueues on the stream, recorded once and launched again as
  // a unit, so that the host's launch latency between a call's kernels is not timed. A device
  // without graphs answers kNoReplay.
  static constexpr int kNoReplay = -1;
  /// Starts recording what is enqueued on stream() by this thread.
  virtual int capture_begin() { return kNoReplay; }
  /// Ends the recording and makes it launchable: *replay is then valid until release_replay().
  virtual int capture_end(void** replay) {
    *replay = nullptr;
    return kNoReplay;
  }
  virtual int launch_replay(void* /*replay*/) { return kNoReplay; }
  virtual void release_replay(void* /*replay*/) {}
  /// Whether short calls may be recorded and replayed (capture_begin can succeed).
  virtual bool replays() const { return false; }

  // Clocks, recorded while a candidate is timed (kfab never sets them). A device that cannot read
  // its clocks does not record any.
  virtual bool reads_clocks() const { return false; }
  virtual ClockReading read_clocks() { return {}; }
  /// The names of the bits of a ClockReading's `reasons` ("sw_thermal", "hw_slowdown", ...).
  virtual std::string clock_reasons(unsigned long long /*mask*/) const { return {}; }
  /// What a device that records no clocks says instead.
  virtual std::string no_clocks_why() const { return "this device does not report its clocks"; }
};

/// A target's device in this runner: `known` false for a name no target has; `device` nullptr for a
/// target whose candidates run on the host. Opened by the caller; one per runner process.
struct DeviceFor {
  bool known = false;
  Accelerator* device = nullptr;
};
DeviceFor accelerator(std::string_view target);

}  // namespace kfab
