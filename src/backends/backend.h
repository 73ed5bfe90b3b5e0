#pragma once
/// A backend is one target + DSL (cpu/cpp, later cuda/cu, opencl/cl): it says whether it can run
/// here (probe), and builds a candidate's source into an artifact that a runner loads.

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/expected.h"

namespace kfab {

struct BuildResult {
  std::filesystem::path artifact;  ///< the shared object a runner loads
  std::string key;                 ///< content hash of source + flags + compiler
  bool cached = false;
  double seconds = 0.0;
};

/// A compile failure: the compiler's own message, for the verdict and for a fixer.
struct BuildFailure {
  std::string message;
  bool timed_out = false;
  /// The disk under the compile cache (or the compiler's temporary folder) is full: no fault of the
  /// source's, so an error for the user (exit 2), never a compile_failed verdict.
  bool no_space = false;
};

template <typename T>
class BuildOutcome {
 public:
  BuildOutcome(T v) : ok_(true), value_(std::move(v)) {}  // NOLINT
  BuildOutcome(BuildFailure f) : failure_(std::move(f)) {}  // NOLINT
  bool ok() const { return ok_; }
  const T& value() const { return value_; }
  const BuildFailure& failure() const { return failure_; }

 private:
  bool ok_ = false;
  T value_{};
  BuildFailure failure_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// The target name used on the command line: cpu, cuda, opencl.
  virtual std::string_view target() const = 0;
  /// The DSL of its candidates: cpp, cuda, opencl.
  virtual std::string_view dsl() const = 0;
  /// Candidate file extensions it accepts (".cpp", ...).
  virtual std::vector<std::string> extensions() const = 0;
  /// 0 when it cannot run here; higher is better (picks the default target).
  virtual int probe() const = 0;
  /// One line on what it found, for `kfab doctor`.
  virtual std::string describe() const = 0;
  /// Builds a source file, using the compile cache.
  virtual BuildOutcome<BuildResult> build(const std::filesystem::path& source) = 0;
  /// The command a candidate `source` is built with (for an agent: describe_task); empty where unknown.
  virtual std::string build_command(const std::string& /*source*/) const { return {}; }
  /// The devices of this target the process sees (GPUs); 0 where it does not count them.
  virtual int device_count() const { return 0; }
};

/// Every backend compiled in, best first where probe() > 0.
std::vector<std::unique_ptr<Backend>> make_backends();
/// The backend for a target name; nullptr if unknown.
std::unique_ptr<Backend> make_backend(std::string_view target);

}  // namespace kfab
