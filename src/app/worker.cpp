#include "app/worker.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "backends/target.h"
#include "core/discover.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/stamp.h"
#include "core/text.h"
#include "dist/job_files.h"
#include "dist/remote_eval.h"
#include "eval/evaluator.h"
#include "eval/torch_harness.h"

namespace kfab {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "host";
  return buf;
}

/// A job id as a folder name.
std::string folder_of(const std::string& job) {
  std::string s;
  for (char c : job) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return s.empty() ? std::string("job") : s;
}

/// Renews a held job's lease from its own connection until stopped.
class Heartbeat {
 public:
  Heartbeat(const QueueOptions& q, std::string consumer, ClaimedJob job) {
    thread_ = std::thread([this, q, consumer = std::move(consumer), job = std::move(job)] {
      auto queue = JobQueue::open(q);
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        cv_.wait_for(lock, std::chrono::duration<double>(q.lease_s / 3.0), [this] { return stop_; });
        if (stop_ || !queue) break;
        (void)queue->renew(consumer, job);
      }
    });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};


/// The evaluator an eval job's worker keeps from one job to the next, for kfab's own candidates of one
/// task (its files' hash) and target: their processes warm, as the tuner keeps them at home.
using KeptEvaluators = std::map<std::string, std::unique_ptr<Evaluator>>;

/// An optimize run's job: one candidate's verdict, or what kept this worker from one.
json eval_job(const json& payload, const std::string& job, const WorkerOptions& opt, KeptEvaluators& kept) {
  const std::string files_hash = hash_hex(payload.value("files", json::object()).dump()).substr(0, 16);
  const std::string target = payload.value("target", std::string());
  const fs::path task_root = opt.work_dir / "tasks" / files_hash;
  fs::path task;
  if (fs::exists(task_root / ".complete")) {
    const fs::path rel = fs::path(payload.value("task", std::string())).lexically_normal();
    if (rel.is_absolute() || rel.empty() || *rel.begin() == "..") return {{"error", "a job's task lies outside its folder"}};
    task = task_root / rel;
  } else {
    auto t = unpack_task_files(payload, task_root);
    if (!t) return {{"error", t.error().message}};
    (void)write_file_atomic(task_root / ".complete", "");
    task = *t;
  }
  const json& cand = payload.value("candidate", json::object());
  const std::string name = fs::path(cand.value("name", std::string("candidate"))).filename().string();
  auto source = base64_decode(cand.value("source", std::string()));
  if (!source || name.empty() || name == "." || name == "..") return {{"error", "a job without a readable candidate"}};
  const fs::path dir = opt.work_dir / "jobs" / folder_of(job);
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path file = dir / name;
  if (auto ok = write_file_atomic(file, *source); !ok) return {{"error", ok.error().message}};
  EvalOptions eo = eval_options_from_json(payload.value("eval", json::object()), opt.eval);
  eo.progress = nullptr;
  Expected<Verdict> v = make_error("not evaluated");
  if (payload.value("own", false)) {
    // One task's evaluator at a time: a kept one holds its problem's processes and device memory.
    const std::string key = files_hash + "/" + target;
    if (!kept.count(key)) kept.clear();
    std::unique_ptr<Evaluator>& ev = kept[key];
    if (!ev) {
      auto loaded = open_task(task);
      if (!loaded) return {{"error", loaded.error().message}, {"hint", loaded.error().hint}};
      ev = std::make_unique<Evaluator>(std::move(*loaded), target, eo);
      ev->keep_workers();
    }
    ev->set_options(eo);
    v = ev->evaluate(file);
  } else {
    // a candidate from elsewhere (an LLM's): processes of its own, as at home
    auto loaded = open_task(task);
    if (!loaded) return {{"error", loaded.error().message}, {"hint", loaded.error().hint}};
    Evaluator ev(std::move(*loaded), target, eo);
    v = ev.evaluate(file);
  }
  fs::remove_all(dir, ec);
  if (!v) return {{"error", v.error().message}, {"hint", v.error().hint}};
  return {{"verdict", v->to_json()}};
}

}  // namespace

Expected<json> task_job_payload(const TaskEntry& e, const json& one) {
  auto p = task_files_payload(e.path);
  if (!p) return p;
  (*p)["bench"] = one;
  return p;
}

Expected<void> run_worker(const WorkerOptions& opt_in) {
  WorkerOptions opt = opt_in;
  if (opt.device >= 0) {
    // Pinned before anything of this process or its children touches a device: every target that
    // pins its processes to a device is pinned to this one.
    for (const Target* t : targets()) {
      if (t->pin == nullptr) continue;
      auto env = t->pin(opt.device);
      if (!env) return Unexpected{env.error()};
      for (const auto& [k, v] : *env) ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  // Workers of a queue may share a GPU: a job waits (within its deadline) for memory another holds
  // rather than being refused for it.
  ::setenv("KFAB_ROOM_WAIT_S", "900", 0);
  if (opt.name.empty()) opt.name = host_name() + "-" + std::to_string(::getpid()) + (opt.device >= 0 ? "-g" + std::to_string(opt.device) : "");
  if (opt.work_dir.empty()) opt.work_dir = cache_dir() / "worker" / folder_of(opt.name);
  auto queue = JobQueue::open(opt.queue);
  if (!queue) return Unexpected{queue.error()};
  if (auto joined = queue->join(opt.name); !joined) return Unexpected{joined.error()};
  auto say = [&](const std::string& s) {
    if (opt.say) opt.say(s);
  };
  say(fmt::format("worker {} on {} (queue {}, lease {:.0f} s){}", opt.name, opt.queue.url, opt.queue.name, opt.queue.lease_s,
                  opt.device >= 0 ? fmt::format(", GPU {}", opt.device) : std::string()));
  std::unique_ptr<TorchInspector> tracer;  // warm from one job to the next
  KeptEvaluators kept;                     // eval jobs' evaluators, warm likewise
  // A lost connection (the server restarted, the network dropped) is found again: the job held then
  // is taken over by whoever holds it when its lease runs out.
  auto reconnect = [&](const Error& why) {
    say("lost the queue (" + why.message + "); trying again every 5 s");
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      if (auto q = JobQueue::open(opt.queue)) {
        queue = std::move(q);
        (void)queue->join(opt.name);
        say("the queue is back");
        return;
      }
    }
  };
  for (int done = 0; opt.max_jobs <= 0 || done < opt.max_jobs;) {
    auto got = queue->claim(opt.name, 5.0);
    if (!got) {
      reconnect(got.error());
      continue;
    }
    if (!*got) continue;
    const ClaimedJob job = std::move(**got);
    ++done;
    Heartbeat beat(opt.queue, opt.name, job);
    if (auto had = queue->result(job.job); had && !had->is_null()) {
      say("job " + job.job + ": done already (delivered again)");
      if (auto ok = queue->complete(job, *had); !ok) reconnect(ok.error());
      continue;
    }
    say("job " + job.job + (job.taken_over ? ": taken over from a worker whose lease ran out" : ""));
    const auto t0 = std::chrono::steady_clock::now();
    json result = {{"worker", opt.name}, {"host", host_name()}};
    if (opt.device >= 0) result["device"] = opt.device;
    const fs::path dir = opt.work_dir / folder_of(job.job);
    if (job.payload.value("kind", std::string("bench")) == "eval") {
      result.update(eval_job(job.payload, job.job, opt, kept));
    } else if (auto task = unpack_task_files(job.payload, dir / "task"); !task) {
      result["error"] = task.error().message;
    } else {
      json one = job.payload.value("bench", json::object());
      one["suite"] = fs::absolute(*task).string();
      std::error_code ec;
      fs::create_directories(dir / "bench", ec);
      if (auto ok = write_file_atomic(dir / "bench" / "bench.json", dump_json(one, 1)); !ok) return Unexpected{ok.error()};
      BenchOptions b;
      b.resume = dir / "bench";
      b.eval = opt.eval;
      b.tracer = &tracer;
      b.say = [&](const std::string& s) { say("  " + s); };
      auto r = run_bench(b);
      if (!r) {
        result["error"] = r.error().message;
      } else if (!(*r)["tasks"].is_array() || (*r)["tasks"].size() != 1) {
        result["error"] = "the job's bench gave no row";
      } else {
        result["row"] = (*r)["tasks"][0];
        if (r->contains("machine")) result["machine"] = (*r)["machine"];
      }
    }
    result["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result["finished_at"] = utc_now_iso();
    auto wrote = queue->complete(job, result);
    if (!wrote) {
      reconnect(wrote.error());
      wrote = queue->complete(job, result);
      if (!wrote) continue;  // its lease runs out and another worker runs it
    }
    const std::string outcome = result.contains("row")       ? result["row"].value("disposition", std::string("?"))
                                : result.contains("verdict") ? result["verdict"].value("disposition", std::string("?"))
                                                             : "error: " + result.value("error", std::string());
    say(fmt::format("job {}: {} in {:.1f} s{}", job.job, outcome,
                    result["seconds"].get<double>(), *wrote ? "" : " (another worker had written its result)"));
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  // Done with its jobs: it leaves the queue's list of workers (one killed stays there, its idle time growing).
  (void)queue->leave(opt.name);
  return {};
}

}  // namespace kfab
