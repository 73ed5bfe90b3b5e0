#include "backends/cpu_cpp/cpu_backend.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "core/hash.h"
#include "core/paths.h"
#include "core/process.h"

namespace kfab {

namespace fs = std::filesystem;

namespace {
constexpr double kCompileTimeoutS = 120.0;
constexpr size_t kMaxCompilerMessage = 16000;
}  // namespace

const std::vector<std::string>& CpuBackend::flags() {
  static const std::vector<std::string> f = {"-std=c++20", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"};
  return f;
}

CpuBackend::CpuBackend() {
  const char* cxx = std::getenv("CXX");
  compiler_ = cxx && *cxx ? cxx : "g++";
  if (auto r = run_command({compiler_, "--version"}, 10.0); r && r->status.ok()) {
    compiler_version_ = r->output.substr(0, r->output.find('\n'));
  }
}

std::string CpuBackend::describe() const {
  if (compiler_version_.empty()) return "no C++ compiler (" + compiler_ + " not found)";
  return compiler_version_;
}

BuildOutcome<BuildResult> CpuBackend::build(const fs::path& source) {
  const auto start = std::chrono::steady_clock::now();
  if (compiler_version_.empty()) return BuildFailure{"no C++ compiler: " + compiler_ + " is not on PATH (set CXX or install g++)"};
  auto text = read_file(source);
  if (!text) return BuildFailure{text.error().to_string()};
  const fs::path include = abi_include_dir();
  auto header = read_file(include / "kfab/candidate.h");
  std::string key_material = *text;
  key_material += '\0' + compiler_ + '\0' + compiler_version_ + '\0';
  for (const auto& f : flags()) key_material += f + ' ';
  if (header) key_material += *header;
  BuildResult r;
  r.key = hash_hex(key_material);
  const fs::path dir = cache_dir() / "cpu";
  r.artifact = dir / (r.key + ".so");
  std::error_code ec;
  if (fs::exists(r.artifact, ec)) {
    r.cached = true;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  fs::create_directories(dir, ec);
  if (ec) return BuildFailure{"cannot create the compile cache " + dir.string() + ": " + ec.message()};
  // Compiled to a private name, then renamed: concurrent builds of the same key never see half a file.
  const fs::path tmp = dir / (r.key + ".so.tmp." + std::to_string(::getpid()));
  std::vector<std::string> argv = {compiler_};
  argv.insert(argv.end(), flags().begin(), flags().end());
  argv.insert(argv.end(), {"-I" + include.string(), "-o", tmp.string(), fs::absolute(source).string()});
  auto run = run_command(argv, kCompileTimeoutS, source.parent_path().empty() ? fs::current_path() : fs::absolute(source).parent_path());
  if (!run) return BuildFailure{run.error().to_string()};
  if (run->timed_out || !run->status.ok()) {
    fs::remove(tmp, ec);
    std::string msg = run->output;
    if (msg.size() > kMaxCompilerMessage) msg = msg.substr(0, kMaxCompilerMessage) + "\n[... compiler output truncated]";
    if (run->timed_out) return BuildFailure{"the compiler ran past " + std::to_string(static_cast<int>(kCompileTimeoutS)) + " s\n" + msg, true};
    if (msg.empty()) msg = "the compiler " + run->status.describe();
    return BuildFailure{msg};
  }
  fs::rename(tmp, r.artifact, ec);
  if (ec) return BuildFailure{"cannot move the build into the cache: " + ec.message()};
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace kfab
