#include "core/paths.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

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

namespace {

/// The start time of a process (clock ticks since boot, /proc/PID/stat's 22nd field); 0 when it is gone.
unsigned long long start_time(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 1));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i)
    if (i == 22) return std::strtoull(f.c_str(), nullptr, 10);
  return 0;
}

// The folders made by this process, for the signal handler: fixed slots, published with `ready`.
constexpr int kMaxOwned = 64;
constexpr size_t kMaxOwnedPath = 512;
struct OwnedDir {
  std::atomic<bool> ready{false};
  char path[kMaxOwnedPath] = {};
};
OwnedDir g_owned[kMaxOwned];
std::mutex g_owned_mutex;

void own(const fs::path& dir) {
  const std::string p = dir.string();
  if (p.size() >= kMaxOwnedPath) return;  // left to the sweep
  std::lock_guard lock(g_owned_mutex);
  OwnedDir* free_slot = nullptr;
  for (auto& slot : g_owned) {
    // A slot whose folder its owner has removed since is taken again.
    if (slot.ready.load() && ::access(slot.path, F_OK) != 0 && errno == ENOENT) slot.ready.store(false);
    if (!slot.ready.load() && free_slot == nullptr) free_slot = &slot;
  }
  if (free_slot == nullptr) return;
  std::memcpy(free_slot->path, p.c_str(), p.size() + 1);
  free_slot->ready.store(true, std::memory_order_release);
}

struct Dirent64 {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

/// rm -rf of `name` under `parent`, with system calls only (a signal handler may run it). Deeper than
/// a few dozen levels is left to the next sweep.
void remove_tree_at(int parent, const char* name, int depth) noexcept {
  if (::unlinkat(parent, name, 0) == 0 || errno == ENOENT) return;
  if (depth > 24) return;
  const int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  // A dying runner may still add an entry: the folder is listed again until it is empty.
  for (int pass = 0; pass < 3; ++pass) {
    ::lseek(fd, 0, SEEK_SET);
    alignas(8) char buf[2048];
    long n;
    while ((n = ::syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
      for (long at = 0; at < n;) {
        const auto* d = reinterpret_cast<const Dirent64*>(buf + at);
        at += d->reclen;
        const char* e = d->name;
        if (e[0] == '.' && (e[1] == 0 || (e[1] == '.' && e[2] == 0))) continue;
        remove_tree_at(fd, e, depth + 1);
      }
    }
    if (::unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno != ENOTEMPTY) break;
  }
  ::close(fd);
}

/// The owner of a folder named PREFIX-PID.START-XXXXXX: {pid, start}; {0, 0} for any other name.
std::pair<long, unsigned long long> owner_of(const std::string& name) {
  constexpr size_t kSuffix = 7;  // "-XXXXXX"
  if (name.rfind("kfab-", 0) != 0 || name.size() < 5 + kSuffix + 4 || name[name.size() - kSuffix] != '-') return {0, 0};
  const std::string stem = name.substr(0, name.size() - kSuffix);
  const auto dash = stem.rfind('-');
  const auto dot = stem.rfind('.');
  if (dash == std::string::npos || dot == std::string::npos || dot < dash) return {0, 0};
  const std::string pid = stem.substr(dash + 1, dot - dash - 1), start = stem.substr(dot + 1);
  auto digits = [](const std::string& s) { return !s.empty() && s.size() < 20 && s.find_first_not_of("0123456789") == std::string::npos; };
  if (!digits(pid) || !digits(start)) return {0, 0};
  return {std::strtol(pid.c_str(), nullptr, 10), std::strtoull(start.c_str(), nullptr, 10)};
}

}  // namespace

Expected<fs::path> make_owned_temp_dir(std::string_view prefix) {
  static const std::string owner = std::to_string(::getpid()) + "." + std::to_string(start_time(::getpid()));
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);
  if (ec) return make_error("no temporary folder: " + ec.message(), "set TMPDIR to a folder kfab may write");
  std::string tmpl = (tmp / (std::string(prefix) + "-" + owner + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    return make_error("cannot create a folder in " + tmp.string() + ": " + std::strerror(errno), "set TMPDIR to a folder kfab may write");
  own(tmpl);
  return fs::path(tmpl);
}

void remove_owned_temp_dirs() noexcept {
  for (auto& slot : g_owned)
    if (slot.ready.load(std::memory_order_acquire)) remove_tree_at(AT_FDCWD, slot.path, 0);
}

int sweep_orphaned_temp_dirs() {
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);
  if (ec) return 0;
  int removed = 0;
  for (fs::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    const auto [pid, start] = owner_of(it->path().filename().string());
    if (pid <= 0 || start_time(pid) == start) continue;
    std::error_code rm;
    if (!it->is_directory(rm) || it->is_symlink(rm)) continue;
    fs::remove_all(it->path(), rm);
    removed += rm ? 0 : 1;
  }
  return removed;
}

}  // namespace kfab
