#pragma once
/// `kfab bench` and `kfab report`: a suite of tasks optimized (or their bundled candidates evaluated)
/// with their baselines, scored (correctness, fast_p, geometric-mean speedups, SOL score, % of the
/// roofline bound, retention on held-out shapes), written as JSON, CSV and one self-contained HTML
/// page; and a stored run gathered into the object the HTML report renders.

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "core/discover.h"
#include "dist/queue.h"
#include "eval/evaluator.h"
#include "store/store.h"

namespace kfab {

class TorchInspector;

/// Where a bench stands, for a live status line.
struct BenchStatus {
  int done = 0;             ///< tasks finished
  int total = 0;
  int passed = 0;
  std::string current;      ///< the task being worked on (several, with devices; empty at the end)
  std::string best;         ///< the best result so far, in words ("softmax 2.13x")
  double elapsed_s = 0.0;
  double left_s = -1.0;     ///< estimated from the tasks done so far; < 0 before the first
};

struct BenchOptions {
  std::filesystem::path suite;     ///< a folder of tasks (or one task)
  std::string target;              ///< cpu, cuda, opencl (empty: cuda with a GPU, else cpu)
  std::string mode = "optimize";   ///< optimize (built-in tuner, or llm) or eval (the bundled candidates)
  std::string llm;                 ///< PROVIDER:MODEL for optimize; empty: the built-in tuner
  int points = 64;                 ///< built-in tuner: parameter points per task, at most
  int budget = 8;                  ///< LLM: candidates per task, at most
  bool fresh = false;              ///< built-in tuner: search again
  std::string filter;              ///< only tasks whose path matches this regular expression (ECMAScript, searched)
  int sample = 0;                  ///< > 0: this many of the (filtered) tasks, evenly spread over them
  std::filesystem::path out_dir;   ///< default kfab-bench/BENCH
  std::filesystem::path report;    ///< the HTML page (default out_dir/report.html)
  /// A stopped bench's folder: its bench.json gives the suite and every setting (those above and the
  /// evaluation's), its finished rows are kept, and the tasks it had not finished run into it.
  std::filesystem::path resume;
  /// The devices to spread the tasks over, a kfab process per device at a time, each task's
  /// evaluations and baselines on one device (cuda: CUDA_VISIBLE_DEVICES of that process, in PCI bus
  /// order as nvidia-smi counts; an index twice: two processes share that GPU; cpu and opencl: the
  /// indices only name slots that run at once). Empty: one task at a time in this process, or on a
  /// cuda host with several GPUs, every GPU.
  std::vector<int> devices;
  /// `--redis URL` (and `--queue NAME`): the tasks become jobs of a Redis job queue, run by `kfab
  /// worker` processes on any host (dist/queue.h); empty url: here.
  QueueOptions queue;
  /// A tracer of KernelBench files kept from one bench to the next (a device's kfab under `--devices`
  /// runs many one-task benches); null: one per bench.
  std::unique_ptr<TorchInspector>* tracer = nullptr;
  EvalOptions eval;
  std::function<void(const std::string&)> say;       ///< a task's result, a line
  std::function<void(const std::string&)> detail;    ///< the tuner's or the agents' progress within a task
  std::function<void(const BenchStatus&)> status;    ///< the live status
};

/// The tasks of a suite a bench runs: those whose path matches `filter` (empty: all), then with
/// `sample` > 0 that many of them spread evenly (the first, then every size/sample-th). An Error for a
/// filter that is not a regular expression.
Expected<std::vector<TaskEntry>> select_tasks(std::vector<TaskEntry> entries, const std::string& filter, int sample);

/// Runs the bench and writes out_dir/{bench.json, tasks.csv, scores.csv} and the report. Returns the
/// bench object (bench.json). An Error only when nothing can be run (no tasks, bad target); a task
/// that fails is a row of the result.
Expected<nlohmann::json> run_bench(const BenchOptions& opt);

/// The suite's scores from its task rows (see README: Benches and reports).
nlohmann::json bench_scores(const nlohmann::json& tasks);

/// A task row's scores from the verdict of its final candidate (null: none passed the search).
/// Fills disposition, speedup, speedup_vs_compile, sol_score, percent_of_bound,
/// percent_of_copy_bandwidth and heldout.
void score_task(nlohmann::json& row, const nlohmann::json& verdict);

/// SOL-ExecBench's score of one time: 1 / (1 + (t - t_sol) / (t_base - t_sol)); 0.5 at the
/// baseline, 1 at the bound.
double sol_score(double t, double t_base, double t_sol);

/// A stored run as the HTML report takes it: the run's facts and every step with its candidate's
/// source, its verdict and the candidate it was derived from (parent_hash).
Expected<nlohmann::json> run_report(Store& store, const std::string& run);

/// The tasks table and the scores as CSV.
std::string tasks_csv(const nlohmann::json& tasks);
std::string scores_csv(const nlohmann::json& scores);

/// The order a bench hands its tasks out in over devices or a queue, from what each took here before
/// (seconds; negative: never timed here): the untimed first, in their order (they may be the
/// longest), then the others longest first.
std::vector<size_t> longest_first(const std::vector<double>& seconds);

}  // namespace kfab
