#pragma once
/// A task's files as a job carries them (dist/queue.h): base64 in JSON, so that any bytes travel, and
/// written out again where the job runs.

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/expected.h"

namespace kfab {

/// A task's files for a job: {"task": its name among them, "files": {relative path: base64}} (a native
/// task's folder; a KernelBench file with its bundled candidates). An Error past 64 MiB.
Expected<nlohmann::json> task_files_payload(const std::filesystem::path& task);

/// Writes a payload's files under `root` (emptied first); the task's path there. An Error for a file
/// that would land outside `root` or is not base64.
Expected<std::filesystem::path> unpack_task_files(const nlohmann::json& payload, const std::filesystem::path& root);

}  // namespace kfab
