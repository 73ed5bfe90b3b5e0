#include <algorithm>

#include <fmt/format.h>

#include "backends/backend.h"
#include "backends/target.h"

namespace kfab {

#define KFAB_TARGET(name) const Target& name##_target();
#include "backends/targets.def"
#undef KFAB_TARGET

const std::vector<const Target*>& targets() {
  static const std::vector<const Target*> all = {
#define KFAB_TARGET(name) &name##_target(),
#include "backends/targets.def"
#undef KFAB_TARGET
  };
  return all;
}

const Target* find_target(std::string_view name) {
  for (const Target* t : targets())
    if (t->name == name) return t;
  return nullptr;
}

std::string target_names() {
  std::string out;
  for (const Target* t : targets()) out += (out.empty() ? "" : ", ") + std::string(t->name);
  return out;
}

const Target* target_of_file(const std::filesystem::path& file) {
  const std::string name = file.filename().string();
  const Target* best = nullptr;
  size_t best_len = 0;
  for (const Target* t : targets())
    for (const std::string& s : t->suffixes)
      if (s.size() > best_len && name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        best = t;
        best_len = s.size();
      }
  return best;
}

namespace {
const Target& pick_default(bool torch_only) {
  const Target* host = nullptr;
  for (const Target* t : targets()) {
    if (torch_only && t->torch_device.empty()) continue;
    if (t->gpu && t->make_backend()->probe() > 0) return *t;
    if (t->on_host && host == nullptr) host = t;
  }
  return host != nullptr ? *host : *targets().front();
}
}  // namespace

const Target& host_target() {
  for (const Target* t : targets())
    if (t->on_host) return *t;
  return *targets().front();
}

const Target& default_target() { return pick_default(false); }
const Target& default_torch_target() { return pick_default(true); }

std::vector<std::unique_ptr<Backend>> make_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  for (const Target* t : targets()) v.push_back(t->make_backend());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a->probe() > b->probe(); });
  return v;
}

std::unique_ptr<Backend> make_backend(std::string_view target) {
  const Target* t = find_target(target);
  return t != nullptr ? t->make_backend() : nullptr;
}

Expected<std::vector<int>> spread_devices(const Backend& backend, std::vector<int> given) {
  const int devices = backend.device_count();
  if (given.empty() && devices > 1)
    for (int d = 0; d < devices; ++d) given.push_back(d);
  for (int d : given)
    if (d < 0)
      return make_error(fmt::format("device {}: devices are counted from 0", d), "--devices 0,1");
    else if (devices > 0 && d >= devices)
      return make_error(fmt::format("device {}: this host has {} GPU{} (0 to {})", d, devices, devices == 1 ? "" : "s", devices - 1),
                        "--devices takes indices as nvidia-smi counts them, comma-separated: --devices 0,1");
  return given;
}

Expected<std::vector<DeviceEnv>> device_pins(const Target& target, const std::vector<int>& devices) {
  std::vector<DeviceEnv> pins;
  for (int d : devices) {
    if (target.pin == nullptr) {
      pins.emplace_back();
      continue;
    }
    auto env = target.pin(d);
    if (!env) return Unexpected{env.error()};
    pins.push_back(std::move(*env));
  }
  return pins;
}

}  // namespace kfab
