#include "dist/remote_eval.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "core/hash.h"
#include "core/paths.h"
#include "core/text.h"
#include "dist/job_files.h"

namespace kfab {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// The protocol's plain fields under their JSON names, one list for both directions: `f(name, field)`
/// for each. `forbid`, `atol` and `rtol` travel too, but may be absent or of another kind.
template <typename Options, typename F>
void protocol_fields(Options& eo, F&& f) {
  // what is verified, how it is timed, then what only KernelBench-format tasks use
  f("seeds", eo.seeds), f("base_seed", eo.base_seed), f("heldout", eo.heldout);
  f("time", eo.time), f("min_calls", eo.min_calls), f("min_time_s", eo.min_time_s), f("max_calls", eo.max_calls);
  f("max_time_s", eo.max_time_s), f("warmup", eo.warmup), f("timeout_s", eo.runner.timeout_s), f("profile", eo.profile);
  f("dtype", eo.dtype), f("compile_baseline", eo.compile_baseline), f("end_to_end", eo.end_to_end);
  f("compile_mode", eo.compile_mode), f("fresh_baselines", eo.fresh_baselines);
}

std::optional<double> number_or_none(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? std::optional<double>(j[key].get<double>()) : std::nullopt;
}

}  // namespace

json eval_options_to_json(const EvalOptions& eo) {
  json j = json::object();
  protocol_fields(eo, [&](const char* key, const auto& field) { j[key] = field; });
  j["forbid"] = eo.forbid;
  if (eo.atol) j["atol"] = *eo.atol;
  if (eo.rtol) j["rtol"] = *eo.rtol;
  return j;
}

EvalOptions eval_options_from_json(const json& j, EvalOptions eo) {
  if (!j.is_object()) return eo;
  protocol_fields(eo, [&](const char* key, auto& field) { field = j.value(key, field); });
  if (j.contains("forbid") && j["forbid"].is_array()) eo.forbid = j["forbid"].get<std::vector<std::string>>();
  eo.atol = number_or_none(j, "atol");
  eo.rtol = number_or_none(j, "rtol");
  return eo;
}

Expected<std::unique_ptr<QueueEvaluations>> QueueEvaluations::open(const QueueOptions& q, const fs::path& task, std::string target,
                                                                     std::function<void(const std::string&)> say) {
  auto queue = JobQueue::open(q);
  if (!queue) return Unexpected{queue.error()};
  auto files = task_files_payload(task);
  if (!files) return Unexpected{files.error()};
  std::unique_ptr<QueueEvaluations> r(new QueueEvaluations(q, std::move(*queue)));
  r->files_ = std::move(*files);
  r->target_ = std::move(target);
  r->say_ = std::move(say);
  return r;
}

std::string QueueEvaluations::describe() const { return q_.url + ", queue " + q_.name; }

Expected<std::string> QueueEvaluations::send(const fs::path& candidate, const EvalOptions& eo, bool own) {
  auto source = read_file(candidate);
  if (!source) return Unexpected{source.error()};
  const json protocol = eval_options_to_json(eo);
  // the run, then what decides the verdict: the task's files, the target, the source, the protocol
  const std::string job = run_ + "/eval-" +
                          hash_hex(files_.dump() + '\0' + target_ + '\0' + *source + '\0' + protocol.dump()).substr(0, 24);
  local_[job] = candidate;
  if (sent_.count(job)) return job;
  auto had = queue_.result(job);
  if (!had) return Unexpected{had.error()};
  if (had->is_null()) {
    json payload = files_;
    payload["kind"] = "eval";
    payload["target"] = target_;
    payload["candidate"] = {{"name", candidate.filename().string()}, {"source", base64_encode(*source)}};
    payload["eval"] = protocol;
    payload["own"] = own;
    if (auto added = queue_.submit(job, payload); !added) return Unexpected{added.error()};
  }
  sent_.insert(job);
  return job;
}

Expected<std::vector<Expected<Verdict>>> QueueEvaluations::wait(const std::vector<std::string>& jobs) {
  std::vector<std::optional<json>> got(jobs.size());
  size_t left = jobs.size();
  auto last_word = std::chrono::steady_clock::now();
  if (!told_ && say_) {
    say_(fmt::format("evaluations go to {}: `kfab worker --redis {} --queue {}` on the GPU hosts takes them", describe(), q_.url, q_.name));
    told_ = true;
  }
  while (left > 0) {
    std::vector<std::string> waiting;
    std::vector<size_t> at;
    for (size_t i = 0; i < jobs.size(); ++i)
      if (!got[i]) {
        waiting.push_back(jobs[i]);
        at.push_back(i);
      }
    auto r = queue_.results(waiting);
    if (!r) {
      // The server restarted or the network dropped: the jobs and results it keeps are found again.
      if (say_) say_("lost the queue (" + r.error().message + "); trying again in 5 s");
      std::this_thread::sleep_for(std::chrono::seconds(5));
      if (auto q = JobQueue::open(q_)) queue_ = std::move(*q);
      continue;
    }
    bool any = false;
    for (size_t k = 0; k < r->size(); ++k)
      if (!(*r)[k].is_null()) {
        got[at[k]] = (*r)[k];
        --left;
        any = true;
      }
    if (left > 0 && say_ && std::chrono::steady_clock::now() - last_word > std::chrono::seconds(60)) {
      auto c = queue_.counts();
      say_(fmt::format("{} of {} evaluation(s) still with the workers{}", left, jobs.size(),
                       c ? fmt::format(" (queue {}: {} waiting, {} held)", q_.name, (*c).value("waiting", 0), (*c).value("held", 0)) : ""));
      last_word = std::chrono::steady_clock::now();
    }
    if (!any && left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::vector<Expected<Verdict>> out;
  for (size_t i = 0; i < jobs.size(); ++i) {
    // a result is whatever was written under its key: anything but an object is said, not trusted
    const json res = got[i]->is_object() ? *got[i] : json{{"error", "a result that is not a JSON object"}};
    try {
      const std::string who = res.value("worker", std::string("?"));
      if (res.contains("verdict") && res["verdict"].is_object()) {
        Verdict v = Verdict::from_json(res["verdict"]);
        if (auto it = local_.find(jobs[i]); it != local_.end()) v.candidate = it->second.string();
        v.extra["worker"] = who;
        if (res.contains("host")) v.extra["host"] = res["host"];
        if (res.contains("device")) v.extra["device"] = res["device"];
        out.emplace_back(std::move(v));
      } else {
        out.emplace_back(make_error(fmt::format("worker {} could not evaluate job {}: {}", who, jobs[i],
                                                printable(res.value("error", std::string("no verdict")), 600)),
                                    res.value("hint", std::string())));
      }
    } catch (const json::exception& ex) {
      out.emplace_back(make_error(fmt::format("job {}: a result kfab cannot read ({})", jobs[i], printable(ex.what(), 200))));
    }
  }
  return out;
}

}  // namespace kfab
