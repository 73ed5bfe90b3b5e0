#include "core/discover.h"

#include <algorithm>
#include <cctype>

#include "core/hash.h"

namespace kfab {

namespace fs = std::filesystem;

static bool is_kernelbench_file(const fs::path& p) {
  if (p.extension() != ".py") return false;
  auto text = read_file(p);
  return text && text->find("class Model(") != std::string::npos &&
         text->find("def get_inputs") != std::string::npos;
}

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0, db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      // compare the runs as numbers: leading zeros off, then by length, then digit by digit
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      if (const int c = a.compare(is, ie - is, b, js, je - js); c != 0) return c < 0;
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
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
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return natural_less(a.path.string(), b.path.string()); });
  return out;
}

}  // namespace kfab
