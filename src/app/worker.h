#pragma once
/// `kfab worker`: takes evaluation jobs from a Redis job queue (dist/queue.h), one at a time, on this
/// host (pinned to one GPU with `--device`), and writes each result back once.
///
/// A job is one of two kinds. A bench's ("bench", the default): one task of a bench, its files (base64,
/// so any bytes travel), the task's path among them and the one-task bench to run (the submitting
/// bench's settings); the worker writes them into its work folder, runs the bench there (`--resume` of
/// the one-task bench) with its tracer warm from job to job, and writes {row, worker, host, device} as
/// the job's result. An optimize run's ("eval", dist/remote_eval.h): one candidate of a task, with the
/// task's files and the protocol; the worker evaluates it (kfab's own candidates with the task's
/// processes kept warm from job to job) and writes {verdict, worker, host, device}.
#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "dist/job_files.h"
#include "dist/queue.h"
#include "app/bench.h"

namespace kfab {

struct WorkerOptions {
  QueueOptions queue;
  std::string name;                   ///< its consumer name (default HOST-PID, with -gD for --device D)
  int device = -1;                    ///< cuda: the GPU it is pinned to (as nvidia-smi counts); -1: as it is
  int max_jobs = 0;                   ///< ends after this many jobs; 0: never
  std::filesystem::path work_dir;     ///< where jobs are unpacked (default: a folder under the cache)
  EvalOptions eval;                   ///< the CLI's defaults (a job's settings override them)
  std::function<void(const std::string&)> say;
};

/// Runs jobs until max_jobs or a signal. An Error when the queue cannot be reached.
Expected<void> run_worker(const WorkerOptions& opt);

/// The job payload of one task for a bench: its files and the one-task bench (`one`, without suite).
/// An Error when its files are too large to send (64 MiB).
Expected<nlohmann::json> task_job_payload(const TaskEntry& e, const nlohmann::json& one);

}  // namespace kfab
