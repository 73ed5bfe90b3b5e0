#pragma once
/// Host tensors: 64-byte aligned, contiguous row-major buffers that are handed to candidates through
/// the ABI, and their deterministic initialisation from a seed.

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/task.h"
#include "kfab/candidate.h"

namespace kfab {

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape);
  /// A tensor over memory it does not own (shared memory): valid while that memory is.
  static HostTensor borrow(DType dtype, std::vector<int64_t> shape, void* data);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  size_t numel() const { return numel_; }
  size_t nbytes() const { return numel_ * dtype_size(dtype_); }
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  double at(size_t i) const { return load_as_double(data_.get(), dtype_, i); }

  /// The ABI view; valid while this tensor lives and is not moved.
  kfab_tensor view();
  /// Fills floats with NaN; integers and bools with the byte `pattern`.
  void poison(uint8_t pattern);
  /// Fills from `init` with a deterministic stream derived from `seed`.
  void fill(const InitSpec& init, uint64_t seed);

 private:
  struct Free {
    Free() : owned(true) {}
    explicit Free(bool own) : owned(own) {}
    bool owned;
    void operator()(void* p) const;
  };
  void set_shape(std::vector<int64_t> shape);
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  size_t numel_ = 0;
  std::unique_ptr<void, Free> data_;
};

/// splitmix64: the seed expander behind every input kfab generates.
uint64_t splitmix64(uint64_t& state);
/// Mixes a task-level seed with per-input indices into an independent stream seed.
uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b = 0);

}  // namespace kfab
