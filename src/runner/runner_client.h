#pragma once
/// kfab's side of a runner: spawns kfab-runner with limits in its own process group and temporary
/// folder, sends it jobs with a deadline, and replaces it when it crashes, hangs or breaks protocol.

#include <filesystem>
#include <map>
#include <vector>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/process.h"

namespace kfab {

struct RunnerOptions {
  double timeout_s = 60.0;          ///< per job, wall clock
  uint64_t memory_bytes = 0;        ///< address-space limit; 0: the default (see default_memory_limit)
  /// Off for GPU targets: the CUDA driver reserves far more address space than it uses.
  bool limit_address_space = true;
  uint64_t cpu_seconds = 0;         ///< CPU-time limit of one runner; 0: timeout x cores x 8
  uint64_t file_size_bytes = 1ull << 30;
  /// A device target ("cuda", "opencl") the runner opens as soon as it starts, before its first job.
  std::string preopen;
  /// Another worker speaking the runner protocol (the Python worker): its command line and the
  /// environment it needs on top of kfab's. Empty: kfab-runner.
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  /// The sandbox (core/sandbox.h): writes confined to the runner's folder, no network, no privilege.
  bool sandbox = true;
  /// Seccomp rules: signals only to itself and its group (a candidate cannot signal kfab), and no new
  /// processes. Off for the Python worker, whose torch starts and signals compile workers: there
  /// Landlock's signal scope (Linux 6.12+) keeps kfab out of reach.
  bool confine_signals = true;
  bool deny_processes = true;
  bool allow_spawn = false;
  /// perf_event_open allowed (the CPU runner's counters for --profile)
  bool perf_events = false;
  /// The runner serves candidate code: it is frozen (SIGSTOP to its group) whenever kfab is not
  /// waiting for one of its jobs, so that nothing of the candidate runs while the reference works,
  /// baselines are timed or its outputs are compared.
  bool freeze_between_jobs = false;
  /// The runner serves the reference only (kfab-runner --trusted): it refuses candidate code.
  bool trusted = false;

  /// Settings that follow from the target the runner serves (eval's for_target() looks them up): the
  /// address-space limit for a target in host memory only (drivers reserve far more than they use);
  /// `spawns` for a target whose runtime starts programs (PoCL runs a linker for every program it
  /// builds): posix_spawn is allowed, never fork.
  void for_target(bool on_host, bool spawns);
};

/// On the host, the harness's two processes (the candidate's and the reference's or torch eager's) time
/// their calls alternately on the same cores, and OpenMP's default wait spins for milliseconds after a
/// parallel region: one process's pool then holds the cores the other's next region needs (issue 25: an
/// OpenBLAS sgemm candidate measured 0.06x eager, descheduled in 98% of its timed calls; 1.62x with passive
/// waits). Unless the caller's environment sets OMP_WAIT_POLICY, the runners' threads sleep between regions
/// (OMP_WAIT_POLICY=PASSIVE), both sides alike. Nothing on a device target.
void host_wait_policy(RunnerOptions& ro, bool on_host);

/// The smaller of 8 GiB and half the machine's memory.
uint64_t default_memory_limit();

struct JobReply {
  enum class Kind {
    Ok,       ///< the runner answered; body holds its reply (which may report a failure)
    Crashed,  ///< the runner died during the job
    Timeout,  ///< the job ran past its deadline; the runner was killed
    Broken,   ///< the runner spoke something that is not the protocol
    Forged,   ///< a well-formed reply without the job's nonce: written by the candidate, not the runner
  };
  Kind kind = Kind::Ok;
  nlohmann::json body;
  std::string detail;
  /// Descriptors the runner passed with its reply (the reply's "fds": shared memory); owned here.
  std::vector<int> fds;
  JobReply() = default;
  JobReply(JobReply&& o) noexcept : kind(o.kind), body(std::move(o.body)), detail(std::move(o.detail)), fds(std::move(o.fds)) { o.fds.clear(); }
  /// Closes the descriptors this reply held, then takes the other's.
  JobReply& operator=(JobReply&& o) noexcept;
  JobReply(const JobReply&) = delete;
  JobReply& operator=(const JobReply&) = delete;
  ~JobReply();
  /// Takes descriptor i out (the caller closes it).
  int take_fd(size_t i);
};

class RunnerClient {
 public:
  explicit RunnerClient(RunnerOptions opt);
  ~RunnerClient();
  RunnerClient(const RunnerClient&) = delete;
  RunnerClient& operator=(const RunnerClient&) = delete;

  /// Spawns the runner now rather than at the first job (it then starts up while kfab works).
  std::optional<std::string> start() { return ensure_started(); }
  /// Runs one job; spawns a runner if none is alive. `pass` are descriptors handed to the runner over
  /// its descriptor channel before the request (a candidate's shared outputs, for the trusted worker).
  JobReply run(const nlohmann::json& request, const std::vector<int>& pass = {});
  /// The deadline of later jobs.
  void set_timeout(double seconds) { opt_.timeout_s = seconds; }
  /// How many runners this client has started.
  int spawned() const { return spawned_; }
  /// The runner's process id (0 when none is alive).
  pid_t pid() const { return child_ && child_->running() ? child_->pid() : 0; }

 private:
  std::optional<std::string> ensure_started();
  void discard();
  std::string log_tail() const;

  RunnerOptions opt_;
  std::optional<Child> child_;
  std::filesystem::path dir_;
  int spawned_ = 0;
};

}  // namespace kfab
