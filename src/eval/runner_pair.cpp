#include "eval/runner_pair.h"

#include <unistd.h>

#include "backends/target.h"

namespace kfab {

using json = nlohmann::json;

RunnerOptions for_target(RunnerOptions o, std::string_view target) {
  const Target* t = find_target(target);
  o.for_target(t == nullptr || t->on_host, t != nullptr && t->runner_spawns);
  return o;
}

namespace {

RunnerOptions candidate_options(RunnerOptions o, const std::string& target) {
  o = for_target(std::move(o), target);
  o.freeze_between_jobs = true;
  o.trusted = false;
  const Target* t = find_target(target);
  o.preopen = t != nullptr && !t->on_host ? target : std::string();
  return o;
}

RunnerOptions trusted_options(RunnerOptions o, const std::string& target) {
  o = for_target(std::move(o), target);
  o.freeze_between_jobs = false;
  o.trusted = true;
  o.preopen.clear();
  return o;
}

}  // namespace

RunnerPair::RunnerPair(const Task& task, const std::string& target, const RunnerOptions& opt, json base)
    : task_(task), target_(target), base_(std::move(base)), candidate_(candidate_options(opt, target)),
      trusted_(trusted_options(opt, target)) {}

void RunnerPair::start() {
  (void)candidate_.start();
  (void)trusted_.start();
}

JobReply RunnerPair::run_trusted(const json& req) {
  JobReply r = trusted_.run(req);
  if (r.kind != JobReply::Kind::Crashed && r.kind != JobReply::Kind::Broken) return r;
  const std::string op = req.value("op", "");
  if ((op == "time_call" || op == "time_end") && trusted_prepare_.is_object()) {
    JobReply p = trusted_.run(trusted_prepare_);
    if (p.kind != JobReply::Kind::Ok || !p.body.value("ok", false)) return r;
  }
  return trusted_.run(req);
}

JobOutcome RunnerPair::map(JobReply& r, const ShapeBinding& shape, MappedOutputs& out) {
  JobOutcome o = interpret(r);
  if (!o.ok) return o;
  // The layout is kfab's own, from the task: a runner's account of it is not needed.
  size_t total = 0;
  region_layout(output_bytes(task_, shape), &total);
  const int fd = r.take_fd(0);
  if (fd < 0) return JobOutcome::failed(Disposition::Crashed, "the runner's reply came without its shared memory");
  if (!out.region.empty() && out.region.same_file(fd) && out.bytes == total && out.region.still_holds(total)) {
    ::close(fd);
    return o;
  }
  auto region = SharedRegion::map_received(fd, total);
  if (!region) {
    out = MappedOutputs{};
    return JobOutcome::failed(Disposition::Crashed, region.error().message);
  }
  out.region = std::move(*region);
  out.bytes = total;
  out.tensors.clear();
  const auto at = region_layout(output_bytes(task_, shape), &total);
  for (size_t i = 0; i < task_.outputs.size(); ++i)
    out.tensors.push_back(HostTensor::borrow(task_.outputs[i].dtype, task_.dims(task_.outputs[i], shape),
                                             const_cast<char*>(static_cast<const char*>(out.region.data())) + at[i]));
  return o;
}

JobOutcome RunnerPair::reference(const ShapeBinding& shape, int64_t seed, uint64_t perturb, MappedOutputs& out, bool timed) {
  json req = {{"op", "reference"}, {"task", base_["task"]}, {"reference", base_["reference"]}, {"target", target_},
              {"shape", shape}, {"base_seed", base_["base_seed"]}, {"seed", seed}, {"perturb", perturb},
              {"perturb_last", !timed}};
  if (base_.contains("gpu_baseline")) req["gpu_baseline"] = base_["gpu_baseline"];
  JobReply r = run_trusted(req);
  out = MappedOutputs{};
  JobOutcome o = map(r, shape, out);
  // Whatever goes wrong in the trusted runner is the task's or the machine's, not the candidate's.
  if (!o.ok && !o.task_error) {
    o.task_error = true;
    o.detail = "the reference's runner: " + o.detail;
  }
  return o;
}

JobOutcome RunnerPair::call(const ShapeBinding& shape, int64_t seed, uint64_t perturb, int pattern) {
  json req = {{"op", "call"}, {"task", base_["task"]}, {"candidate", base_["candidate"]}, {"target", target_},
              {"shape", shape}, {"base_seed", base_["base_seed"]}, {"seed", seed}, {"perturb", perturb},
              {"pattern", pattern}};
  have_outputs_ = false;
  shape_ = shape;
  JobReply r = candidate_.run(req);
  JobOutcome o = map(r, shape, cand_out_);
  have_outputs_ = o.ok;
  return o;
}

const std::vector<HostTensor>* RunnerPair::candidate_outputs() const {
  if (!have_outputs_ || !cand_out_.region.still_holds(cand_out_.bytes)) return nullptr;
  return &cand_out_.tensors;
}

JobOutcome RunnerPair::prepare_timing(bool candidate_side, const ShapeBinding& shape, int64_t seed, const json& settings) {
  json req = settings;
  req["op"] = "time_prepare";
  req["task"] = base_["task"];
  req["target"] = target_;
  req["shape"] = shape;
  req["base_seed"] = base_["base_seed"];
  req["seed"] = seed;
  if (candidate_side) {
    req["candidate"] = base_["candidate"];
    shape_ = shape;
    have_outputs_ = false;
    return interpret(candidate_.run(req));
  }
  req["reference"] = base_["reference"];
  if (base_.contains("gpu_baseline")) req["gpu_baseline"] = base_["gpu_baseline"];
  trusted_prepare_ = req;
  JobOutcome o = interpret(run_trusted(req));
  if (!o.ok && !o.task_error) {
    o.task_error = true;
    o.detail = "the baseline's runner: " + o.detail;
  }
  return o;
}

JobOutcome RunnerPair::timed_call(uint64_t perturb, bool flush, bool clocks, bool counters) {
  have_outputs_ = false;
  json req = {{"op", "time_call"}, {"perturb", perturb}, {"flush", flush}, {"clocks", clocks}};
  if (counters) req["counters"] = true;
  JobReply r = candidate_.run(req);
  if (r.kind == JobReply::Kind::Ok && r.body.value("fds", 0) > 0) {
    JobOutcome o = map(r, shape_, cand_out_);
    have_outputs_ = o.ok;
    return o;
  }
  return interpret(r);
}

JobOutcome RunnerPair::timed_baseline_call(bool flush) {
  JobOutcome o = interpret(run_trusted({{"op", "time_call"}, {"flush", flush}}));
  if (!o.ok && !o.task_error) {
    o.task_error = true;
    o.detail = "the baseline's runner: " + o.detail;
  }
  return o;
}

JobOutcome RunnerPair::fetch() {
  if (have_outputs_) {
    JobOutcome o;
    o.ok = true;
    return o;
  }
  JobReply r = candidate_.run({{"op", "fetch"}});
  JobOutcome o = map(r, shape_, cand_out_);
  have_outputs_ = o.ok;
  return o;
}

JobOutcome RunnerPair::end_timing(bool candidate_side) {
  if (candidate_side) return interpret(candidate_.run({{"op", "time_end"}}));
  JobOutcome o = interpret(run_trusted({{"op", "time_end"}}));
  if (!o.ok && !o.task_error) {
    o.task_error = true;
    o.detail = "the baseline's runner: " + o.detail;
  }
  return o;
}

}  // namespace kfab
