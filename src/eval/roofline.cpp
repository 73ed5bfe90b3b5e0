#include "eval/roofline.h"

#include <fstream>
#include <thread>

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
          {"bound_enforced", enforce},
          {"source", source}};
}

namespace {

struct CpuFacts {
  std::string model;
  double mhz = 0.0;
  int flops_per_cycle = 8;  // fp32 per core: 2 FMA pipes x lanes x 2
};

CpuFacts read_cpuinfo() {
  CpuFacts f;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::string flags;
  while (std::getline(in, line)) {
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (f.model.empty() && line.rfind("model name", 0) == 0) f.model = value();
    if (f.mhz == 0.0 && line.rfind("cpu MHz", 0) == 0) f.mhz = std::stod(value());
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = " " + value() + " ";
  }
  std::ifstream maxf("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0.0;
  if (maxf >> khz && khz / 1000.0 > f.mhz) f.mhz = khz / 1000.0;
  if (f.mhz == 0.0) f.mhz = 4000.0;
  if (flags.find(" avx512f ") != std::string::npos) f.flops_per_cycle = 64;
  else if (flags.find(" fma ") != std::string::npos) f.flops_per_cycle = 32;
  else if (flags.find(" avx ") != std::string::npos) f.flops_per_cycle = 16;
  if (f.model.empty()) f.model = "unknown CPU";
  return f;
}

}  // namespace

std::optional<MachinePeaks> cpu_peaks(RunnerClient& runner, bool remeasure) {
  const CpuFacts facts = read_cpuinfo();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  MachinePeaks p;
  p.device = facts.model;
  p.flops_per_s = static_cast<double>(cores) * facts.mhz * 1e6 * facts.flops_per_cycle;
  const auto file = cache_dir() / "machine" / ("cpu-" + hash_hex(facts.model + "/" + std::to_string(cores)).substr(0, 16) + ".json");
  double cached = 0.0;
  if (auto text = read_file(file)) {
    try {
      auto j = nlohmann::json::parse(*text);
      // A damaged entry can hold a number too: one no machine has (zero, negative, not finite, or
      // above 1 PB/s, which would switch the bound off) is measured again.
      const double bw = j.at("copy_bandwidth_bytes_per_s").get<double>();
      if (!(bw > 0.0 && bw < 1e15)) throw nlohmann::json::other_error::create(501, "implausible bandwidth", nullptr);
      cached = bw;
      p.bandwidth_Bps = cached;
      p.copy_Bps = cached;
      p.source = "cached " + file.string();
      if (!remeasure) return p;
    } catch (const nlohmann::json::exception&) {
      // A damaged cache entry is measured again.
    }
  }
  JobReply r = runner.run({{"op", "machine"}});
  if (r.kind != JobReply::Kind::Ok || !r.body.value("ok", false)) {
    if (cached > 0.0) return p;
    return std::nullopt;
  }
  p.bandwidth_Bps = std::max(cached, r.body.at("copy_bandwidth_bytes_per_s").get<double>());
  p.copy_Bps = p.bandwidth_Bps;
  p.source = cached > 0.0 ? "measured again" : "measured";
  nlohmann::json j = {{"device", p.device}, {"cores", cores}, {"copy_bandwidth_bytes_per_s", p.bandwidth_Bps}};
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
  if (auto text = read_file(file); text && !remeasure) {
    try {
      j = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception&) {
      j = nlohmann::json();
    }
  }
  MachinePeaks p;
  // A damaged entry (not JSON, fields of the wrong type, a bandwidth no machine has) is measured again.
  const auto plausible = [](const nlohmann::json& e) {
    if (!e.is_object() || !e.contains("copy_bandwidth_bytes_per_s") || !e["copy_bandwidth_bytes_per_s"].is_number()) return false;
    if (e.contains("device") && !e["device"].is_string()) return false;
    if (e.contains("type") && !e["type"].is_string()) return false;
    const double bw = e["copy_bandwidth_bytes_per_s"].get<double>();
    return bw > 0.0 && bw < 1e15;
  };
  if (!plausible(j)) {
    JobReply r = runner.run({{"op", "machine"}, {"target", target}});
    if (r.kind != JobReply::Kind::Ok || !r.body.value("ok", false)) return std::nullopt;
    j = r.body;
    j.erase("ok");
    (void)write_file_atomic(file, j.dump(2));
    p.source = "measured";
  } else {
    p.source = "cached " + file.string();
  }
  p.device = j.value("device", "GPU");
  p.enforce = j.value("type", "gpu") == "gpu";
  p.copy_Bps = j.value("copy_bandwidth_bytes_per_s", 0.0);
  p.bandwidth_Bps = p.copy_Bps;
  for (const auto& g : kGpus) {
    if (p.device.find(g.match) == std::string::npos) continue;
    p.bandwidth_Bps = std::max(p.bandwidth_Bps, g.bandwidth_Bps);
    p.flops_per_s = g.flops_per_s;
    break;
  }
  p.margin = 1.25;
  return p;
}

std::optional<double> bound_ms(const Task& task, const ShapeBinding& shape, const MachinePeaks& peaks) {
  return bound_ms(task.flops(shape), task.bytes(shape), peaks);
}

std::optional<double> bound_ms(std::optional<double> flops, std::optional<double> bytes, const MachinePeaks& peaks) {
  if (!flops && !bytes) return std::nullopt;
  double s = 0.0;
  if (flops && peaks.flops_per_s > 0) s = std::max(s, *flops / (peaks.flops_per_s * peaks.margin));
  if (bytes && peaks.bandwidth_Bps > 0) s = std::max(s, *bytes / (peaks.bandwidth_Bps * peaks.margin));
  return s * 1e3;
}

}  // namespace kfab
