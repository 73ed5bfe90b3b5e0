#include "runner/runner_client.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "core/paths.h"
#include "core/text.h"
#include "runner/protocol.h"
#include "runner/shared_region.h"

namespace kfab {

void host_wait_policy(RunnerOptions& ro, bool on_host) {
  if (!on_host || std::getenv("OMP_WAIT_POLICY") != nullptr || ro.env.count("OMP_WAIT_POLICY")) return;
  ro.env["OMP_WAIT_POLICY"] = "PASSIVE";
}

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

uint64_t default_memory_limit() {
  const uint64_t eight = 8ull << 30;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return eight;
  return std::min(eight, static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2);
}

RunnerClient::RunnerClient(RunnerOptions opt) : opt_(opt) {
  ::signal(SIGPIPE, SIG_IGN);  // a dead runner must not take kfab down when it is written to
  if (opt_.memory_bytes == 0) opt_.memory_bytes = default_memory_limit();
  if (opt_.cpu_seconds == 0) {
    const auto cores = std::max(1u, std::thread::hardware_concurrency());
    opt_.cpu_seconds = static_cast<uint64_t>(opt_.timeout_s * cores * 8) + 10;
  }
}

void RunnerOptions::for_target(bool on_host, bool spawns) {
  limit_address_space = on_host;
  deny_processes = true;
  allow_spawn = spawns;
}

namespace {
/// Device runners told to quit and not waited for (see ~RunnerClient), reaped when kfab next looks.
std::mutex g_detached_mu;  // runners of several evaluators (tune's --devices) end at once
std::vector<pid_t>& detached() {
  static std::vector<pid_t> pids;
  return pids;
}
void reap_detached() {
  std::lock_guard<std::mutex> lock(g_detached_mu);
  auto& pids = detached();
  std::erase_if(pids, [](pid_t p) { return ::waitpid(p, nullptr, WNOHANG) != 0; });
}
}  // namespace

JobReply::~JobReply() {
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
}

JobReply& JobReply::operator=(JobReply&& o) noexcept {
  if (this == &o) return *this;
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  kind = o.kind;
  body = std::move(o.body);
  detail = std::move(o.detail);
  fds = std::move(o.fds);
  o.fds.clear();
  return *this;
}

int JobReply::take_fd(size_t i) {
  if (i >= fds.size()) return -1;
  return std::exchange(fds[i], -1);
}

RunnerClient::~RunnerClient() {
  if (child_ && child_->running()) {
    child_->thaw();
    write_message(child_->request_fd(), {{"op", "quit"}});
    if (!opt_.preopen.empty()) {
      // A device runner takes a tenth of a second to tear its context down: it is not waited for.
      // It removes its own folder on quit (and kfab removes whatever is left); it is reaped later.
      if (const pid_t pid = child_->release(); pid > 0) {
        std::lock_guard<std::mutex> lock(g_detached_mu);
        detached().push_back(pid);
      }
      child_.reset();
      std::error_code ec;
      fs::remove_all(dir_, ec);
      dir_.clear();
      reap_detached();
      return;
    }
    child_->wait(Clock::now() + std::chrono::seconds(2));
  }
  discard();
}

void RunnerClient::discard() {
  if (child_) {
    child_->kill_group();
    child_->wait();
    child_.reset();
  }
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    dir_.clear();
  }
}

std::optional<std::string> RunnerClient::ensure_started() {
  if (child_ && child_->running()) return std::nullopt;
  reap_detached();
  discard();
  // Named after kfab's pid and start time: removed on a signal, or by the next kfab once kfab is gone.
  auto made = make_owned_temp_dir("kfab-runner");
  if (!made) return "cannot create a runner folder: " + made.error().to_string();
  dir_ = *made;
  SpawnOptions so;
  so.argv = {runner_path().string()};
  if (opt_.trusted) so.argv.push_back("--trusted");
  if (!opt_.preopen.empty()) so.argv.insert(so.argv.end(), {"--open", opt_.preopen});
  if (!opt_.argv.empty()) so.argv = opt_.argv;
  so.cwd = dir_;
  // Caches that libraries keep under $HOME by default are kept in the folder, the one place the
  // sandbox lets the runner write: PoCL's kernels, CUDA's JIT, Triton's and torch.compile's. Of kfab's
  // own environment only the allow-listed part comes along (sandbox_env_allowed): no secret of kfab's
  // (an API key) reaches a candidate.
  so.clean_env = true;
  so.env = sandbox_folder_env(dir_);
  for (const auto& [k, v] : opt_.env) so.env.emplace_back(k, v);
  so.output_file = dir_ / "runner.log";
  so.protocol_pipes = true;
  so.limits.address_space_bytes = opt_.limit_address_space ? opt_.memory_bytes : 0;
  so.limits.cpu_seconds = opt_.cpu_seconds;
  so.limits.file_size_bytes = opt_.file_size_bytes;
  so.limits.sandbox = {.enabled = opt_.sandbox,
                       .writable_dir = dir_,
                       .confine_signals = opt_.confine_signals,
                       .deny_processes = opt_.deny_processes,
                       .allow_spawn = opt_.allow_spawn,
                       .perf_events = opt_.perf_events};
  auto c = Child::spawn(so);
  if (!c) return c.error().to_string() + " (is kfab-runner beside kfab? KFAB_RUNNER may name it)";
  child_.emplace(std::move(*c));
  ++spawned_;
  return std::nullopt;
}

std::string RunnerClient::log_tail() const {
  std::ifstream in(dir_ / "runner.log", std::ios::binary);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  // The sandbox's own line (what applied) says nothing about a crash.
  if (s.rfind("kfab sandbox:", 0) == 0) s.erase(0, s.find('\n') == std::string::npos ? s.size() : s.find('\n') + 1);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  // What the candidate printed is any bytes at all: the tail is kept, as valid UTF-8.
  constexpr size_t kTail = 2000;
  return printable(s, kTail, Keep::Tail);
}

JobReply RunnerClient::run(const nlohmann::json& request, const std::vector<int>& pass) {
  JobReply r;
  if (auto err = ensure_started()) {
    r.kind = JobReply::Kind::Broken;
    r.detail = *err;
    return r;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opt_.timeout_s * 1000));
  // Every job carries a fresh nonce that the runner echoes: a reply without it was not the runner's
  // (a candidate that wrote to the reply descriptor).
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char nonce[17];
  std::snprintf(nonce, sizeof nonce, "%016llx", static_cast<unsigned long long>(rng()));
  nlohmann::json job = request;
  job["nonce"] = nonce;
  // what the job has: a worker that may wait (for device memory another process holds) waits less
  job["timeout_s"] = opt_.timeout_s;
  child_->thaw();
  const bool sent = send_fds(child_->channel_fd(), pass) && write_message(child_->request_fd(), job);
  ReadResult in = sent ? read_message(child_->reply_fd(), deadline) : ReadResult{ReadStatus::Eof, {}, {}};
  // Nothing of a candidate's runs between its jobs: not while the reference works, baselines are
  // timed or its outputs are compared.
  const bool stopped = in.status != ReadStatus::Ok || !opt_.freeze_between_jobs || child_->freeze(deadline + std::chrono::seconds(5));
  // A runner that died between its reply and the stop (killed from outside, or it exited) is said as
  // any death is, with its signal or exit code.
  if (!stopped && child_->has_exited()) in.status = ReadStatus::Eof;
  if (in.status == ReadStatus::Ok && !stopped) {
    child_->kill_group();
    child_->wait(Clock::now() + std::chrono::seconds(5));
    r.kind = JobReply::Kind::Crashed;
    r.detail = "the runner could not be stopped after its reply";
    discard();
    return r;
  }
  if (in.status == ReadStatus::Ok && (!in.message.is_object() || !in.message.contains("nonce") || in.message["nonce"] != nonce)) {
    child_->kill_group();
    child_->wait(Clock::now() + std::chrono::seconds(5));
    r.kind = JobReply::Kind::Forged;
    r.detail = "a reply that did not come from the runner (it lacks this job's nonce): something in the runner's process, "
               "the candidate, wrote to the runner's reply descriptor";
    discard();
    return r;
  }
  if (in.status == ReadStatus::Ok) {
    in.message.erase("nonce");
    // Shared memory comes over the descriptor channel, one descriptor per entry of "fds".
    const auto want = in.message.contains("fds") && in.message["fds"].is_number_unsigned() ? in.message["fds"].get<size_t>() : size_t{0};
    for (size_t i = 0; i < std::min<size_t>(want, 16); ++i) {
      auto fd = receive_fd(child_->channel_fd(), deadline);
      if (!fd) {
        child_->kill_group();
        child_->wait(Clock::now() + std::chrono::seconds(5));
        r.kind = JobReply::Kind::Broken;
        r.detail = "the runner announced shared memory it did not pass";
        discard();
        return r;
      }
      r.fds.push_back(*fd);
    }
    r.body = std::move(in.message);
    // A runner that says it cannot go on (a lost CUDA context) is replaced before the next job.
    if (r.body.value("fatal", false)) discard();
    return r;
  }
  if (in.status == ReadStatus::Timeout) {
    child_->kill_group();
    child_->wait();
    r.kind = JobReply::Kind::Timeout;
    r.detail = "no answer within " + std::to_string(opt_.timeout_s).substr(0, std::to_string(opt_.timeout_s).find('.') + 2) +
               " s; the runner's process group was killed";
  } else {
    // The runner is gone or talking nonsense: find out how it ended.
    if (in.status == ReadStatus::Malformed) child_->kill_group();
    const ExitStatus st = child_->wait(Clock::now() + std::chrono::seconds(5));
    if (in.status == ReadStatus::Malformed) {
      r.kind = JobReply::Kind::Broken;
      r.detail = "the runner broke protocol: " + in.error;
    } else if (st.signal == SIGXCPU) {
      r.kind = JobReply::Kind::Timeout;
      r.detail = "the runner exceeded its CPU-time limit of " + std::to_string(opt_.cpu_seconds) + " s";
    } else {
      r.kind = JobReply::Kind::Crashed;
      r.detail = "the runner " + st.describe() + " during the job";
      if (st.signal == SIGXFSZ) r.detail += " (a file grew past the limit of " + std::to_string(opt_.file_size_bytes >> 20) + " MiB)";
    }
    r.body = {{"signal", st.signal}, {"exit_code", st.exited ? st.code : -1}};
  }
  if (auto tail = log_tail(); !tail.empty()) r.detail += "; its output ended with: " + tail;
  discard();
  return r;
}

}  // namespace kfab
