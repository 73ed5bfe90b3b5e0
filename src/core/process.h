#pragma once
/// Child processes: spawning with resource limits in their own process group, talking to them over
/// pipes, waiting with deadlines and killing the whole group. Used for compilers, probes and runners.

#include <sys/types.h>

#include <csignal>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/expected.h"
#include "core/sandbox.h"

namespace kfab {

/// Limits applied in the child before exec (setrlimit). 0 leaves a limit as it is.
struct ProcessLimits {
  uint64_t address_space_bytes = 0;
  uint64_t cpu_seconds = 0;
  uint64_t file_size_bytes = 0;
  bool no_core_files = true;
  /// The candidate sandbox (core/sandbox.h): writes confined to a folder, no network, no privilege,
  /// optionally no signals to others, no new processes, a PID namespace. Inherited by what it starts.
  SandboxPolicy sandbox;
};

struct SpawnOptions {
  std::vector<std::string> argv;
  std::filesystem::path cwd;                              ///< empty: inherit
  std::vector<std::pair<std::string, std::string>> env;   ///< set on top of the parent's environment
  /// Starts from the allow-listed part of the parent's environment (sandbox_env_allowed) rather than
  /// all of it: for runners, whose candidates must not see kfab's secrets (API keys, tokens).
  bool clean_env = false;
  ProcessLimits limits;
  /// Where the child's stdout and stderr go; empty: a pipe read back by the parent (capture()).
  std::filesystem::path output_file;
  /// Gives the child a request pipe on fd 3 and a reply pipe on fd 4, and one end of a Unix socket
  /// pair on fd 5 over which it may pass file descriptors (shared memory) to the parent.
  bool protocol_pipes = false;
  /// What the child's group gets when kfab is ended by SIGINT, SIGTERM or SIGHUP (install_child_reaper),
  /// and, as its parent-death signal, when kfab dies any other way. SIGKILL (the default) suits a
  /// runner; a kfab of its own (`bench --devices`) gets SIGTERM, so that it ends its own runners and
  /// workers before it goes.
  int stop_signal = SIGKILL;
};

/// How a child ended.
struct ExitStatus {
  bool exited = false;  ///< exited normally with `code`
  int code = 0;
  int signal = 0;       ///< killed by this signal
  bool ok() const { return exited && code == 0; }
  std::string describe() const;
};

/// "SIGSEGV (segmentation fault)"
std::string signal_name(int sig);

/// A running child in its own process group. Killed (group-wide) when destroyed while still running.
class Child {
 public:
  static Expected<Child> spawn(const SpawnOptions& opt);
  Child(Child&& o) noexcept;
  Child& operator=(Child&& o) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  int request_fd() const { return to_child_; }
  int reply_fd() const { return from_child_; }
  /// The parent's end of the descriptor channel (fd 5 in the child); -1 without protocol pipes.
  int channel_fd() const { return channel_; }
  /// Reads the merged stdout/stderr pipe until EOF or the deadline (only without output_file).
  std::string capture(std::chrono::steady_clock::time_point deadline, bool* timed_out);
  /// Sends SIGKILL to the whole process group.
  void kill_group();
  /// Stops every thread of the child (SIGSTOP to its group) and waits until the child reports itself
  /// stopped: then nothing of it runs until thaw(). False when it died or did not stop by the deadline.
  bool freeze(std::chrono::steady_clock::time_point deadline);
  /// Lets a frozen child go on (SIGCONT to its group).
  void thaw();
  bool frozen() const { return frozen_; }
  /// True once the child has ended (its status is left to wait() to collect).
  bool has_exited() const;
  /// Waits for the child; kills the group first if it is still running at the deadline.
  ExitStatus wait(std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);
  bool running() const { return pid_ > 0 && !reaped_; }
  /// Lets the process go on alone: closes kfab's ends of its pipes and returns its pid, which the
  /// caller must reap (waitpid) or leave to init when kfab exits. The Child is then empty.
  pid_t release();

 private:
  Child() = default;
  void close_fds();
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  int output_ = -1;
  int channel_ = -1;
  bool reaped_ = false;
  bool frozen_ = false;
  ExitStatus status_;
};

struct CommandResult {
  ExitStatus status;
  std::string output;  ///< stdout and stderr, merged
  bool timed_out = false;
  double seconds = 0.0;
};

/// Runs a command to completion (or until `timeout_s`), capturing its output.
Expected<CommandResult> run_command(const std::vector<std::string>& argv, double timeout_s,
                                    const std::filesystem::path& cwd = {});

/// Seconds since this process started (since its static objects were made: before main).
double seconds_since_process_start();

/// On SIGINT, SIGTERM or SIGHUP, kills the process group of every child still running, then lets the
/// signal take its default course, so that an interrupted kfab leaves no candidate running behind it.
void install_child_reaper();

/// Whether a variable of kfab's environment reaches a child started with SpawnOptions::clean_env: what
/// toolchains, drivers and the runner need (PATH, LD_LIBRARY_PATH, locale, CUDA_* and NVIDIA_* device
/// selection, OMP_* and KMP_* threads, POCL_* and OCL_ICD_*, TORCH_*, TORCHINDUCTOR_*, TRITON_*,
/// PYTHONPATH, KFAB_SANDBOX*, the runner's and worker's own KFAB_* settings). Nothing else: no secret.
bool sandbox_env_allowed(std::string_view name);

/// What a sandboxed child is given on top of that part, all inside `dir` (the one folder it may write
/// in): TMPDIR, HOME, and the caches libraries keep under HOME by default (PoCL's kernels, CUDA's JIT,
/// Triton's and torch.compile's, XDG's, matplotlib's).
std::vector<std::pair<std::string, std::string>> sandbox_folder_env(const std::filesystem::path& dir);

/// Looks a program up on PATH; empty when absent.
std::string find_program(const std::string& name);

}  // namespace kfab
