#pragma once
/// Content hashes (xxh3-128, hex) for the compile cache and the store.

#include <filesystem>
#include <string>
#include <string_view>

#include "core/expected.h"

namespace kfab {

std::string hash_hex(std::string_view data);
Expected<std::string> read_file(const std::filesystem::path& p);
/// Writes a file atomically (temporary file in the same folder, then rename).
Expected<void> write_file_atomic(const std::filesystem::path& p, std::string_view data);

}  // namespace kfab
