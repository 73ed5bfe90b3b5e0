#include "eval/profile.h"

#include <stdlib.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "core/hash.h"
#include "core/paths.h"
#include "core/process.h"
#include "core/text.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::pair<std::string, std::string>>& profile_metrics() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {"gpu__time_duration.sum", "duration_ns"},
      {"dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram_throughput_pct"},
      {"sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm_throughput_pct"},
      {"sm__warps_active.avg.pct_of_peak_sustained_active", "achieved_occupancy_pct"},
      {"launch__registers_per_thread", "registers_per_thread"},
      {"launch__shared_mem_per_block_static", "static_shared_bytes_per_block"},
      {"launch__shared_mem_per_block_dynamic", "dynamic_shared_bytes_per_block"},
      {"l1tex__t_sector_hit_rate.pct", "l1_hit_rate_pct"},
      {"lts__t_sector_hit_rate.pct", "l2_hit_rate_pct"},
      {"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "stall_long_scoreboard"},
      {"smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio", "stall_short_scoreboard"},
      {"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "stall_barrier"},
      {"smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio", "stall_mio_throttle"},
      {"smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio", "stall_lg_throttle"},
      {"smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio", "stall_math_pipe_throttle"},
      {"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "stall_wait"},
      {"smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio", "stall_not_selected"},
      {"smsp__average_warps_issue_stalled_membar_per_issue_active.ratio", "stall_membar"},
  };
  return m;
}

namespace {

/// Splits one CSV line ("a","b,c","d") into fields.
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> f;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) {
      f.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  f.push_back(cur);
  return f;
}

/// "1,234.5" or "1234.5" -> 1234.5; nullopt for "n/a" and the like.
std::optional<double> number(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return std::nullopt;
  return v;
}

double to_ns(double v, const std::string& unit) {
  if (unit == "usecond" || unit == "us") return v * 1e3;
  if (unit == "msecond" || unit == "ms") return v * 1e6;
  if (unit == "second" || unit == "s") return v * 1e9;
  return v;
}

}  // namespace

Expected<json> parse_ncu_csv(const std::string& csv) {
  std::istringstream in(csv);
  std::string line;
  std::vector<std::string> header;
  std::map<std::string, std::string> names;
  for (const auto& [metric, name] : profile_metrics()) names[metric] = name;
  // kernel -> metric -> (sum, count); kernel -> launch ids
  std::map<std::string, std::map<std::string, std::pair<double, int>>> acc;
  std::map<std::string, std::set<std::string>> launches;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("==", 0) == 0 || line.empty()) continue;
    auto f = csv_fields(line);
    if (header.empty()) {
      if (std::find(f.begin(), f.end(), "Metric Name") != f.end()) header = f;
      continue;
    }
    if (f.size() != header.size()) continue;
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < f.size(); ++i) row[header[i]] = f[i];
    const std::string kernel = row["Kernel Name"];
    auto it = names.find(row["Metric Name"]);
    if (it == names.end()) continue;
    auto v = number(row["Metric Value"]);
    if (!v) continue;
    double value = *v;
    if (it->second == "duration_ns") value = to_ns(value, row["Metric Unit"]);
    auto& slot = acc[kernel][it->second];
    slot.first += value;
    slot.second += 1;
    launches[kernel].insert(row["ID"]);
  }
  if (header.empty()) return make_error("ncu printed no CSV table");
  if (acc.empty()) return make_error("ncu profiled no kernel of the candidate");
  json out = json::object();
  for (const auto& [kernel, metrics] : acc) {
    json k;
    std::vector<std::pair<double, std::string>> stalls;
    for (const auto& [name, sc] : metrics) {
      const double mean = sc.first / sc.second;
      k[name] = mean;
      if (name.rfind("stall_", 0) == 0) stalls.emplace_back(mean, name.substr(6));
    }
    std::sort(stalls.rbegin(), stalls.rend());
    json top = json::array();
    for (size_t i = 0; i < stalls.size() && i < 3; ++i) top.push_back({{"reason", stalls[i].second}, {"cycles_per_issue", stalls[i].first}});
    k["top_stalls"] = top;
    k["launches"] = launches[kernel].size();
    out[kernel] = k;
  }
  return out;
}

Expected<json> ncu_profile(const Task& task, const fs::path& artifact, const fs::path& reference, const std::string& target,
                           const ShapeBinding& shape,
                           uint64_t base_seed, double timeout_s) {
  std::string ncu = find_program("ncu");
  if (ncu.empty() && fs::exists("/usr/local/cuda/bin/ncu")) ncu = "/usr/local/cuda/bin/ncu";
  if (ncu.empty()) return make_error("ncu is not installed (it comes with the CUDA toolkit); the rest of the verdict stands");
  auto made = make_owned_temp_dir("kfab-ncu");
  if (!made) return make_error("cannot create a folder for ncu: " + made.error().message, made.error().hint);
  const fs::path dir = *made;
  const json req = {{"op", "run"},       {"task", task.manifest.string()}, {"candidate", artifact.string()},
                    {"reference", reference.string()},   {"target", target},               {"shape", shape},
                    {"base_seed", base_seed}, {"seed", 0},                 {"calls", 3}};
  (void)write_file_atomic(dir / "job.json", dump_json(req));
  std::string metrics;
  for (const auto& [m, _] : profile_metrics()) metrics += (metrics.empty() ? "" : ",") + m;
  auto r = run_command({ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--metrics", metrics,
                        "--launch-count", "30", "--log-file", (dir / "ncu.csv").string(), runner_path().string(), "--job",
                        (dir / "job.json").string()},
                       timeout_s, dir);
  auto csv = read_file(dir / "ncu.csv");
  std::error_code ec;
  const std::string output = r ? r->output : r.error().message;
  fs::remove_all(dir, ec);
  if (!r) return make_error("ncu did not start: " + r.error().message);
  if (r->timed_out) return make_error("ncu ran past " + std::to_string(static_cast<int>(timeout_s)) + " s");
  const std::string all = (csv ? *csv : "") + "\n" + output;
  if (all.find("ERR_NVGPUCTRPERM") != std::string::npos)
    return make_error("ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM); the rest of the verdict stands");
  // ncu passes on what the candidate printed: any bytes at all.
  if (!csv) return make_error("ncu wrote no results: " + printable(output, 2000));
  auto parsed = parse_ncu_csv(*csv);
  if (!parsed) return make_error(parsed.error().message + ": " + printable(output, 2000));
  return parsed;
}

}  // namespace kfab
