#include "dist/job_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/hash.h"
#include "core/text.h"
#include "dist/queue.h"

namespace kfab {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {
constexpr uintmax_t kMaxJobBytes = 64u << 20;
}  // namespace

Expected<json> task_files_payload(const fs::path& task_in) {
  // A native task is its folder; a KernelBench file is the file and its bundled candidates
  // (candidates/NAME/ beside it), relative to the folder it is in.
  fs::path task = fs::absolute(task_in).lexically_normal();
  if (task.filename().empty()) task = task.parent_path();
  const fs::path base = task.parent_path();
  std::vector<fs::path> files;
  std::error_code ec;
  auto add_tree = [&](const fs::path& dir) {
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_regular_file(ec)) files.push_back(it->path());
  };
  if (fs::is_directory(task, ec)) {
    add_tree(task);
  } else {
    files.push_back(task);
    if (const fs::path c = base / "candidates" / task.stem(); fs::is_directory(c, ec)) add_tree(c);
  }
  std::sort(files.begin(), files.end());  // the same payload, byte for byte, for the same files
  json f = json::object();
  uintmax_t total = 0;
  for (const auto& p : files) {
    total += fs::file_size(p, ec);
    if (total > kMaxJobBytes)
      return make_error(fmt::format("{}: its files pass {} MiB, more than a job carries", task_in.string(), kMaxJobBytes >> 20));
    auto bytes = read_file(p);
    if (!bytes) return Unexpected{bytes.error()};
    f[p.lexically_relative(base).string()] = base64_encode(*bytes);
  }
  return json{{"task", task.filename().string()}, {"files", f}};
}

Expected<fs::path> unpack_task_files(const json& payload, const fs::path& root) {
  std::error_code ec;
  fs::remove_all(root, ec);
  fs::create_directories(root, ec);
  if (ec) return make_error("cannot create " + root.string() + ": " + ec.message());
  if (!payload.contains("files") || !payload["files"].is_object() || !payload.contains("task"))
    return make_error("a job without its task's files");
  for (const auto& [rel, b64] : payload["files"].items()) {
    const fs::path p = fs::path(rel).lexically_normal();
    if (p.is_absolute() || p.empty() || *p.begin() == "..") return make_error("a job's file lies outside its folder: " + printable(rel, 200));
    auto bytes = base64_decode(b64.is_string() ? b64.get<std::string>() : std::string("?"));
    if (!bytes) return make_error("a job's file " + printable(rel, 200) + " is not base64");
    fs::create_directories((root / p).parent_path(), ec);
    if (auto ok = write_file_atomic(root / p, *bytes); !ok) return Unexpected{ok.error()};
  }
  const fs::path task = fs::path(payload["task"].get<std::string>()).lexically_normal();
  if (task.is_absolute() || task.empty() || *task.begin() == "..") return make_error("a job's task lies outside its folder");
  return root / task;
}

}  // namespace kfab
