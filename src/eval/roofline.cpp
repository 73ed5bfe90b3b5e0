#include "eval/roofline.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "backends/target.h"
#include "core/hash.h"
#include "core/paths.h"
#include "runner/runner_client.h"

namespace kfab {

nlohmann::json MachinePeaks::to_json() const {
  return {{"device", device},
          {"copy_bandwidth_GBps", copy_Bps / 1e9},
          {"peak_bandwidth_GBps", bandwidth_Bps / 1e9},
          {"peak_gflops_f32", flops_per_s / 1e9},
          {"bound_margin", margin},
          {"reject_margin", reject_margin},
          {"bound_enforced", enforce},
          {"source", source},
          {"flops_source", flops_source},
          {"measured_again", measured_again}};
}

namespace {

/// Times the copy bandwidth is measured beside a time below the rejection limit; the best is kept.
constexpr int kRemeasureRuns = 3;
/// Figures no machine has (a damaged cache entry): measured again, never trusted.
constexpr double kMaxPlausibleBps = 1e15;
constexpr double kMaxPlausibleMhz = 1e5;
/// Where the kernel publishes the CPU's maximum clock (kHz); virtual machines often have none.
constexpr const char* kMaxFreqFile = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq";

bool plausible_bandwidth(double bps) { return std::isfinite(bps) && bps > 0.0 && bps < kMaxPlausibleBps; }

struct CpuFacts {
  std::string model;
  std::string cpuinfo;              ///< /proc/cpuinfo's text
  std::optional<double> max_khz;    ///< cpuinfo_max_freq, where the kernel has it
  int flops_per_cycle = 8;          ///< fp32 per core: 2 FMA pipes x lanes x 2
};

CpuFacts read_cpuinfo() {
  CpuFacts f;
  std::ifstream in("/proc/cpuinfo");
  std::stringstream all;
  all << in.rdbuf();
  f.cpuinfo = all.str();
  std::istringstream lines(f.cpuinfo);
  std::string line;
  std::string flags;
  while (std::getline(lines, line)) {
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (f.model.empty() && line.rfind("model name", 0) == 0) f.model = value();
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = " " + value() + " ";
  }
  std::ifstream maxf(kMaxFreqFile);
  if (double khz = 0.0; maxf >> khz) f.max_khz = khz;
  if (flags.find(" avx512f ") != std::string::npos) f.flops_per_cycle = 64;
  else if (flags.find(" fma ") != std::string::npos) f.flops_per_cycle = 32;
  else if (flags.find(" avx ") != std::string::npos) f.flops_per_cycle = 16;
  if (f.model.empty()) f.model = "unknown CPU";
  return f;
}

/// The cached figures of one CPU: the highest bandwidth and clock seen; zero where absent or damaged.
struct CpuCache {
  double bandwidth_Bps = 0.0;
  double mhz = 0.0;
};

CpuCache read_cpu_cache(const std::filesystem::path& file) {
  CpuCache c;
  const auto text = read_file(file);
  if (!text) return c;
  const auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object()) return c;
  // A damaged entry can hold a number too: one no machine has (zero, negative, not finite, or above
  // 1 PB/s, which would switch the bound off) is measured again.
  if (const auto bw = j.find("copy_bandwidth_bytes_per_s"); bw != j.end() && bw->is_number() && plausible_bandwidth(bw->get<double>()))
    c.bandwidth_Bps = bw->get<double>();
  if (const auto mhz = j.find("max_mhz"); mhz != j.end() && mhz->is_number()) {
    const double m = mhz->get<double>();
    if (std::isfinite(m) && m > 0.0 && m < kMaxPlausibleMhz) c.mhz = m;
  }
  return c;
}

/// One run of the runner's machine job; nullopt when it fails or answers a bandwidth no machine has.
std::optional<double> measure_copy(RunnerClient& runner) {
  JobReply r = runner.run({{"op", "machine"}});
  if (r.kind != JobReply::Kind::Ok || !r.body.value("ok", false)) return std::nullopt;
  const auto bw = r.body.find("copy_bandwidth_bytes_per_s");
  if (bw == r.body.end() || !bw->is_number() || !plausible_bandwidth(bw->get<double>())) return std::nullopt;
  return bw->get<double>();
}

}  // namespace

CpuClock max_cpu_clock(const std::string& cpuinfo, std::optional<double> cpuinfo_max_freq_khz, double seen_mhz) {
  CpuClock c;
  std::istringstream lines(cpuinfo);
  std::string line;
  double current = 0.0;
  while (std::getline(lines, line)) {
    if (line.rfind("cpu MHz", 0) != 0 || line.find(':') == std::string::npos) continue;
    try {
      current = std::max(current, std::stod(line.substr(line.find(':') + 1)));
    } catch (const std::exception&) {
      // A line without a number says nothing about the clock.
    }
  }
  if (current > 0.0) c = {current, "the highest \"cpu MHz\" in /proc/cpuinfo, no cpuinfo_max_freq"};
  if (seen_mhz > c.mhz) c = {seen_mhz, "the highest \"cpu MHz\" seen on this machine, no cpuinfo_max_freq"};
  if (cpuinfo_max_freq_khz && *cpuinfo_max_freq_khz / 1000.0 >= c.mhz && *cpuinfo_max_freq_khz > 0.0)
    c = {*cpuinfo_max_freq_khz / 1000.0, "cpuinfo_max_freq"};
  if (c.mhz == 0.0) c = {4000.0, "assumed: no clock published", true};
  return c;
}

std::optional<MachinePeaks> cpu_peaks(RunnerClient& runner, bool remeasure) {
  const CpuFacts facts = read_cpuinfo();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const auto file = cache_dir() / "machine" / ("cpu-" + hash_hex(facts.model + "/" + std::to_string(cores)).substr(0, 16) + ".json");
  const CpuCache cached = read_cpu_cache(file);
  const CpuClock clock = max_cpu_clock(facts.cpuinfo, facts.max_khz, cached.mhz);
  MachinePeaks p;
  p.device = facts.model;
  p.flops_per_s = static_cast<double>(cores) * clock.mhz * 1e6 * facts.flops_per_cycle;
  p.flops_source = fmt::format("{} cores x {:.0f} MHz ({}) x {} FLOP/cycle", cores, clock.mhz, clock.source, facts.flops_per_cycle);
  p.bandwidth_Bps = cached.bandwidth_Bps;
  p.source = fmt::format("the highest copy bandwidth measured here, cached in {}", file.string());
  if (cached.bandwidth_Bps > 0.0 && !remeasure && cached.mhz >= clock.mhz) {
    p.copy_Bps = p.bandwidth_Bps;
    return p;
  }
  // A busy machine slows a copy, never speeds it up: the highest figure of several runs is the truest.
  double best = 0.0;
  const int runs = cached.bandwidth_Bps > 0.0 && !remeasure ? 0 : (remeasure ? kRemeasureRuns : 1);
  for (int i = 0; i < runs; ++i)
    if (auto bw = measure_copy(runner)) best = std::max(best, *bw);
  if (best == 0.0 && cached.bandwidth_Bps == 0.0) return std::nullopt;
  if (runs > 0 && best == 0.0) {
    p.source += fmt::format("; measuring it again failed {} times", runs);
  } else if (runs > 0) {
    p.source = cached.bandwidth_Bps == 0.0
                   ? (runs > 1 ? fmt::format("the best of {} runs measured here", runs) : std::string("measured here"))
                   : fmt::format("the higher of {:.4g} GB/s cached in {} and {:.4g} GB/s, the best of {} runs measured again",
                                 cached.bandwidth_Bps / 1e9, file.string(), best / 1e9, runs);
  }
  p.bandwidth_Bps = std::max(cached.bandwidth_Bps, best);
  p.copy_Bps = p.bandwidth_Bps;
  // Another kfab may have written a higher figure meanwhile: the entry only ever goes up.
  const CpuCache now = read_cpu_cache(file);
  nlohmann::json j = {{"device", p.device},
                      {"cores", cores},
                      {"copy_bandwidth_bytes_per_s", std::max(now.bandwidth_Bps, p.bandwidth_Bps)},
                      {"max_mhz", std::max(now.mhz, clock.assumed ? 0.0 : clock.mhz)}};
  (void)write_file_atomic(file, j.dump(2));
  return p;
}

namespace {

/// Published peaks of the GPUs kfab knows (dense; the FLOP/s is bf16 tensor-core, the highest an f32
/// task can legitimately reach through reduced-precision tensor cores within its tolerance).
struct GpuSpec {
  const char* match;
  double bandwidth_Bps;
  double flops_per_s;
};
constexpr GpuSpec kGpus[] = {
    {"H200", 4.8e12, 989e12},
    {"H100 NVL", 3.9e12, 835e12},
    {"H100 PCIe", 2.0e12, 756e12},
    {"H100", 3.35e12, 989e12},
};

}  // namespace

std::optional<MachinePeaks> device_peaks(RunnerClient& runner, const std::string& target, bool remeasure) {
  const auto file = cache_dir() / "machine" / (target + "-device.json");
  nlohmann::json j;
  if (auto text = read_file(file)) j = nlohmann::json::parse(*text, nullptr, false);
  MachinePeaks p;
  // A damaged entry (not JSON, fields of the wrong type, a bandwidth no machine has) is measured again.
  const auto plausible = [](const nlohmann::json& e) {
    if (!e.is_object() || !e.contains("copy_bandwidth_bytes_per_s") || !e["copy_bandwidth_bytes_per_s"].is_number()) return false;
    if (e.contains("device") && !e["device"].is_string()) return false;
    if (e.contains("type") && !e["type"].is_string()) return false;
    return plausible_bandwidth(e["copy_bandwidth_bytes_per_s"].get<double>());
  };
  const bool have_cached = plausible(j);
  if (!have_cached || remeasure) {
    JobReply r = runner.run({{"op", "machine"}, {"target", target}});
    const bool ok = r.kind == JobReply::Kind::Ok && r.body.value("ok", false);
    if (!ok && !have_cached) return std::nullopt;
    if (ok) {
      nlohmann::json m = r.body;
      m.erase("ok");
      if (!plausible(m) && !have_cached) return std::nullopt;
      if (plausible(m)) {
        // A copy timed while the device was busy reads low: the entry keeps the highest figure.
        const double before = have_cached ? j["copy_bandwidth_bytes_per_s"].get<double>() : 0.0;
        const double measured = m["copy_bandwidth_bytes_per_s"].get<double>();
        m["copy_bandwidth_bytes_per_s"] = std::max(before, measured);
        p.source = have_cached ? fmt::format("the higher of {:.4g} GB/s cached in {} and {:.4g} GB/s measured again", before / 1e9,
                                             file.string(), measured / 1e9)
                               : "measured here";
        j = m;
        (void)write_file_atomic(file, j.dump(2));
      }
    }
  }
  if (p.source.empty()) p.source = fmt::format("the highest copy bandwidth measured here, cached in {}", file.string());
  p.device = j.value("device", "GPU");
  p.enforce = j.value("type", "gpu") == "gpu";
  p.copy_Bps = j.value("copy_bandwidth_bytes_per_s", 0.0);
  p.bandwidth_Bps = p.copy_Bps;
  for (const auto& g : kGpus) {
    if (p.device.find(g.match) == std::string::npos) continue;
    if (g.bandwidth_Bps > p.bandwidth_Bps) {
      p.bandwidth_Bps = g.bandwidth_Bps;
      p.source = fmt::format("the published peak of the {}; its copy: {:.4g} GB/s, {}", g.match, p.copy_Bps / 1e9, p.source);
    }
    p.flops_per_s = g.flops_per_s;
    p.flops_source = fmt::format("the published bf16 tensor-core peak of the {}", g.match);
    break;
  }
  p.margin = 1.25;
  p.reject_margin = 2.0;
  return p;
}

uint64_t last_level_cache_bytes() {
  uint64_t best = 0;
  for (int i = 0; i < 16; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string size;
    if (!(f >> size) || size.empty()) continue;
    uint64_t v = 0;
    size_t at = 0;
    while (at < size.size() && std::isdigit(static_cast<unsigned char>(size[at]))) v = v * 10 + static_cast<uint64_t>(size[at++] - '0');
    const char unit = at < size.size() ? size[at] : ' ';
    v *= unit == 'K' ? 1024ull : unit == 'M' ? 1024ull * 1024 : unit == 'G' ? 1024ull * 1024 * 1024 : 1ull;
    best = std::max(best, v);
  }
  return best;
}

std::optional<double> bound_ms(const Task& task, const ShapeBinding& shape, const MachinePeaks& peaks) {
  return bound_ms(task.flops(shape), task.bytes(shape), peaks);
}

std::optional<double> bound_ms(std::optional<double> flops, std::optional<double> bytes, const MachinePeaks& peaks) {
  if (!flops && !bytes) return std::nullopt;
  double s = 0.0;
  if (flops && peaks.flops_per_s > 0) s = std::max(s, *flops / peaks.flops_per_s);
  if (bytes && peaks.bandwidth_Bps > 0) s = std::max(s, *bytes / peaks.bandwidth_Bps);
  return s * 1e3;
}

namespace {

/// Keeps the higher of each peak: a measurement taken on a busy machine can only lower the bound.
void keep_higher(MachinePeaks& peaks, const MachinePeaks& again) {
  if (again.bandwidth_Bps >= peaks.bandwidth_Bps) {
    peaks.bandwidth_Bps = again.bandwidth_Bps;
    peaks.source = again.source;
  } else {
    peaks.source += fmt::format(", not the {:.4g} GB/s measured again beside this time", again.bandwidth_Bps / 1e9);
  }
  peaks.copy_Bps = std::max(peaks.copy_Bps, again.copy_Bps);
  if (again.flops_per_s > peaks.flops_per_s) {
    peaks.flops_per_s = again.flops_per_s;
    peaks.flops_source = again.flops_source;
  }
}

}  // namespace

RooflineDecision decide_roofline(double median_ms, std::optional<double> flops, std::optional<double> bytes, MachinePeaks& peaks,
                                 bool enforce, const std::function<std::optional<MachinePeaks>()>& remeasure,
                                 const std::string& no_bytes_bound) {
  RooflineDecision d;
  if (!no_bytes_bound.empty()) bytes.reset();
  const double margin = std::max(1.0, peaks.margin);
  const auto judge = [&] {
    d.bound_ms = bound_ms(flops, bytes, peaks);
    if (d.bound_ms && !(*d.bound_ms > 0.0)) d.bound_ms.reset();  // no peak for the cost it states
    d.reject_below_ms.reset();
    if (d.bound_ms) d.reject_below_ms = *d.bound_ms / (margin * std::max(1.0, peaks.reject_margin));
  };
  judge();
  if (!d.bound_ms) {
    if (!no_bytes_bound.empty()) d.compared_with = {{"median_ms", median_ms}, {"not_established", no_bytes_bound}};
    return d;
  }
  const auto impossible = [&] { return enforce && median_ms < *d.reject_below_ms; };
  if (impossible() && !peaks.measured_again && remeasure) {
    peaks.measured_again = true;
    if (auto again = remeasure()) keep_higher(peaks, *again);
    judge();
  }
  d.below_bound = median_ms < *d.bound_ms / margin;
  d.reject = impossible();

  nlohmann::json terms = nlohmann::json::array();
  std::string terms_text;
  const auto term = [&](const char* what, double amount, const char* unit, double peak, double scale, const char* peak_unit,
                        const std::string& source) {
    if (!(peak > 0.0)) return;
    const double ms = amount / peak * 1e3;
    terms.push_back({{"cost", what}, {"amount", amount}, {"peak", peak / scale}, {"peak_unit", peak_unit}, {"ms", ms}, {"source", source}});
    terms_text += fmt::format("{}{:.6g} {} / {:.4g} {} ({}) = {:.6g} ms", terms_text.empty() ? "" : " and ", amount, unit, peak / scale,
                              peak_unit, source, ms);
  };
  if (bytes) term("bytes", *bytes, "bytes", peaks.bandwidth_Bps, 1e9, "GB/s", peaks.source);
  if (flops) term("flops", *flops, "FLOP", peaks.flops_per_s, 1e9, "GFLOP/s", peaks.flops_source);
  d.compared_with = {{"median_ms", median_ms},
                     {"bound_ms", *d.bound_ms},
                     {"margin", margin},
                     {"reject_margin", peaks.reject_margin},
                     {"reject_below_ms", *d.reject_below_ms},
                     {"enforced", enforce},
                     {"measured_again", peaks.measured_again},
                     {"terms", terms},
                     {"decision", d.reject         ? "rejected"
                                  : d.below_bound ? "below the bound by more than the peaks' margin, not by the rejection's"
                                  : median_ms < *d.bound_ms ? "below the bound, within the peaks' margin"
                                                            : "at or above the bound"}};
  if (!no_bytes_bound.empty()) d.compared_with["not_established"] = no_bytes_bound;
  const std::string again = peaks.measured_again ? "; the peaks were measured again beside this time" : "";
  const std::string limit = fmt::format("the bound / ({} for peaks that read low x {}) = {:.6g} ms", margin, peaks.reject_margin,
                                        *d.reject_below_ms);
  if (d.reject)
    d.text = fmt::format("median time {:.6g} ms is below the roofline bound {:.6g} ms, and below {}: the work the task's cost "
                         "describes cannot be done that fast here; the bound is the larger of {}{}",
                         median_ms, *d.bound_ms, limit, terms_text, again);
  else
    d.text = fmt::format("median time {:.6g} ms; roofline bound {:.6g} ms, the larger of {}; {} below {}{}", median_ms, *d.bound_ms,
                         terms_text, enforce ? "rejected only" : "not enforced here, else rejected", limit, again);
  if (!no_bytes_bound.empty()) d.text += "; no bytes bound: " + no_bytes_bound;
  d.compared_with["text"] = d.text;
  return d;
}

std::optional<MachinePeaks> target_peaks(RunnerClient& runner, const std::string& target, bool remeasure) {
  const Target* t = find_target(target);
  return t == nullptr || t->on_host ? cpu_peaks(runner, remeasure) : device_peaks(runner, target, remeasure);
}

}  // namespace kfab
