#include "core/host_load.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kfab {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// A process's parent and its ticks (fields 4 and 14-17 of /proc/PID/stat; the name in field 2 may
/// hold spaces and parentheses, so the fields are read after its last ')').
bool read_stat(const std::string& pid, long& ppid, uint64_t& ticks) {
  std::ifstream f("/proc/" + pid + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream in(line.substr(close + 2));
  std::string state;
  in >> state >> ppid;
  std::string skip;
  for (int field = 5; field < 14; ++field) in >> skip;  // pgrp .. cmajflt
  uint64_t utime = 0, stime = 0;
  int64_t cutime = 0, cstime = 0;
  in >> utime >> stime >> cutime >> cstime;
  if (!in) return false;
  ticks = utime + stime + static_cast<uint64_t>(std::max<int64_t>(0, cutime) + std::max<int64_t>(0, cstime));
  return true;
}

}  // namespace

uint64_t own_tree_ticks() {
  std::map<long, std::vector<long>> children;
  std::map<long, uint64_t> ticks;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    long ppid = 0;
    uint64_t t = 0;
    if (!read_stat(name, ppid, t)) continue;  // gone meanwhile
    const long pid = std::stol(name);
    ticks[pid] = t;
    children[ppid].push_back(pid);
  }
  uint64_t sum = 0;
  std::vector<long> todo = {static_cast<long>(getpid())};
  while (!todo.empty()) {
    const long p = todo.back();
    todo.pop_back();
    if (auto it = ticks.find(p); it != ticks.end()) sum += it->second;
    if (auto it = children.find(p); it != children.end()) todo.insert(todo.end(), it->second.begin(), it->second.end());
  }
  return sum;
}

HostLoad::Sample HostLoad::sample() {
  Sample s;
  std::ifstream f("/proc/stat");
  std::string cpu;
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu") return s;
  s.busy = user + nice + system + irq + softirq + steal;
  s.total = s.busy + idle + iowait;
  s.ours = own_tree_ticks();
  s.at_s = now_s();
  s.ok = true;
  return s;
}

void HostLoad::begin() { first_ = sample(); }

LoadReading HostLoad::end() const {
  LoadReading r;
  const Sample last = sample();
  if (!first_.ok || !last.ok || last.total <= first_.total) return r;
  r.cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  r.window_s = last.at_s - first_.at_s;
  const double ticks_per_s = static_cast<double>(std::max(1L, sysconf(_SC_CLK_TCK)));
  // /proc/stat's ticks are summed over the cores: their share of the total, in cores
  r.busy_cores = static_cast<double>(last.busy - first_.busy) / static_cast<double>(last.total - first_.total) * r.cores;
  r.ours_cores = r.window_s > 0 ? static_cast<double>(last.ours - std::min(last.ours, first_.ours)) / ticks_per_s / r.window_s : 0.0;
  r.known = r.window_s > 0;
  return r;
}

nlohmann::json LoadReading::to_json() const {
  if (!known) return {{"known", false}};
  return {{"window_s", window_s}, {"cores", cores}, {"busy_cores", busy_cores}, {"ours_cores", ours_cores},
          {"others_cores", others_cores()}};
}

}  // namespace kfab
