#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace kfab {

namespace {
constexpr size_t kAlign = 64;
}

void HostTensor::Free::operator()(void* p) const {
  if (owned) std::free(p);
}

void HostTensor::set_shape(std::vector<int64_t> shape) {
  shape_ = std::move(shape);
  numel_ = 1;
  for (int64_t d : shape_) numel_ *= static_cast<size_t>(d);
  strides_.assign(shape_.size(), 1);
  for (size_t i = shape_.size(); i-- > 1;) strides_[i - 1] = strides_[i] * shape_[i];
}

HostTensor HostTensor::borrow(DType dtype, std::vector<int64_t> shape, void* data) {
  HostTensor t;
  t.dtype_ = dtype;
  t.set_shape(std::move(shape));
  t.data_ = std::unique_ptr<void, Free>(data, Free{false});
  return t;
}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype) {
  set_shape(std::move(shape));
  size_t bytes = (nbytes() + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) bytes = kAlign;
  void* p = std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(p);
}

kfab_tensor HostTensor::view() {
  kfab_tensor t;
  t.data = data_.get();
  t.dtype = static_cast<kfab_dtype>(dtype_);
  t.ndim = static_cast<int32_t>(shape_.size());
  t.shape = shape_.data();
  t.strides = strides_.data();
  return t;
}

void HostTensor::poison(uint8_t pattern) {
  if (!dtype_is_float(dtype_)) {
    std::memset(data_.get(), pattern, nbytes());
    return;
  }
  switch (dtype_) {
    case DType::F32: std::fill_n(static_cast<float*>(data_.get()), numel_, std::numeric_limits<float>::quiet_NaN()); return;
    case DType::F64: std::fill_n(static_cast<double*>(data_.get()), numel_, std::numeric_limits<double>::quiet_NaN()); return;
    case DType::F16: std::fill_n(static_cast<uint16_t*>(data_.get()), numel_, uint16_t{0x7e00}); return;
    case DType::BF16: std::fill_n(static_cast<uint16_t*>(data_.get()), numel_, uint16_t{0x7fc0}); return;
    default: return;
  }
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t s = seed ^ (a * 0xd1342543de82ef95ull) ^ (b * 0x9e3779b97f4a7c15ull);
  splitmix64(s);
  return splitmix64(s);
}

namespace {
/// The k-th value (k >= 1) splitmix64 draws from `seed`: its state only advances by a constant, so
/// any draw can be computed on its own, and a tensor filled in parallel holds the same values as one
/// filled in order.
inline uint64_t draw(uint64_t seed, uint64_t k) {
  uint64_t state = seed + (k - 1) * 0x9e3779b97f4a7c15ull;
  return splitmix64(state);
}
/// In (0, 1): 53 random bits, never exactly 0.
inline double uniform01(uint64_t seed, uint64_t k) {
  return (static_cast<double>(draw(seed, k) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
constexpr int64_t kParallelFrom = 1 << 16;  // elements; below this a thread team costs more than it saves
}  // namespace

void HostTensor::fill(const InitSpec& init, uint64_t seed) {
  void* d = data_.get();
  const auto n = static_cast<int64_t>(numel_);
  switch (init.kind) {
    case InitKind::Zeros:
    case InitKind::Ones: {
      const double v = init.kind == InitKind::Ones ? 1.0 : 0.0;
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
      for (int64_t i = 0; i < n; ++i) store_from_double(d, dtype_, static_cast<size_t>(i), v);
      return;
    }
    case InitKind::Uniform:
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
      for (int64_t i = 0; i < n; ++i) store_from_double(d, dtype_, static_cast<size_t>(i), init.a + (init.b - init.a) * uniform01(seed, i + 1));
      return;
    case InitKind::RandInt: {
      const auto lo = static_cast<int64_t>(std::ceil(init.a));
      const auto span = static_cast<uint64_t>(static_cast<int64_t>(std::ceil(init.b)) - lo);
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
      for (int64_t i = 0; i < n; ++i)
        store_from_double(d, dtype_, static_cast<size_t>(i), static_cast<double>(lo + static_cast<int64_t>(draw(seed, i + 1) % span)));
      return;
    }
    case InitKind::Bernoulli:
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
      for (int64_t i = 0; i < n; ++i) store_from_double(d, dtype_, static_cast<size_t>(i), uniform01(seed, i + 1) < init.a ? 1.0 : 0.0);
      return;
    case InitKind::Normal: {
      // Box-Muller, two values per pair of uniforms (draws 2p+1 and 2p+2 for pair p).
      const int64_t pairs = (n + 1) / 2;
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
      for (int64_t p = 0; p < pairs; ++p) {
        const double r = std::sqrt(-2.0 * std::log(uniform01(seed, 2 * p + 1)));
        const double t = 6.283185307179586 * uniform01(seed, 2 * p + 2);
        store_from_double(d, dtype_, static_cast<size_t>(2 * p), init.a + init.b * r * std::cos(t));
        if (2 * p + 1 < n) store_from_double(d, dtype_, static_cast<size_t>(2 * p + 1), init.a + init.b * r * std::sin(t));
      }
      return;
    }
  }
}

}  // namespace kfab
