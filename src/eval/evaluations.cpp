#include "eval/evaluations.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kfab {

namespace fs = std::filesystem;

Evaluations::Evaluations(const LoadedTask& task, std::string target, std::vector<DeviceEnv> pins, RemoteEvaluations* remote,
                         bool own)
    : task_(task), target_(std::move(target)), pins_(std::move(pins)), remote_(remote), own_(own) {
  kept_.resize(std::max<size_t>(1, pins_.size()));
}

Evaluations::~Evaluations() = default;

EvalOptions Evaluations::pinned(EvalOptions eo, size_t slot) const {
  if (slot < pins_.size())
    for (const auto& [k, v] : pins_[slot]) eo.runner.env[k] = v;
  return eo;
}

Expected<Verdict> Evaluations::on_slot(const fs::path& file, const EvalOptions& eo, size_t slot) {
  if (!own_) {
    Evaluator ev(task_, target_, pinned(eo, slot));
    return ev.evaluate(file);
  }
  auto& ev = kept_[slot];
  if (!ev) {
    ev = std::make_unique<Evaluator>(task_, target_, pinned(eo, slot));
    ev->keep_workers();
  }
  ev->set_options(pinned(eo, slot));
  return ev->evaluate(file);
}

Expected<Verdict> Evaluations::evaluate(const fs::path& file, const EvalOptions& eo) {
  if (remote_) return remote_->evaluate(file, eo, own_);
  return on_slot(file, eo, 0);
}

Expected<nlohmann::json> Evaluations::compare(const fs::path& a, const fs::path& b, const EvalOptions& eo) {
  if (remote_) return make_error("a queue's jobs are one candidate each: two are not timed interleaved there");
  Evaluator ev(task_, target_, pinned(eo, 0));
  return ev.compare(a, b);
}

Expected<void> Evaluations::evaluate_all(const std::vector<fs::path>& files, const EvalOptions& eo, const Done& done,
                                         const std::function<void(const std::string&)>& say) {
  if (!spreads()) {
    for (size_t i = 0; i < files.size(); ++i)
      if (auto ok = done(i, on_slot(files[i], eo, 0)); !ok) return ok;
    return {};
  }
  std::vector<std::optional<Expected<Verdict>>> got(files.size());
  if (say && !files.empty())
    say(fmt::format("evaluating {} candidate(s) on {}", files.size(),
                    remote_ ? remote_->describe() : fmt::format("devices {}", fmt::join(devices, ","))));
  if (remote_) {
    auto all = remote_->evaluate_all(files, eo, own_);
    if (!all) return Unexpected{all.error()};
    for (size_t i = 0; i < files.size(); ++i) got[i] = std::move((*all)[i]);
  } else {
    // an evaluator per device, each taking the next candidate as it finishes one
    std::atomic<size_t> next{0};
    std::mutex say_mu;
    auto work = [&](size_t slot) {
      for (size_t i = next++; i < files.size(); i = next++) {
        got[i] = on_slot(files[i], eo, slot);
        if (say && *got[i] && slot < devices.size()) {
          std::lock_guard<std::mutex> lock(say_mu);
          say(fmt::format("  {} on device {}: {}", files[i].filename().string(), devices[slot], disposition_name((*got[i])->disposition)));
        }
      }
    };
    std::vector<std::thread> threads;
    for (size_t slot = 1; slot < std::min(pins_.size(), files.size()); ++slot) threads.emplace_back(work, slot);
    work(0);
    for (auto& t : threads) t.join();
  }
  for (size_t i = 0; i < files.size(); ++i)
    if (auto ok = done(i, std::move(*got[i])); !ok) return ok;
  return {};
}

}  // namespace kfab
