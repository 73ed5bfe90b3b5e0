#include "cli/commands.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <thread>

#include "backends/backend.h"
#include "backends/target.h"
#include "core/discover.h"
#include "core/doctor.h"
#include "core/hash.h"
#include "core/paths.h"
#include "core/process.h"
#include "core/text.h"
#include "eval/evaluator.h"
#include "eval/runner_pair.h"
#include "eval/torch_harness.h"
#include "cli/mcp.h"
#include "agent/optimize.h"
#include "tuner/fused.h"
#include "tuner/templates.h"
#include "tuner/tuner.h"
#include "app/bench.h"
#include "dist/queue.h"
#include "dist/remote_eval.h"
#include "app/worker.h"
#include "report/html.h"
#include "report/table.h"
#include "store/store.h"

namespace kfab::cli {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// --atol and --rtol, alike wherever a subcommand evaluates.
void add_tolerances(CLI::App& sub, MeasureArgs& m) {
  sub.add_option("--atol", m.atol, "absolute tolerance of every output (default: the task's; KernelBench tasks: KernelBench's for the dtype)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--rtol", m.rtol, "relative tolerance of every output (default: the task's; KernelBench tasks: KernelBench's for the dtype)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--judge", m.judge,
                 "KernelBench tasks: float64 (default): a value that differs from torch eager's beyond the tolerance passes where "
                 "eager's own answer is outside the tolerance of the Model run in float64 and the candidate's within it (said in the "
                 "verdict); eager: eager's answer alone, as KernelBench's own check")
      ->check(CLI::IsMember({"float64", "eager"}));
}

void add_options(CLI::App& sub, DoctorArgs& a) {
  sub.add_flag("--json", a.json, "print one JSON object on stdout");
  sub.add_option("--redis", a.queue.url, "redis://HOST[:PORT]: also the pool of that job queue (its workers and jobs)");
  sub.add_option("--queue", a.queue.name, "the job queue's name on that server (default kfab)");
}

void add_options(CLI::App& sub, TasksArgs& a) {
  sub.add_option("PATH", a.path, "a task folder, a task.toml or a folder of tasks")->capture_default_str();
  sub.add_flag("--json", a.json, "print one JSON object on stdout");
  sub.add_flag("--check", a.check, "KernelBench-format tasks: flag those whose outputs barely vary across seeds (runs each reference)");
  sub.add_flag("--coverage", a.coverage, "which tasks the built-in tuner takes (tracing only: nothing is built or run), "
                                         "and its refusals grouped with counts");
  sub.add_option("--target", a.target, "--check: cpu or cuda (default cpu); --coverage: the target whose templates count (default cuda)");
}

void add_options(CLI::App& sub, OptimizeArgs& a) {
  sub.add_option("TASK", a.task, "task folder, task.toml or KernelBench-format .py (not with --resume)");
  sub.add_option("--target", a.target, target_names() + " (default: cuda when a GPU is here, else cpu)");
  sub.add_option("--dsl", a.agents.dsl, "cpp, cuda, opencl, triton, modelnew (default: the target's native one)");
  sub.add_option("--llm", a.agents.llm, "PROVIDER:MODEL from the config, or replay:RUN (a recorded run's exchanges, no network); "
                                 "none or absent: the built-in tuner");
  sub.add_option("--config", a.agents.config, "provider config (default ~/.config/kfab/config.toml)");
  sub.add_option("--strategy", a.agents.strategy, "with --llm: refine (one trajectory) or evolve (a population)")
      ->capture_default_str()->check(CLI::IsMember({"refine", "evolve"}));
  sub.add_option("--budget", a.agents.budget_candidates, "candidates to evaluate, at most")->capture_default_str()->check(CLI::Range(1, 100000));
  sub.add_option("--budget-tokens", a.agents.budget_tokens, "LLM tokens, at most (0: no limit)");
  sub.add_option("--budget-dollars", a.agents.budget_dollars, "dollars, at most (0: no limit)");
  sub.add_option("--budget-time", a.agents.budget_wall_s, "seconds of wall time, at most (0: no limit)");
  sub.add_option("--out", a.out, "folder for the candidates and best.<ext> (default kfab-runs/RUN)");
  sub.add_option("--resume", a.resume, "continue a stopped run from the store");
  sub.add_option("--points", a.points, "built-in tuner: parameter points to evaluate, at most")->capture_default_str();
  sub.add_option("--devices", a.devices,
                 "spread evaluations over these devices, comma-separated (cuda: GPU indices as nvidia-smi counts them, "
                 "default every GPU; cpu, opencl: evaluations at once): the built-in tuner's points, an evolve "
                 "generation's children; the other steps and the final check on the first")
      ->delimiter(',');
  sub.add_flag("--fresh", a.fresh, "built-in tuner: search again even when a cached result exists");
  sub.add_option("--redis", a.queue.url,
                 "redis://HOST[:PORT]: every evaluation becomes a job of this Redis server's job queue, done by "
                 "`kfab worker --redis` processes on any host (the tuner's points at once, an evolve generation's "
                 "children at once); nothing is built or run here");
  sub.add_option("--queue", a.queue.name, "the job queue's name on that server (default kfab)");
  sub.add_option("--timeout", a.measure.timeout_s, "seconds each runner job may take")->capture_default_str();
  sub.add_flag("--no-compile", a.measure.no_compile, "KernelBench tasks: do not time torch.compile in the final check");
  sub.add_flag("--no-end-to-end", a.measure.no_end_to_end, "KernelBench tasks: do not time the winner's exported ModelNew end to end");
  sub.add_option("--dtype", a.measure.dtype, "KernelBench tasks: the float dtype of inputs, weights and reference (f32; f16 and bf16: "
                                             "the built-in tuner takes a plain matrix product, on 16-bit tensor cores)")->capture_default_str();
  sub.add_flag("--quiet,-q", a.measure.quiet, "no progress lines on stderr");
  add_tolerances(sub, a.measure);
  sub.add_flag("--json", a.json, "print one JSON object on stdout");
}

void add_options(CLI::App& sub, BenchArgs& a) {
  sub.add_option("SUITE", a.suite, "a folder of tasks (tasks/core, tasks/kb) or one task");
  sub.add_option("--resume", a.resume, "BENCH_DIR: go on with a stopped bench in its folder (its suite and settings)");
  sub.add_option("--target", a.target, target_names() + " (default: cuda when a GPU is here, else cpu)");
  sub.add_option("--report", a.report, "the HTML report (default OUT/report.html)");
  sub.add_option("--out", a.out, "folder for the scores, the report and the runs' candidates (default kfab-bench/BENCH)");
  sub.add_flag("--eval", a.eval, "evaluate each task's bundled candidates instead of optimizing");
  sub.add_option("--llm", a.llm, "PROVIDER:MODEL: optimize with LLM agents (default: the built-in tuner)");
  sub.add_option("--budget", a.budget, "LLM: candidates per task, at most")->capture_default_str()->check(CLI::Range(1, 100000));
  sub.add_option("--points", a.points, "built-in tuner: parameter points per task, at most")->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub.add_flag("--fresh", a.fresh, "built-in tuner: search again even when a cached result exists");
  sub.add_option("--seeds", a.measure.seeds, "seeds per shape in the final checks")->capture_default_str()->check(CLI::Range(1, 1000));
  sub.add_option("--min-time", a.measure.min_time_s, "seconds of timed calls per shape in the final checks, at least")->check(CLI::NonNegativeNumber);
  sub.add_option("--timeout", a.measure.timeout_s, "seconds each runner job may take")->capture_default_str()->check(CLI::PositiveNumber);
  sub.add_flag("--no-compile", a.measure.no_compile, "KernelBench tasks: do not time torch.compile");
  sub.add_flag("--no-end-to-end", a.measure.no_end_to_end, "KernelBench tasks: do not time each winner's exported ModelNew end to end");
  sub.add_option("--dtype", a.measure.dtype, "KernelBench tasks: the float dtype of inputs, weights and reference (f32, f16, bf16)")
      ->capture_default_str();
  sub.add_option("--filter", a.filter, "only the tasks whose path matches this regular expression");
  sub.add_option("--sample", a.sample, "only this many of the tasks, spread evenly over them (after --filter)")->check(CLI::Range(1, 1000000));
  sub.add_flag("--quiet,-q", a.measure.quiet, "no progress on stderr");
  add_tolerances(sub, a.measure);
  sub.add_flag("--json", a.json, "print the bench (scores and task rows) as one JSON object on stdout");
  sub.add_option("--devices", a.devices,
                 "spread the tasks over these devices, comma-separated (cuda: GPU indices as nvidia-smi counts them, one may "
                 "repeat to share a GPU; default: every GPU; cpu, opencl: slots that run at once), a kfab per task")
      ->delimiter(',');
  sub.add_option("--redis", a.queue.url, "redis://HOST[:PORT]: the tasks become jobs of this Redis server's job queue, run by "
                                         "`kfab worker` processes on any host");
  sub.add_option("--queue", a.queue.name, "the job queue's name on that server (default kfab)");
  // What `--devices` starts on each device: one-task bench folders to resume, a line each on fd 3, a
  // reply line each on fd 4 ("done", or "error MESSAGE"); an empty line or the end of fd 3 ends it.
  sub.add_flag("--serve-slot", a.serve_slot, "")->group("");
}

void add_options(CLI::App& sub, ReportArgs& a) {
  sub.add_option("RUN", a.run, "a run id from the store, latest, or a bench folder (or its bench.json)")->required();
  sub.add_option("--html", a.html, "write the HTML page to this file");
  sub.add_option("--db", a.db, "the store (default: " + Store::default_path().string() + ")");
  sub.add_flag("--json", a.json, "print the report's data as one JSON object on stdout");
}

void add_options(CLI::App& sub, ExportArgs& a) {
  sub.add_option("CANDIDATE", a.candidate, "a .cpp, .cu or run() .py candidate")->required();
  sub.add_option("--task", a.task, "the KernelBench-format task file the candidate is for")->required();
  sub.add_option("--modelnew", a.modelnew, "the ModelNew file to write")->required();
  sub.add_flag("--json", a.json, "print one JSON object on stdout");
}

void add_options(CLI::App& sub, WorkerArgs& a) {
  sub.add_option("--redis", a.queue.url, "redis://HOST[:PORT][/DB] of the queue")->required();
  sub.add_option("--queue", a.queue.name, "the job queue's name on that server (default kfab)");
  sub.add_option("--device", a.device, "cuda: the GPU this worker runs on, as nvidia-smi counts them (a worker per GPU)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--lease", a.lease_s, "seconds after which the job of a worker that stopped renewing it is taken over")
      ->capture_default_str()->check(CLI::Range(1.0, 86400.0));
  sub.add_option("--max-jobs", a.max_jobs, "end after this many jobs (default: never)")->check(CLI::NonNegativeNumber);
  sub.add_option("--name", a.name, "its name in the queue (default HOST-PID)");
  sub.add_option("--work-dir", a.work_dir, "where jobs are unpacked (default: under kfab's cache)");
  sub.add_flag("--quiet,-q", a.quiet, "no progress on stderr");
}

void add_options(CLI::App& sub, SandboxArgs& a) {
  sub.add_flag("--processes", a.processes, "let it start processes (as the Python worker may)");
  sub.add_option("command", a.argv, "the command and its arguments (after --)")->required();
}

void add_options(CLI::App& sub, CompareArgs& a) {
  sub.add_option("TASK", a.task, "task folder, task.toml, or a KernelBench-format .py file")->required();
  sub.add_option("A", a.a, "a candidate source file")->required();
  sub.add_option("B", a.b, "the candidate it is compared with")->required();
  sub.add_option("--target", a.target, target_names() + " (default: the best target present that takes A)");
  sub.add_option("--timeout", a.measure.timeout_s, "seconds each runner job may take before it is killed")
      ->capture_default_str()->check(CLI::PositiveNumber);
  sub.add_option("--seeds", a.measure.seeds, "seeds per shape")->capture_default_str()->check(CLI::Range(1, 1000));
  sub.add_option("--min-calls", a.measure.min_calls, "timed calls of each per shape, at least (default: cpu 50, cuda 100)")
      ->check(CLI::Range(1, 1000000));
  sub.add_option("--min-time", a.measure.min_time_s, "seconds of timed calls per shape, at least (default: cpu 0.5, cuda/opencl 0.05)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--dtype", a.measure.dtype, "KernelBench tasks: the float dtype of inputs, weights and reference")->capture_default_str();
  sub.add_flag("--quiet,-q", a.measure.quiet, "no progress lines on stderr");
  sub.add_flag("--json", a.json, "print one JSON object on stdout");
}

void add_options(CLI::App& sub, EvalArgs& a) {
  sub.add_option("TASK", a.task, "task folder, task.toml, or a KernelBench-format .py file")->required();
  sub.add_option("CANDIDATE", a.candidate, "candidate source file")->required();
  sub.add_option("--target", a.target, target_names() + " (default: the best target present that takes the file)");
  sub.add_option("--timeout", a.measure.timeout_s, "seconds each runner job may take before it is killed")
      ->capture_default_str()->check(CLI::PositiveNumber);
  sub.add_option("--seeds", a.measure.seeds, "seeds per shape")->capture_default_str()->check(CLI::Range(1, 1000));
  sub.add_option("--min-calls", a.measure.min_calls, "timed calls per shape, at least (default: cpu 50, cuda 100)")->check(CLI::Range(1, 1000000));
  sub.add_option("--min-time", a.measure.min_time_s, "seconds of timed calls per shape, at least (default: cpu 0.5, cuda/opencl 0.05)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--memory-limit", a.measure.memory_gib, "address-space limit of the runner in GiB (default: min(8, RAM/2))")->check(CLI::PositiveNumber);
  sub.add_option("--db", a.db, "the store (default: " + Store::default_path().string() + ")");
  sub.add_flag("--no-store", a.no_store, "do not record the evaluation");
  sub.add_flag("--no-heldout", a.measure.no_heldout, "verify the tuning shapes only (what a proposer may see)");
  sub.add_flag("--quiet,-q", a.measure.quiet, "no progress lines on stderr");
  sub.add_flag("--profile", a.measure.profile, "after a pass, profile the first tuning shape with ncu (cuda target)");
  sub.add_option("--dtype", a.measure.dtype, "KernelBench tasks: the float dtype of inputs, weights and reference")->capture_default_str();
  sub.add_option("--compile-mode", a.measure.compile_mode, "KernelBench tasks: torch.compile's mode (default, reduce-overhead, max-autotune)")
      ->capture_default_str();
  sub.add_flag("--no-compile", a.measure.no_compile, "KernelBench tasks: do not time torch.compile");
  sub.add_flag("--no-end-to-end", a.no_end_to_end, "KernelBench tasks: do not time the exported ModelNew end to end");
  sub.add_flag("--fresh-baselines", a.measure.fresh_baselines, "KernelBench tasks: time torch.compile again rather than use its cached time");
  sub.add_option("--forbid", a.measure.forbid, "KernelBench tasks: an operation a Python candidate may not call (torch.xxx or aten.xxx), repeatable");
  add_tolerances(sub, a.measure);
  sub.add_flag("--json", a.json, "print one JSON object on stdout");
}

}  // namespace

// A subcommand and its options, bound to `args`.
template <class Args>
CLI::App* subcommand(CLI::App& app, const char* name, const std::string& description, Args& args) {
  CLI::App* sub = app.add_subcommand(name, description);
  add_options(*sub, args);
  return sub;
}

Commands::Commands(CLI::App& app) : app_(app) {
  app.add_flag("--json", json_, "print one JSON object on stdout");

  doctor_ = subcommand(app, "doctor", "what is here: compilers, GPUs, ncu, python+torch, triton, OpenCL", doctor_args_);
  tasks_ = subcommand(app, "tasks", "list tasks (native manifests and KernelBench files)", tasks_args_);
  optimize_ = subcommand(app, "optimize",
                         "search for a faster correct candidate: the built-in tuner by default (its kernel templates searched by "
                         "measurement, no LLM), or LLM agents (planner, coder, fixer, analyst) with --llm",
                         optimize_args_);
  bench_ = subcommand(app, "bench",
                      "a suite of tasks: each optimized (or its bundled candidates evaluated) with its baselines, then scored; "
                      "writes bench.json, tasks.csv, scores.csv and an HTML report",
                      bench_args_);
  report_ = subcommand(app, "report", "a stored run (or a bench folder) as a self-contained HTML page, or as text or JSON",
                       report_args_);
  mcp_ = app.add_subcommand("mcp", "an MCP server on stdio (JSON-RPC 2.0) for coding agents: list_tasks, describe_task, evaluate, "
                                   "check_heldout, profile, history, best");
  export_ = subcommand(app, "export", "write a KernelBench ModelNew file for a candidate of a KernelBench-format task", export_args_);
  worker_ = subcommand(app, "worker",
                       "take evaluation jobs (a bench's tasks) from a Redis job queue and run them here, one at a time, until stopped",
                       worker_args_);
  sandbox_ = subcommand(app, "sandbox",
                        "run a command in the sandbox candidates run in (writes confined to a temporary "
                        "folder, no network, no privilege), to see what a driver or library needs",
                        sandbox_args_);
  eval_ = subcommand(app, "eval", "verify and time one candidate against the task's reference", eval_args_);
  compare_ = subcommand(app, "compare",
                        "verify two candidates, then time them interleaved in one run (each in processes of its own, with the "
                        "task's baseline in the same rotation): how much faster A is than B, with a 95% interval",
                        compare_args_);
  mcp_->add_option("--brief", brief_, "DIR: write DIR/AGENTS.md, a brief for a coding agent (the loop, the rules, the tools, an "
                                      "MCP configuration), instead of serving");
  mcp_->add_flag("--force", brief_force_, "with --brief: replace an AGENTS.md that is there");
  // eval and report bind --db themselves; these give it to every process they start (KFAB_DB)
  for (CLI::App* sub : {optimize_, bench_, mcp_, worker_})
    sub->add_option("--db", db_, "the store (default: $KFAB_DB, else " + (data_dir() / "kfab.db").string() + ")");
}

/// `kfab mcp --brief DIR`: DIR/AGENTS.md (agent_brief), kept where it is there unless `force`.
int write_agent_brief(const std::string& dir, bool force);

int Commands::run() {
  for (bool* j : {&doctor_args_.json, &tasks_args_.json, &eval_args_.json, &compare_args_.json, &export_args_.json, &optimize_args_.json, &bench_args_.json,
                  &report_args_.json})
    *j = *j || json_;
  if (doctor_->parsed()) return doctor(doctor_args_);
  if (tasks_->parsed()) return tasks(tasks_args_);
  if (eval_->parsed()) return eval(eval_args_);
  if (compare_->parsed()) return compare(compare_args_);
  if (export_->parsed()) return export_modelnew(export_args_);
  if (!db_.empty()) ::setenv("KFAB_DB", fs::absolute(db_).c_str(), 1);  // Store::default_path(), here and in what this starts
  if (mcp_->parsed() && !brief_.empty()) return write_agent_brief(brief_, brief_force_);
  if (mcp_->parsed()) return serve_mcp(std::cin, std::cout);
  if (optimize_->parsed()) return optimize_task(optimize_args_);
  if (bench_->parsed()) return bench(bench_args_);
  if (report_->parsed()) return report(report_args_);
  if (sandbox_->parsed()) return sandbox_command(sandbox_args_);
  if (worker_->parsed()) return worker(worker_args_);
  return kExitBadInput;
}

namespace {

/// "cpu takes .cpp, cuda .cu, opencl .cl.cpp", from the targets.
std::string suffixes_hint() {
  std::string s;
  for (const Target* t : targets())
    s += (s.empty() ? "" : ", ") + std::string(t->name) + (s.empty() ? " takes " : " ") + std::string(t->suffix());
  return s;
}

/// Where a task runs when no --target is given and the file does not decide: a GPU target usable here,
/// else the host's.
std::string default_device_target() { return std::string(default_target().name); }

EvalOptions eval_options(const MeasureArgs& m) {
  EvalOptions opt;
  opt.seeds = m.seeds;
  opt.min_calls = m.min_calls;
  opt.min_time_s = m.min_time_s;
  opt.profile = m.profile;
  opt.runner.timeout_s = m.timeout_s;
  if (m.memory_gib > 0) opt.runner.memory_bytes = static_cast<uint64_t>(m.memory_gib * (1ull << 30));
  // progress on stderr: on a terminal as it comes; to a file or a pipe, each line with the time since the
  // command started (a search of minutes is not silent there)
  if (!m.quiet) {
    const bool tty = ::isatty(2) != 0;
    const auto start = std::chrono::steady_clock::now();
    opt.progress = [tty, start](const std::string& s) {
      if (tty) {
        std::cerr << "kfab: " << s << "\n";
        return;
      }
      const auto secs = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start).count();
      std::cerr << fmt::format("kfab [{}:{:02d}]: {}\n", secs / 60, secs % 60, s) << std::flush;
    };
  }
  opt.dtype = m.dtype;
  opt.compile_baseline = !m.no_compile;
  opt.compile_mode = m.compile_mode;
  opt.fresh_baselines = m.fresh_baselines;
  opt.forbid = m.forbid;
  opt.heldout = !m.no_heldout;
  opt.final_end_to_end = !m.no_end_to_end;
  opt.atol = m.atol;
  opt.rtol = m.rtol;
  opt.judge_eager = m.judge == "eager";
  return opt;
}

QueueOptions queue_options(const QueueArgs& q) {
  QueueOptions o;
  o.url = q.url;
  if (!q.name.empty()) o.name = q.name;
  return o;
}

/// `kfab optimize --redis`: the run's evaluations as jobs of that queue.
Expected<std::unique_ptr<QueueEvaluations>> open_remote(const QueueArgs& queue, const std::string& task, const std::string& target,
                                                        const std::function<void(const std::string&)>& say) {
  if (!queue_available()) return make_error("this kfab was built without hiredis: --redis needs it", "apt-get install libhiredis-dev, then build again");
  return QueueEvaluations::open(queue_options(queue), task, target, say);
}

int bad_input(bool as_json, const std::string& message, const std::string& hint = {}) {
  if (as_json) {
    std::cout << dump_json(json{{"error", message}, {"hint", hint}}, 2) << "\n";
  } else {
    std::cerr << "kfab: " << message << "\n";
    if (!hint.empty()) std::cerr << "  " << hint << "\n";
  }
  return kExitBadInput;
}

}  // namespace

int write_agent_brief(const std::string& dir, bool force) {
  const fs::path file = fs::path(dir) / "AGENTS.md";
  std::error_code ec;
  if (fs::exists(file, ec) && !force) return bad_input(false, file.string() + " is there already", "--force replaces it");
  fs::create_directories(dir, ec);
  if (auto ok = write_file_atomic(file, agent_brief(fs::absolute(self_dir() / "kfab").lexically_normal().string())); !ok)
    return bad_input(false, ok.error().message);
  std::cout << "wrote " << file.string() << "\n";
  return kExitOk;
}

namespace {

std::string fmt_num(const json& j, const char* spec = "{:.3g}") {
  if (j.is_number()) return fmt::format(fmt::runtime(spec), j.get<double>());
  if (j.is_string()) return j.get<std::string>();
  return "-";
}

/// Refuses a native task with a shape that cannot fit where it would run (DESIGN.md 3: what cannot fit
/// is refused with the figures), before anything runs: on the cpu, the runner's address-space limit;
/// on a device, the machine's memory, which holds the host copies of the tensors.
Expected<void> fits_target(const Task& task, const std::string& target, const EvalOptions& opt, const std::string& remedy = {}) {
  RunnerOptions ro = for_target(opt.runner, target);
  FitScope scope;
  scope.heldout = opt.heldout;
  if (ro.limit_address_space) {
    scope.limit = "the " + target + " runner may use (its address-space limit)";
    scope.remedy = remedy;
    return check_fits(task, ro.memory_bytes > 0 ? ro.memory_bytes : default_memory_limit(), scope);
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return {};
  scope.gpu = true;
  scope.limit = "of memory this machine has, which holds the " + target + " runner's host copies of the tensors";
  return check_fits(task, static_cast<uint64_t>(pages) * static_cast<uint64_t>(page), scope);
}

/// fits_target for a task given by its path: a native task; a KernelBench file, or a task that does
/// not open (the command's own loading reports that), passes.
Expected<void> native_task_fits(const std::string& path, const std::string& target, const EvalOptions& opt) {
  if (path.empty()) return {};
  auto task = open_task(path);
  if (!task || task->kernelbench()) return {};
  return fits_target(task->task, target, opt);
}

// A run's result as JSON (--json) or as `text` writes it; exit 0 where its best passed.
/// An optimize run's result with its outcome (issue 24): `outcome` "faster" (a correct kernel faster than the
/// baseline, exit 0), "not_faster" (correct, but no faster: the baseline stays the thing to use, exit 4),
/// "untimed" (correct, the baseline not timed: exit 0, nothing claimed) or "none" (nothing correct, exit 1),
/// and best's `faster_than_baseline` where timed; the text says the same.
int report_run(bool as_json, const Expected<json>& given, const std::function<void(const json&)>& text) {
  if (!given) return bad_input(as_json, given.error().message, given.error().hint);
  json r = *given;
  json& b = r["best"];
  const bool passed = !b["candidate"].is_null() && b["disposition"] == "passed";
  const bool timed = passed && b["speedup"].is_number();  // a verdict without a baseline's time claims neither
  const bool faster = timed && b["speedup"].get<double>() > 1.0;
  r["outcome"] = !passed ? "none" : !timed ? "untimed" : faster ? "faster" : "not_faster";
  if (timed) b["faster_than_baseline"] = faster;
  if (as_json) std::cout << dump_json(r, 2) << "\n";
  else text(r);
  if (timed && !faster && !as_json)
    std::cout << fmt::format("no kernel faster than the baseline was found: the fastest correct one runs at {:.3f}x; keep the baseline "
                             "(the kernel is kept in {} for reference)\n",
                             b["speedup"].get<double>(), b["candidate"].get<std::string>());
  return !passed ? kExitFailed : timed && !faster ? kExitNotFaster : kExitOk;
}

// What a run of either kind takes from the command line (its target is chosen before), and where
// its candidates are evaluated: through the job queue (--redis; the workers check the room where they
// run), else here once the task fits the device's memory. Progress moves from the evaluator to the
// run, which says what each evaluation is for. The queue lives as long as the run.
Expected<std::unique_ptr<QueueEvaluations>> prepare_run(const OptimizeArgs& a, RunOptions& o) {
  o.task = a.task;
  o.out_dir = a.out;
  o.resume = a.resume;
  o.devices = a.devices;
  for (int d : o.devices)
    if (d < 0) return make_error(fmt::format("device {}: devices are counted from 0", d), "--devices 0,1");
  o.eval = eval_options(a.measure);
  std::unique_ptr<QueueEvaluations> remote;
  if (!a.queue.url.empty()) {
    if (a.task.empty()) return make_error("--redis with --resume of a run that did not use a queue: give the task too");
    auto r = open_remote(a.queue, a.task, o.target, o.eval.progress);
    if (!r) return Unexpected{r.error()};
    remote = std::move(*r);
    o.remote = remote.get();
  } else if (!a.task.empty()) {
    if (auto fits = native_task_fits(a.task, o.target, o.eval); !fits) return Unexpected{fits.error()};
  }
  o.progress = o.eval.progress;
  o.eval.progress = nullptr;
  return remote;
}

std::string shape_list(const std::vector<ShapeBinding>& v) {
  std::string s;
  for (const auto& b : v) s += (s.empty() ? "" : "; ") + format_binding(b);
  return s.empty() ? "-" : s;
}

}  // namespace

int Commands::sandbox_command(const SandboxArgs& a) {
  auto made = make_owned_temp_dir("kfab-sandbox");
  if (!made) return bad_input(false, made.error().message, made.error().hint);
  const fs::path dir = *made;
  SpawnOptions so;
  so.argv = a.argv;
  so.cwd = dir;
  // the environment a runner starts with: the allow-listed part of kfab's, and HOME and caches in the folder
  so.clean_env = true;
  so.env = sandbox_folder_env(dir);
  so.output_file = dir / "output.log";
  so.limits.sandbox = {.enabled = true, .writable_dir = dir, .confine_signals = !a.processes,
                       .deny_processes = !a.processes};
  auto child = Child::spawn(so);
  int rc = kExitBadInput;
  if (!child) {
    std::cerr << "kfab: " << child.error().to_string() << "\n";
  } else {
    const ExitStatus st = child->wait();
    std::ifstream in(dir / "output.log");
    std::cout << in.rdbuf();
    std::cerr << "kfab: the command " << st.describe() << " (its folder was " << dir.string() << ")\n";
    rc = st.exited ? st.code : 128 + st.signal;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return rc;
}

int Commands::doctor(const DoctorArgs& a) {
  json out = probe_system();
  out["backends"] = json::array();
  for (const auto& b : make_backends())
    out["backends"].push_back({{"target", b->target()}, {"dsl", b->dsl()}, {"score", b->probe()}, {"found", b->describe()}});
  out["paths"] = {{"store", Store::default_path().string()}, {"cache", cache_dir().string()},
                  {"runner", runner_path().string()}, {"abi_include", abi_include_dir().string()}};
  out["cpu_cores"] = std::thread::hardware_concurrency();
  if (!a.queue.url.empty()) {
    // The pool: the consumer group's workers (jobs held, idle time) and the jobs not yet taken.
    const QueueOptions qo = queue_options(a.queue);
    json pool = {{"url", qo.url}, {"queue", qo.name}, {"found", false}};
    if (auto q = JobQueue::open(qo); !q) {
      pool["why"] = q.error().message;
    } else if (auto w = q->workers(); !w) {
      pool["why"] = w.error().message;
    } else {
      pool["found"] = true;
      pool["workers"] = *w;
      if (auto st = q->counts()) pool.update(*st);
    }
    out["pool"] = pool;
  }
  if (a.json) {
    std::cout << dump_json(out, 2) << "\n";
    return kExitOk;
  }
  auto line = [](const std::string& what, const json& j, const std::string& value) {
    std::cout << fmt::format("{:<14} {}\n", what, j.value("found", false) ? value : "none (" + j.value("why", std::string("absent")) + ")");
  };
  for (const auto& c : out["compilers"]) line(c["name"].get<std::string>(), c, c.value("version", "") + "  " + c.value("path", ""));
  line("cuda toolkit", out["cuda_toolkit"], out["cuda_toolkit"].value("version", "") + "  " + out["cuda_toolkit"].value("home", ""));
  std::string gpus;
  for (const auto& d : out["gpus"]["devices"])
    gpus += (gpus.empty() ? "" : "; ") + d.value("name", "") + " (sm " + d.value("compute_capability", "?") + ")";
  line("gpus", out["gpus"], gpus + (out["gpus"].contains("driver_version") ? "  driver " + out["gpus"]["driver_version"].get<std::string>() : ""));
  const json& py = out["python"];
  line("python", py, py.value("python", "") + "  torch " + py.value("torch", "?") + "  triton " + py.value("triton", "?"));
  std::string plats;
  for (const auto& p : out["opencl"]["platforms"])
    plats += (plats.empty() ? "" : "; ") + p.value("name", "") + " (" + std::to_string(p.value("devices", 0)) + " devices)";
  line("opencl", out["opencl"], plats);
  line("ncu", out["ncu"], out["ncu"].value("version", "") + "  " + out["ncu"].value("path", ""));
  line("sandbox", out["sandbox"], out["sandbox"]["mode"].get<std::string>() + ": " + out["sandbox"]["summary"].get<std::string>());
  for (const auto& b : out["backends"])
    std::cout << fmt::format("{:<14} {} ({})\n", "backend " + b["target"].get<std::string>(),
                             b["score"].get<int>() > 0 ? "available" : "unavailable", b["found"].get<std::string>());
  std::cout << fmt::format("{:<14} {}\n{:<14} {}\n", "store", out["paths"]["store"].get<std::string>(), "cache",
                           out["paths"]["cache"].get<std::string>());
  if (out.contains("pool")) {
    const json& p = out["pool"];
    std::string workers;
    for (const auto& w : p.value("workers", json::array()))
      workers += fmt::format("\n{:<14}   {} ({} job{} held, idle {:.0f} s)", "", w.value("name", std::string("?")), w.value("pending", 0),
                             w.value("pending", 0) == 1 ? "" : "s", w.value("idle_s", 0.0));
    line("pool", p, fmt::format("{} queue {}: {} worker{}, {} job{} waiting, {} held{}", p["url"].get<std::string>(), p["queue"].get<std::string>(),
                                p.value("workers", json::array()).size(), p.value("workers", json::array()).size() == 1 ? "" : "s",
                                p.value("waiting", 0), p.value("waiting", 0) == 1 ? "" : "s", p.value("held", 0), workers));
  }
  return kExitOk;
}

int Commands::tasks(const TasksArgs& a) {
  std::error_code ec;
  if (!fs::exists(a.path, ec)) return bad_input(a.json, a.path + ": no such file or folder", "give a task folder or a folder of tasks");
  auto entries = discover_tasks(a.path);
  if (a.check) return check_tasks(a, entries);
  if (a.coverage) return coverage_tasks(a, entries);
  int broken = 0;
  json arr = json::array();
  Table table({"name", "format", "op class", "inputs", "outputs", "tune", "held out"});
  for (const auto& e : entries) {
    json j = {{"path", e.path.string()}, {"format", e.format}};
    if (e.task) {
      const Task& t = *e.task;
      auto tensors = [](const std::vector<TensorSpec>& v) {
        std::string s;
        json list = json::array();
        for (const auto& x : v) {
          std::string dims;
          for (const auto& d : x.shape) dims += (dims.empty() ? "" : ",") + d;
          s += (s.empty() ? "" : " ") + x.name + ":" + std::string(dtype_name(x.dtype)) + "[" + dims + "]";
          list.push_back({{"name", x.name}, {"dtype", dtype_name(x.dtype)}, {"shape", x.shape}});
        }
        return std::pair{s, list};
      };
      auto [ins, ins_j] = tensors(t.inputs);
      auto [outs, outs_j] = tensors(t.outputs);
      j.update({{"name", t.name}, {"op_class", t.op_class}, {"summary", t.summary}, {"inputs", ins_j},
                {"outputs", outs_j}, {"tune", t.tune}, {"heldout", t.heldout}});
      table.add({t.name, e.format, t.op_class.empty() ? "-" : t.op_class, ins, outs, shape_list(t.tune), shape_list(t.heldout)});
    } else if (e.format == "kernelbench") {
      // what the file declares beside KernelBench's format, read from its text (nothing is imported here)
      const auto file = read_file(e.path);
      const std::string text = file ? *file : std::string();
      auto declared = [&](const char* name) {
        static const std::string value = R"(\s*=\s*([^\n]*))";
        std::smatch m;
        if (!std::regex_search(text, m, std::regex(std::string("(^|\n)") + name + value))) return std::string();
        std::string v = m[2].str();
        if (const auto hash = v.find("  #"); hash != std::string::npos) v.resize(hash);
        while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.pop_back();
        if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
        return v;
      };
      const std::string op = declared("KFAB_OP_CLASS"), gpu = declared("KFAB_GPU"), heldout = declared("KFAB_HELDOUT");
      j["name"] = e.path.stem().string();
      j["op_class"] = op;
      j["tune"] = "the file's own sizes";
      if (!gpu.empty()) j["tune_gpu"] = gpu;
      if (!heldout.empty()) j["heldout"] = heldout;
      table.add({e.path.stem().string(), e.format, op.empty() ? "-" : op, "get_inputs()", "forward()",
                 gpu.empty() ? "its own" : "its own; gpu " + gpu, heldout.empty() ? "-" : heldout});
    } else {
      ++broken;
      j["error"] = e.error;
      table.add({e.path.filename().string(), "native", "BROKEN", e.error, "", "", ""});
    }
    arr.push_back(j);
  }
  if (a.json) {
    std::cout << dump_json(json{{"path", a.path}, {"tasks", arr}, {"broken", broken}}, 2) << "\n";
  } else if (entries.empty()) {
    std::cout << "no tasks under " << a.path << "\n";
  } else {
    std::cout << table.render();
    std::cout << fmt::format("{} tasks{}\n", entries.size(), broken ? fmt::format(", {} broken", broken) : "");
  }
  return broken ? kExitBadInput : kExitOk;
}

int Commands::check_tasks(const TasksArgs& a, const std::vector<TaskEntry>& entries) {
  EvalOptions opt = eval_options(MeasureArgs{});
  TorchInspector kb(a.target.empty() ? std::string(host_target().name) : a.target, opt);
  json arr = json::array();
  int degenerate = 0, failed = 0, checked = 0;
  for (const auto& e : entries) {
    if (e.format != "kernelbench") continue;
    ++checked;
    if (::isatty(2)) std::cerr << "kfab: check " << e.path.string() << "\n";
    auto r = kb.check(e.path);
    if (!r) {
      ++failed;
      arr.push_back({{"path", e.path.string()}, {"error", r.error().message}});
      if (!a.json) std::cout << e.path.stem().string() << ": ERROR " << r.error().message << "\n";
      continue;
    }
    json j = *r;
    j["path"] = e.path.string();
    if (j.value("degenerate", false)) ++degenerate;
    arr.push_back(j);
    if (!a.json) {
      std::string findings;
      for (const auto& s : j["shapes"])
        for (const auto& f : s["findings"]) findings += "\n    " + s["shape"].dump() + " " + f.get<std::string>();
      std::cout << e.path.stem().string() << ": " << (j.value("degenerate", false) ? "DEGENERATE" + findings : "ok") << "\n";
    }
  }
  if (a.json) std::cout << dump_json(json{{"checked", checked}, {"degenerate", degenerate}, {"errors", failed}, {"tasks", arr}}, 2) << "\n";
  else std::cout << fmt::format("{} KernelBench-format tasks checked: {} degenerate, {} errors\n", checked, degenerate, failed);
  if (failed > 0) return kExitBadInput;
  return degenerate > 0 ? kExitFailed : kExitOk;
}

namespace {

/// A refusal reason without what only one problem has (its node names, shapes and numbers), so that
/// refusals of one kind count together.
std::string reason_group(const std::string& reason) {
  static const std::regex node(R"( \(node [^)]*\))"), dims(R"(\[[^\]]*\])"), num(R"(\b\d+(\.\d+)?\b(?!-D))");
  static const std::regex ops(R"(\((aten\.[^)]*)\))");
  std::string g = std::regex_replace(reason, node, "");
  g = std::regex_replace(g, ops, "(...)");
  g = std::regex_replace(g, dims, "[..]");
  g = std::regex_replace(g, num, "N");
  return g.size() > 160 ? g.substr(0, 157) + "..." : g;
}

}  // namespace

int Commands::coverage_tasks(const TasksArgs& a, const std::vector<TaskEntry>& entries) {
  // default: the GPU target the tuner generates for, whether or not this machine has the GPU
  std::string target = a.target;
  for (const Target* t : targets())
    if (target.empty() && t->gpu && printer_for(t->name) != nullptr) target = t->name;
  if (printer_for(target) == nullptr || find_target(target) == nullptr || find_target(target)->torch_device.empty())
    return bad_input(a.json, "--coverage counts the templates of " + printer_targets() + ", not " + target);
  TorchInspector tracer(target, eval_options(MeasureArgs{}));
  json problems = json::array();
  std::map<std::string, int> groups;
  int taken = 0;
  const bool tty = ::isatty(2);
  for (size_t i = 0; i < entries.size(); ++i) {
    const TaskEntry& e = entries[i];
    if (tty) std::cerr << fmt::format("kfab: [{}/{}] trace {}\n", i + 1, entries.size(), e.path.string());
    json row;
    if (auto lt = e.loaded()) {
      row = tuner_coverage(*lt, target, tracer);
    } else {
      row = {{"path", e.path.string()}, {"format", e.format}, {"taken", false}, {"template", nullptr}, {"reason", lt.error().message}};
    }
    if (row.value("taken", false)) ++taken;
    else ++groups[reason_group(printable(row.value("reason", std::string("?")), 2000))];
    problems.push_back(row);
  }
  std::vector<std::pair<std::string, int>> sorted(groups.begin(), groups.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  json reasons = json::array();
  for (const auto& [r, n] : sorted) reasons.push_back({{"reason", r}, {"count", n}});
  if (a.json) {
    std::cout << dump_json(json{{"path", a.path}, {"target", target}, {"total", entries.size()}, {"taken", taken},
                                {"problems", problems}, {"refusals", reasons}}, 2)
              << "\n";
    return kExitOk;
  }
  Table table({"refused because", "problems"});
  for (const auto& [r, n] : sorted) table.add({r, std::to_string(n)});
  if (!sorted.empty()) std::cout << table.render();
  std::cout << fmt::format("the built-in tuner takes {} of {} tasks under {} on {} (tracing only)\n", taken, entries.size(), a.path, target);
  return kExitOk;
}


int Commands::optimize_task(OptimizeArgs a) {
  if (a.resume.empty() && a.task.empty()) return bad_input(a.json, "optimize needs a TASK (or --resume RUN)");
  if (!a.queue.url.empty() && !a.devices.empty())
    return bad_input(a.json, "--devices with --redis: the queue's workers evaluate on their own devices",
                     "leave out --devices; start a `kfab worker --redis URL --device D` per GPU");
  // A run of the built-in tuner resumes in the tuner, with the run's own settings.
  TuneOptions t;
  bool tuner = a.resume.empty() && (a.agents.llm.empty() || a.agents.llm == "none");
  if (!a.resume.empty()) {
    auto store = Store::open(Store::default_path());
    if (!store) return bad_input(a.json, store.error().message, store.error().hint);
    auto info = (*store)->run_info(a.resume);
    if (!info) return bad_input(a.json, info.error().message, info.error().hint);
    if ((*info).value("llm", std::string()) == "tuner") {
      tuner = true;
      t.resume = a.resume;
      a.task = (*info).value("task_path", std::string());
      a.target = (*info).value("target", std::string());
      const json& c = (*info)["config"];
      a.points = c.value("budget", a.points);
      a.out = c.value("out_dir", a.out);
    }
    // a run on many hosts sends its jobs to its queue again
    const json& c = (*info)["config"];
    if (a.queue.url.empty() && c.is_object() && c.contains("queue") && c["queue"].is_object()) {
      a.queue.url = c["queue"].value("url", std::string());
      a.queue.name = c["queue"].value("name", std::string());
      if (a.task.empty()) a.task = (*info).value("task_path", std::string());  // an agent run's: for the jobs' files
      if (a.target.empty()) a.target = (*info).value("target", std::string());
    }
  }
  if (tuner) {
    // No LLM: the built-in tuner.
    t.task = a.task;
    t.target = a.target;
    auto task = open_task(a.task);
    if (!task) return bad_input(a.json, task.error().message, task.error().hint);
    if (t.target.empty() && task->kernelbench()) {
      t.target = default_torch_target().name;  // KernelBench tasks: the GPU where there is one
      if (!a.json && !a.measure.quiet) std::cerr << "kfab: target " << t.target << "\n";
    } else if (t.target.empty()) {
      // The best target present for which the tuner has a template for this task.
      for (const auto& b : make_backends()) {
        if (b->probe() == 0 || templates_for(task->task, std::string(b->target())).empty()) continue;
        t.target = b->target();
        break;
      }
      if (t.target.empty()) t.target = default_target().name;  // tune() says what is missing
      if (!a.json && !a.measure.quiet) std::cerr << "kfab: target " << t.target << "\n";
    }
    t.budget = a.points;
    t.fresh = a.fresh;
    auto remote = prepare_run(a, t);
    if (!remote) return bad_input(a.json, remote.error().message, remote.error().hint);
    if (!a.json && !a.measure.quiet) std::cerr << "kfab: no --llm: the built-in tuner searches its kernel templates by measurement\n";
    return report_run(a.json, tune(t), [](const json& r) {
      const json& b = r["best"];
      std::cout << fmt::format("run {} (built-in tuner): {} parameter points evaluated; {}\n", r["run"].get<std::string>(),
                               r["candidates"].get<int>(), r["stopped_because"].get<std::string>());
      if (b["candidate"].is_null()) {
        std::cout << "no parameter point passed\n";
      } else {
        std::cout << fmt::format("{}: {} ({})\n", r["outcome"] == "faster" ? "best" : "fastest correct (slower than the baseline)",
                                 b["candidate"].get<std::string>(), format_params(r["tuner"]["params"].get<TemplateParams>()));
        std::cout << fmt::format("{} ({:.2f}x): {}\n", b["disposition"].get<std::string>(),
                                 b["speedup"].is_null() ? 0.0 : b["speedup"].get<double>(), b.value("detail", std::string()));
      }
    });
  }
  OptimizeOptions o = a.agents;
  o.target = a.target.empty() ? default_device_target() : a.target;
  auto remote = prepare_run(a, o);
  if (!remote) return bad_input(a.json, remote.error().message, remote.error().hint);
  return report_run(a.json, optimize(o), [](const json& r) {
    const json& b = r["best"];
    std::cout << fmt::format("run {}: {} steps, {} candidates, {} + {} tokens, ${:.4f}; stopped: {}\n", r["run"].get<std::string>(),
                             r["steps"].get<int>(), r["candidates"].get<int>(), r["tokens_in"].get<int64_t>(), r["tokens_out"].get<int64_t>(),
                             r["cost"].get<double>(), r["stopped_because"].get<std::string>());
    if (b["candidate"].is_null()) std::cout << "no candidate passed (last: " << b["disposition"].get<std::string>() << ")\n";
    else std::cout << fmt::format("{}: {} ({}, {:.3f}x, held-out shapes included)\n",
                                  r["outcome"] == "faster" ? "best" : "fastest correct (slower than the baseline)", b["candidate"].get<std::string>(),
                                  b["disposition"].get<std::string>(), b["speedup"].is_null() ? 0.0 : b["speedup"].get<double>());
  });
}

int Commands::export_modelnew(const ExportArgs& a) {
  std::error_code ec;
  if (!fs::is_regular_file(a.candidate, ec)) return bad_input(a.json, a.candidate + ": no such candidate file");
  auto task = open_task(a.task);
  if (!task || !task->kernelbench())
    return bad_input(a.json, a.task + ": not a KernelBench-format task file", "export is for .py tasks (Model, get_inputs, get_init_inputs)");
  if (fs::path(a.modelnew).extension() != ".py") return bad_input(a.json, a.modelnew + ": the ModelNew file must end in .py");
  if (auto r = run_export({"--task", a.task, "--candidate", a.candidate, "--out", a.modelnew}, 60.0); !r)
    return bad_input(a.json, r.error().message);
  if (a.json) std::cout << dump_json(json{{"modelnew", a.modelnew}, {"task", a.task}, {"candidate", a.candidate}}, 2) << "\n";
  else std::cout << "wrote " << a.modelnew << ": ModelNew for " << fs::path(a.task).stem().string() << " from " << a.candidate << "\n";
  return kExitOk;
}

int Commands::eval(const EvalArgs& a) {
  // The task is opened once; its format picks how the candidate runs (eval/harness.h).
  auto task = open_task(a.task);
  if (!task) return bad_input(a.json, task.error().message, task.error().hint);
  std::error_code ec;
  if (!fs::is_regular_file(a.candidate, ec)) return bad_input(a.json, a.candidate + ": no such candidate file");
  const EvalOptions opt = eval_options(a.measure);
  std::string target = a.target;
  if (task->kernelbench()) {
    // A KernelBench file runs where torch runs it: the GPU where there is one.
    if (target.empty()) target = default_device_target();
  } else {
    auto backend = native_backend_for(a.target, a.candidate);
    if (!backend) return bad_input(a.json, backend.error().message, backend.error().hint);
    target = std::string((*backend)->target());
    if (auto fits = fits_target(task->task, target, opt, ", or a larger --memory-limit GIB"); !fits)
      return bad_input(a.json, fits.error().message, fits.error().hint);
  }
  EvalOptions eopt = opt;
  eopt.end_to_end = task->kernelbench() && !a.no_end_to_end;
  Evaluator evaluator(*task, target, eopt);
  // What the command did before the evaluation (probing the machine, opening the task): part of what
  // a user waits for, outside the verdict's wall_s.
  const double startup_s = seconds_since_process_start();
  auto verdict = evaluator.evaluate(a.candidate);
  if (!verdict) return bad_input(a.json, verdict.error().message, verdict.error().hint);
  verdict->extra["phases_s"]["startup"] = startup_s;
  return report_verdict(a, task->task, *verdict);
}

int Commands::compare(const CompareArgs& a) {
  auto task = open_task(a.task);
  if (!task) return bad_input(a.json, task.error().message, task.error().hint);
  std::error_code ec;
  for (const auto& c : {a.a, a.b})
    if (!fs::is_regular_file(c, ec)) return bad_input(a.json, c + ": no such candidate file");
  EvalOptions opt = eval_options(a.measure);
  opt.end_to_end = false;
  opt.compile_baseline = false;  // the pair is the comparison; torch eager stays in the rotation
  std::string target = a.target;
  if (task->kernelbench()) {
    if (target.empty()) target = default_device_target();
  } else {
    for (const auto& c : {a.a, a.b}) {
      auto backend = native_backend_for(target, c);
      if (!backend) return bad_input(a.json, backend.error().message, backend.error().hint);
      if (target.empty()) target = std::string((*backend)->target());
    }
    if (auto fits = fits_target(task->task, target, opt, ", or a larger --memory-limit GIB"); !fits)
      return bad_input(a.json, fits.error().message, fits.error().hint);
  }
  Evaluator evaluator(*task, target, opt);
  auto out = evaluator.compare(a.a, a.b);
  if (!out) return bad_input(a.json, out.error().message, out.error().hint);
  const bool compared = out->contains("a_over_b");
  if (a.json) {
    std::cout << dump_json(*out, 2) << "\n";
  } else {
    for (const char* side : {"a", "b"}) {
      const json& s = (*out)[side];
      std::cout << fmt::format("{}: {} {}{}\n", side, s.value("candidate", ""), s.value("disposition", ""),
                               s.contains("speedup") ? fmt::format(" ({:.3f}x the baseline)", s["speedup"].get<double>())
                               : s.contains("detail") ? ": " + s["detail"].get<std::string>() : "");
    }
    for (const auto& sh : out->value("shapes", json::array()))
      std::cout << fmt::format("  {}: a {:.4f} ms, b {:.4f} ms, a/b {:.3f}x\n", sh.value("shape", ""), sh["a_ms"].value("median", 0.0),
                               sh["b_ms"].value("median", 0.0), sh.value("a_over_b", 0.0));
    std::cout << out->value("verdict", "") << "\n";
  }
  return compared ? kExitOk : kExitFailed;
}

Expected<std::unique_ptr<Backend>> Commands::native_backend_for(const std::string& target, const std::string& candidate) const {
  std::unique_ptr<Backend> backend;
  // How well a backend's extensions fit the file: the longest matching suffix (".cl.cpp" beats ".cpp").
  auto fit = [&](const Backend& b) {
    size_t best = 0;
    for (const auto& e : b.extensions())
      if (candidate.size() >= e.size() && candidate.compare(candidate.size() - e.size(), e.size(), e) == 0)
        best = std::max(best, e.size());
    return best;
  };
  if (target.empty()) {
    // The best target present that takes this kind of file.
    size_t best_fit = 0;
    for (auto& b : make_backends()) {
      const size_t f = fit(*b);
      if (b->probe() > 0 && f > best_fit) {
        best_fit = f;
        backend = std::move(b);
      }
    }
    if (!backend)
      return make_error("no target available here takes " + candidate, suffixes_hint() + "; `kfab doctor` says what is here");
  } else {
    backend = make_backend(target);
    if (!backend) return make_error("unknown target \"" + target + "\"", "accepted: " + target_names());
    if (backend->probe() == 0) return make_error("target " + target + " is not available here: " + backend->describe());
  }
  if (fit(*backend) == 0) {
    std::string list;
    for (const auto& e : backend->extensions()) list += (list.empty() ? "" : ", ") + e;
    return make_error(candidate + ": a " + std::string(backend->target()) + " candidate must be one of " + list,
                      "the target is chosen with --target");
  }
  return backend;
}


int Commands::report_verdict(const EvalArgs& a, const Task& task, const Verdict& v) {
  json out = v.to_json();
  if (!a.no_store) {
    const fs::path db = a.db.empty() ? Store::default_path() : fs::path(a.db);
    auto store = Store::open(db);
    auto source = read_file(a.candidate);
    // The verdict stands either way; a store that cannot take it (a full disk, a damaged file) is said
    // on stderr and, under --json, in "store": {"db", "error"}.
    auto not_recorded = [&](const Error& e) {
      std::cerr << "kfab: warning: the evaluation was not recorded: " << e.to_string() << "\n";
      out["store"] = {{"db", db.string()}, {"error", e.to_string()}};
    };
    if (!store) {
      not_recorded(store.error());
    } else if (auto id = (*store)->record_evaluation(task, source ? *source : "", v); !id) {
      not_recorded(id.error());
    } else {
      out["store"] = {{"db", db.string()}, {"evaluation", *id}};
    }
  }

  if (a.json) {
    std::cout << dump_json(out, 2) << "\n";
  } else {
    Table t({"shape", "set", "status", "max abs err", "max rel err", "median ms", "iqr ms", "n", "baseline ms", "speedup", "% of bound"});
    for (const auto& s : out["shapes"]) {
      std::string shape;
      for (const auto& [k, val] : s["shape"].items()) shape += (shape.empty() ? "" : " ") + k + "=" + std::to_string(val.get<int64_t>());
      const json none;
      const json& tm = s.contains("time_ms") ? s["time_ms"] : none;
      const json& bl = s.contains("baseline_ms") ? s["baseline_ms"] : none;
      t.add({shape, s["heldout"].get<bool>() ? "heldout" : "tune", s["status"].get<std::string>(),
             fmt_num(s.value("max_abs_err", json())), fmt_num(s.value("max_rel_err", json())),
             tm.is_object() ? fmt_num(tm["median"], "{:.4f}") : "-", tm.is_object() ? fmt_num(tm["iqr"], "{:.4f}") : "-",
             tm.is_object() ? std::to_string(tm["n"].get<int64_t>()) : "-",
             bl.is_object() ? fmt_num(bl["median"], "{:.4f}") : "-",
             s.contains("speedup") ? fmt_num(s["speedup"], "{:.2f}x") : "-",
             s.contains("percent_of_bound") ? fmt_num(s["percent_of_bound"], "{:.1f}%") : "-"});
    }
    std::cout << fmt::format("task {}  candidate {}  target {}/{}\n", v.task, v.candidate, v.target, v.dsl);
    if (!v.shapes.empty() && v.disposition != Disposition::CompileFailed) std::cout << t.render();
    for (const auto& s : out["shapes"]) {
      if (!s.contains("clocks") && !s.contains("achieved_GBps")) continue;
      std::string line = "  " + s["shape"].dump() + ":";
      if (s.contains("achieved_GBps"))
        line += fmt::format(" {:.0f} GB/s ({:.1f}% of the measured copy bandwidth)", s["achieved_GBps"].get<double>(),
                            s["percent_of_copy_bandwidth"].get<double>());
      if (s.contains("timer")) line += "; timer: " + s["timer"].get<std::string>();
      if (s.contains("clocks") && s["clocks"].value("recorded", false))
        line += fmt::format("; SM {}-{} MHz, memory {}-{} MHz, clock reasons: {}", s["clocks"]["sm_mhz_min"].get<unsigned>(),
                            s["clocks"]["sm_mhz_max"].get<unsigned>(), s["clocks"]["mem_mhz_min"].get<unsigned>(),
                            s["clocks"]["mem_mhz_max"].get<unsigned>(), s["clocks"]["reasons"].get<std::string>());
      if (s.contains("warning")) line += "; WARNING: " + s["warning"].get<std::string>();
      std::cout << line << "\n";
    }
    const json kernels = v.profile.is_object() ? v.profile.value("kernels", json::object()) : json::object();
    if (v.profile.is_object() && v.profile.contains("error"))
      std::cout << "profile: " << v.profile["error"].get<std::string>() << "\n";
    for (const auto& [kernel, k] : kernels.items()) {
      std::string stalls;
      for (const auto& st : k.value("top_stalls", json::array()))
        stalls += (stalls.empty() ? "" : ", ") + st["reason"].get<std::string>() + fmt::format(" {:.2f}", st["cycles_per_issue"].get<double>());
      std::cout << fmt::format("profile {}: {:.1f} us, DRAM {:.0f}%, SM {:.0f}%, occupancy {:.0f}%, {:.0f} regs, L1 hit {:.0f}%, "
                               "L2 hit {:.0f}%; top stalls: {}\n",
                               kernel.substr(0, 60), k.value("duration_ns", 0.0) / 1e3, k.value("dram_throughput_pct", 0.0),
                               k.value("sm_throughput_pct", 0.0), k.value("achieved_occupancy_pct", 0.0),
                               k.value("registers_per_thread", 0.0), k.value("l1_hit_rate_pct", 0.0),
                               k.value("l2_hit_rate_pct", 0.0), stalls);
    }
    for (const auto& s : out["shapes"])
      if (s.contains("compile_ms"))
        std::cout << fmt::format("  {}: torch.compile {:.4f} ms ({:.2f}x); {}\n", s["shape"].dump(),
                                 s["compile_ms"]["median"].get<double>(), s["speedup_vs_compile"].get<double>(),
                                 s.value("compile_baseline", std::string()));
    std::cout << fmt::format("{}{}: {}\n", disposition_name(v.disposition),
                             v.speedup ? fmt::format(" ({:.2f}x)", *v.speedup) : "", v.detail);
  }
  return v.passed() ? kExitOk : kExitFailed;
}

namespace {

std::string clock_text(double s) {
  const int t = static_cast<int>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02d}:{:02d}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02d}", t / 60, t % 60);
}

std::string pct(const json& v) { return v.is_number() ? fmt::format("{:.1f}%", 100.0 * v.get<double>()) : "-"; }
std::string times(const json& v) { return v.is_number() ? fmt::format("{:.2f}x", v.get<double>()) : "-"; }

}  // namespace

int Commands::worker(const WorkerArgs& a) {
  WorkerOptions w;
  w.queue = queue_options(a.queue);
  w.queue.lease_s = a.lease_s;
  w.device = a.device;
  w.max_jobs = a.max_jobs;
  w.name = a.name;
  w.work_dir = a.work_dir;
  w.eval = eval_options(MeasureArgs{});
  w.eval.progress = nullptr;
  if (!a.quiet) w.say = [](const std::string& line) { std::cerr << "kfab: " << line << std::endl; };
  auto r = run_worker(w);
  if (!r) return bad_input(false, r.error().message, r.error().hint);
  return 0;
}

int Commands::bench_serve_slot(const BenchArgs& a) {
  std::unique_ptr<TorchInspector> tracer;  // warm from one task to the next
  // Not inherited by what the tasks start: a runner or worker that outlives this kfab must not keep
  // the reply pipe open (the bench waits for its end).
  ::fcntl(3, F_SETFD, FD_CLOEXEC);
  ::fcntl(4, F_SETFD, FD_CLOEXEC);
  std::string pending;
  char buf[4096];
  auto reply = [](const std::string& line) {
    for (size_t off = 0; off < line.size();) {
      const ssize_t n = ::write(4, line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  };
  for (;;) {
    const auto nl = pending.find('\n');
    if (nl == std::string::npos) {
      const ssize_t n = ::read(3, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 0;
      pending.append(buf, static_cast<size_t>(n));
      continue;
    }
    const std::string dir = pending.substr(0, nl);
    pending.erase(0, nl + 1);
    if (dir.empty()) return 0;
    // The task's output in its own folder: this kfab's lines and its runners' and workers'.
    std::cout << std::flush;
    std::cerr << std::flush;
    if (const int log = ::open((fs::path(dir) / "log.txt").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644); log >= 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
      ::close(log);
    }
    BenchOptions o;
    o.resume = dir;
    o.eval = eval_options(a.measure);
    o.eval.progress = nullptr;
    o.tracer = &tracer;
    o.say = [](const std::string& line) { std::cerr << "kfab: " << line << std::endl; };
    o.detail = [](const std::string& line) { std::cerr << "  " << line << std::endl; };
    auto r = run_bench(o);
    std::cout << std::flush;
    std::string line = r ? std::string("done") : "error " + r.error().message;
    for (char& c : line)
      if (c == '\n' || c == '\r') c = ' ';
    reply(line + "\n");
  }
}

int Commands::bench(const BenchArgs& a) {
  if (a.serve_slot) return bench_serve_slot(a);
  if (!a.queue.url.empty() && !a.devices.empty())
    return bad_input(a.json, "--devices with --redis: the queue's workers run the tasks on their own devices",
                     "leave out --devices; start a `kfab worker --redis URL --device D` per GPU");
  const bool suite_given = bench_->count("SUITE") > 0;
  if (a.resume.empty() != suite_given)
    return bad_input(a.json, !suite_given ? "bench needs a SUITE (a folder of tasks), or --resume BENCH_DIR"
                                          : "bench takes a SUITE or --resume BENCH_DIR, not both",
                     "--resume goes on with the suite and the settings the stopped bench was started with");
  if (!a.resume.empty()) {
    // Everything comes from the stopped bench; options that would change it are refused, not ignored.
    for (const char* o : {"--target", "--eval", "--llm", "--budget", "--points", "--fresh", "--seeds", "--min-time",
                          "--timeout", "--no-compile", "--filter", "--sample", "--atol", "--rtol", "--judge", "--out"})
      if (bench_->count(o) > 0)
        return bad_input(a.json, std::string(o) + " cannot change a bench that is resumed",
                         "resume without it (the bench's own settings apply), or start a new bench");
  }
  BenchOptions o;
  o.resume = a.resume;
  o.suite = a.suite;
  o.target = a.target;
  o.mode = a.eval ? "eval" : "optimize";
  o.llm = a.llm;
  o.points = a.points;
  o.budget = a.budget;
  o.fresh = a.fresh;
  o.out_dir = a.out;
  o.report = a.report;
  o.filter = a.filter;
  o.sample = a.sample;
  o.devices = a.devices;
  o.queue = queue_options(a.queue);
  o.eval = eval_options(a.measure);
  o.eval.progress = nullptr;
  if (suite_given) {  // a resumed bench's tasks were checked when it started
    std::error_code ec;
    const std::string target = a.target.empty() ? default_device_target() : a.target;
    auto selected = fs::exists(a.suite, ec) ? select_tasks(discover_tasks(a.suite), a.filter, a.sample) : std::vector<TaskEntry>{};
    if (!selected) return bad_input(a.json, selected.error().message, selected.error().hint);
    for (const auto& e : *selected)
      if (e.task)
        if (auto fits = fits_target(*e.task, target, o.eval); !fits) return bad_input(a.json, fits.error().message, fits.error().hint);
  }
  const bool tty = ::isatty(2) != 0;
  // On a terminal: the tuner's lines scroll above a status line that is redrawn in place; otherwise
  // plain lines, one when a task starts and one when it ends.
  std::string status_line;
  auto print = [&](const std::string& line) {
    if (tty) std::cerr << "\r\033[K" << line << "\n" << status_line << std::flush;
    else std::cerr << line << "\n";
  };
  if (!a.measure.quiet) {
    o.say = [&](const std::string& s) { print("kfab: " + s); };
    if (tty) o.detail = [&](const std::string& s) { print("  " + s); };
    o.status = [&, tty](const BenchStatus& st) {
      std::string s = fmt::format("[{}/{}] {} passed", st.done, st.total, st.passed);
      if (!st.current.empty()) s += " | now " + st.current;
      if (!st.best.empty()) s += " | best " + st.best;
      s += " | " + clock_text(st.elapsed_s);
      if (st.left_s >= 0 && !st.current.empty()) s += ", ~" + clock_text(st.left_s) + " left";
      if (tty) {
        status_line = st.current.empty() ? std::string() : s;
        std::cerr << "\r\033[K" << status_line << std::flush;
      } else if (!st.current.empty()) {
        std::cerr << "kfab: " << s << "\n";
      }
    };
  }
  auto r = run_bench(o);
  if (tty && !a.measure.quiet) std::cerr << "\r\033[K" << std::flush;
  if (!r) return bad_input(a.json, r.error().message, r.error().hint);
  const json& sc = (*r)["scores"];
  if (a.json) {
    json out = *r;
    for (auto& t : out["tasks"]) t.erase("report");  // the runs are in bench.json and the HTML page
    std::cout << dump_json(out, 2) << "\n";
  } else {
    Table t({"task", "result", "speedup", "vs compile", "SOL score", "% of bound", "held-out", "wall s"});
    for (const auto& row : (*r)["tasks"]) {
      const json& h = row.value("heldout", json::object());
      t.add({row["task"].get<std::string>(), row.value("disposition", std::string("-")), times(row.value("speedup", json())),
             times(row.value("speedup_vs_compile", json())), fmt_num(row.value("sol_score", json()), "{:.3f}"),
             fmt_num(row.value("percent_of_bound", json()), "{:.1f}"),
             h.value("total", 0) > 0 ? fmt::format("{}/{}", h.value("passed", 0), h.value("total", 0)) : "-",
             fmt_num(row.value("wall_s", json()), "{:.1f}")});
    }
    std::cout << t.render();
    const json& fp = sc["fast_p"];
    std::cout << fmt::format(
        "{}/{} correct ({}); fast_1 {}, fast_1.2 {}, fast_2 {}; geometric-mean speedup {} over {}{}; SOL score {}; {:s}% of bound on average; "
        "held-out retention {}\n",
        sc["correct"].get<int>(), sc["tasks"].get<int>(), pct(sc["correctness_rate"]), pct(fp["1"]), pct(fp["1.2"]), pct(fp["2"]),
        times(sc["geomean_speedup"]), (*r)["mode"] == "optimize" && (*r)["tasks"].size() && (*r)["tasks"][0].value("format", "") == "kernelbench" ? "torch eager" : "the baseline",
        sc["geomean_speedup_vs_compile"].is_number() ? ", " + times(sc["geomean_speedup_vs_compile"]) + " over torch.compile" : "",
        fmt_num(sc["sol_score"], "{:.3f}"), fmt_num(sc["mean_percent_of_bound"], "{:.1f}"), pct(sc["heldout_retention"]));
    std::cout << fmt::format("report: {}\nscores: {}/bench.json, tasks.csv, scores.csv\n", (*r)["report"].get<std::string>(),
                             (*r)["out_dir"].get<std::string>());
  }
  return sc["correct"] == sc["tasks"] ? kExitOk : kExitFailed;
}

int Commands::report(const ReportArgs& a) {
  std::error_code ec;
  fs::path as_bench = a.run;
  if (fs::is_directory(as_bench, ec)) as_bench /= "bench.json";
  if (fs::is_regular_file(as_bench, ec)) {
    auto text = read_file(as_bench);
    if (!text) return bad_input(a.json, text.error().message);
    json b;
    try {
      b = json::parse(*text);
    } catch (const json::exception& e) {
      return bad_input(a.json, as_bench.string() + ": not a bench file: " + e.what());
    }
    if (!b.is_object() || !b.contains("tasks")) return bad_input(a.json, as_bench.string() + ": not a bench file (no \"tasks\")");
    const fs::path out = a.html.empty() ? as_bench.parent_path() / "report.html" : fs::path(a.html);
    if (auto ok = write_file_atomic(out, render_bench_html(b)); !ok) return bad_input(a.json, ok.error().message);
    if (a.json) std::cout << dump_json(json{{"bench", b.value("bench", "")}, {"html", fs::absolute(out).string()}, {"scores", b.value("scores", json())}}, 2) << "\n";
    else std::cout << "report: " << fs::absolute(out).string() << "\n";
    return kExitOk;
  }
  auto store = Store::open(a.db.empty() ? Store::default_path() : fs::path(a.db));
  if (!store) return bad_input(a.json, store.error().message);
  std::string run = a.run;
  if (run == "latest") {
    auto l = (*store)->latest_run();
    if (!l || l->empty()) return bad_input(a.json, "the store holds no run yet");
    run = *l;
  }
  auto rep = run_report(**store, run);
  if (!rep) return bad_input(a.json, rep.error().message, "`kfab report` takes a run id (kfab optimize prints it), latest, or a bench folder");
  if (!a.html.empty())
    if (auto ok = write_file_atomic(a.html, render_run_html(*rep)); !ok) return bad_input(a.json, ok.error().message);
  if (a.json) {
    json out = *rep;
    if (!a.html.empty()) out["html"] = fs::absolute(a.html).string();
    std::cout << dump_json(out, 2) << "\n";
    return kExitOk;
  }
  std::cout << fmt::format("run {}: {} on {} ({}, {}), {}\n", run, rep->value("task", ""), rep->value("target", ""), rep->value("llm", ""),
                           rep->value("strategy", ""), rep->value("status", ""));
  Table t({"step", "role", "result", "speedup", "detail"});
  for (const auto& s : (*rep)["steps"])
    t.add({std::to_string(s["seq"].get<int64_t>()), s["role"].get<std::string>(), s["disposition"].get<std::string>(), times(s["speedup"]),
           s["detail"].get<std::string>().substr(0, 80)});
  std::cout << t.render();
  if (!a.html.empty()) std::cout << "report: " << fs::absolute(a.html).string() << "\n";
  return kExitOk;
}

}  // namespace kfab::cli
