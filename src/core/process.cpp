#include "core/process.h"

#include <chrono>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "core/hash.h"
#include "core/paths.h"

extern char** environ;

namespace kfab {

namespace {
const auto g_process_start = std::chrono::steady_clock::now();
}  // namespace

double seconds_since_process_start() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_process_start).count();
}

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* desc = sigdescr_np(sig);
  std::string s = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
  if (desc) s += std::string(" (") + desc + ")";
  return s;
}

std::string ExitStatus::describe() const {
  if (exited) return "exited with status " + std::to_string(code);
  if (signal != 0) return "was killed by " + signal_name(signal);
  return "still running";
}

namespace {

// Process groups of live children, for the signal handler. Fixed size: slots are claimed with a CAS.
// A slot holds a group's id, negated for a group that is to get SIGTERM instead of SIGKILL.
constexpr int kMaxTracked = 256;
std::atomic<pid_t> g_tracked[kMaxTracked];

void track(pid_t pgid, bool gentle) {
  for (auto& slot : g_tracked) {
    pid_t expected = 0;
    if (slot.compare_exchange_strong(expected, gentle ? -pgid : pgid)) return;
  }
}

void untrack(pid_t pgid) {
  for (auto& slot : g_tracked) {
    pid_t expected = pgid;
    if (slot.compare_exchange_strong(expected, 0)) return;
    expected = -pgid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

extern "C" void reap_and_reraise(int sig) {
  for (auto& slot : g_tracked) {
    const pid_t p = slot.load();
    if (p > 0) ::kill(-p, SIGKILL);
    if (p < 0) ::kill(p, SIGTERM);  // -(-pgid): the group
  }
  // The runners' folders go with them (system calls only); what a dying runner still adds is left to
  // the next kfab's sweep_orphaned_temp_dirs.
  remove_owned_temp_dirs();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

bool sandbox_env_allowed(std::string_view name) {
  // Exact names: the search paths, the locale, the user's name (getpass, pwd-less containers), the
  // compilers torch.compile may call, and the settings the runner and the worker read themselves.
  static constexpr std::string_view kNames[] = {
      "PATH", "LD_LIBRARY_PATH", "LANG", "LANGUAGE", "TZ", "USER", "LOGNAME", "CC", "CXX", "PYTHONPATH",
      "KFAB_OPENCL_PLATFORM", "KFAB_LAUNCH_HOLD", "KFAB_ROOM_WAIT_S",
      // The adversarial suite's probe targets (tests/integration/suite_test.cpp): where an escape
      // would write or connect. Not secrets: they exist to be found by candidates.
      "KFAB_ESCAPE_PROBE", "KFAB_ESCAPE_PORT"};
  // Prefixes: device selection, thread pools, the OpenCL loader and PoCL, torch's and Triton's settings.
  static constexpr std::string_view kPrefixes[] = {"LC_",     "CUDA_",  "NVIDIA_", "OMP_",         "KMP_",    "GOMP_",
                                                   "POCL_",   "OCL_ICD_", "TORCH_", "TORCHINDUCTOR_", "TRITON_", "KFAB_SANDBOX"};
  for (auto n : kNames)
    if (name == n) return true;
  for (auto p : kPrefixes)
    if (name.substr(0, p.size()) == p) return true;
  return false;
}

std::vector<std::pair<std::string, std::string>> sandbox_folder_env(const std::filesystem::path& dir) {
  const std::string d = dir.string();
  return {{"TMPDIR", d},           {"POCL_CACHE_DIR", d + "/pocl"},   {"CUDA_CACHE_PATH", d + "/nv"},
          {"TRITON_HOME", d},      {"TRITON_CACHE_DIR", d + "/triton"}, {"TORCHINDUCTOR_CACHE_DIR", d + "/inductor"},
          {"XDG_CACHE_HOME", d + "/cache"}, {"MPLCONFIGDIR", d + "/mpl"}, {"HOME", d + "/home"}};
}

void install_child_reaper() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa {};
    sa.sa_handler = reap_and_reraise;
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

Expected<Child> Child::spawn(const SpawnOptions& opt) {
  KFAB_ASSERT(!opt.argv.empty(), "spawn without argv");
  // Everything the child needs is prepared before fork: only async-signal-safe calls after it.
  std::vector<char*> argv;
  for (const auto& a : opt.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::map<std::string, std::string> env_map;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos || (opt.clean_env && !sandbox_env_allowed(std::string_view(kv).substr(0, eq)))) continue;
    env_map[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : opt.env) env_map[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env_map) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::string cwd = opt.cwd.string();
  const std::string out_path = opt.output_file.string();

  int req[2] = {-1, -1}, rep[2] = {-1, -1}, out[2] = {-1, -1}, err_pipe[2] = {-1, -1}, chan[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {req, rep, out, err_pipe, chan})
      for (int i = 0; i < 2; ++i)
        if (p[i] >= 0) ::close(p[i]);
  };
  if (opt.protocol_pipes && (::pipe2(req, O_CLOEXEC) != 0 || ::pipe2(rep, O_CLOEXEC) != 0 ||
                             ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) != 0)) {
    close_all();
    return make_error(std::string("pipe: ") + std::strerror(errno));
  }
  if (out_path.empty() && ::pipe2(out, O_CLOEXEC) != 0) {
    close_all();
    return make_error(std::string("pipe: ") + std::strerror(errno));
  }
  // Reports a failed exec back to the parent: the pipe closes on a successful exec.
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    close_all();
    return make_error(std::string("pipe: ") + std::strerror(errno));
  }

  // The sandbox's paths are gathered now: the child may only make async-signal-safe calls.
  const SandboxPlan sandbox(opt.limits.sandbox);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    close_all();
    return make_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    // Not left running when kfab dies without a chance to end it (SIGKILL, a crash).
    if (opt.stop_signal != SIGKILL) {
      ::prctl(PR_SET_PDEATHSIG, opt.stop_signal);
      if (::getppid() != parent) ::_exit(127);
    }
    auto limit = [](int res, uint64_t v) {
      struct rlimit rl;
      rl.rlim_cur = rl.rlim_max = v;
      ::setrlimit(res, &rl);
    };
    if (opt.limits.address_space_bytes) limit(RLIMIT_AS, opt.limits.address_space_bytes);
    if (opt.limits.cpu_seconds) limit(RLIMIT_CPU, opt.limits.cpu_seconds);
    if (opt.limits.file_size_bytes) limit(RLIMIT_FSIZE, opt.limits.file_size_bytes);
    if (opt.limits.no_core_files) limit(RLIMIT_CORE, 0);
    // Signals the parent ignores must not stay ignored in the child.
    ::signal(SIGPIPE, SIG_DFL);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    int outfd = out[1];
    if (!out_path.empty()) outfd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (outfd >= 0) {
      ::dup2(outfd, 1);
      ::dup2(outfd, 2);
    }
    if (opt.protocol_pipes) {
      // Moved out of the way first: a pipe end may already sit on fd 3 or 4, and dup2 onto itself
      // would keep its close-on-exec flag.
      const int in = ::fcntl(req[0], F_DUPFD_CLOEXEC, 10);
      const int out_fd = ::fcntl(rep[1], F_DUPFD_CLOEXEC, 10);
      const int chan_fd = ::fcntl(chan[1], F_DUPFD_CLOEXEC, 10);
      ::dup2(in, 3);
      ::dup2(out_fd, 4);
      ::dup2(chan_fd, 5);
    }
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) {
      int e = errno;
      (void)!::write(err_pipe[1], &e, sizeof e);
      ::_exit(127);
    }
    if (const int e = sandbox.apply_in_child(); e != 0) {
      const int marked = -e;  // negative: the sandbox, not exec, failed
      (void)!::write(err_pipe[1], &marked, sizeof marked);
      ::_exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    (void)!::write(err_pipe[1], &e, sizeof e);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so a kill right after spawn reaches the group
  track(pid, opt.stop_signal != SIGKILL);
  ::close(err_pipe[1]);
  err_pipe[1] = -1;
  int child_errno = 0;
  ssize_t n;
  do n = ::read(err_pipe[0], &child_errno, sizeof child_errno);
  while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  err_pipe[0] = -1;

  Child c;
  c.pid_ = pid;
  if (opt.protocol_pipes) {
    ::close(req[0]);
    ::close(rep[1]);
    ::close(chan[1]);
    c.to_child_ = req[1];
    c.from_child_ = rep[0];
    c.channel_ = chan[0];
    req[0] = req[1] = rep[0] = rep[1] = chan[0] = chan[1] = -1;
  }
  if (out_path.empty()) {
    ::close(out[1]);
    c.output_ = out[0];
    out[0] = out[1] = -1;
  }
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    c.wait();
    if (child_errno < 0)
      return make_error("cannot start " + opt.argv[0] + " in its sandbox (KFAB_SANDBOX=require): " + std::strerror(-child_errno));
    return make_error("cannot start " + opt.argv[0] + ": " + std::strerror(child_errno));
  }
  return c;
}

Child::Child(Child&& o) noexcept { *this = std::move(o); }

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    if (running()) {
      kill_group();
      wait();
    }
    close_fds();
    pid_ = std::exchange(o.pid_, -1);
    to_child_ = std::exchange(o.to_child_, -1);
    from_child_ = std::exchange(o.from_child_, -1);
    output_ = std::exchange(o.output_, -1);
    channel_ = std::exchange(o.channel_, -1);
    reaped_ = std::exchange(o.reaped_, false);
    frozen_ = std::exchange(o.frozen_, false);
    status_ = o.status_;
  }
  return *this;
}

Child::~Child() {
  if (running()) {
    kill_group();
    wait();
  }
  close_fds();
}

pid_t Child::release() {
  const pid_t pid = reaped_ ? -1 : pid_;
  if (pid > 0) untrack(pid);  // it is on its way out: Ctrl-C need not reach it
  close_fds();
  pid_ = -1;
  return pid;
}

void Child::close_fds() {
  for (int* fd : {&to_child_, &from_child_, &output_, &channel_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void Child::kill_group() {
  if (pid_ > 0 && !reaped_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
  }
}

namespace {

/// Whether no thread of process `pid` can run user code again before it stops, read from /proc: every
/// thread is stopped (T, t), gone (Z, X) or in uninterruptible sleep (D), and the stop is under way (a
/// thread has stopped, or SIGSTOP is pending for the process). A thread in D (the parent of a vfork
/// whose child has not exec'd yet, a page fault on a slow disk) takes the stop only as it leaves the
/// kernel, and until then the kernel reports no stop for the process, though it runs none of its code.
bool stopped_per_proc(pid_t pid) {
  const std::string base = "/proc/" + std::to_string(pid);
  std::error_code ec;
  bool any_stopped = false;
  int threads = 0;
  for (const auto& t : std::filesystem::directory_iterator(base + "/task", ec)) {
    const auto stat = read_file(t.path() / "stat");
    if (!stat) continue;  // gone meanwhile
    const size_t close = stat->rfind(')');
    if (close == std::string::npos || close + 2 >= stat->size()) return false;
    const char state = (*stat)[close + 2];
    ++threads;
    if (state == 'T' || state == 't') any_stopped = true;
    else if (state != 'D' && state != 'Z' && state != 'X') return false;
  }
  if (ec || threads == 0) return false;
  if (any_stopped) return true;
  const auto status = read_file(base + "/status");
  if (!status) return false;
  const size_t at = status->find("ShdPnd:\t");
  if (at == std::string::npos) return false;
  const unsigned long long pending = std::strtoull(status->c_str() + at + 8, nullptr, 16);
  return (pending >> (SIGSTOP - 1)) & 1;
}

}  // namespace

bool Child::freeze(Clock::time_point deadline) {
  if (pid_ <= 0 || reaped_) return false;
  // A stop the child reported earlier (its own SIGSTOP) is taken first: only this one counts.
  siginfo_t si{};
  while (::waitid(P_PID, static_cast<id_t>(pid_), &si, WSTOPPED | WNOHANG) == 0 && si.si_pid == pid_) si = {};
  frozen_ = true;
  ::kill(-pid_, SIGSTOP);
  // The stop is reported once every thread of the child has stopped (a group stop).
  for (int spins = 0;; ++spins) {
    si = {};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &si, WSTOPPED | WNOHANG) == 0 && si.si_pid == pid_) return true;
    si = {};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid_) return false;
    // No report yet: a thread may be in uninterruptible sleep, which holds the report back but runs
    // nothing of the child's (looked at once the common case, a report within a moment, has passed).
    if (spins >= 200 && spins % 20 == 0 && stopped_per_proc(pid_)) return true;
    if (Clock::now() >= deadline) return false;
    if (spins < 200) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool Child::has_exited() const {
  if (pid_ <= 0 || reaped_) return true;
  siginfo_t si{};
  return ::waitid(P_PID, static_cast<id_t>(pid_), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid_;
}

void Child::thaw() {
  if (pid_ > 0 && !reaped_ && frozen_) ::kill(-pid_, SIGCONT);
  frozen_ = false;
}

std::string Child::capture(Clock::time_point deadline, bool* timed_out) {
  std::string s;
  *timed_out = false;
  if (output_ < 0) return s;
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      *timed_out = true;
      return s;
    }
    struct pollfd p = {output_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = ::read(output_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return s;
    s.append(buf, static_cast<size_t>(n));
  }
}

ExitStatus Child::wait(std::optional<Clock::time_point> deadline) {
  if (pid_ <= 0 || reaped_) return status_;
  int st = 0;
  for (;;) {
    pid_t r;
    if (deadline) {
      r = ::waitpid(pid_, &st, WNOHANG);
      if (r == 0) {
        if (Clock::now() >= *deadline) {
          kill_group();
          deadline.reset();
          continue;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
    } else {
      r = ::waitpid(pid_, &st, 0);
    }
    if (r < 0 && errno == EINTR) continue;
    break;
  }
  reaped_ = true;
  // Whatever the child left in its group (grandchildren) goes with it.
  ::kill(-pid_, SIGKILL);
  untrack(pid_);
  if (WIFEXITED(st)) {
    status_.exited = true;
    status_.code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    status_.signal = WTERMSIG(st);
  }
  return status_;
}

Expected<CommandResult> run_command(const std::vector<std::string>& argv, double timeout_s, const fs::path& cwd) {
  SpawnOptions opt;
  opt.argv = argv;
  opt.cwd = cwd;
  const auto start = Clock::now();
  auto child = Child::spawn(opt);
  if (!child) return Unexpected{child.error()};
  const auto deadline = start + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  CommandResult r;
  r.output = child->capture(deadline, &r.timed_out);
  if (r.timed_out) child->kill_group();
  r.status = child->wait(deadline);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (!dir.empty()) {
      std::string full = dir + "/" + name;
      if (::access(full.c_str(), X_OK) == 0) return full;
    }
    start = end + 1;
  }
  return "";
}

}  // namespace kfab
