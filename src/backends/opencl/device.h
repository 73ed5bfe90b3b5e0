#pragma once
/// An OpenCL device for the runner: the ICD loader (libOpenCL.so.1) through dlopen, the first
/// platform with a device ($KFAB_OPENCL_PLATFORM picks one by a part of its name; a GPU is preferred
/// over other device types), a context and an in-order queue with profiling. Timestamps are markers
/// enqueued around the call, so every command the candidate enqueues on the queue is inside them.
/// flush_cache on a GPU is a fill of twice the global-memory cache. CPU devices share the host's caches;
/// a fill there would cost more than the kernels, so nothing is flushed (describe() says so).

#include <string>

#include "runner/accelerator.h"

namespace kfab {

class OpenClDevice final : public Accelerator {
 public:
  KFAB_ACCELERATOR_OVERRIDES
  std::string name() const override { return name_; }
  void* stream() const override { return queue_; }
  bool fatal(int rc) const override;

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
