#pragma once
/// Where kfab keeps things: the store under the data directory, compile products under the cache
/// directory (XDG base directories; KFAB_DATA_DIR and KFAB_CACHE_DIR override), and its own binaries.

#include <filesystem>
#include <string_view>

#include "core/expected.h"

namespace kfab {

/// $KFAB_DATA_DIR, else $XDG_DATA_HOME/kfab, else ~/.local/share/kfab.
std::filesystem::path data_dir();
/// $KFAB_CACHE_DIR, else $XDG_CACHE_HOME/kfab, else ~/.cache/kfab.
std::filesystem::path cache_dir();
/// The folder holding the running executable.
std::filesystem::path self_dir();
/// The folder holding the kfab_worker package ($KFAB_WORKER_PATH, else ../python beside the binaries,
/// else the source tree's python/).
std::filesystem::path python_worker_dir();
/// The Python that runs the worker: $KFAB_PYTHON, else the source tree's .venv (what `make test`
/// creates), else python3 on PATH.
std::string python_interpreter();
/// The kfab-runner executable: $KFAB_RUNNER, else beside the running executable.
std::filesystem::path runner_path();
/// The ABI header folder (holding kfab/candidate.h) passed to compilers with -I.
std::filesystem::path abi_include_dir();

/// A new folder PREFIX-PID.START-XXXXXX under the temporary directory, named after the process that
/// makes it (its pid and start time, which no candidate inside can rewrite). The caller removes it when
/// done; when kfab is ended instead, remove_owned_temp_dirs (on SIGINT, SIGTERM, SIGHUP) or the next
/// kfab's sweep_orphaned_temp_dirs (after SIGKILL) does.
Expected<std::filesystem::path> make_owned_temp_dir(std::string_view prefix);

/// Removes every folder make_owned_temp_dir made in this process that is still there. Async-signal-safe
/// (system calls only): the child reaper calls it from its signal handler once the children are killed.
void remove_owned_temp_dirs() noexcept;

/// Removes the folders of make_owned_temp_dir under the temporary directory whose owning process has
/// gone (no such pid, or one started at another time). Returns how many it removed.
int sweep_orphaned_temp_dirs();

}  // namespace kfab
