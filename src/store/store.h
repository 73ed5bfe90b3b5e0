#pragma once
/// The store: one SQLite file with tasks, candidates (by content hash) and evaluations. WAL mode and
/// IMMEDIATE transactions let several kfab processes write at once; every write is one transaction.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "core/task.h"
#include "eval/verdict.h"

struct sqlite3;

namespace kfab {

class Store {
 public:
  /// Opens (creating it and its folder if needed) and migrates the store.
  static Expected<std::unique_ptr<Store>> open(const std::filesystem::path& file);
  /// data_dir()/kfab.db
  /// $KFAB_DB (set by --db of optimize, bench, mcp and worker, for every process they start), else kfab.db
  /// in the data folder.
  static std::filesystem::path default_path();
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Records a task (once per manifest content), the candidate's source (once per hash) and the
  /// evaluation; returns the evaluation's id.
  Expected<int64_t> record_evaluation(const Task& task, const std::string& candidate_source, const Verdict& v);

  struct EvaluationRow {
    int64_t id = 0;
    std::string task;
    std::string candidate_hash;
    std::string target;
    std::string disposition;
    std::optional<double> speedup;
    std::string created_at;
  };
  /// The most recent evaluations, newest first.
  Expected<std::vector<EvaluationRow>> recent_evaluations(int limit);
  /// The evaluations of one task (by name), newest first, with each candidate's path.
  struct TaskEvaluation {
    EvaluationRow row;
    std::string candidate_path;
    std::string dsl;
    std::string verdict;  ///< the verdict's JSON
  };
  Expected<std::vector<TaskEvaluation>> task_evaluations(const std::string& task, int limit);
  // Optimization runs.
  struct Step {
    int64_t seq = 0;
    std::string role;             ///< planner, coder, fixer, analyst, final
    std::string call_hash;        ///< the LLM exchange (llm_calls), empty for none
    std::string candidate_hash;   ///< empty when the step produced no candidate
    std::string candidate_path;
    std::optional<int64_t> evaluation_id;
    std::string disposition;      ///< a verdict's, or no_code, or empty (planner, analyst)
    std::optional<double> speedup;
    std::string detail;           ///< the verdict's detail, or the plan / recommendation text
    int64_t tokens_in = 0, tokens_out = 0;
    double cost = 0.0;
  };
  Expected<void> create_run(const std::string& id, const std::string& task, const std::string& task_path,
                            const std::string& target, const std::string& llm, const std::string& strategy,
                            const std::string& config_json);
  Expected<void> set_run_status(const std::string& id, const std::string& status);
  /// The id of the newest run; empty when there is none.
  Expected<std::string> latest_run();
  /// {task, task_path, target, llm, strategy, config, status}; an Error when there is no such run.
  Expected<nlohmann::json> run_info(const std::string& id);
  Expected<void> add_step(const std::string& run_id, const Step& s);
  Expected<std::vector<Step>> run_steps(const std::string& run_id);
  /// An LLM exchange, stored once per hash (of the request).
  Expected<void> put_llm_call(const std::string& hash, const std::string& provider, const std::string& request,
                              const std::string& response, int64_t tokens_in, int64_t tokens_out, double cost);
  /// The response text of a stored exchange.
  Expected<std::string> llm_response(const std::string& hash);
  /// The stored source of a candidate.
  Expected<std::string> candidate_source(const std::string& hash);
  /// The verdict JSON an evaluation recorded.
  Expected<nlohmann::json> evaluation_verdict(int64_t id);
  Expected<int64_t> count(const std::string& table);
  /// PRAGMA integrity_check == "ok"
  Expected<bool> integrity_ok();

  static constexpr int kSchemaVersion = 2;

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Expected<void> exec(const std::string& sql);
  Expected<void> migrate();
  sqlite3* db_;
};

}  // namespace kfab
