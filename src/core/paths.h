#pragma once
/// Where kfab keeps things: the store under the data directory, compile products under the cache
/// directory (XDG base directories; KFAB_DATA_DIR and KFAB_CACHE_DIR override), and its own binaries.

#include <filesystem>

namespace kfab {

/// $KFAB_DATA_DIR, else $XDG_DATA_HOME/kfab, else ~/.local/share/kfab.
std::filesystem::path data_dir();
/// $KFAB_CACHE_DIR, else $XDG_CACHE_HOME/kfab, else ~/.cache/kfab.
std::filesystem::path cache_dir();
/// The folder holding the running executable.
std::filesystem::path self_dir();
/// The kfab-runner executable: $KFAB_RUNNER, else beside the running executable.
std::filesystem::path runner_path();
/// The ABI header folder (holding kfab/candidate.h) passed to compilers with -I.
std::filesystem::path abi_include_dir();

}  // namespace kfab
