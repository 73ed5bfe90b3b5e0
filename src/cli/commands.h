#pragma once
/// The subcommands: each registers its options on the CLI11 app and runs when chosen.

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/discover.h"
#include "core/process.h"
#include "core/task.h"
#include "eval/evaluator.h"
#include "eval/verdict.h"
#include "dist/remote_eval.h"

namespace kfab::cli {

constexpr std::string_view kVersion = "0.1.0";

/// Exit codes of DESIGN.md section 2.3.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitBadInput = 2;

class Commands {
 public:
  explicit Commands(CLI::App& app);
  /// Runs the chosen subcommand; returns the exit code.
  int run();

 private:
  int doctor();
  int tasks();
  int eval();
  /// The backend a native candidate file runs on: --target, or the best present that takes the file.
  Expected<std::unique_ptr<Backend>> native_backend_for(const std::string& candidate) const;
  int export_modelnew();
  int optimize_task();
  Expected<std::unique_ptr<QueueEvaluations>> open_remote(const std::string& task, const std::string& target,
                                                          const std::function<void(const std::string&)>& say);
  int bench();
  int bench_serve_slot();
  int worker();
  int report();
  int sandbox_command();
  int check_tasks(const std::vector<TaskEntry>& entries);
  int coverage_tasks(const std::vector<TaskEntry>& entries);
  EvalOptions eval_options() const;
  int report_verdict(const Task& task, const Verdict& v);

  CLI::App& app_;
  CLI::App* doctor_ = nullptr;
  CLI::App* tasks_ = nullptr;
  CLI::App* eval_ = nullptr;
  CLI::App* export_ = nullptr;
  CLI::App* mcp_ = nullptr;
  CLI::App* optimize_ = nullptr;
  CLI::App* bench_ = nullptr;
  CLI::App* report_ = nullptr;
  CLI::App* sandbox_ = nullptr;
  CLI::App* worker_ = nullptr;
  std::vector<std::string> sandbox_argv_;
  bool sandbox_processes_ = false;
  bool json_ = false;
  std::string path_ = "tasks";
  std::string task_;
  std::string candidate_;
  std::string target_;
  std::string db_;
  double timeout_s_ = 60.0;
  int seeds_ = 5;
  int min_calls_ = 0;
  double min_time_s_ = -1.0;
  double memory_gib_ = 0.0;
  bool no_store_ = false;
  bool quiet_ = false;
  bool profile_ = false;
  std::string dtype_ = "f32";
  std::optional<double> atol_, rtol_;
  std::string compile_mode_ = "default";
  bool no_compile_ = false;
  bool fresh_baselines_ = false;
  std::vector<std::string> forbid_;
  bool check_ = false;
  bool coverage_ = false;
  bool no_end_to_end_ = false;  ///< eval --no-end-to-end
  std::string bench_resume_;  ///< bench --resume BENCH_DIR
  std::vector<int> devices_;  ///< bench --devices
  bool serve_slot_ = false;   ///< bench --serve-slot (hidden: what --devices starts on a device)
  std::string redis_url_;     ///< bench and worker --redis
  std::string queue_name_;    ///< --queue
  int worker_device_ = -1;    ///< worker --device
  double lease_s_ = 60.0;     ///< worker --lease
  int max_jobs_ = 0;          ///< worker --max-jobs
  std::string worker_name_;   ///< worker --name
  std::string worker_dir_;    ///< worker --work-dir
  CLI::Option* bench_suite_ = nullptr;  ///< bench SUITE (absent with --resume)
  std::string filter_;  ///< bench --filter
  int sample_ = 0;      ///< bench --sample
  bool no_heldout_ = false;
  std::string dsl_;
  std::string llm_;
  std::string config_;
  std::string strategy_ = "refine";
  std::string resume_;
  int budget_ = 8;
  int64_t budget_tokens_ = 0;
  double budget_dollars_ = 0.0;
  double budget_time_s_ = 0.0;
  int budget_tuner_ = 64;
  bool fresh_ = false;
  std::string out_;
  std::string html_;
  bool bench_eval_ = false;
};

}  // namespace kfab::cli
