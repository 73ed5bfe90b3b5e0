#pragma once
/// An OpenCL device for the runner: the ICD loader (libOpenCL.so.1) through dlopen, the first
/// platform with a device ($KFAB_OPENCL_PLATFORM picks one by a part of its name; a GPU is preferred
/// over other device types), a context and an in-order queue with profiling. Timestamps are markers
/// enqueued around the call, so every command the candidate enqueues on the queue is inside them.

#include <string>

#include "runner/accelerator.h"

namespace kfab {

class OpenClDevice final : public Accelerator {
 public:
  std::string open() override;
  std::string name() const override { return name_; }
  void* stream() const override { return queue_; }
  int alloc(void** handle, size_t bytes) override;
  int release(void* handle) override;
  int upload(void* handle, const void* src, size_t bytes, size_t offset = 0) override;
  int fill(void* handle, unsigned char byte, size_t bytes) override;
  int download(void* dst, void* handle, size_t bytes) override;
  int synchronize() override;
  /// GPUs: a fill of twice the global-memory cache. CPU devices share the host's caches; a fill there
  /// would cost more than the kernels, so nothing is flushed (describe() says so).
  int flush_cache() override;
  int mark_start() override;
  int mark_end() override;
  int elapsed_ms(double* ms) override;
  std::string error(int rc) const override;
  bool fatal(int rc) const override;
  double copy_bandwidth() override;
  nlohmann::json describe() const override;

 private:
  void* context_ = nullptr;
  void* queue_ = nullptr;
  void* device_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  void* start_ = nullptr;
  void* end_ = nullptr;
  bool is_gpu_ = false;
  std::string name_;
  std::string platform_;
};

}  // namespace kfab
