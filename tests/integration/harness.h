#pragma once
// Runs the kfab binary as a user would and collects what it printed and how it ended.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "core/process.h"

namespace kfab::test {

struct CliResult {
  ExitStatus status;
  std::string out;
  std::string err;
  double seconds = 0.0;
  nlohmann::json json() const {
    try {
      return nlohmann::json::parse(out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "stdout is not JSON: " << e.what() << "\n" << out << "\nstderr: " << err;
      return {};
    }
  }
};

inline std::filesystem::path scratch() {
  static const auto dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("kfab-it-" + std::to_string(::getpid()));
    // A folder of this name is an earlier test process's whose pid this one got again: it starts empty
    // (a test copying a task into it met "File exists").
    std::error_code ec;
    std::filesystem::remove_all(d, ec);
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// The compile cache the tests share (one per build of kfab).
inline std::filesystem::path shared_test_cache() { return std::string(KFAB_BINARY) + ".test-cache"; }

/// Runs `kfab ARGS` to the end with its store in `data` and its caches in `cache`; its stdout and
/// stderr pass through files named `io` + ".out" and ".err" (kept apart from `data`, which a test may
/// fill up).
inline CliResult kfab_with(const std::filesystem::path& data, const std::filesystem::path& cache, const std::filesystem::path& io,
                           const std::vector<std::string>& args, double timeout_s = 600) {
  const auto out = io.string() + ".out", err = io.string() + ".err";
  std::string cmd = "KFAB_CACHE_DIR=" + quote(cache.string()) + " KFAB_DATA_DIR=" + quote(data.string()) + " exec " + quote(KFAB_BINARY);
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(out) + " 2>" + quote(err);
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command({"/bin/sh", "-c", cmd}, timeout_s, KFAB_SOURCE_DIR);
  CliResult c;
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r) c.status = r->status;
  if (auto o = read_file(out)) c.out = *o;
  if (auto e = read_file(err)) c.err = *e;
  return c;
}

/// Runs `kfab ARGS` with a private store and a compile cache shared by the test run.
inline CliResult kfab_cli(const std::vector<std::string>& args, double timeout_s = 300) {
  static int counter = 0;
  return kfab_with(scratch() / "data", shared_test_cache(), scratch() / ("io" + std::to_string(++counter)), args, timeout_s);
}

/// An optimize run that found a correct kernel (issue 24): exit 0 with `outcome` "faster", or exit 4 with
/// "not_faster" (on a busy machine timing decides which, so a test asks for either); the exit status, the
/// outcome and best's faster_than_baseline must agree. Plain-text output: the exit status alone.
inline ::testing::AssertionResult found_correct(const CliResult& r) {
  const int code = r.status.code;
  if (!r.status.exited || (code != 0 && code != 4))
    return ::testing::AssertionFailure() << r.status.describe() << "\n" << r.out << "\nstderr: " << r.err;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r.out);
  } catch (const std::exception&) {
    return ::testing::AssertionSuccess();
  }
  if (code == 0 && j.value("outcome", "") == "untimed") return ::testing::AssertionSuccess();  // no baseline time: nothing claimed
  const std::string want = code == 0 ? "faster" : "not_faster";
  if (j.value("outcome", "") != want || !j["best"].is_object() || j["best"].value("faster_than_baseline", code != 0) != (code == 0))
    return ::testing::AssertionFailure() << "exit " << code << " but outcome " << j.value("outcome", "?") << ", best "
                                         << j.value("best", nlohmann::json()).dump();
  return ::testing::AssertionSuccess();
}

/// A TCP listener on loopback for the network probes: counts the connections that reach it.
class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0) return;
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() {
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }
  int accepted() {
    int n = 0;
    for (int c; (c = ::accept(fd_, nullptr, nullptr)) >= 0; ++n) ::close(c);
    return n;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// appended in place: g++ 12 at -O2 warns of a bound past the end (-Warray-bounds, a false positive) on
// std::string(LITERAL) + "/" + rel where the precompiled headers change what it inlines
inline std::string fixture(const std::string& rel) {
  std::string path = KFAB_TEST_FIXTURES;
  path += '/';
  path += rel;
  return path;
}

/// The scripted server of tests/fixtures/mock_llm.py, on a port of its own, and a config naming it.
class MockLlm {
 public:
  MockLlm(const std::filesystem::path& script, const std::filesystem::path& dir) : dir_(dir) {
    std::filesystem::create_directories(dir_);
    std::filesystem::remove(dir_ / "port");
    SpawnOptions so;
    so.argv = {"python3", fixture("mock_llm.py"), script.string(), (dir_ / "port").string(), (dir_ / "requests.jsonl").string()};
    so.output_file = dir_ / "server.log";
    auto c = Child::spawn(so);
    EXPECT_TRUE(c.has_value());
    if (c) child_.emplace(std::move(*c));
    for (int i = 0; i < 100 && !std::filesystem::exists(dir_ / "port"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto port = read_file(dir_ / "port");
    EXPECT_TRUE(port.has_value()) << "the mock server did not start";
    std::string cfg = *read_file(fixture("llm/config.toml"));
    cfg.replace(cfg.find("PORT"), 4, port ? *port : "1");
    EXPECT_TRUE(write_file_atomic(dir_ / "config.toml", cfg).has_value());
  }
  ~MockLlm() { stop(); }
  void stop() {
    if (child_) {
      child_->kill_group();
      child_->wait();
      child_.reset();
    }
  }
  std::string config() const { return (dir_ / "config.toml").string(); }

 private:
  std::filesystem::path dir_;
  std::optional<Child> child_;
};

}  // namespace kfab::test
