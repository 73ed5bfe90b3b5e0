#include "store/run.h"

#include <algorithm>

#include "core/hash.h"
#include "core/paths.h"
#include "core/stamp.h"
#include "core/text.h"

namespace kfab {

namespace fs = std::filesystem;
using json = nlohmann::json;

Expected<Run> Run::start(Store& store, RunSpec spec) {
  Run r;
  r.store_ = &store;
  r.resumed_ = !spec.resume.empty();
  r.id_ = r.resumed_ ? spec.resume : new_run_id();
  r.out_dir_ = spec.out_dir.empty() ? fs::path("kfab-runs") / r.id_ : spec.out_dir;
  if (r.resumed_) {
    auto steps = store.run_steps(r.id_);
    if (!steps) return Unexpected{steps.error()};
    r.earlier_ = std::move(*steps);
    for (const auto& s : r.earlier_) r.seq_ = std::max(r.seq_, s.seq);
    (void)store.set_run_status(r.id_, "running");
  } else {
    spec.config["out_dir"] = fs::absolute(r.out_dir_).string();
    if (auto ok = store.create_run(r.id_, spec.task_name, fs::absolute(spec.task_path).string(), spec.target, spec.proposer,
                                   spec.strategy, dump_json(spec.config));
        !ok)
      return Unexpected{ok.error()};
  }
  std::error_code ec;
  fs::create_directories(r.out_dir_, ec);
  return r;
}

Expected<void> Run::add(Store::Step step) {
  if (step.seq == 0) step.seq = ++seq_;
  seq_ = std::max(seq_, step.seq);
  return store_->add_step(id_, step);
}

std::optional<int64_t> Run::keep(const Task& task, const fs::path& file, const Verdict& v) {
  auto src = read_file(file);
  auto id = store_->record_evaluation(task, src ? *src : "", v);
  return id ? std::optional<int64_t>(*id) : std::nullopt;
}

Expected<Store::Step> Run::record(const Task& task, const fs::path& file, const Verdict& v, const std::string& role,
                                  const std::string& detail) {
  Store::Step s;
  s.seq = ++seq_;
  s.role = role;
  s.candidate_hash = v.candidate_hash;
  s.candidate_path = fs::absolute(file).string();
  s.evaluation_id = keep(task, file, v);
  s.disposition = std::string(disposition_name(v.disposition));
  s.speedup = v.speedup;
  s.detail = detail;
  if (auto ok = store_->add_step(id_, s); !ok) return Unexpected{ok.error()};
  return s;
}

Expected<fs::path> Run::write_best(const std::string& source, const std::string& suffix) {
  const fs::path file = out_dir_ / ("best" + suffix);
  if (auto ok = write_file_atomic(file, source); !ok) return Unexpected{ok.error()};
  return file;
}

Expected<void> Run::drive(Proposer& proposer, const Task& task, Evaluations& evals, const EvalOptions& eo,
                          const std::function<void(const std::string&)>& say) {
  for (;;) {
    auto batch = proposer.propose(*this);
    if (!batch) return Unexpected{batch.error()};
    if (batch->empty()) return {};
    std::vector<size_t> with_file;
    std::vector<fs::path> files;
    for (size_t i = 0; i < batch->size(); ++i)
      if (!(*batch)[i].file.empty()) {
        with_file.push_back(i);
        files.push_back((*batch)[i].file);
      }
    // Proposals are settled in their order: one without a file as it comes, one with a file when its
    // verdict is in.
    size_t settled = 0;
    auto settle_empty_until = [&](size_t end) -> Expected<void> {
      for (; settled < end; ++settled) {
        const Proposal& p = (*batch)[settled];
        if (!p.file.empty()) continue;
        Store::Step s = p.step;
        if (s.role.empty()) s.role = p.role;
        s.disposition = "no_code";
        s.detail = p.why;
        if (auto ok = add(s); !ok) return ok;
        if (auto ok = proposer.observe(*this, p, nullptr, s); !ok) return ok;
      }
      return {};
    };
    auto done = [&](size_t k, Expected<Verdict> v) -> Expected<void> {
      const size_t i = with_file[k];
      if (auto ok = settle_empty_until(i); !ok) return ok;
      settled = i + 1;
      if (!v) return Unexpected{v.error()};
      const Proposal& p = (*batch)[i];
      Store::Step s = p.step;
      if (s.role.empty()) s.role = p.role;
      if (s.seq == 0) s.seq = next_seq();
      s.candidate_hash = v->candidate_hash;
      s.candidate_path = fs::absolute(p.file).string();
      s.evaluation_id = keep(task, p.file, *v);
      s.disposition = std::string(disposition_name(v->disposition));
      s.speedup = v->speedup;
      s.detail = proposer.detail(p, *v);
      if (auto ok = add(s); !ok) return ok;
      return proposer.observe(*this, p, &*v, s);
    };
    if (auto ok = evals.evaluate_all(files, eo, done, say); !ok) return ok;
    if (auto ok = settle_empty_until(batch->size()); !ok) return ok;
  }
}

void Run::finish(bool passed) { (void)store_->set_run_status(id_, passed ? "finished" : "failed"); }

}  // namespace kfab
