#include "core/paths.h"

#include <unistd.h>

#include <cstdlib>

#ifndef KFAB_SOURCE_INCLUDE_DIR
#define KFAB_SOURCE_INCLUDE_DIR ""
#endif

namespace kfab {

namespace fs = std::filesystem;

static fs::path home() {
  const char* h = std::getenv("HOME");
  return h && *h ? fs::path(h) : fs::temp_directory_path();
}

static fs::path xdg(const char* own, const char* xdg_var, const char* fallback) {
  if (const char* v = std::getenv(own); v && *v) return v;
  if (const char* v = std::getenv(xdg_var); v && *v) return fs::path(v) / "kfab";
  return home() / fallback / "kfab";
}

fs::path data_dir() { return xdg("KFAB_DATA_DIR", "XDG_DATA_HOME", ".local/share"); }
fs::path cache_dir() { return xdg("KFAB_CACHE_DIR", "XDG_CACHE_HOME", ".cache"); }

fs::path self_dir() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : p.parent_path();
}

fs::path runner_path() {
  if (const char* v = std::getenv("KFAB_RUNNER"); v && *v) return v;
  return self_dir() / "kfab-runner";
}

fs::path python_worker_dir() {
  if (const char* v = std::getenv("KFAB_WORKER_PATH"); v && *v) return v;
  std::error_code ec;
  for (const fs::path& p : {self_dir() / "../python", fs::path(KFAB_SOURCE_INCLUDE_DIR) / "../python"})
    if (fs::exists(p / "kfab_worker/__main__.py", ec)) return fs::weakly_canonical(p, ec);
  return fs::path(KFAB_SOURCE_INCLUDE_DIR) / "../python";
}

std::string python_interpreter() {
  if (const char* v = std::getenv("KFAB_PYTHON"); v && *v) return v;
  std::error_code ec;
  const fs::path venv = fs::path(KFAB_SOURCE_INCLUDE_DIR) / "../.venv/bin/python";
  // Not canonical: the venv's python is a link whose own path is what selects the venv.
  if (fs::exists(venv, ec)) return venv.lexically_normal().string();
  return "python3";
}

fs::path abi_include_dir() {
  // An installed kfab keeps the header beside the binaries (../include); a build tree uses the source's.
  std::error_code ec;
  for (const fs::path& p : {self_dir() / "../include", fs::path(KFAB_SOURCE_INCLUDE_DIR)})
    if (!p.empty() && fs::exists(p / "kfab/candidate.h", ec)) return fs::weakly_canonical(p, ec);
  return KFAB_SOURCE_INCLUDE_DIR;
}

}  // namespace kfab
