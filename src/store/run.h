#pragma once
/// One optimization run, kept in the store: created (or found again on --resume), its steps recorded
/// in order, its final check on every shape, its best file and its status. The built-in tuner and the
/// LLM agents each drive one through a Proposer (below), which proposes the candidates.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "core/task.h"
#include "eval/evaluations.h"
#include "eval/verdict.h"
#include "store/store.h"

namespace kfab {

/// What every run's subcommand takes (the tuner's TuneOptions and the agents' OptimizeOptions add
/// their own).
struct RunOptions {
  std::filesystem::path task;     ///< a native task folder or a KernelBench-format .py file
  std::string target;             ///< cpu, cuda, opencl (the tuner: cpu where empty)
  std::filesystem::path out_dir;  ///< candidates and best.<ext> (default: kfab-runs/RUN)
  /// A stopped run to go on with (--resume): its settings win, and what it evaluated is not
  /// evaluated again.
  std::string resume;
  EvalOptions eval;  ///< the final check's protocol (a search may use a shorter one)
  /// The devices candidates evaluated together are spread over, an evaluator pinned to each (a GPU
  /// target: every GPU of a host with several where empty); other evaluations run on the first.
  std::vector<int> devices;
  /// Evaluations done elsewhere (--redis: the workers of a job queue). Null: here.
  RemoteEvaluations* remote = nullptr;
  std::function<void(const std::string&)> progress;
};

/// What a run is, as stored when it is created.
struct RunSpec {
  std::string task_name;
  std::filesystem::path task_path;
  std::string target;
  std::string proposer;  ///< "tuner", or the LLM (provider:model)
  std::string strategy;  ///< tune, refine, evolve
  nlohmann::json config = nlohmann::json::object();
  std::filesystem::path out_dir;  ///< empty: kfab-runs/RUN
  std::string resume;             ///< a run to go on with, instead of a new one
};

class Proposer;

class Run {
 public:
  /// A new run, or the one named by spec.resume (its earlier steps read back, its status running).
  static Expected<Run> start(Store& store, RunSpec spec);

  const std::string& id() const { return id_; }
  const std::filesystem::path& out_dir() const { return out_dir_; }
  bool resumed() const { return resumed_; }
  /// The steps recorded before this process (on --resume).
  const std::vector<Store::Step>& earlier() const { return earlier_; }
  /// The highest step number so far.
  int64_t seq() const { return seq_; }
  Store& store() { return *store_; }

  /// The next step number (an LLM exchange takes it when it is asked).
  int64_t next_seq() { return ++seq_; }
  /// Adds a step; one without a number gets the next.
  Expected<void> add(Store::Step step);
  /// The search: what `proposer` proposes, evaluated with `eo` (several at once where `evals`
  /// spreads), each recorded as a step with its verdict and told back to the proposer, in the order
  /// proposed, until it proposes nothing.
  Expected<void> drive(Proposer& proposer, const Task& task, Evaluations& evals, const EvalOptions& eo,
                       const std::function<void(const std::string&)>& say);
  /// An evaluated candidate: its source and verdict kept, recorded as a step of `role`; the step.
  Expected<Store::Step> record(const Task& task, const std::filesystem::path& file, const Verdict& v, const std::string& role,
                               const std::string& detail);
  /// The evaluation id of a recorded verdict, for a step recorded by the caller.
  std::optional<int64_t> keep(const Task& task, const std::filesystem::path& file, const Verdict& v);
  /// Writes `source` as the run's best file (best<suffix> in its folder).
  Expected<std::filesystem::path> write_best(const std::string& source, const std::string& suffix);
  /// The final status: finished when the best passed its final check, else failed.
  void finish(bool passed);

 private:
  Store* store_ = nullptr;
  std::string id_;
  std::filesystem::path out_dir_;
  bool resumed_ = false;
  std::vector<Store::Step> earlier_;
  int64_t seq_ = 0;
};

/// A candidate a Proposer hands its run: the file it wrote (empty where its source held none, with
/// `why`), the step that made it.
struct Proposal {
  std::string role;
  std::filesystem::path file;
  size_t tag = 0;    ///< the proposer's own (a parameter point's index)
  Store::Step step;  ///< its exchange (LLM) or nothing yet (tuner); the run fills in the verdict
  std::string why;   ///< no file: why not
};

/// What proposes candidates to a run: the template tuner (every parameter point of its templates),
/// an LLM refining one trajectory, an LLM evolving a population. The run evaluates what it proposes
/// and tells it what came of each.
class Proposer {
 public:
  virtual ~Proposer() = default;
  /// The next candidates, evaluated together (at once where there are devices); none: it is done,
  /// and stopped() says why.
  virtual Expected<std::vector<Proposal>> propose(Run& run) = 0;
  /// The detail its step records for a candidate's verdict.
  virtual std::string detail(const Proposal& p, const Verdict& v) const = 0;
  /// What came of a candidate it proposed: its verdict (nullptr where it had no file) and its step.
  virtual Expected<void> observe(Run& run, const Proposal& p, const Verdict* v, const Store::Step& step) = 0;
  virtual std::string stopped() const = 0;
};

}  // namespace kfab
