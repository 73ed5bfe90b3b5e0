#pragma once
/// The subcommands: each registers its options on the CLI11 app and runs when chosen.

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/optimize.h"
#include "backends/backend.h"
#include "core/discover.h"
#include "core/process.h"
#include "core/task.h"
#include "eval/evaluator.h"
#include "eval/verdict.h"

namespace kfab::cli {

constexpr std::string_view kVersion = "0.1.0";

/// Exit codes of DESIGN.md section 2.3.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitBadInput = 2;
/// optimize: a correct kernel was found, but none faster than the baseline (its `outcome` "not_faster").
constexpr int kExitNotFaster = 4;

/// What a subcommand passes on to the evaluator (EvalOptions). eval, optimize and bench each hold
/// their own, bound to the options each offers; what a subcommand does not offer keeps these defaults.
struct MeasureArgs {
  double timeout_s = 60.0;
  int seeds = 5;
  int min_calls = 0;
  double min_time_s = -1.0;
  double memory_gib = 0.0;
  bool quiet = false;  ///< also the subcommand's own progress lines
  bool profile = false;
  std::string dtype = "f32";
  std::string compile_mode = "default";
  bool no_compile = false;
  bool fresh_baselines = false;
  std::vector<std::string> forbid;
  bool no_heldout = false;
  bool no_end_to_end = false;  ///< optimize, bench: the final check does not time the exported ModelNew
  std::optional<double> atol, rtol;
  std::string judge = "float64";  ///< --judge: float64 (where eager itself is off) or eager
};

/// --redis URL and --queue NAME: a job queue on a Redis server.
struct QueueArgs {
  std::string url;
  std::string name;  ///< empty: QueueOptions' default
};

struct DoctorArgs {
  bool json = false;
  QueueArgs queue;  ///< also the pool of that queue
};

struct TasksArgs {
  std::string path = "tasks";
  bool json = false;
  bool check = false;
  bool coverage = false;
  std::string target;
};

struct EvalArgs {
  std::string task;
  std::string candidate;
  std::string target;
  std::string db;
  bool no_store = false;
  bool no_end_to_end = false;
  bool json = false;
  MeasureArgs measure;
};

/// `kfab compare TASK A B`: two candidates timed interleaved in one run.
struct CompareArgs {
  std::string task;
  std::string a, b;
  std::string target;
  bool json = false;
  MeasureArgs measure;
};

struct ExportArgs {
  std::string candidate;
  std::string task;
  std::string modelnew;
  bool json = false;
};

struct OptimizeArgs {
  std::string task;
  std::string resume;
  std::string target;
  /// The LLM agents' own options, bound as they are (--llm, --dsl, --config, --strategy, the budgets);
  /// what a run of either kind takes (task, out, devices, measurement) is filled in from the rest.
  OptimizeOptions agents;
  int points = 64;  ///< the built-in tuner's budget
  bool fresh = false;
  std::string out;
  std::vector<int> devices;
  QueueArgs queue;
  bool json = false;
  MeasureArgs measure;
};

struct BenchArgs {
  std::string suite;
  std::string resume;  ///< BENCH_DIR
  std::string target;
  std::string report;  ///< the HTML file
  std::string out;
  bool eval = false;
  std::string llm;
  int budget = 8;
  int points = 64;
  bool fresh = false;
  std::string filter;
  int sample = 0;
  std::vector<int> devices;
  QueueArgs queue;
  bool serve_slot = false;  ///< hidden: what --devices starts on a device
  bool json = false;
  MeasureArgs measure;
};

struct ReportArgs {
  std::string run;  ///< a run id, latest, or a bench folder
  std::string html;
  std::string db;
  bool json = false;
};

struct WorkerArgs {
  QueueArgs queue;
  int device = -1;
  double lease_s = 60.0;
  int max_jobs = 0;
  std::string name;
  std::string work_dir;
  bool quiet = false;
};

struct SandboxArgs {
  bool processes = false;
  std::vector<std::string> argv;
};

class Commands {
 public:
  explicit Commands(CLI::App& app);
  /// Runs the chosen subcommand; returns the exit code.
  int run();

 private:
  int doctor(const DoctorArgs& a);
  int tasks(const TasksArgs& a);
  int eval(const EvalArgs& a);
  int compare(const CompareArgs& a);
  /// The backend a native candidate file runs on: `target`, or the best present that takes the file.
  Expected<std::unique_ptr<Backend>> native_backend_for(const std::string& target, const std::string& candidate) const;
  int export_modelnew(const ExportArgs& a);
  /// By value: resuming a run takes its task, target and settings from the store.
  int optimize_task(OptimizeArgs a);
  int bench(const BenchArgs& a);
  int bench_serve_slot(const BenchArgs& a);
  int worker(const WorkerArgs& a);
  int report(const ReportArgs& a);
  int sandbox_command(const SandboxArgs& a);
  int check_tasks(const TasksArgs& a, const std::vector<TaskEntry>& entries);
  int coverage_tasks(const TasksArgs& a, const std::vector<TaskEntry>& entries);
  int report_verdict(const EvalArgs& a, const Task& task, const Verdict& v);

  CLI::App& app_;
  CLI::App* doctor_ = nullptr;
  CLI::App* tasks_ = nullptr;
  CLI::App* eval_ = nullptr;
  CLI::App* compare_ = nullptr;
  CLI::App* export_ = nullptr;
  CLI::App* mcp_ = nullptr;
  CLI::App* optimize_ = nullptr;
  CLI::App* bench_ = nullptr;
  CLI::App* report_ = nullptr;
  CLI::App* sandbox_ = nullptr;
  CLI::App* worker_ = nullptr;
  bool json_ = false;  ///< --json before the subcommand's name: as if given after it
  std::string db_;     ///< optimize, bench, mcp, worker --db: the store, for this process and those it starts (KFAB_DB)
  std::string brief_;  ///< mcp --brief DIR: write DIR/AGENTS.md instead of serving
  bool brief_force_ = false;
  DoctorArgs doctor_args_;
  TasksArgs tasks_args_;
  EvalArgs eval_args_;
  CompareArgs compare_args_;
  ExportArgs export_args_;
  OptimizeArgs optimize_args_;
  BenchArgs bench_args_;
  ReportArgs report_args_;
  WorkerArgs worker_args_;
  SandboxArgs sandbox_args_;
};

}  // namespace kfab::cli
