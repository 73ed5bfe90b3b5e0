#pragma once
/// Evaluation jobs across hosts through Redis Streams (issue 26): a bench (the submitter) adds a job
/// per task to a stream; `kfab worker` processes on any host read them through one consumer group,
/// run each task and write its result once.
///
/// Why Redis Streams and not Ray: kfab is a C++ program whose workers are already processes; a
/// consumer group gives what the evaluation farm needs (each job to one worker, at-least-once
/// delivery through the pending list, a job of a dead worker taken over with XAUTOCLAIM once its
/// lease has run out) from a server users start with one command and a C client Debian packages
/// (hiredis). Ray would put a Python runtime and its cluster between kfab and every evaluation.
///
/// Keys, under the queue's name Q (`--queue`, default "kfab"):
///   Q:jobs              the stream; each entry has `job` (its id) and `payload` (JSON)
///   Q:workers           its consumer group
///   Q:result:JOB        the job's result (JSON), written once (SET NX), kept a week
///   Q:sent:JOB          set when the job was added (with it, in one script): added once, kept a week
/// A worker holding a job renews its lease (XCLAIM with JUSTID, every third of the lease); a job idle
/// longer than the lease is another worker's to take. A worker finishes a job by writing its result
/// (unless one is there already: the job ran twice), then XACK and XDEL.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.h"

namespace kfab {

struct QueueOptions {
  std::string url;             ///< redis://HOST[:PORT][/DB]
  std::string name = "kfab";   ///< the keys' prefix
  double lease_s = 60.0;       ///< a job unrenewed this long is taken over
};

/// Whether this kfab was built with hiredis.
bool queue_available();

/// One connection to the Redis server (not shared between threads).
class Redis {
 public:
  static Expected<Redis> connect(const std::string& url, double timeout_s = 10.0);
  Redis(Redis&&) noexcept;
  Redis& operator=(Redis&&) noexcept;
  ~Redis();
  /// A command; the reply as JSON (strings, integers, null, arrays); a Redis error is an Error.
  Expected<nlohmann::json> command(const std::vector<std::string>& args);
  /// The timeout of later commands (a blocking read waits longer than its BLOCK).
  void set_timeout(double seconds);

 private:
  Redis() = default;
  void* ctx_ = nullptr;
};

/// A job a worker holds.
struct ClaimedJob {
  std::string entry;        ///< the stream entry's id
  std::string job;          ///< the job's id
  nlohmann::json payload;
  bool taken_over = false;  ///< it was another worker's, whose lease ran out
};

class JobQueue {
 public:
  static Expected<JobQueue> open(const QueueOptions& opt);
  const QueueOptions& options() const { return opt_; }

  // the submitter's side
  /// Adds the job unless it was added before (within the week its result is kept): true when added
  /// now. A resumed submitter sends what it sent before again without doubling it.
  Expected<bool> submit(const std::string& job, const nlohmann::json& payload);
  /// The results of those of `jobs` that have one (null where none yet).
  Expected<std::vector<nlohmann::json>> results(const std::vector<std::string>& jobs);

  // a worker's side
  /// A job idle past the lease, else a new one (waiting up to `block_s`); nullopt when none came.
  Expected<std::optional<ClaimedJob>> claim(const std::string& consumer, double block_s);
  /// Renews the lease of a held job (from any connection: the heartbeat has its own).
  Expected<void> renew(const std::string& consumer, const ClaimedJob& j);
  /// Writes the result unless the job has one already, then acknowledges and deletes the entry.
  /// True when this call wrote it.
  Expected<bool> complete(const ClaimedJob& j, const nlohmann::json& result);
  /// The result of a job, or null.
  Expected<nlohmann::json> result(const std::string& job);
  /// The workers of the consumer group: name, pending jobs, idle seconds (for `kfab doctor`).
  Expected<nlohmann::json> workers();
  /// Adds a worker to the consumer group (where `kfab doctor` lists it) before it has taken a job.
  Expected<void> join(const std::string& consumer);
  /// Removes a worker that holds no job from the consumer group.
  Expected<void> leave(const std::string& consumer);
  /// {"jobs": entries in the stream, "held": delivered and not yet done, "waiting": not yet delivered}.
  Expected<nlohmann::json> counts();

 private:
  JobQueue(QueueOptions opt, Redis r) : opt_(std::move(opt)), redis_(std::move(r)) {}
  std::string key(const std::string& what) const { return opt_.name + ":" + what; }
  QueueOptions opt_;
  Redis redis_;
};

/// Bytes as base64 (files of a job's task travel in JSON).
std::string base64_encode(std::string_view bytes);
/// Its inverse; an Error for text that is not base64.
Expected<std::string> base64_decode(std::string_view text);

}  // namespace kfab
