#include "core/discover.h"

#include <algorithm>

#include "core/hash.h"

namespace kfab {

namespace fs = std::filesystem;

static bool is_kernelbench_file(const fs::path& p) {
  if (p.extension() != ".py") return false;
  auto text = read_file(p);
  return text && text->find("class Model(") != std::string::npos &&
         text->find("def get_inputs") != std::string::npos;
}

Expected<LoadedTask> TaskEntry::loaded() const {
  if (format == "kernelbench") return open_task(path);
  if (!task) return make_error(error.empty() ? path.string() + ": the task did not load" : error);
  return loaded_native(*task, path);
}

static void add(const fs::path& p, std::vector<TaskEntry>& out) {
  if (p.filename() == "task.toml") {
    TaskEntry e{p.parent_path(), "native", std::nullopt, {}};
    if (auto t = load_task(p)) e.task = std::move(*t);
    else e.error = t.error().to_string();
    out.push_back(std::move(e));
  } else if (is_kernelbench_file(p)) {
    out.push_back(TaskEntry{p, "kernelbench", std::nullopt, {}});
  }
}

std::vector<TaskEntry> discover_tasks(const fs::path& root) {
  std::vector<TaskEntry> out;
  std::error_code ec;
  if (fs::is_regular_file(root, ec)) {
    add(root, out);
  } else if (fs::is_directory(root, ec)) {
    if (fs::exists(root / "task.toml", ec)) {
      add(root / "task.toml", out);
      return out;
    }
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      // A task's candidates are not tasks.
      if (it->is_directory() && it->path().filename() == "candidates") {
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) add(it->path(), out);
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

}  // namespace kfab
