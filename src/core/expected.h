#pragma once
/// kfab::Expected<T>: a value or an Error, for failures that are expected (bad input, compile errors,
/// a candidate that crashes). tl-expected is not packaged in Debian 12 and std::expected needs C++23,
/// so kfab carries this small equivalent with the same spelling of the common operations.

#include <string>
#include <utility>
#include <variant>

#include "core/assert.h"

namespace kfab {

/// What went wrong, for a person to read. `hint` says what would be accepted or how to fix it.
struct Error {
  std::string message;
  std::string hint;

  std::string to_string() const { return hint.empty() ? message : message + " (" + hint + ")"; }
};

/// Marks an Error to be returned where an Expected<T> is expected.
struct Unexpected {
  Error error;
};

inline Unexpected make_error(std::string message, std::string hint = {}) {
  return Unexpected{Error{std::move(message), std::move(hint)}};
}

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Unexpected u) : v_(std::move(u.error)) {}  // NOLINT

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & {
    KFAB_ASSERT(has_value(), "Expected::value() on an error: " + std::get<1>(v_).to_string());
    return std::get<0>(v_);
  }
  const T& value() const& {
    KFAB_ASSERT(has_value(), "Expected::value() on an error: " + std::get<1>(v_).to_string());
    return std::get<0>(v_);
  }
  T&& value() && {
    KFAB_ASSERT(has_value(), "Expected::value() on an error: " + std::get<1>(v_).to_string());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const {
    KFAB_ASSERT(!has_value(), "Expected::error() on a value");
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

/// Expected<void>: success or an Error.
template <>
class [[nodiscard]] Expected<void> {
 public:
  Expected() = default;
  Expected(Unexpected u) : err_(std::move(u.error)), ok_(false) {}  // NOLINT
  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    KFAB_ASSERT(!ok_, "Expected::error() on a value");
    return err_;
  }

 private:
  Error err_;
  bool ok_ = true;
};

}  // namespace kfab
