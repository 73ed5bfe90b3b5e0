#pragma once
/// Comparing a candidate's output with the oracle's (allclose semantics, NaN/Inf rules of
/// DESIGN.md section 3), accumulating the evidence a verdict reports.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/task.h"
#include "core/tensor.h"

namespace kfab {

struct Mismatch {
  std::string output;
  size_t index = 0;
  std::vector<int64_t> coord;
  double got = 0.0;
  double want = 0.0;
  int64_t seed = 0;
  int call = 0;  ///< 1: first candidate call, 2: the call after the reference
};

/// The call number of verify's last check: the last seed's inputs with four elements changed.
inline constexpr int kPerturbedCall = 5;

struct CompareStats {
  double max_abs = 0.0;  ///< over finite pairs
  double max_rel = 0.0;
  /// max |got - want| / (atol + rtol |want|) over finite pairs: the share of the tolerance the worst
  /// element used (1 is the limit; a reduced precision is kept only well under it)
  double tol_used = 0.0;
  size_t checked = 0;
  size_t mismatches = 0;
  size_t nonfinite = 0;  ///< NaN or Inf where the reference had a finite value
  std::optional<Mismatch> first;

  bool ok() const { return mismatches == 0; }
  nlohmann::json to_json() const;
};

/// Compares got with want elementwise: |got - want| <= atol + rtol * |want|; NaN must meet NaN and an
/// infinity the same infinity. Records the first mismatch with its coordinates.
void compare_output(const HostTensor& got, const HostTensor& want, const Tolerance& tol,
                    const std::string& name, int64_t seed, int call, CompareStats& st);

}  // namespace kfab
