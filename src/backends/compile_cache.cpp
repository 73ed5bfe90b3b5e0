#include "backends/compile_cache.h"

#include <atomic>
#include <elf.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "core/hash.h"
#include "core/paths.h"
#include "core/process.h"
#include "core/text.h"

namespace kfab {

namespace fs = std::filesystem;

namespace {

/// Whether a cached artifact is a whole 64-bit ELF file: its header, program headers and section
/// headers (which the linker writes last) lie within the file. A truncated write or a damaged disk
/// fails this, and the candidate is built again rather than blamed for a load failure.
bool whole_elf(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  Elf64_Ehdr h{};
  if (!in.read(reinterpret_cast<char*>(&h), sizeof h)) return false;
  if (std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0 || h.e_ident[EI_CLASS] != ELFCLASS64) return false;
  std::error_code ec;
  const uint64_t size = fs::file_size(p, ec);
  if (ec) return false;
  return h.e_phoff + uint64_t{h.e_phnum} * h.e_phentsize <= size && h.e_shoff + uint64_t{h.e_shnum} * h.e_shentsize <= size;
}
constexpr size_t kMaxCompilerMessage = 16000;

/// Bytes an unprivileged process may still write on the file system holding `p`.
uint64_t free_bytes(const fs::path& p) {
  struct statvfs st {};
  if (::statvfs(p.c_str(), &st) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

/// A failed build that a full disk explains: the compiler or linker said so, or the cache's file
/// system (or the temporary folder's) has almost nothing left.
BuildFailure failure_or_no_space(const fs::path& dir, std::string msg) {
  constexpr uint64_t kLow = 4u << 20;
  const fs::path tmp = fs::temp_directory_path();
  const bool said = msg.find("No space left on device") != std::string::npos;
  if (said || free_bytes(dir) < kLow || free_bytes(tmp) < kLow) {
    BuildFailure f{fmt::format("no space left on the disk under the compile cache ({}, {} KiB free) or the temporary "
                               "folder ({}, {} KiB free): the source was not judged\n{}",
                               dir.string(), free_bytes(dir) / 1024, tmp.string(), free_bytes(tmp) / 1024, msg)};
    f.no_space = true;
    return f;
  }
  return BuildFailure{std::move(msg)};
}
}

const std::string& system_cxx() {
  static const std::string cxx = [] {
    const char* v = std::getenv("CXX");
    return std::string(v && *v ? v : "g++");
  }();
  return cxx;
}

const std::string& system_cxx_version() {
  static const std::string version = [] {
    auto r = run_command({system_cxx(), "--version"}, 10.0);
    return r && r->status.ok() ? r->output.substr(0, r->output.find('\n')) : std::string();
  }();
  return version;
}

namespace {
std::vector<std::string> compile_argv(const CompileSpec& spec, const fs::path& include, const std::string& source, const std::string& output) {
  std::vector<std::string> argv = {spec.compiler};
  argv.insert(argv.end(), spec.flags.begin(), spec.flags.end());
  argv.insert(argv.end(), {"-I" + include.string(), "-o", output, source});
  argv.insert(argv.end(), spec.link_flags.begin(), spec.link_flags.end());
  return argv;
}
}  // namespace

namespace {

// The name in a line `#include "name"`, or empty.
std::string quoted_include(std::string_view line) {
  auto skip = [&] {
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  };
  skip();
  if (line.empty() || line.front() != '#') return {};
  line.remove_prefix(1);
  skip();
  if (line.substr(0, 7) != "include") return {};
  line.remove_prefix(7);
  skip();
  if (line.empty() || line.front() != '"') return {};
  line.remove_prefix(1);
  const size_t end = line.find('"');
  return end == std::string_view::npos ? std::string() : std::string(line.substr(0, end));
}

// The files a source includes by a quoted name, found beside the file that includes them or in kfab's
// include folder (kfab/candidate.h, kfab/templates/...), and theirs in turn (at most 256 files): each one's
// path and text, for the cache key. A candidate's own header changed without its source (a user's edit, a
// test of a template header) then builds again rather than loading the old build. Headers found through
// other -I folders (CUDA's, CUTLASS's: versioned by their folder, which is in the flags) and <...> ones are
// not read.
std::string included_text(const std::string& text, const fs::path& dir, const fs::path& include) {
  std::string out;
  std::vector<std::pair<std::string, fs::path>> todo{{text, dir}};
  std::vector<fs::path> seen;
  while (!todo.empty() && seen.size() < 256) {
    const auto [body, from] = std::move(todo.back());
    todo.pop_back();
    for (const std::string& line : split(body, '\n')) {
      const std::string name = quoted_include(line);
      if (name.empty()) continue;
      std::error_code ec;
      for (const fs::path& base : {from, include}) {
        const fs::path f = fs::weakly_canonical(base / name, ec);
        if (ec || !fs::is_regular_file(f, ec)) continue;
        if (std::find(seen.begin(), seen.end(), f) == seen.end()) {
          seen.push_back(f);
          // a regular file of at most 16 MiB (a candidate naming /proc/kcore is the compiler's to refuse)
          const auto size = fs::file_size(f, ec);
          if (ec || size > (16u << 20)) {
            out += '\0' + f.string() + "\0not read";
            break;
          }
          auto t = read_file(f);
          out += '\0' + f.string() + '\0' + (t ? *t : std::string("unreadable"));
          if (t) todo.emplace_back(std::move(*t), f.parent_path());
        }
        break;  // the first folder that has it, as the compiler looks
      }
    }
  }
  return out;
}

}  // namespace

std::string compile_command(const CompileSpec& spec, const std::string& source, const std::string& output) {
  std::string line;
  for (const auto& a : compile_argv(spec, abi_include_dir(), source, output)) line += (line.empty() ? "" : " ") + a;
  return line;
}

BuildOutcome<BuildResult> compile_cached(const CompileSpec& spec, const fs::path& source) {
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  auto text = read_file(source);
  if (!text) return BuildFailure{text.error().to_string()};
  const fs::path include = abi_include_dir();
  std::string key_material = *text + '\0' + spec.compiler + '\0' + spec.compiler_version + '\0';
  for (const auto& f : spec.flags) key_material += f + ' ';
  for (const auto& f : spec.link_flags) key_material += f + ' ';
  if (auto header = read_file(include / "kfab/candidate.h")) key_material += *header;
  key_material += included_text(*text, fs::absolute(source).parent_path(), include);
  BuildResult r;
  r.key = hash_hex(key_material);
  const fs::path dir = cache_dir() / spec.kind;
  r.artifact = dir / (r.key + ".so");
  std::error_code ec;
  if (fs::exists(r.artifact, ec)) {
    if (whole_elf(r.artifact)) {
      r.cached = true;
      r.seconds = seconds();
      return r;
    }
    fs::remove(r.artifact, ec);  // damaged: built again below
  }
  fs::create_directories(dir, ec);
  if (ec) return failure_or_no_space(dir.parent_path(), "cannot create the compile cache " + dir.string() + ": " + ec.message());
  // One name per build, also where threads of one kfab build the same source at once (each device's
  // evaluator builds the task's reference: `--devices`).
  static std::atomic<unsigned> builds{0};
  const fs::path tmp = dir / (r.key + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(builds++) + ".so");
  const std::vector<std::string> argv = compile_argv(spec, include, fs::absolute(source).string(), tmp.string());
  auto run = run_command(argv, spec.timeout_s, fs::absolute(source).parent_path());
  if (!run) return BuildFailure{run.error().to_string()};
  if (run->timed_out || !run->status.ok()) {
    fs::remove(tmp, ec);
    // The compiler quotes the source, whatever bytes it holds: its message is kept as valid UTF-8.
    std::string msg = printable(run->output, kMaxCompilerMessage);
    if (run->timed_out)
      return BuildFailure{"the compiler ran past " + std::to_string(static_cast<int>(spec.timeout_s)) + " s\n" + msg, true};
    if (msg.empty()) msg = "the compiler " + run->status.describe();
    return failure_or_no_space(dir, msg);
  }
  fs::rename(tmp, r.artifact, ec);
  if (ec) return failure_or_no_space(dir, "cannot move the build into the cache: " + ec.message());
  r.seconds = seconds();
  return r;
}

}  // namespace kfab
