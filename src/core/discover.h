#pragma once
/// Finding tasks under a folder: native manifests (task.toml) and KernelBench files (a Python file
/// defining `class Model(` and `get_inputs`).

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/task.h"

namespace kfab {

struct TaskEntry {
  std::filesystem::path path;
  std::string format;        ///< "native" or "kernelbench"
  std::optional<Task> task;  ///< native tasks that loaded
  std::string error;         ///< why a native task did not load

  /// The task as open_task gives it (a native task that did not load: its error).
  Expected<LoadedTask> loaded() const;
};

/// Whether `a` sorts before `b` with runs of digits compared as numbers ("level1/9_x" before "level1/10_x").
bool natural_less(const std::string& a, const std::string& b);

/// Every task under `root` (or `root` itself), sorted by path, numbers in it as numbers.
std::vector<TaskEntry> discover_tasks(const std::filesystem::path& root);

}  // namespace kfab
