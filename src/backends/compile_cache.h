#pragma once
/// Builds a source file into a shared object in the compile cache (cache_dir()/<kind>/<hash>.so). The
/// hash covers the source, the compiler and its version, the flags, the ABI header and the headers the
/// source includes by a quoted name (beside it or in kfab's include folder, and theirs), so an unchanged
/// candidate is never compiled twice, a changed header is, and concurrent builds of one key never see
/// half a file.

#include <filesystem>
#include <string>
#include <vector>

#include "backends/backend.h"

namespace kfab {

struct CompileSpec {
  std::string kind;                    ///< cache subfolder: cpu, cuda, opencl
  std::string compiler;                ///< path or name
  std::string compiler_version;        ///< part of the key
  std::vector<std::string> flags;      ///< before the source
  std::vector<std::string> link_flags; ///< after the source (libraries)
  double timeout_s = 120.0;
};

/// The system C++ compiler ($CXX, else g++) and the first line of its `--version` (empty when it is
/// absent). Asked once per process: the cpu and opencl backends share the answer.
const std::string& system_cxx();
const std::string& system_cxx_version();

BuildOutcome<BuildResult> compile_cached(const CompileSpec& spec, const std::filesystem::path& source);
/// The command compile_cached runs for `source` (its output named `output`), as one line (for an agent's
/// brief: describe_task).
std::string compile_command(const CompileSpec& spec, const std::string& source, const std::string& output);

}  // namespace kfab
